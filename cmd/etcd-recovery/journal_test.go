package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// journal continues the newest backup into segments until stopped, and a
// second run resumes where the first ended.
func TestJournalCommand(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/before/", 20, 16)
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	cos := cosArgs(t, m, bucket, prefix)
	if code, _, errOut := runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", "j1", "--v2", "off"}, clusterArgs(c), cos)...); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, errOut)
	}
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}
	entries, err := catalog.Inventory(ctx, st, layout, "j1")
	if err != nil || len(entries) != 1 {
		t.Fatalf("%v %v", entries, err)
	}
	man, err := catalog.LoadManifest(ctx, st, layout, "j1", entries[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	run := func(writes string) {
		jctx, cancel := context.WithCancel(ctx)
		done := make(chan int, 1)
		var errOut string
		go func() {
			var code int
			code, _, errOut = runCtx(t, jctx, concatArgs([]string{"journal", "--cluster-id", "j1", "--segment-interval", "1s"}, clusterArgs(c), cos)...)
			done <- code
		}()
		testenv.PutKeys(t, cli, writes, 30, 16)
		r, err := cli.Put(ctx, writes+"last", "x")
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			ch, err := journal.ListSegments(ctx, st, layout, "j1", man.Revision())
			if err != nil || ch.Problem != nil {
				t.Fatalf("%v %v", err, ch.Problem)
			}
			if ch.Reach == r.Header.Revision {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the journal reaches %d, the cluster is at %d", ch.Reach, r.Header.Revision)
			}
		}
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("journal stopped: exit %d: %s", code, errOut)
		}
		if !strings.Contains(errOut, "journal: capturing") {
			t.Fatalf("stderr: %s", errOut)
		}
	}
	run("/first/")
	run("/second/")
}
