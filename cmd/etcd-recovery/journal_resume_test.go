package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// A journal survives its own retention, on real etcd 3.5 and MinIO
// through the CLI: backup A, the journal (500 ms segments), backup B
// while it runs, more writes, the journal stopped; prune with a tiny
// --journal-retention lets A and the segments before the one holding
// B's revision + 1 go, and keeps B (the window's base) and the rest.
// Writes while it is stopped; the journal restarted continues the stored
// chain from B, inside it: no gap record, no new full backup, its new
// segments name B and continue the kept ones exactly. restore
// --to-revision of a revision written before the stop (in segments that
// name the pruned A) and of the newest revision after the restart
// (through segments of both bases) equal the source's dumps there.
func TestJournalResumesAfterPrune(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 3*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/a/", 20, 16)
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	cos := cosArgs(t, m, bucket, prefix)
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}
	const id = "resume1"
	backup := func() *catalog.Manifest {
		t.Helper()
		before := map[string]bool{}
		for _, e := range inventory(t, ctx, id, st, layout) {
			before[e.Name] = true
		}
		if code, _, errOut := runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", id, "--v2", "off", "--kind", "scheduled"}, clusterArgs(c), cos)...); code != 0 {
			t.Fatalf("backup: exit %d: %s", code, errOut)
		}
		for _, e := range inventory(t, ctx, id, st, layout) {
			if !before[e.Name] {
				man, err := catalog.LoadManifest(ctx, st, layout, id, e.Name)
				if err != nil {
					t.Fatal(err)
				}
				return man
			}
		}
		t.Fatal("backup: no new backup")
		return nil
	}
	put := func(k string) int64 {
		t.Helper()
		r, err := cli.Put(ctx, k, "v-"+k)
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	// writes: n puts 150 ms apart, over several 500 ms segments.
	writes := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			put(fmt.Sprintf("%s%02d", prefix, i))
			time.Sleep(150 * time.Millisecond)
		}
	}
	a := backup()
	jargs := concatArgs([]string{"--cluster-id", id, "--segment-interval", "500ms"}, clusterArgs(c), cos)
	stop := journalRun(t, ctx, jargs...)
	writes("/b/", 8)
	testfix.WaitJournalReach(t, ctx, st, layout, id, put("/b/last"), 30*time.Second)
	b := backup()
	writes("/c/", 8)
	if _, err := cli.Delete(ctx, "/a/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	beforeStop := put("/c/last")
	testfix.WaitJournalReach(t, ctx, st, layout, id, beforeStop, 30*time.Second)
	if code, errOut := stop(); code != 0 {
		t.Fatalf("journal: exit %d: %s", code, errOut)
	}
	before, err := journal.ListSegments(ctx, st, layout, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.All) < 3 || before.All[0].FirstRev != a.Revision()+1 {
		t.Fatalf("the journal before the prune: %+v, want segments from %d", before.All, a.Revision()+1)
	}

	// Prune: every segment is older than the retention; A goes (the
	// backup rule keeps one), B is the window's base.
	time.Sleep(1500 * time.Millisecond)
	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"prune", "--cluster-id", id, "--journal-retention", "1s",
		"--keep-recent", "1", "--keep-anchors", "0", "--anchor-days", "", "-o", "json"}, cos)...)
	if code != 0 {
		t.Fatalf("prune: exit %d\n%s\n%s", code, out, errOut)
	}
	if es := inventory(t, ctx, id, st, layout); len(es) != 1 || es[0].Name != b.Name {
		t.Fatalf("after the prune the backups are %+v, want only %s (B)", es, b.Name)
	}
	kept, err := journal.ListSegments(ctx, st, layout, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	bRev := b.Revision()
	if len(kept.All) == 0 || len(kept.All) >= len(before.All) || kept.All[0].FirstRev > bRev+1 || kept.All[0].LastRev < bRev+1 {
		t.Fatalf("after the prune the segments are %+v, want those from the one holding B's revision %d + 1 (before: %d)", kept.All, bRev, len(before.All))
	}
	t.Logf("prune kept %d of %d segments, from %s (B at %d)", len(kept.All), len(before.All), kept.All[0].Key, bRev)

	// Writes while it is stopped, then the restart.
	writes("/d/", 8)
	stop = journalRun(t, ctx, jargs...)
	writes("/e/", 8)
	last := put("/e/last")
	testfix.WaitJournalReach(t, ctx, st, layout, id, last, 30*time.Second)
	code, jerr := stop()
	if code != 0 {
		t.Fatalf("journal after the prune: exit %d: %s", code, jerr)
	}
	if !strings.Contains(jerr, "continuing a chain started from another backup") {
		t.Errorf("the restart does not say it continues A's chain from B:\n%s", testfix.LastLines(jerr, 20))
	}
	if gaps, err := catalog.ReadJournalGaps(ctx, st, layout, id); err != nil || len(gaps) != 0 {
		t.Fatalf("gap records after the restart: %+v %v", gaps, err)
	}
	if es := inventory(t, ctx, id, st, layout); len(es) != 1 {
		t.Fatalf("the restart took a full backup: %+v", es)
	}
	all, err := journal.ListSegments(ctx, st, layout, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	ch := journal.Continuation(id, all.All, bRev)
	if ch.Problem != nil || ch.Reach < last || ch.Segments[0].Key != kept.All[0].Key {
		t.Fatalf("the chain from B: reach %d (want %d), problem %v, from %s", ch.Reach, last, ch.Problem, ch.Segments[0].Key)
	}
	h, _, err := journal.ReadSegment(ctx, st, layout, ch.Segments[len(ch.Segments)-1].Key, nil, journal.Want{ClusterID: id})
	if err != nil || h.BaseBackup != b.Name || h.BaseRev != bRev {
		t.Fatalf("the newest segment's header names base %q at %d, want %s at %d (%v)", h.BaseBackup, h.BaseRev, b.Name, bRev, err)
	}
	h0, _, err := journal.ReadSegment(ctx, st, layout, ch.Segments[0].Key, nil, journal.Want{ClusterID: id})
	if err != nil || h0.BaseBackup != a.Name {
		t.Fatalf("the first kept segment's header names base %q, want the pruned %s (%v)", h0.BaseBackup, a.Name, err)
	}

	for _, rev := range []int64{beforeStop, last} {
		want := pitrDump(t, cli, rev)
		got := restoreDump(t, ctx, cos, id, rev)
		checkDump(t, fmt.Sprintf("restore --to-revision %d", rev), want, got)
		t.Logf("restore --to-revision %d: %d keys equal the source's", rev, len(want))
	}
}
