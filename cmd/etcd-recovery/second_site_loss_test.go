package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/replicate"
	"github.com/armada/etcd-recovery/restore"
)

// The intervals of TestSecondSitePITRAfterPrimaryLoss: production's
// divided by lossScale, so that the RPO measured times lossScale is what
// production would lose (the copy's own time, not scaled, makes that an
// overestimate). Production: the journal's --segment-interval 30 s, the
// copier's --journal-interval 5 s, --scan-interval 2 m, --status-every
// 30 s; the second site promises 60 s for the journal.
const (
	lossScale           = 5
	lossSegmentInterval = 30 * time.Second / lossScale
	lossJournalInterval = replicate.DefaultJournalInterval / lossScale
	lossScanInterval    = replicate.DefaultScanInterval / lossScale
	lossStatusEvery     = replicate.DefaultStatusEvery / lossScale
	lossPromisedRPO     = 60 * time.Second
)

// wipeVersions deletes every version and delete marker of st (the
// primary's own credential can: nothing there is locked).
func wipeVersions(tb testing.TB, ctx context.Context, st store.Store) int {
	tb.Helper()
	v, ok := st.(store.Versioner)
	if !ok {
		tb.Fatal("the primary store lists no versions")
	}
	vs, err := v.ListVersions(ctx, "")
	if err != nil {
		tb.Fatal(err)
	}
	var refs []store.VersionRef
	for _, x := range vs {
		refs = append(refs, store.VersionRef{Key: x.Key, VersionID: x.VersionID})
	}
	if err := v.DeleteVersions(ctx, refs, store.DeleteOptions{}); err != nil {
		tb.Fatal(err)
	}
	if left, err := v.ListVersions(ctx, ""); err != nil || len(left) != 0 {
		tb.Fatalf("after deleting every version of the primary: %d left, %v", len(left), err)
	}
	return len(refs)
}

// The acceptance: losing the primary costs at most a minute of
// writes, proven by an exact PITR from the second site alone. On etcd 3.5
// and two MinIO servers (the primary region a server of its own, the
// second region the shared one), a seeded workload (puts, overwrites,
// leased puts, deletes, txns, range deletes, leases granted with an
// anchor and revoked) runs with the journal command on (its segments
// every 6 s) and the copier (replicate.Run) running, every interval
// production's divided by lossScale. Then the primary is lost: (frozen)
// its MinIO is SIGSTOPped; (deleted) its own credential deletes every
// version of everything in its bucket. The copier runs on for a few
// seconds: nothing on the second site is removed or changed. A restore
// from the second site alone through the CLI (frozen: --site auto
// --to-latest, which says it reads the second site; deleted: --site
// second --to-revision R, the second site's journal end at the loss)
// gives exactly the source's keyspace at that revision: every key's
// value, create and mod revision, version and lease, every lease with its
// TTL. The writes missing are those of the last seconds before the loss
// (the RPO, logged): under 60 s once scaled back to production.
func TestSecondSitePITRAfterPrimaryLoss(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"frozen", "deleted"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			primaryLoss(t, how)
		})
	}
}

