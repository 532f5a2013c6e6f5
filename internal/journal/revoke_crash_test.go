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
// three writes after it are held back in the client (its lookup finds
// the lease gone at the third), the interval falls due meanwhile, and the
// capture is fenced (stopped at once, no final flush, as a SIGKILL) as
// soon as a segment holding the revoke is stored. Restarted, the journal must still hold
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

	// Past the warm-up, the watch's messages are held in the client: the
	// first (/a) until the revoke and the three writes after it are
	// done, so that the lookup the revoke's delete starts finds the
	// lease gone three revisions later; the revoke's own then at once;
	// the writes after it 1.3 s after /a, when the interval (1 s) of the
	// buffer /a started has fallen due.
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
			until = time.After(time.Until(time.Unix(0, releasedAt.Load()).Add(1300 * time.Millisecond)))
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
	if n := held.Load(); n < 3 {
		t.Fatalf("the scenario was not reached: %d messages held, want /a, the revoke and the writes after it apart", n)
	}

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
