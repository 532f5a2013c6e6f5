package restore_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// watchedJournal is a journal the test watched itself (the source's
// events from the backup's revision + 1): no segments, no store.
type watchedJournal struct {
	events []journal.Event
	leases []journal.Lease
	// unfiltered yields every event whatever the revisions asked for (a
	// broken reader).
	unfiltered bool
	// unplaced is what UnplacedRevokes answers (journal.Source's).
	unplaced journal.Unplaced
}

func (j *watchedJournal) UnplacedRevokes() journal.Unplaced { return j.unplaced }

func (j *watchedJournal) Leases(context.Context, int64, int64) ([]journal.Lease, error) {
	return j.leases, nil
}

func (j *watchedJournal) Events(_ context.Context, from, to int64) (iter.Seq2[journal.Event, error], error) {
	return func(yield func(journal.Event, error) bool) {
		for _, ev := range j.events {
			if (j.unfiltered || ev.Rev >= from && ev.Rev <= to) && !yield(ev, nil) {
				return
			}
		}
	}, nil
}

// dumpAt is every key at revision rev (0: the newest) with its value,
// create and mod revision, version and lease, and the revision read.
func dumpAt(tb testing.TB, cli *clientv3.Client, rev int64) (map[string]string, int64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		tb.Fatalf("dump at %d: %v", rev, err)
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = fmt.Sprintf("value=%q create=%d mod=%d version=%d lease=%x", kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return out, resp.Header.Revision
}

func sameDump(tb testing.TB, what string, got, want map[string]string) {
	tb.Helper()
	var diffs []string
	for k, v := range want {
		if got[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: got %q, want %q", k, got[k], v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: got %q, not in the source", k, v))
		}
	}
	if len(diffs) > 0 {
		tb.Fatalf("%s: %d keys differ (got %d, want %d), first: %s", what, len(diffs), len(got), len(want), strings.Join(diffs[:min(5, len(diffs))], "; "))
	}
}

// pitrPoint is a revision the source was recorded at.
type pitrPoint struct {
	rev     int64
	dump    map[string]string
	hash    uint32
	compact int64
}

// pitrSource runs a workload on a one-member etcd: a first part, a full
// backup at revision base, then a second part (overwrites, a range
// delete, multi-op txns, a lease revoked with its keys, leases granted
// with keys), watched from base+1, with the source's dump and HashKV
// recorded at several revisions, before any compaction (there is none).
type pitrSource struct {
	c      *testenv.EtcdCluster
	rig    *storeRig
	id     string
	backup *catalog.Manifest
	base   int64
	points []pitrPoint
	j      *watchedJournal
}

func newPITRSource(t *testing.T, v testenv.Version) *pitrSource {
	t.Helper()
	ctx := testfix.Context(t, 2*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, Members: 1})
	cli := c.Client(t)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	s := &pitrSource{c: c, rig: newStoreRig(t), id: "kubx-etcd-pitr", j: &watchedJournal{}}
	testenv.PutKeys(t, cli, "/registry/pods/", 300, 32)
	testenv.PutKeys(t, cli, "/registry/pods/", 50, 32) // overwrites
	must(cli.Delete(ctx, "/registry/pods/00000100", clientv3.WithRange("/registry/pods/00000120")))
	l1, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		must(cli.Put(ctx, fmt.Sprintf("/registry/leases/a%02d", i), "held", clientv3.WithLease(l1.ID)))
	}
	s.backup = s.rig.TakeBackup(t, c, s.id, catalog.KindScheduled)
	s.base = s.backup.Revision()

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := cli.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(s.base+1))
	record := func() {
		t.Helper()
		dump, rev := dumpAt(t, cli, 0)
		h, err := cli.HashKV(ctx, c.Members[0].ClientURL, rev)
		if err != nil {
			t.Fatal(err)
		}
		s.points = append(s.points, pitrPoint{rev: rev, dump: dump, hash: h.Hash, compact: h.CompactRevision})
	}

	for i := range 30 {
		must(cli.Put(ctx, fmt.Sprintf("/registry/pods/%08d", i), fmt.Sprintf("after-%d", i)))
	}
	record()
	must(cli.Delete(ctx, "/registry/pods/00000200", clientv3.WithRange("/registry/pods/00000230")))
	must(cli.Txn(ctx).Then(
		clientv3.OpPut("/registry/configmaps/a", "1"),
		clientv3.OpPut("/registry/configmaps/b", "2"),
		clientv3.OpDelete("/registry/pods/00000001"),
		clientv3.OpPut("/registry/configmaps/c", "3"),
	).Commit())
	l2, err := cli.Grant(ctx, 900)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		must(cli.Put(ctx, fmt.Sprintf("/registry/leases/b%02d", i), "held", clientv3.WithLease(l2.ID)))
	}
	record()
	rv, err := cli.Revoke(ctx, l1.ID)
	if err != nil {
		t.Fatal(err)
	}
	must(cli.Put(ctx, "/registry/leases/a00", "unleased now"))
	must(cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("/registry/configmaps/a"), "=", 1)).
		Then(clientv3.OpDelete("/registry/configmaps/", clientv3.WithPrefix()), clientv3.OpPut("/registry/secrets/c", "x")).Commit())
	record()
	last := s.points[len(s.points)-1].rev

	var evs []*clientv3.Event
	for len(evs) == 0 || evs[len(evs)-1].Kv.ModRevision < last {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				t.Fatalf("watch ended: %v", wr.Err())
			}
			evs = append(evs, wr.Events...)
		case <-time.After(30 * time.Second):
			t.Fatalf("watched %d events, not yet at revision %d", len(evs), last)
		}
	}
	s.j.events = testfix.AppendWatched(nil, evs)
	s.j.leases = []journal.Lease{
		{ID: int64(l1.ID), TTL: 600, Rev: l1.Revision, Revoked: rv.Header.Revision},
		{ID: int64(l2.ID), TTL: 900, Rev: l2.Revision},
	}
	return s
}

