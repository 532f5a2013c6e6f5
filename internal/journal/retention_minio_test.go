package journal_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// putBackup writes a committed backup folder of cluster id taken at at,
// restoring to revision rev (its manifest's RevisionBefore): a snapshot
// object and the manifest, as prune and list check them.
func putBackup(tb testing.TB, st store.Store, l catalog.Layout, id string, at time.Time, rev int64) journal.WindowBackup {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := catalog.BackupName(at, catalog.KindScheduled)
	snap := []byte("snapshot")
	sum := fmt.Sprintf("%x", sha256.Sum256(snap))
	if _, err := st.Put(ctx, l.Key(id, name, catalog.SnapshotObjectRaw), bytes.NewReader(snap)); err != nil {
		tb.Fatal(err)
	}
	b, err := catalog.MarshalManifest(&catalog.Manifest{
		Format: catalog.ManifestFormat, ClusterID: id, Name: name, Kind: catalog.KindScheduled,
		StartedAt: at, FinishedAt: at.Add(time.Second), ServerVersion: "3.5.35",
		Source: catalog.Member{Name: "m0", ID: "8e9e05c52164694d", Endpoint: "https://10.0.0.1:2379"},
		Snapshot: catalog.SnapshotInfo{Object: catalog.SnapshotObjectRaw, Compression: objectio.CompressNone, RawSize: int64(len(snap)), StoredSize: int64(len(snap)),
			RawSHA256: sum, StoredSHA256: sum},
		RevisionBefore: rev, RevisionAfter: rev, ToolVersion: "test",
	})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := st.Put(ctx, l.Key(id, name, catalog.ManifestObject), bytes.NewReader(b)); err != nil {
		tb.Fatal(err)
	}
	return journal.WindowBackup{Name: name, Rev: rev, Time: at}
}

// putSegment writes a real segment of revisions first-last (one put each)
// continuing base, received at recv.
func putSegment(tb testing.TB, st store.Store, l catalog.Layout, id string, base journal.WindowBackup, first, last int64, recv time.Time) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := journal.Header{Format: journal.FormatVersion, ClusterID: id, BaseBackup: base.Name, BaseRev: base.Rev, FirstRev: first, LastRev: last,
		Received: map[int64]int64{first: recv.Add(-time.Second).UnixMilli(), last: recv.UnixMilli()}}
	var evs []journal.Event
	for r := first; r <= last; r++ {
		evs = append(evs, putAt(r, fmt.Sprint("/registry/k", r)))
	}
	return writeSegment(tb, ctx, st, l, h, evs).Key
}

func journalKeys(tb testing.TB, st store.Store, l catalog.Layout, id string) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	objs, err := st.List(ctx, l.JournalPrefix(id))
	if err != nil {
		tb.Fatal(err)
	}
	var ks []string
	for _, o := range objs {
		ks = append(ks, o.Key)
	}
	return ks
}

