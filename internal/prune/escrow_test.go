package prune_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// escrowPolicy keeps the newest scheduled backup only, with the shortest
// grace for folders in flight (and so for escrows no backup names).
func escrowPolicy() retention.Policy {
	p := retention.DefaultPolicy()
	p.Recent, p.Anchors, p.IncompleteAfter = 1, 0, retention.MinIncompleteAfter
	return p
}

// escrowsIn are the escrow keys of cluster in the bucket.
func escrowsIn(tb testing.TB, st store.Store, l catalog.Layout, cluster string) []string {
	tb.Helper()
	return testfix.Keys(tb, st, l.EscrowPrefix(cluster))
}

func escrowActions(rep *prune.PruneReport, cluster string) map[string]prune.EscrowAction {
	out := map[string]prune.EscrowAction{}
	for _, c := range rep.Clusters {
		for _, a := range c.Escrows {
			if a.ClusterID == cluster {
				out[a.Address] = a
			}
		}
	}
	return out
}

// An escrow follows its backups in a real bucket: prune deletes the last
// backup that names escrow A, and A goes, but only once it is older than
// the grace (a backup in flight writes its escrow first); escrow B, still
// named by the newest backup, stays; the dry run says so and deletes
// nothing; another cluster's escrow is never touched; list no longer
// calls escrow keys unknown.
func TestPruneEscrowFollowsItsBackups(t *testing.T) {
	t.Parallel()
	st, l, now := storeRig(t)
	ctx := context.Background()
	a, b := testfix.EscrowAddress("A"), testfix.EscrowAddress("B")
	old := testfix.PutEscrowBackup(t, st, l, "esc-a", now.Add(-3*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, a))
	mid := testfix.PutEscrowBackup(t, st, l, "esc-a", now.Add(-2*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, b))
	newest := testfix.PutEscrowBackup(t, st, l, "esc-a", now.Add(-1*time.Hour), testfix.StoredEscrow(catalog.EscrowMismatch, b))
	none := testfix.PutEscrowBackup(t, st, l, "esc-b", now.Add(-3*time.Hour), &catalog.EscrowRef{State: catalog.EscrowNone, Problems: []string{"no recipient"}})
	otherKey := testfix.PutEscrowObject(t, st, l, "esc-b", testfix.EscrowAddress("other"))
	_ = none
	keyA, keyB := l.EscrowKey("esc-a", a), l.EscrowKey("esc-a", b)

	// 1. Now: the backups naming A go, but A was written a moment ago: it
	// may be a backup's in flight, so it stays (and says so).
	rep, err := prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{"esc-a"}, Policy: escrowPolicy(), Now: now})
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	acts := actionsByName(rep)
	if acts["esc-a/"+old].Action != prune.ActionDeleted || acts["esc-a/"+mid].Action != prune.ActionDeleted || acts["esc-a/"+newest].Action != prune.ActionKeep {
		t.Fatalf("backups: %+v", acts)
	}
	ea := escrowActions(rep, "esc-a")
	if got := ea[a]; got.Action != prune.ActionKeep || got.Rule != retention.EscrowRuleYoung || !strings.Contains(got.Reason, "a backup in flight may name it") {
		t.Errorf("fresh escrow A, named by no backup now: %+v; want kept as young", got)
	}
	if got := ea[b]; got.Action != prune.ActionKeep || got.Rule != retention.EscrowRuleNamed || !strings.Contains(got.Reason, newest) {
		t.Errorf("escrow B: %+v; want kept, named by %s", got, newest)
	}
	if rep.EscrowsKept != 2 || rep.EscrowsPlanned != 0 {
		t.Errorf("escrow counts: kept %d planned %d; want 2, 0", rep.EscrowsKept, rep.EscrowsPlanned)
	}
	if got := escrowsIn(t, st, l, "esc-a"); !slices.Equal(got, []string{keyA, keyB}) && !slices.Equal(got, []string{keyB, keyA}) {
		t.Fatalf("escrows after the first prune: %v", got)
	}

	// 2. Past the grace, a dry run: A would go, B stays; nothing deleted.
	later := now.Add(retention.MinIncompleteAfter + 30*time.Minute)
	before := stateOf(t, st)
	rep, err = prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{"esc-a"}, Policy: escrowPolicy(), Now: later, DryRun: true})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if after := stateOf(t, st); !after.equal(before) {
		t.Fatalf("the dry run changed the bucket: %s", diffKeys(after.keys, before.keys))
	}
	ea = escrowActions(rep, "esc-a")
	if got := ea[a]; got.Action != prune.ActionDelete || got.Rule != retention.EscrowRuleUnnamed {
		t.Errorf("dry run, escrow A: %+v; want delete (named by none)", got)
	}
	if got := ea[b]; got.Action != prune.ActionKeep {
		t.Errorf("dry run, escrow B: %+v; want keep", got)
	}
	if foot := rep.Table().Footer; !strings.Contains(foot, "escrows: 1 kept, would delete 1") {
		t.Errorf("dry run footer has no escrow line:\n%s", foot)
	}

	// 3. The real prune: A is gone, B and the other cluster's stay.
	rep, err = prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{"esc-a"}, Policy: escrowPolicy(), Now: later})
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	if rep.EscrowsDeleted != 1 || rep.EscrowsFailed != 0 || escrowActions(rep, "esc-a")[a].Action != prune.ActionDeleted {
		t.Errorf("prune: %d escrows deleted, %d failed, A %+v; want A deleted", rep.EscrowsDeleted, rep.EscrowsFailed, escrowActions(rep, "esc-a")[a])
	}
	if got := escrowsIn(t, st, l, "esc-a"); !slices.Equal(got, []string{keyB}) {
		t.Errorf("escrows of esc-a after prune: %v, want only %s", got, keyB)
	}
	if got := escrowsIn(t, st, l, "esc-b"); !slices.Equal(got, []string{otherKey}) {
		t.Errorf("escrows of esc-b (not pruned): %v, want %s", got, otherKey)
	}

	// 4. prune --all sees every cluster's escrows in one listing: esc-b's
	// is named by none and old, and goes; and no escrow key is unknown.
	rep, err = prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, All: true, Policy: escrowPolicy(), Now: later, DryRun: true})
	if err != nil {
		t.Fatalf("prune --all: %v", err)
	}
	if got := escrowActions(rep, "esc-b")[testfix.EscrowAddress("other")]; got.Action != prune.ActionDelete {
		t.Errorf("prune --all, esc-b's unnamed escrow: %+v; want delete", got)
	}
	for _, k := range rep.Unknown {
		if strings.Contains(k, "/_escrow/") {
			t.Errorf("prune --all reports escrow key %s as unknown", k)
		}
	}
}

