package journal_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// A lease revoke is recorded once the capture holds every revision up to
// the one its lookup found the lease gone at (a later delete of one of
// its keys may be the revoke's own). A segment sealed before that would
// be stored with the revoke still pending in memory; a capture killed
// then resumes after the deletes of the lease's keys and never records
// it, and every restore after would hold the lease, on no key, for good
// (TestPointInTimeRestoreExact saw one, with a SIGKILL of the journal).
// Here, on a real etcd: the lease's revoke reaches the capture while
// three writes after it are held back in the client (its lookup finds
// the lease gone at the third), the interval falls due meanwhile, and the
// capture is fenced (stopped at once, no final flush, as a SIGKILL) as
// soon as a segment holding the revoke is stored. Restarted, the journal
// must still hold the revoke, and a replay to the revoke's revision must
// remove the lease. Twice: with the writes after the revoke 1.3 s late,
// the segment is held until the revoke is placed (revokesAhead); 4 s
// late, past the hold's two intervals, the segment is stored with the
// revoke pending in its header (Header.Revoking), and the restarted
// capture goes on with it.
func TestCaptureRevokeSurvivesAKill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		interval, after time.Duration
	}{
		// Due at 2 s, held to 4 s: a second's margin either way.
		{"held", 2 * time.Second, 3 * time.Second},
		// Due at 1 s, held to 2 s, the writes after it at 4 s.
		{"past the hold", time.Second, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			revokeSurvivesAKill(t, tc.interval, tc.after)
		})
	}
}