// restoreTo restores the backup up to rev into one member and starts it.
func (s *pitrSource) restoreTo(t *testing.T, v testenv.Version, rev int64, bump bool) (*restore.Result, *clientv3.Client) {
	t.Helper()
	ctx := testfix.Context(t, 2*time.Minute)
	ic, ms := newCluster(t, 1, false)
	opts := restore.Options{ClusterID: s.id, Store: s.rig.Store, Layout: s.rig.Layout, NoLive: true, Backup: s.backup.Name,
		Targets: restore.Targets{InitialCluster: ic, DataDirRoot: t.TempDir()}, ToRevision: rev, Journal: s.j, Log: testfix.Logger(t)}
	if bump {
		opts.BumpRevision, opts.MarkCompacted = restore.DefaultBumpRevision, true
	}
	res, err := restore.Run(ctx, opts)
	if err != nil {
		t.Fatalf("restore to %d: %v", rev, err)
	}
	nc := startRestored(t, v, &res.Plan, ms, nil, false)
	return res, nc.Client(t)
}

// Point-in-time restore on real etcd: a backup, then the watched events
// replayed straight into its bbolt file up to each recorded revision R.
// Restored without a bump, etcd serves at exactly R the source's full dump
// at R (every key with value, create and mod revision, version, lease)
// and the same HashKV at R: HashKV hashes the "key" bucket's entries
// (revision key and marshalled KeyValue, tombstones included) from the
// compact revision up to R, and the compact revision (0 on both: the
// source was never compacted: both report -1); the restored bucket is the snapshot's
// entries up to the backup's revision plus the replayed ones, which are
// etcd's own bytes (etcdinternals.TestApplyEventsMatchesEtcd). HashKV
// does not cover leases, so the leases are checked apart: the leases of
// the dump's keys live with their granted TTL, the revoked one is gone.
// With the default bump and compaction mark, the newest revision's dump
// is the same keys (HashKV then differs by design: the bump's entry and
// the compaction).
func TestReplayToRevision(t *testing.T) {
	t.Parallel()
	for _, v := range []testenv.Version{testenv.V35, testenv.V36} {
		t.Run(string(v), func(t *testing.T) {
			t.Parallel()
			s := newPITRSource(t, v)
			ctx := testfix.Context(t, 2*time.Minute)
			revoked := s.j.leases[0]
			for _, p := range s.points {
				res, cli := s.restoreTo(t, v, p.rev, false)
				if res.Replay == nil || res.Replay.FromRevision != s.base || res.Replay.ToRevision != p.rev || res.MinRevision != p.rev {
					t.Fatalf("replay %+v, min revision %d: want %d..%d", res.Replay, res.MinRevision, s.base, p.rev)
				}
				got, rev := dumpAt(t, cli, 0)
				if rev != p.rev {
					t.Fatalf("the restored cluster is at revision %d, want %d", rev, p.rev)
				}
				sameDump(t, fmt.Sprintf("revision %d", p.rev), got, p.dump)
				h, err := cli.HashKV(ctx, cli.Endpoints()[0], p.rev)
				if err != nil {
					t.Fatal(err)
				}
				if h.Hash != p.hash || h.CompactRevision != p.compact {
					t.Fatalf("HashKV at %d: %d (compact revision %d), the source's %d (%d)", p.rev, h.Hash, h.CompactRevision, p.hash, p.compact)
				}
				checkLeases(t, cli, got, revoked, p.rev)
			}
			p := s.points[len(s.points)-1]
			// A revoke the journal could not place is named, not hidden.
			s.j.unplaced = journal.Unplaced{Leases: []int64{0xabc}, Why: "the journal ends before they are placed"}
			res, cli := s.restoreTo(t, v, p.rev, true)
			got, rev := dumpAt(t, cli, 0)
			if rev < p.rev+restore.DefaultBumpRevision || res.MinRevision != p.rev+restore.DefaultBumpRevision {
				t.Fatalf("revision %d, min %d: want the bump above %d", rev, res.MinRevision, p.rev)
			}
			sameDump(t, "bumped", got, p.dump)
			if fmt.Sprint(res.Replay.RevokesUnplaced) != "[abc]" || !slices.ContainsFunc(res.Warnings, func(w string) bool {
				return strings.Contains(w, "lease(s) abc:") && strings.Contains(w, "the journal ends before they are placed")
			}) {
				t.Fatalf("an unplaced revoke: replay %+v, warnings %q", res.Replay, res.Warnings)
			}
		})
	}
}