// The last backup's deletion takes its escrows: delete --all-backups (the
// runbook's Destroy) removes every escrow of the cluster, and its dry run
// lists them; delete of a named backup keeps an escrow another backup
// still names, and one no backup names that is younger than the grace.
func TestDeleteAllBackupsRemovesEscrows(t *testing.T) {
	t.Parallel()
	st, l, now := storeRig(t)
	ctx := context.Background()
	a, b := testfix.EscrowAddress("A"), testfix.EscrowAddress("B")
	first := testfix.PutEscrowBackup(t, st, l, "esc-d", now.Add(-3*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, a))
	testfix.PutEscrowBackup(t, st, l, "esc-d", now.Add(-2*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, b))
	testfix.PutEscrowBackup(t, st, l, "esc-d", now.Add(-1*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, b))
	inFlight := testfix.PutEscrowObject(t, st, l, "esc-d", testfix.EscrowAddress("in flight"))
	keep := testfix.PutEscrowBackup(t, st, l, "esc-keep", now.Add(-1*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, a))
	_ = keep

	// delete of the backup naming A: A is named by none now, but younger
	// than the grace: kept, as is B (named) and the one in flight.
	drep, err := prune.Delete(ctx, prune.DeleteOptions{Store: st, Layout: l, ClusterID: "esc-d", Names: []string{first}})
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	if len(drep.Escrows) != 3 {
		t.Fatalf("delete reports %d escrows, want 3: %+v", len(drep.Escrows), drep.Escrows)
	}
	for _, e := range drep.Escrows {
		want := retention.EscrowRuleYoung
		if e.Address == b {
			want = retention.EscrowRuleNamed
		}
		if e.Action != prune.ActionKeep || e.Rule != want {
			t.Errorf("delete, escrow %s: %+v; want kept (%s)", e.Key, e, want)
		}
	}
	if n := len(escrowsIn(t, st, l, "esc-d")); n != 3 {
		t.Fatalf("%d escrows after delete, want 3", n)
	}

	// delete --all-backups, dry run: every escrow listed to go, none gone.
	rep, err := prune.DeleteAll(ctx, prune.DeleteAllOptions{Store: st, Layout: l, ClusterID: "esc-d", DryRun: true})
	if err != nil {
		t.Fatalf("delete --all-backups --dry-run: %v", err)
	}
	if len(rep.Escrows) != 3 || slices.ContainsFunc(rep.Escrows, func(e prune.EscrowAction) bool { return e.Action != prune.ActionDelete }) {
		t.Errorf("dry run escrows: %+v; want 3 to delete", rep.Escrows)
	}
	if n := len(escrowsIn(t, st, l, "esc-d")); n != 3 {
		t.Fatalf("the dry run deleted escrows: %d left", n)
	}
	notes := strings.Join(rep.Table().Notes, "\n")
	if !strings.Contains(notes, "would delete 2 backup(s), 0 multipart upload(s) and 3 escrow(s) of cluster esc-d") {
		t.Errorf("dry run summary: %s", notes)
	}

	// The real one: the cluster's escrows are gone (the one in flight
	// too: the cluster is destroyed), the other cluster's stays.
	rep, err = prune.DeleteAll(ctx, prune.DeleteAllOptions{Store: st, Layout: l, ClusterID: "esc-d"})
	if err != nil {
		t.Fatalf("delete --all-backups: %v", err)
	}
	for _, e := range rep.Escrows {
		if e.Action != prune.ActionDeleted {
			t.Errorf("escrow %s: %+v; want deleted", e.Key, e)
		}
	}
	if got := testfix.Keys(t, st, l.RootPrefix()); slices.ContainsFunc(got, func(k string) bool { return strings.Contains(k, "/esc-d/") }) {
		t.Errorf("keys of esc-d left after delete --all-backups: %v", got)
	}
	if got := escrowsIn(t, st, l, "esc-keep"); !slices.Equal(got, []string{l.EscrowKey("esc-keep", a)}) {
		t.Errorf("the other cluster's escrows: %v", got)
	}
	_ = inFlight
}