func revokeSurvivesAKill(t *testing.T, interval, after time.Duration) {
	ctx := testfix.Context(t, time.Minute)
	_, cli := startEtcd(t, testenv.V35)
	g, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/leased", "x", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	base := headRev(t, ctx, cli)

	// Past the warm-up, the watch's messages are held in the client: the
	// first (/a) until the revoke and the three writes after it are
	// done, so that the lookup the revoke's delete starts finds the
	// lease gone three revisions later; the revoke's own then at once;
	// the writes after it `after` past /a, when the interval (1 s) of the
	// buffer /a started has fallen due (or, past the hold, its two).
	var hold atomic.Bool
	var held atomic.Int32
	var releasedAt atomic.Int64
	written := make(chan struct{})
	undo := journal.SlowSends(cli, func(wctx context.Context, evs []*mvccpb.Event) {
		if !hold.Load() || len(evs) == 0 {
			return
		}
		var until <-chan time.Time
		switch held.Add(1) {
		case 1:
			select {
			case <-wctx.Done():
			case <-written:
			}
			releasedAt.Store(time.Now().UnixNano())
			return
		case 2:
			return
		default:
			until = time.After(time.Until(time.Unix(0, releasedAt.Load()).Add(after)))
		}
		select {
		case <-wctx.Done():
		case <-until:
		}
	})
	defer undo()
	st := memstore.New()
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	o := captureOptions(t, cli, st, layout, zstdEnc, base)
	o.SegmentInterval = interval
	var fenced atomic.Bool
	o.Fence = func() error {
		if fenced.Load() {
			return errors.New("fenced by the test: a kill")
		}
		return nil
	}
	stop := startCapture(ctx, o)
	// The watch is up, its warm-up segment stored: the buffer is empty.
	p, err := cli.Put(ctx, "/warm-up", "x")
	if err != nil {
		t.Fatal(err)
	}
	waitChain(t, ctx, st, layout, "c1", base, p.Header.Revision, 15*time.Second)
	hold.Store(true)
	if _, err = cli.Put(ctx, "/a", "x"); err != nil { // the next buffer starts
		t.Fatal(err)
	}
	r, err := cli.Revoke(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	revoked := r.Header.Revision
	var last int64
	for i := range 3 {
		p, err := cli.Put(ctx, "/after", string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		last = p.Header.Revision
	}
	close(written)
	// Killed as soon as a segment holding the revoke's deletes is stored.
	waitChain(t, ctx, st, layout, "c1", base, revoked, 15*time.Second)
	fenced.Store(true)
	err = stop() // fenced: no final flush
	t.Logf("the first capture ended: %v", err)
	killed, err := journal.ListSegments(ctx, st, layout, "c1", base)
	if err != nil {
		t.Fatal(err)
	}
	if n := held.Load(); n < 3 {
		t.Fatalf("the scenario was not reached: %d messages held, want /a, the revoke and the writes after it apart", n)
	}

	undo()
	o.Fence = nil
	stop2 := startCapture(ctx, o)
	last = writeUntilPlaced(t, ctx, cli, st, layout, base)
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	chain, err := journal.ListSegments(ctx, st, layout, "c1", base)
	if err != nil || chain.Problem != nil || chain.Reach < last {
		t.Fatalf("chain: %+v %v", chain, err)
	}
	// Where the revoke went: the segment holding its deletes, and the
	// one holding its record.
	var deletes, record *journal.Header
	for _, s := range chain.Segments {
		h, _, err := journal.ReadSegment(ctx, st, layout, s.Key, nil, journal.Want{ClusterID: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		if h.FirstRev <= revoked && revoked <= h.LastRev {
			deletes = &h
		}
		for _, l := range h.Leases {
			if l.ID == int64(g.ID) && l.Revoked != 0 {
				if record != nil {
					t.Errorf("lease %x: revoked twice in the journal, in %d-%d and %d-%d", l.ID, record.FirstRev, record.LastRev, h.FirstRev, h.LastRev)
				}
				record = &h
				if l.Revoked != revoked {
					t.Errorf("lease %x revoked at %d in the journal, at %d in etcd", l.ID, l.Revoked, revoked)
				}
			}
		}
	}
	if record == nil {
		t.Fatalf("lease %x: its revoke at revision %d is not in the journal (%d segments to %d): a restore keeps the lease for good", g.ID, revoked, len(chain.Segments), chain.Reach)
	}
	pending := slices.IndexFunc(deletes.Revoking, func(r journal.PendingRevoke) bool { return r.ID == int64(g.ID) && r.Last == revoked }) >= 0
	if after > 2*interval {
		// The scenario: the segment of the deletes was stored with the
		// revoke pending in its header, the record came later.
		// The first capture stored nothing past the kill that placed it:
		// the restarted one did.
		if !pending || record.FirstRev <= killed.Reach {
			t.Fatalf("the scenario was not reached: the segment %d-%d of the deletes carries %+v, the record is in %d-%d, the killed capture reached %d", deletes.FirstRev, deletes.LastRev, deletes.Revoking, record.FirstRev, record.LastRev, killed.Reach)
		}
	} else {
		// Held past its interval, placed with its deletes.
		span := time.Duration(deletes.Received[deletes.LastRev]-deletes.Received[deletes.FirstRev]) * time.Millisecond
		if pending || record != deletes || span <= interval {
			t.Fatalf("the scenario was not reached: the segment %d-%d of the deletes (received over %v) carries %+v, the record is in %d-%d", deletes.FirstRev, deletes.LastRev, span, deletes.Revoking, record.FirstRev, record.LastRev)
		}
	}
	// A replay to the revoke removes the lease (one of the snapshot's).
	leases, err := journal.NewSource(st, layout, "c1", nil).Leases(ctx, base+1, revoked)
	if err != nil || len(leases) != 1 || leases[0].ID != int64(g.ID) || leases[0].Revoked != revoked {
		t.Fatalf("the leases of a replay to %d: %v %v, want lease %x revoked at %d", revoked, leases, err, g.ID, revoked)
	}
}

// A capture resuming after a segment that carries pending revokes looks
// each lease up before it places it: a header naming a live lease (wrong,
// or forged by someone who could write the bucket) must not become a
// revoke, which would take the lease from under its keys in every restore
// after it; a gone one is placed at the delete the header names. Here the
// stored segment names lease L, alive with a key, and lease L2, revoked,
// as pending: the resumed capture drops L and places L2's revoke.
func TestCaptureResumeDropsALivePendingRevoke(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	rig := newCaptureRig(t, ctx)
	var ids [2]clientv3.LeaseID
	for i := range ids {
		g, err := rig.cli.Grant(ctx, 600)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = g.ID
	}
	live, gone := int64(ids[0]), int64(ids[1])
	var revs []int64
	for _, op := range []clientv3.Op{
		clientv3.OpPut("/k", "x", clientv3.WithLease(ids[0])),
		clientv3.OpPut("/k2", "y", clientv3.WithLease(ids[1])),
	} {
		r, err := rig.cli.Do(ctx, op)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r.Put().Header.Revision)
	}
	rv, err := rig.cli.Revoke(ctx, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	r1, r2, r3 := revs[0], revs[1], rv.Header.Revision
	if r1 != rig.base+1 || r2 != r1+1 || r3 != r2+1 {
		t.Fatalf("revisions %d %d %d after base %d", r1, r2, r3, rig.base)
	}
	h := journal.Header{ClusterID: "c1", BaseBackup: rig.o.BaseBackup, BaseRev: rig.base, FirstRev: r1, LastRev: r3,
		Received: map[int64]int64{r1: time.Now().UnixMilli(), r3: time.Now().UnixMilli()}, EtcdClusterID: rig.etcdID,
		Revoking: []journal.PendingRevoke{{ID: live, Last: r1, SeenGone: r3 + 1}, {ID: gone, Last: r3, SeenGone: r3 + 1}}}
	writeSegment(t, ctx, rig.st, rig.layout, h, []journal.Event{
		{Rev: r1, Type: journal.Put, Key: []byte("/k"), Value: []byte("x"), CreateRev: r1, Version: 1, Lease: live},
		{Rev: r2, Type: journal.Put, Key: []byte("/k2"), Value: []byte("y"), CreateRev: r2, Version: 1, Lease: gone},
		{Rev: r3, Type: journal.Delete, Key: []byte("/k2")},
	})
	stop := startCapture(ctx, rig.o)
	last := writeUntilPlaced(t, ctx, rig.cli, rig.st, rig.layout, rig.base)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	chain, err := journal.ListSegments(ctx, rig.st, rig.layout, "c1", rig.base)
	if err != nil || chain.Problem != nil || len(chain.Segments) < 2 {
		t.Fatalf("chain: %+v %v", chain, err)
	}
	var records []journal.Lease
	for _, s := range chain.Segments[1:] {
		h, _, err := journal.ReadSegment(ctx, rig.st, rig.layout, s.Key, nil, journal.Want{ClusterID: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range h.Leases {
			if l.Revoked != 0 {
				records = append(records, l)
			}
		}
	}
	if len(records) != 1 || records[0].ID != gone || records[0].Revoked != r3 {
		t.Fatalf("revoke records %+v: want lease %x's alone, at %d (lease %x lives)", records, gone, r3, live)
	}
	leases, err := journal.NewSource(rig.st, rig.layout, "c1", nil).Leases(ctx, r1, last)
	if err != nil || len(leases) != 1 || leases[0].ID != gone || leases[0].Revoked != r3 {
		t.Errorf("a replay's leases: %v %v, want lease %x revoked at %d only", leases, err, gone, r3)
	}
}

// writeUntilPlaced writes to the cluster until the journal's last stored
// segment carries no pending revoke (a lookup that times out on a loaded
// machine is made again at the next seal), for 30 s at most, and returns
// the last revision written, which the journal holds.
func writeUntilPlaced(tb testing.TB, ctx context.Context, cli *clientv3.Client, st store.Store, layout catalog.Layout, base int64) int64 {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := cli.Put(ctx, "/written", "v")
		if err != nil {
			tb.Fatal(err)
		}
		chain := waitChain(tb, ctx, st, layout, "c1", base, p.Header.Revision, 15*time.Second)
		h, _, err := journal.ReadSegment(ctx, st, layout, chain.Segments[len(chain.Segments)-1].Key, nil, journal.Want{ClusterID: "c1"})
		if err != nil {
			tb.Fatal(err)
		}
		if len(h.Revoking) == 0 {
			return p.Header.Revision
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after 30 s of writes, the journal's last segment %d-%d still carries %+v", h.FirstRev, h.LastRev, h.Revoking)
		}
	}
}
