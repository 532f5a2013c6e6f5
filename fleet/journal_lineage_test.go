package fleet_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// A cluster whose data is replaced by a new history under the same name
// (a restore without a revision bump: the same etcd cluster ID, its
// revision back to 1), on real etcd 3.5 and MinIO: the journal records
// the lineage break once (a gap record from the journal's end, Lineage
// set), takes no full backup while the new history is below the
// journal's end (such a backup could not start a journal), stores
// nothing of the new history, and once the cluster is past the end it
// heals as a gap: a full backup, then a journal from it.
func TestJournalLineageBreak(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 2*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/registry/k", 20, 64)
	m := testenv.SharedMinIO(t)
	st := testfix.Store(t, m, m.NewBucket(t))
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	const id = "lin"

	logs := &testfix.SyncBuffer{}
	jctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var gaps []fleet.JournalGap
	gapc := make(chan fleet.JournalGap, 10)
	go func() {
		done <- fleet.JournalAll(jctx, fleet.JournalAllOptions{
			ClusterID: id, Etcd: testfix.EtcdConfig(c), Store: st, Layout: layout, MaxBackoff: 2 * time.Second,
			Capture: journal.CaptureOptions{SegmentInterval: 300 * time.Millisecond, WatchStallTimeout: time.Second},
			Backup:  backup.Options{V2: backup.V2Off, ProbeTimeout: time.Second},
			OnGap:   func(g fleet.JournalGap) { gapc <- g },
			Log:     slog.New(slog.NewTextHandler(logs, nil)),
		})
	}()
	defer func() {
		stop()
		<-done
	}()
	var last int64
	for i := range 20 {
		r, err := cli.Put(ctx, fmt.Sprintf("/registry/old/%d", i%4), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	waitReach(t, ctx, st, layout, id, last, logs)
	gaps = append(gaps, <-gapc) // no base at first: its backup
	backups := func() int {
		t.Helper()
		entries, err := catalog.Inventory(ctx, st, layout, id)
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	if n := backups(); n != 1 {
		t.Fatalf("%d backups before the break, want the first one", n)
	}

	// The new history: same name, URLs and token.
	mem := c.Members[0]
	mem.Kill()
	fresh := testenv.StartEtcdMember(t, testenv.MemberSpec{Version: testenv.V35, Name: mem.Name, DataDir: filepath.Join(t.TempDir(), "new.etcd"),
		ClientURL: mem.ClientURL, PeerURL: mem.PeerURL, InitialClusterToken: c.Token})
	fresh.WaitReady(t)
	var g fleet.JournalGap
	select {
	case g = <-gapc:
	case <-time.After(30 * time.Second):
		t.Fatalf("no lineage break recorded; log:\n%s", testfix.LastLines(logs.String(), 30))
	}
	if !g.Lineage || g.From != last+1 || !g.Recorded || !strings.Contains(g.Reason, "lineage") {
		t.Fatalf("the break's record: %+v, want a lineage gap from %d", g, last+1)
	}
	// Checked again every MaxBackoff, recorded once, no backup, nothing stored.
	for deadline := time.Now().Add(20 * time.Second); strings.Count(logs.String(), "still another history") < 2; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the break is not checked again; log:\n%s", testfix.LastLines(logs.String(), 30))
		}
	}
	recorded, err := fleet.JournalGaps(ctx, st, layout, id)
	if err != nil || len(recorded) != 2 || !recorded[1].Lineage {
		t.Fatalf("gap records: %+v %v, want the first backup's and the break's", recorded, err)
	}
	if n := backups(); n != 1 {
		t.Fatalf("%d backups after the break, want no new one below the journal's end", n)
	}
	_, ch, err := fleet.JournalBase(ctx, st, layout, id, nil)
	if err != nil || ch.Reach != last {
		t.Fatalf("the journal reaches %d (%v), want it to end at %d", ch.Reach, err, last)
	}

	// The new history passes the journal's end: healed as a gap.
	var now int64
	for i := int64(0); i <= last; i++ {
		r, err := cli.Put(ctx, fmt.Sprintf("/registry/new/%d", i%4), "n")
		if err != nil {
			t.Fatal(err)
		}
		now = r.Header.Revision
	}
	waitReach(t, ctx, st, layout, id, now, logs)
	if n := backups(); n != 2 {
		t.Fatalf("%d backups once past the end, want the one that heals it", n)
	}
	if recorded, _ = fleet.JournalGaps(ctx, st, layout, id); len(recorded) != 2 {
		t.Fatalf("gap records: %+v, want no third (the heal's gap is the break's)", recorded)
	}
}