// The orphan lifecycle takes the escrows with the backups: an orphan due
// for deletion loses its escrows with its last backup; a cluster id with
// escrows but no backups and no EtcdCluster loses them once older than
// the orphan grace; a live cluster's escrows are never touched.
func TestOrphanEscrowsGoWithTheBackups(t *testing.T) {
	t.Parallel()
	st, l, now := storeRig(t)
	ctx := context.Background()
	opts := orphanPasses(t, st, l, now, "esc-live")
	a := testfix.EscrowAddress("A")
	testfix.PutEscrowBackup(t, st, l, "esc-gone", now.Add(-2*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, a))
	leftover := testfix.PutEscrowObject(t, st, l, "esc-leftover", testfix.EscrowAddress("left"))
	testfix.PutEscrowBackup(t, st, l, "esc-live", now.Add(-2*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, a))
	// First seen: a marker, nothing deleted; the leftover escrow is fresh.
	rep, err := prune.Orphans(ctx, opts(now))
	if err != nil {
		t.Fatalf("orphans: %v", err)
	}
	if n := len(testfix.Keys(t, st, l.EscrowPrefix(""))); n != 3 {
		t.Fatalf("%d escrows after the first orphan pass, want 3 (nothing deleted): %+v", n, rep.Orphans)
	}
	// After the grace: the orphan's backups and escrow go, and the
	// leftover escrow; the live cluster's stays.
	rep, err = prune.Orphans(ctx, opts(now.Add(2*prune.MinOrphanGrace)))
	if err != nil {
		t.Fatalf("orphans: %v", err)
	}
	gone := orphanOf(rep, "esc-gone")
	if gone == nil || gone.State != prune.OrphanDeleted || len(gone.Escrows) != 1 || gone.Escrows[0].Action != prune.ActionDeleted {
		t.Errorf("orphan esc-gone: %+v; want deleted with its escrow", gone)
	}
	if got := testfix.Keys(t, st, l.EscrowPrefix("")); !slices.Equal(got, []string{l.EscrowKey("esc-live", a)}) {
		t.Errorf("escrows after the orphan pass: %v; want only the live cluster's (leftover %s gone)", got, leftover)
	}
}

