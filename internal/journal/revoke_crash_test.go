package journal_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
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
// three writes after it are held back (the lookup finds it gone at the
// third), the interval falls due meanwhile, and the capture is fenced
// (stopped at once, no final flush, as a SIGKILL) as soon as a segment
// holding the revoke is stored. Restarted, the journal must still hold
// the revoke.
func TestCaptureRevokeSurvivesAKill(t *testing.T) {
	t.Parallel()
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

	var after atomic.Int64 // messages past this revision are held
	var firstHeld atomic.Int64
	undo := journal.SlowSends(cli, func(wctx context.Context, evs []*mvccpb.Event) {
		a := after.Load()
		if a == 0 || len(evs) == 0 || evs[0].Kv.ModRevision <= a {
			return
		}
		// The revoke's message waits for the writes after it; those
		// wait 600 ms more: the interval (1 s) falls due meanwhile.
		wait := 300 * time.Millisecond
		if !firstHeld.CompareAndSwap(0, time.Now().UnixNano()) {
			wait = time.Until(time.Unix(0, firstHeld.Load()).Add(900 * time.Millisecond))
		}
		select {
		case <-wctx.Done():
		case <-time.After(wait):
		}
	})
	defer undo()
	st := memstore.New()
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	o := captureOptions(t, cli, st, layout, zstdEnc, base)
	var fenced atomic.Bool
	o.Fence = func() error {
		if fenced.Load() {
			return errors.New("fenced by the test: a kill")
		}
		return nil
	}
	stop := startCapture(ctx, o)
	p, err := cli.Put(ctx, "/a", "x") // the buffer starts
	if err != nil {
		t.Fatal(err)
	}
	waitRev := p.Header.Revision
	time.Sleep(400 * time.Millisecond)
	after.Store(waitRev)
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
	// Killed as soon as a segment holding the revoke's deletes is stored.
	waitChain(t, ctx, st, layout, "c1", base, revoked, 15*time.Second)
	fenced.Store(true)
	err = stop() // fenced: no final flush
	t.Logf("the first capture ended: %v", err)

	undo()
	o.Fence = nil
	stop2 := startCapture(ctx, o)
	p, err = cli.Put(ctx, "/restarted", "x")
	if err != nil {
		t.Fatal(err)
	}
	last = p.Header.Revision
	waitChain(t, ctx, st, layout, "c1", base, last, 15*time.Second)
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	chain, err := journal.ListSegments(ctx, st, layout, "c1", base)
	if err != nil || chain.Problem != nil || chain.Reach < last {
		t.Fatalf("chain: %+v %v", chain, err)
	}
	var found bool
	for _, s := range chain.Segments {
		h, _, err := journal.ReadSegment(ctx, st, layout, s.Key, nil, journal.Want{ClusterID: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range h.Leases {
			if l.ID == int64(g.ID) && l.Revoked != 0 {
				found = true
				if l.Revoked != revoked {
					t.Errorf("lease %x revoked at %d in the journal, at %d in etcd", l.ID, l.Revoked, revoked)
				}
			}
		}
	}
	if !found {
		t.Fatalf("lease %x: its revoke at revision %d is not in the journal (%d segments to %d): a restore keeps the lease for good", g.ID, revoked, len(chain.Segments), chain.Reach)
	}
}