// On real MinIO: backups and real segments, a prune with the journal's
// retention. The segments older than the retention before the window's
// base go, the base the backup rule lets go is kept (journal-base), the
// rest stays; a dry run plans exactly that and deletes nothing; the window
// of what is left starts at the base and ends at the newest segment's
// receive time.
func TestPruneJournalInBucket(t *testing.T) {
	t.Parallel()
	rig := testfix.NewStoreRig(t)
	st, l := rig.Store, rig.Layout
	const id = "jr"
	now := time.Now().UTC()
	b1 := putBackup(t, st, l, id, now.Add(-72*time.Hour), 100)
	b2 := putBackup(t, st, l, id, now.Add(-48*time.Hour), 200)
	b3 := putBackup(t, st, l, id, now.Add(-time.Hour), 300)
	// The segments' time is their stored time: the old ones are written
	// first, the retention's start falls between them and the new ones.
	old := []string{
		putSegment(t, st, l, id, b1, 101, 150, now.Add(-60*time.Hour)),
		putSegment(t, st, l, id, b1, 151, 200, now.Add(-50*time.Hour)),
		putSegment(t, st, l, id, b1, 201, 250, now.Add(-40*time.Hour)),
	}
	oldDone := time.Now()
	time.Sleep(2500 * time.Millisecond) // stored times have a second's precision
	recent := []string{
		putSegment(t, st, l, id, b1, 251, 300, time.Now()),
		putSegment(t, st, l, id, b1, 301, 320, time.Now()),
	}
	cutoff := oldDone.Add(time.Second)
	pnow := time.Now()
	policy := retention.DefaultPolicy()
	policy.Recent, policy.Anchors, policy.AnchorDays = 1, 0, nil
	opts := prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{id}, Policy: policy, Now: pnow, JournalRetention: pnow.Sub(cutoff)}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all := append(slices.Clone(old), recent...)
	wantKept := append([]string{old[2]}, recent...)

	dry := opts
	dry.DryRun = true
	rep, err := prune.Prune(ctx, dry)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if rep.SegmentsKept != 3 || rep.SegmentsPlanned != 2 || rep.SegmentsDeleted != 0 {
		t.Fatalf("dry run: segments kept %d, planned %d, deleted %d; want 3, 2, 0", rep.SegmentsKept, rep.SegmentsPlanned, rep.SegmentsDeleted)
	}
	var tb bytes.Buffer
	if err := output.Render(&tb, output.FormatWide, rep.Table(), nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"segment: 101-150", "segment: 201-250", "journal: 3 segment(s) kept, would delete 2 (0 failed)", "base of the journal window"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("dry run table lacks %q:\n%s", want, tb.String())
		}
	}
	if got := journalKeys(t, st, l, id); !slices.Equal(got, all) {
		t.Fatalf("a dry run deleted segments: %v", got)
	}
	// list's retention column decides as prune does, and its window
	// holds all of it.
	lres, err := journal.List(ctx, prune.ListOptions{Store: st, Layout: l, ClusterID: id, Policy: policy, Now: pnow, JournalRetention: opts.JournalRetention})
	if err != nil || lres.Err != nil || lres.WindowErr != nil {
		t.Fatalf("list: %v %v %v", err, lres.Err, lres.WindowErr)
	}
	for _, r := range lres.Rows() {
		want := map[string]bool{b1.Name: false, b2.Name: true, b3.Name: true}[r.Name]
		if r.Retention.Keep != want || (r.Name == b2.Name && !slices.Equal(r.Retention.Rules, []string{retention.RuleJournalBase})) {
			t.Errorf("list: %s keep %v rules %v, want keep %v (%s a journal base)", r.Name, r.Retention.Keep, r.Retention.Rules, want, b2.Name)
		}
		if r.Window == nil || r.Window.FromRev != 100 || r.Window.ToRev != 320 || len(r.Window.Holes) != 0 {
			t.Errorf("list: %s window %+v, want 100-320 without holes", r.Name, r.Window)
		}
	}

	rep, err = prune.Prune(ctx, opts)
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	if got := journalKeys(t, st, l, id); !slices.Equal(got, wantKept) {
		t.Fatalf("segments left %v, want %v", got, wantKept)
	}
	if rep.SegmentsDeleted != 2 || rep.SegmentsFailed != 0 {
		t.Errorf("segments deleted %d failed %d, want 2 and 0", rep.SegmentsDeleted, rep.SegmentsFailed)
	}
	acts := map[string]prune.BackupAction{}
	for _, a := range rep.Clusters[0].Backups {
		acts[a.Name] = a
	}
	if a := acts[b2.Name]; !a.Keep || !slices.Equal(a.Rules, []string{retention.RuleJournalBase}) {
		t.Errorf("base %s: keep %v rules %v (%s), want kept as %s", b2.Name, a.Keep, a.Rules, a.Reason, retention.RuleJournalBase)
	}
	if a := acts[b1.Name]; a.Keep || a.Action != prune.ActionDeleted {
		t.Errorf("%s: %s (%s), want deleted", b1.Name, a.Action, a.Reason)
	}
	if a := acts[b3.Name]; !a.Keep {
		t.Errorf("newest %s not kept", b3.Name)
	}
	listed, err := catalog.ListBackups(ctx, st, l, id)
	if err != nil {
		t.Fatal(err)
	}
	var left []journal.WindowBackup
	for _, b := range listed {
		left = append(left, journal.WindowBackup{Name: b.Entry.Name, Rev: b.Manifest.Revision(), Time: b.Entry.Time})
	}
	w, herr, err := journal.LoadWindow(ctx, st, l, id, left, nil)
	if err != nil || herr != nil {
		t.Fatalf("window: %v %v", err, herr)
	}
	if w.FromRev != 200 || w.ToRev != 320 || len(w.Holes) != 0 || w.LastReceivedFrom != "header" || w.Segments != 3 {
		t.Errorf("window %d-%d holes %v from %q segments %d, want 200-320 without holes, from the header, 3 segments", w.FromRev, w.ToRev, w.Holes, w.LastReceivedFrom, w.Segments)
	}
	if lag, ok := w.Lag(time.Now()); !ok || lag < 0 || lag > time.Minute {
		t.Errorf("lag %v %v right after the newest segment", lag, ok)
	}
}