// list shows each backup's escrow: ESCROW (-o wide) is its state
// (present, mismatch, missing, none, "-" for a backup from before escrow),
// CERTS EXPIRE (-o wide) the nearest certificate expiry, and the reason
// (the default table too) names a problem and a certificate expiring
// within 30 days; -o json has the EscrowRef.
func TestListShowsEscrow(t *testing.T) {
	t.Parallel()
	st, l, now := storeRig(t)
	ctx := context.Background()
	soon, late := now.Add(10*24*time.Hour), now.Add(60*24*time.Hour)
	names := map[string]string{
		"-":        testfix.PutEscrowBackup(t, st, l, "esc-l", now.Add(-5*time.Hour), nil),
		"none":     testfix.PutEscrowBackup(t, st, l, "esc-l", now.Add(-4*time.Hour), &catalog.EscrowRef{State: catalog.EscrowNone, Problems: []string{"no recipient to seal it to"}}),
		"missing":  testfix.PutEscrowBackup(t, st, l, "esc-l", now.Add(-3*time.Hour), &catalog.EscrowRef{State: catalog.EscrowMissing, Problems: []string{"secret etcd-x-peer-tls not found"}}),
		"mismatch": testfix.PutEscrowBackup(t, st, l, "esc-l", now.Add(-2*time.Hour), testfix.StoredEscrow(catalog.EscrowMismatch, testfix.EscrowAddress("m"), testfix.EscrowCert("etcd-x-server-tls", late))),
		"present": testfix.PutEscrowBackup(t, st, l, "esc-l", now.Add(-1*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, testfix.EscrowAddress("p"),
			testfix.EscrowCert("etcd-x-server-tls", late), testfix.EscrowCert("etcd-x-client-tls", soon))),
	}
	res, err := prune.List(ctx, prune.ListOptions{Store: st, Layout: l, ClusterID: "esc-l", Policy: retention.DefaultPolicy()})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(res.Unknown) != 0 {
		t.Errorf("unknown keys: %v", res.Unknown)
	}
	tbl := res.Rows.Table()
	col := slices.Index(tbl.Header, "ESCROW")
	exp := slices.Index(tbl.Header, "CERTS EXPIRE")
	if col < 0 || exp < 0 || !slices.Contains(tbl.Wide, "CERTS EXPIRE") || !slices.Contains(tbl.Wide, "ESCROW") {
		t.Fatalf("header %v, wide %v: want ESCROW and CERTS EXPIRE in -o wide (the default table's reason names what is wrong)", tbl.Header, tbl.Wide)
	}
	byName := map[string][]string{}
	for _, r := range tbl.Rows {
		byName[r[0]] = r
	}
	for state, name := range names {
		if got := byName[name][col]; got != state {
			t.Errorf("backup %s: ESCROW %q, want %q", name, got, state)
		}
	}
	present := byName[names["present"]]
	if want := soon.Format("2006-01-02") + " (9d)"; present[exp] != want && present[exp] != soon.Format("2006-01-02")+" (10d)" {
		t.Errorf("CERTS EXPIRE of the present escrow: %q, want the client cert's %s with its days left", present[exp], want)
	}
	if got := byName[names["mismatch"]][exp]; got != late.Format("2006-01-02") {
		t.Errorf("CERTS EXPIRE 60 days out: %q, want the bare date", got)
	}
	reason := present[len(present)-1]
	if !strings.Contains(reason, "escrowed certificate etcd-x-client-tls") || !strings.Contains(reason, "expires") {
		t.Errorf("reason of a backup whose escrowed cert expires in 10 days: %q", reason)
	}
	if r := byName[names["missing"]]; !strings.Contains(r[len(r)-1], "escrow missing: secret etcd-x-peer-tls not found") {
		t.Errorf("reason of a missing escrow: %q", r[len(r)-1])
	}
	if r := byName[names["mismatch"]]; strings.Contains(r[len(r)-1], "escrowed certificate") {
		t.Errorf("a certificate 60 days out is warned about: %q", r[len(r)-1])
	}
	// -o json: the EscrowRef itself.
	for _, r := range res.Rows {
		if r.Name == names["present"] && (r.Escrow == nil || r.Escrow.Address != testfix.EscrowAddress("p") || len(r.Escrow.Certs) != 2) {
			t.Errorf("JSON row of the present backup: escrow %+v", r.Escrow)
		}
		if r.Name == names["-"] && r.Escrow != nil {
			t.Errorf("a backup from before escrow has escrow %+v", r.Escrow)
		}
	}
}

