package fleet_test

import (
	"context"
	"errors"
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
	"github.com/armada/etcd-recovery/restore"
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
	rig := testfix.NewStoreRig(t)
	st, layout := rig.Store, rig.Layout
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
	backups := func() int {
		t.Helper()
		entries, err := catalog.Inventory(ctx, st, layout, id)
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	gaps = append(gaps, <-gapc) // no base at first: its backup
	for deadline := time.Now().Add(30 * time.Second); backups() == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no first backup; log:\n%s", testfix.LastLines(logs.String(), 20))
		}
	}
	var last int64
	for i := range 60 {
		r, err := cli.Put(ctx, fmt.Sprintf("/registry/old/%d", i%4), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	waitReach(t, ctx, st, layout, id, last, logs)
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
	recorded, err := catalog.ReadJournalGaps(ctx, st, layout, id)
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

	// A backup of the new history below the old end (as the CronJob
	// takes them): a point-in-time restore from it would replay the old
	// history's segments onto it. Refused at selection, naming the break.
	entries, err := catalog.ListBackups(ctx, st, layout, id)
	if err != nil || len(entries) != 1 || entries[0].Manifest == nil {
		t.Fatalf("backups: %+v %v", entries, err)
	}
	for rev := int64(0); rev <= entries[0].Manifest.Revision(); {
		r, err := cli.Put(ctx, "/registry/new/early", "n")
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	nb, err := backup.Run(ctx, backup.Options{ClusterID: id, Etcd: testfix.EtcdConfig(c), Store: st, Layout: layout, V2: backup.V2Off, Kind: catalog.KindManual})
	if err != nil {
		t.Fatal(err)
	}
	if nb.Manifest.Revision() >= last {
		t.Fatalf("the new history's backup is at revision %d, want it below the old end %d (the test's premise)", nb.Manifest.Revision(), last)
	}
	ropts := restore.Options{ClusterID: id, Store: st, Layout: layout, NoLive: true, DryRun: true, ToRevision: last,
		Journal: journal.NewSource(st, layout, id, nil)}
	_, _, err = restore.SelectSnapshot(ctx, ropts, t.TempDir())
	var le *restore.LineageError
	if !errors.As(err, &le) || le.Backup != nb.Manifest.Name || le.End != last {
		t.Fatalf("a point-in-time restore from the new history's backup %s over the old journal: %v, want a LineageError", nb.Manifest.Name, err)
	}
	// From the old history's backup, within the old history: allowed.
	ropts.Backup = entries[0].Manifest.Name
	if _, _, err := restore.SelectSnapshot(ctx, ropts, t.TempDir()); err != nil {
		t.Fatalf("a point-in-time restore of the old history: %v", err)
	}
	if n := backups(); n != 2 {
		t.Fatalf("%d backups, want the first and the new history's", n)
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
	if n := backups(); n != 3 {
		t.Fatalf("%d backups once past the end, want the one that heals it too", n)
	}
	if recorded, _ = catalog.ReadJournalGaps(ctx, st, layout, id); len(recorded) != 2 {
		t.Fatalf("gap records: %+v, want no third (the heal's gap is the break's)", recorded)
	}
}