// checkLeases: every lease a key is on lives with its TTL; the revoked
// lease is gone once R is past its revoke.
func checkLeases(t *testing.T, cli *clientv3.Client, dump map[string]string, revoked journal.Lease, rev int64) {
	t.Helper()
	ctx := testfix.Context(t, time.Minute)
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, kv := range resp.Kvs {
		if kv.Lease == 0 || seen[kv.Lease] {
			continue
		}
		seen[kv.Lease] = true
		ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil || ttl.TTL <= 0 || (ttl.GrantedTTL != 600 && ttl.GrantedTTL != 900) {
			t.Fatalf("lease %x of %s: %+v, %v", kv.Lease, kv.Key, ttl, err)
		}
	}
	if len(seen) == 0 {
		t.Fatalf("no key at revision %d is on a lease", rev)
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(revoked.ID))
	if err != nil {
		t.Fatal(err)
	}
	if gone := ttl.TTL == -1; gone != (rev >= revoked.Revoked) {
		t.Fatalf("lease %x (revoked at %d) at revision %d: TTL %d", revoked.ID, revoked.Revoked, rev, ttl.TTL)
	}
}

// A journal that does not continue the backup exactly, or ends short, is
// refused at the replay step, before any data dir is written; a revision
// without a journal is a usage error.
func TestReplayRefuses(t *testing.T) {
	t.Parallel()
	s := newPITRSource(t, testenv.V35)
	ctx := testfix.Context(t, time.Minute)
	last := s.points[len(s.points)-1].rev
	run := func(j restore.JournalSource, rev int64) error {
		ic, _ := newCluster(t, 1, false)
		root := t.TempDir()
		_, err := restore.Run(ctx, restore.Options{ClusterID: s.id, Store: s.rig.Store, Layout: s.rig.Layout, NoLive: true,
			Backup: s.backup.Name, Targets: restore.Targets{InitialCluster: ic, DataDirRoot: root}, ToRevision: rev, Journal: j,
			Log: testfix.Logger(t)})
		if err == nil {
			return nil
		}
		if dirs := treeState(t, root); len(dirs) > 1 {
			t.Errorf("a refused replay left %v", dirs)
		}
		return err
	}
	atBase := &watchedJournal{unfiltered: true, leases: s.j.leases, events: append([]journal.Event{{Rev: s.base, Type: journal.Delete, Key: []byte("/x")}}, s.j.events...)}
	for _, c := range []struct {
		name string
		j    restore.JournalSource
		rev  int64
		want string
	}{
		{"an event at the snapshot's revision", atBase, last, "not after the snapshot's revision"},
		{"a gap", &watchedJournal{leases: s.j.leases, events: s.j.events[3:]}, last, "gap"},
		{"a journal that ends short", s.j, last + 5, fmt.Sprintf("reaches revision %d only", last)},
	} {
		err := run(c.j, c.rev)
		var re *restore.Error
		if !errors.As(err, &re) || re.Step() != restore.StepReplay || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a failure at %q saying %q", c.name, err, restore.StepReplay, c.want)
		}
	}
	// A backup above the revision is not selected (the selection is by
	// revision at or below it): named with --backup, it is refused there.
	err := run(s.j, s.base-1)
	var re *restore.Error
	if !errors.As(err, &re) || re.Step() != restore.StepSelect || !strings.Contains(err.Error(), fmt.Sprintf("is above --to-revision %d", s.base-1)) {
		t.Errorf("a revision below the backup: %v, want a failure at %q", err, restore.StepSelect)
	}
	err = restore.Options{ClusterID: s.id, Targets: restore.Targets{InitialCluster: "a=http://127.0.0.1:1", DataDirRoot: "/tmp/x"}, ToRevision: 5}.Validate()
	if err == nil || !strings.Contains(err.Error(), "no journal") {
		t.Errorf("a revision without a journal: %v", err)
	}
}