// On a bucket with object lock, an escrow no backup names whose lock still
// holds is retained (with its lock's end), not hidden behind a delete
// marker, and that is no failure; once the lock has ended a prune deletes it.
func TestPruneRetainsLockedEscrow(t *testing.T) {
	t.Parallel()
	st, l, now := lockedStoreRig(t)
	ctx := context.Background()
	testfix.PutEscrowBackup(t, st, l, "esc-lock", now.Add(-time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, testfix.EscrowAddress("named")))
	locked := testfix.PutEscrowObject(t, st, l, "esc-lock", testfix.EscrowAddress("locked"))
	until := now.Add(4 * time.Hour).Truncate(time.Second)
	if err := st.SetRetention(ctx, locked, "", store.Retention{Mode: store.LockGovernance, Until: until}); err != nil {
		t.Fatal(err)
	}
	later := now.Add(2 * time.Hour) // past the 1 h grace, within the lock
	rep, err := prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{"esc-lock"}, Policy: escrowPolicy(), Now: later})
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	a := escrowActions(rep, "esc-lock")[testfix.EscrowAddress("locked")]
	if a.Action != prune.ActionRetained || a.LockedUntil == nil || !a.LockedUntil.Equal(until) || !strings.Contains(a.Reason, "retained until") ||
		rep.EscrowsRetained != 1 || rep.EscrowsFailed != 0 {
		t.Errorf("locked escrow: %+v (retained %d, failed %d); want retained until %v", a, rep.EscrowsRetained, rep.EscrowsFailed, until)
	}
	if got := escrowsIn(t, st, l, "esc-lock"); !slices.Contains(got, locked) {
		t.Fatalf("the locked escrow is gone from the listing: %v", got)
	}
	// After its lock: deleted.
	rep, err = prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{"esc-lock"}, Policy: escrowPolicy(), Now: until.Add(time.Minute)})
	if err != nil {
		t.Fatalf("prune after the lock: %v", err)
	}
	if a := escrowActions(rep, "esc-lock")[testfix.EscrowAddress("locked")]; a.Action != prune.ActionDeleted {
		t.Errorf("escrow after its lock ended: %+v; want deleted", a)
	}
}