func primaryLoss(t *testing.T, how string) {
	began := time.Now()
	ctx := testfix.Context(t, 3*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/registry/pods/", 20, 32)
	pm, sm := testenv.StartMinIO(t), testenv.SharedMinIO(t)
	pb, sb := pm.NewVersionedBucket(t), sm.NewBucket(t)
	prefix := testenv.Prefix(t)
	pl, sl := catalog.Layout{Prefix: prefix}, catalog.Layout{Prefix: "dr/" + prefix}
	primary := cosArgs(t, pm, pb, prefix)
	second := secondArgs(t, sm, sb, sl.Prefix)
	pst, sst := testfix.Store(t, pm, pb), testfix.Store(t, sm, sb)
	const id = "lost"
	baseRev := exactRev(t, ctx, cli)
	backupCLI(t, ctx, c, primary, id)
	stopJournal := journalRun(t, ctx, concatArgs([]string{"--cluster-id", id, "--segment-interval", lossSegmentInterval.String()}, clusterArgs(c), primary)...)

	rctx, stopCopier := context.WithCancel(ctx)
	defer stopCopier()
	runDone := make(chan error, 1)
	go func() {
		runDone <- replicate.Run(rctx, replicate.Options{Primary: pst, PrimaryLayout: pl, Second: sst, SecondLayout: sl,
			JournalInterval: lossJournalInterval, ScanInterval: lossScanInterval, StatusEvery: lossStatusEvery, Copier: t.Name(), Log: testfix.Logger(t)})
	}()
	seed := uint64(time.Now().UnixNano())
	w := testfix.NewWorkload(cli, seed)
	w.Prefix = "/registry/w/"
	stopWrites := w.Start(t, ctx, 50*time.Millisecond)

	// Three segment intervals at least, then a moment anywhere in the
	// next one: the loss falls at any phase of the journal's segments.
	time.Sleep(3*lossSegmentInterval + rand.N(lossSegmentInterval))
	if ch, err := journal.ListSegments(ctx, sst, sl, id, baseRev); err != nil || len(ch.Segments) < 2 {
		t.Fatalf("the second site holds %v of the journal before the loss (%v); want 2 segments at least", ch, err)
	}
	lossAt := time.Now()
	switch how {
	case "frozen":
		pm.Freeze()
	case "deleted":
		n := wipeVersions(t, ctx, pst)
		t.Logf("the primary's credential deleted all %d versions on the primary", n)
	}
	stopWrites()
	atLoss, err := journal.ListSegments(ctx, sst, sl, id, baseRev)
	if err != nil {
		t.Fatal(err)
	}
	held := testfix.Sums(t, sst, sl)
	// The copier goes on a while after the loss.
	time.Sleep(2*lossJournalInterval + 2*time.Second)
	stopCopier()
	if err := <-runDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the copier: %v", err)
	}
	after := testfix.Sums(t, sst, sl)
	for k, s := range held {
		if k != sl.ReplicaStatusKey() && after[k] != s {
			t.Errorf("%s changed on the second site after the loss: sha256 %s, %q before", k, after[k], s)
		}
	}

	// A restore from the second site alone.
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	client := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	args := concatArgs([]string{"restore", "--cluster-id", id, "--initial-cluster", "r0=" + peer,
		"--data-dir-root", filepath.Join(t.TempDir(), "data"), "-o", "json"}, primary, second)
	var rev int64
	switch how {
	case "frozen":
		final, err := journal.ListSegments(ctx, sst, sl, id, baseRev)
		if err != nil {
			t.Fatal(err)
		}
		rev = final.Reach
		args = append(args, "--site", "auto", "--site-timeout", "2s", "--to-latest")
	case "deleted":
		rev = atLoss.Reach
		args = append(args, "--site", "second", "--to-revision", fmt.Sprint(rev))
	}
	want := testfix.Dump(t, ctx, cli, rev)
	code, out, errOut := runCtx(t, ctx, args...)
	var res restore.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Replay == nil || res.Replay.ToRevision != rev {
		t.Fatalf("restore from the second site to %d: exit %d\n%s\n%s", rev, code, out, errOut)
	}
	if how == "frozen" && !strings.Contains(errOut, "etcd-recovery: "+fellBack+": ") {
		t.Errorf("restore --site auto with the primary frozen did not say it reads the second site:\n%s", errOut)
	}
	ncli := startRestored(t, res, client, peer)
	testfix.SameKeyspace(t, fmt.Sprintf("the restore from the second site at %d", rev), want, testfix.Dump(t, ctx, ncli, 0), w.LeasesAt(rev), testfix.Leases(t, ctx, ncli))

	// The RPO: the writes before the loss the second site lacks.
	last, _ := w.Last()
	if rev <= baseRev || rev > last {
		t.Fatalf("the second site reaches %d: not a revision of the workload (%d..%d)", rev, baseRev+1, last)
	}
	rpo := lossAt.Sub(w.CommittedAt(rev))
	missing := w.WritesAfter(rev, lossAt)
	granted, revoked := w.Counts(rev)
	t.Logf("primary %s at %s: the second site had the journal to revision %d (%d at the loss), the restore is exact there (%d keys, %d leases live; %d granted, %d revoked); "+
		"%d writes of the last %.1fs before the loss missing (RPO %.1fs with intervals divided by %d: %.0fs in production, %s promised); %d writes in all",
		how, lossAt.Format(time.TimeOnly), rev, atLoss.Reach, len(want), granted-revoked, granted, revoked, missing, rpo.Seconds(), rpo.Seconds(), lossScale,
		rpo.Seconds()*lossScale, lossPromisedRPO, w.Writes())
	if rpo*lossScale > lossPromisedRPO || rpo < 0 {
		t.Errorf("the second site lacks the last %s of writes before the loss: %s in production's intervals, more than the %s promised", rpo, rpo*lossScale, lossPromisedRPO)
	}
	if how == "frozen" {
		pm.Thaw() // the journal's last segment, as it stops
	}
	if code, jerr := stopJournal(); code != exitOK && code != exitCanceled {
		t.Logf("journal: exit %d: %s", code, testfix.LastLines(jerr, 5))
	}
	t.Logf("%s: %s", how, time.Since(began).Round(time.Millisecond))
}