// Prune re-reads the cluster just before deleting escrows: a backup that
// commits after prune's listing and names an escrow no listed backup
// names (a backup reusing an older escrow's address), or a folder in
// flight that appears after the listing, keeps that escrow.
func TestPruneEscrowRecheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		put    func(tb testing.TB, st store.Store, l catalog.Layout, a string)
		rule   string
		saying string
	}{
		{name: "committed reuse", rule: retention.EscrowRuleNamed, saying: "named by 1 backup", put: func(tb testing.TB, st store.Store, l catalog.Layout, a string) {
			testfix.PutEscrowBackup(tb, st, l, "esc-r", time.Now().UTC(), testfix.StoredEscrow(catalog.EscrowPresent, a))
		}},
		{name: "in flight", rule: retention.EscrowRuleInFlight, saying: "in flight", put: func(tb testing.TB, st store.Store, l catalog.Layout, a string) {
			name := catalog.BackupName(time.Now().UTC(), catalog.KindScheduled)
			if _, err := st.Put(context.Background(), l.Key("esc-r", name, catalog.StartedObject), strings.NewReader("{}")); err != nil {
				tb.Error(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sr := testfix.NewStoreRig(t)
			l := sr.Layout
			st := faults.Wrap(sr.Store)
			ctx := context.Background()
			now := time.Now().UTC()
			a, b := testfix.EscrowAddress("A"), testfix.EscrowAddress("B")
			old := testfix.PutEscrowBackup(t, st, l, "esc-r", now.Add(-3*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, a))
			testfix.PutEscrowBackup(t, st, l, "esc-r", now.Add(-1*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, b))
			// The backup naming A goes; while prune deletes it (after its
			// listing), another backup appears.
			st.Inject(faults.Fault{Op: faults.OpDelete, KeyContains: old, Kind: faults.Hook, Times: 1,
				Func: func(context.Context, string) { tc.put(t, sr.Store, l, a) }})
			later := now.Add(retention.MinIncompleteAfter + 30*time.Minute)
			rep, err := prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{"esc-r"}, Policy: escrowPolicy(), Now: later})
			if err != nil {
				t.Fatalf("prune: %v", err)
			}
			if acts := actionsByName(rep); acts["esc-r/"+old].Action != prune.ActionDeleted {
				t.Fatalf("the backup naming A was not deleted: %+v", acts)
			}
			got := escrowActions(rep, "esc-r")[a]
			if got.Action != prune.ActionKeep || got.Rule != tc.rule || !strings.Contains(got.Reason, tc.saying) || !strings.Contains(got.Reason, "re-read") {
				t.Errorf("escrow A: %+v; want kept (%s, re-read before deleting)", got, tc.rule)
			}
			keys := escrowsIn(t, sr.Store, l, "esc-r")
			if !slices.Contains(keys, l.EscrowKey("esc-r", a)) {
				t.Fatalf("escrow A was deleted although a backup appeared meanwhile: %v", keys)
			}
		})
	}
}

// prune --lock-mode re-locks the newest backup and, with it, the escrow
// it names: on a locked bucket, without a backup run, the escrow's
// retention reaches at least the newest backup's.
func TestPruneRelockExtendsEscrow(t *testing.T) {
	t.Parallel()
	st, l, now := lockedStoreRig(t)
	ctx := context.Background()
	addr := testfix.EscrowAddress("relock")
	name := testfix.PutEscrowBackup(t, st, l, "esc-relock", now.Add(-time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, addr))
	rep, err := prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{"esc-relock"}, Policy: escrowPolicy(), Now: now,
		Lock: retention.LockPolicy{Mode: catalog.LockGovernanceMode}})
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	if len(rep.Relocked) != 1 {
		t.Fatalf("relocked %v", rep.Relocked)
	}
	backupRet, err := st.Retention(ctx, l.Key("esc-relock", name, catalog.ManifestObject), "")
	if err != nil || backupRet.Until.IsZero() {
		t.Fatalf("the newest backup's manifest: retention %+v, %v", backupRet, err)
	}
	escrowRet, err := st.Retention(ctx, l.EscrowKey("esc-relock", addr), "")
	if err != nil || escrowRet.Until.Before(backupRet.Until) {
		t.Fatalf("escrow retention %+v (%v), want until >= the newest backup's %s", escrowRet, err, backupRet.Until)
	}
}
