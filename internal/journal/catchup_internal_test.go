package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// watchRig drives a capture's buffer as its watch loop does, on a clock of
// its own (unix ms): responses of events (add, then noteSynced with the
// response's header revision), a watch opened again (openFrom, then its
// first answer: noteCatchUp), and seals into an in-memory store. The
// receive-time and catch-up rules are the capture's own code; a real etcd
// cannot be made to deliver at chosen milliseconds.
type watchRig struct {
	t   *testing.T
	c   *capture
	now int64
	st  *memstore.Store
}

var watchRigLayout = catalog.Layout{Prefix: "p"}

func newWatchRig(t *testing.T, next int64) *watchRig {
	r := &watchRig{t: t, st: memstore.New()}
	r.c = &capture{o: CaptureOptions{ClusterID: "c1", BaseBackup: "b1", BaseRev: next - 1, SegmentSize: 1 << 30, Log: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return time.UnixMilli(r.now) }}, next: next, known: map[int64]bool{}}
	return r
}

// response delivers revisions revs at ms, in a response whose header says
// etcd is at head.
func (r *watchRig) response(ms, head int64, revs ...int64) {
	r.t.Helper()
	r.now = ms
	var evs []*clientv3.Event
	for _, v := range revs {
		evs = append(evs, &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(fmt.Sprint("k", v)), Value: []byte("v"),
			ModRevision: v, CreateRevision: v, Version: 1}})
	}
	if c := r.c; c.openFrom != 0 {
		c.noteCatchUp(head)
	}
	r.c.pollOpenRead()
	if rest, err := r.c.add(context.Background(), evs); err != nil || len(rest) > 0 {
		r.t.Fatal(rest, err)
	}
	r.c.noteSynced(head)
}

// reopen is the watch opened again (a stream broken, a restart).
func (r *watchRig) reopen() { r.c.openFrom = r.c.from() }

func (r *watchRig) seal() {
	r.t.Helper()
	p, err := r.c.seal(false)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := writeRaw(context.Background(), r.st, watchRigLayout.JournalSegmentKey("c1", p.h.FirstRev, p.h.LastRev), p.h, p.raw,
		objectio.Encoding{Compression: objectio.CompressZstd}, objectio.PutOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *watchRig) pointAt(ms int64) (Point, error) {
	return NewSource(r.st, watchRigLayout, "c1", nil).PointAt(context.Background(), time.UnixMilli(ms))
}

// The capture's receive times and catch-ups, through its own code: the
// revision before a recorded one is recorded too (a revision received
// within ReceivedEvery of a recorded one took that one's time until the
// next recorded, seconds later); a catch-up closes only once the watch has
// delivered a response's own revision (revisions committed after its first
// answer come behind the backlog); one cut short by the journal's end stays
// open and takes the time past the end as past it. Each case failed before
// (found by an adversarial review).
func TestWatchRigCatchUps(t *testing.T) {
	t.Parallel()
	var ce *CatchUpError
	t.Run("sparse receive times", func(t *testing.T) {
		r := newWatchRig(t, 11)
		r.response(1000, 11, 11)
		r.response(1050, 12, 12) // within ReceivedEvery of 11
		r.response(21000, 13, 13)
		r.seal()
		if p, err := r.pointAt(11000); err != nil || p.Revision != 12 {
			t.Errorf("10 s after 12 was received: %+v %v, want 12", p, err)
		}
	})
	t.Run("the revision before a reopen unrecorded", func(t *testing.T) {
		r := newWatchRig(t, 11)
		r.response(1000, 11, 11)
		r.response(1050, 12, 12)
		r.reopen()
		r.response(4010, 20, 13, 14, 15, 16, 17, 18, 19, 20)
		r.seal()
		if p, err := r.pointAt(3000); !errors.As(err, &ce) || ce.Before != 12 {
			t.Errorf("a time no journal watched, after 12: %+v %v, want the window after 12", p, err)
		}
		if p, err := r.pointAt(4010); err != nil || p.Revision != 20 {
			t.Errorf("caught up: %+v %v, want 20", p, err)
		}
	})
	t.Run("a backlog", func(t *testing.T) {
		r := newWatchRig(t, 11)
		r.response(1100, 11, 11)
		r.response(1300, 13, 12, 13)
		r.seal()
		r.reopen()
		r.response(2000, 16, 14) // the first answer: etcd at 16
		r.response(2500, 17, 15) // 17 committed meanwhile
		r.response(3000, 17, 16)
		r.response(3010, 17, 17) // caught up
		r.seal()
		if p, err := r.pointAt(2800); !errors.As(err, &ce) || ce.CatchUp.To != 17 || ce.CatchUp.At != 3010 {
			t.Errorf("inside the backlog (17 may have been committed by then): %+v %v, want refused, the catch-up to 17 at 3010", p, err)
		}
		if p, err := r.pointAt(3010); err != nil || p.Revision != 17 {
			t.Errorf("caught up: %+v %v, want 17", p, err)
		}
	})
	t.Run("a catch-up cut by the journal's end", func(t *testing.T) {
		r := newWatchRig(t, 11)
		r.response(1000, 11, 11)
		r.seal()
		r.reopen()
		r.response(4010, 20, 12, 13, 14, 15) // etcd at 20; the journal stops at 15
		r.seal()
		if p, err := r.pointAt(4005); !errors.As(err, &ce) || !ce.CatchUp.Open {
			t.Errorf("inside the catch-up: %+v %v, want refused (open)", p, err)
		}
		if p, err := r.pointAt(60000); err != nil || p.Revision != 15 || !p.PastEnd {
			t.Errorf("after the journal's end: %+v %v, want 15, past the end", p, err)
		}
	})
	t.Run("a fragment dropped before the seal", func(t *testing.T) {
		r := newWatchRig(t, 10)
		r.response(900, 10, 10)
		r.response(1000, 11, 11)
		// 60 s later the first fragment of a large 12; the watch ends
		// before the rest, and the final flush drops it.
		r.now = 61010
		if rest, err := r.c.add(context.Background(), []*clientv3.Event{{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("big"), Value: []byte("v"),
			ModRevision: 12, CreateRevision: 12, Version: 1}}}); err != nil || len(rest) > 0 {
			t.Fatal(rest, err)
		}
		r.c.partial = 12
		r.c.dropPartial()
		r.seal()
		if p, err := r.pointAt(30000); err != nil || p.Revision != 11 {
			t.Errorf("30 s after 11 was received: %+v %v, want 11 (not the dropped fragment's time)", p, err)
		}
	})
	t.Run("a watch opened on a member behind the cluster", func(t *testing.T) {
		r := newWatchRig(t, 11)
		r.response(1000, 11, 11)
		r.reopen() // 12 to 15 committed while no journal watched
		r.c.openLin = make(chan int64, 1)
		r.c.openLin <- 15    // the cluster's revision, read linearizably
		r.response(8000, 11) // the member's own: behind
		r.response(9000, 12, 12)
		r.response(9001, 13, 13)
		r.response(9002, 14, 14)
		r.response(9003, 15, 15)
		r.seal()
		if p, err := r.pointAt(3000); !errors.As(err, &ce) || ce.CatchUp.To != 15 || ce.CatchUp.At != 9003 {
			t.Errorf("in the window no journal watched: %+v %v, want refused, caught up to 15 at 9003", p, err)
		}
	})
	t.Run("a live write after a late read", func(t *testing.T) {
		r := newWatchRig(t, 11)
		r.response(1000, 11, 11)
		r.reopen()
		r.c.openLin = make(chan int64, 1)
		r.response(8000, 11) // the first answer, before the read
		r.c.openLin <- 11    // the cluster had not moved
		r.response(9000, 12, 12)
		r.seal()
		for _, at := range []int64{5000, 8500} {
			if p, err := r.pointAt(at); err != nil || p.Revision != 11 {
				t.Errorf("at %d, the cluster idle at 11 (read at the reopen), 12 a live write: %+v %v, want 11", at, p, err)
			}
		}
	})
	t.Run("a read that never answers", func(t *testing.T) {
		r := newWatchRig(t, 11)
		r.response(1000, 11, 11)
		r.reopen()
		r.c.openLin = make(chan int64, 1) // no quorum: no answer
		r.response(8000, 11)              // its member, behind
		r.response(18000, 11)
		r.response(30000, 15, 12, 13, 14, 15)
		r.seal()
		if p, err := r.pointAt(20000); !errors.As(err, &ce) || !ce.CatchUp.Open {
			t.Errorf("the cluster's revision unknown since the reopen: %+v %v, want refused (open)", p, err)
		}
	})
	t.Run("a watch opened with nothing to catch up", func(t *testing.T) {
		r := newWatchRig(t, 11)
		r.response(1000, 11, 11)
		r.reopen()
		r.c.openLin = make(chan int64, 1)
		r.c.openLin <- 11
		r.response(8000, 11) // nothing committed meanwhile: no catch-up
		r.response(9000, 12, 12)
		r.seal()
		if p, err := r.pointAt(8500); err != nil || p.Revision != 11 || len(r.c.catchUps) != 0 {
			t.Errorf("an idle cluster's watch opened again: %+v %v, catch-ups %+v; want 11, none", p, err, r.c.catchUps)
		}
	})
}

// The stop's catch-up (SIGTERM while the watch was down, waiting for its
// backoff) opens a watch of its own and reads the backlog the cluster
// wrote meanwhile: on a real etcd 3.5, that backlog is recorded as a
// catch-up, and a time inside the window no journal watched is refused.
// Before, the stop's path recorded none, and the time mapped to the
// revision before the window (found by an adversarial review).
func TestStopCatchUpIsACatchUp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := e.Client(t)
	p0, err := cli.Put(ctx, "k0", "v")
	if err != nil {
		t.Fatal(err)
	}
	r0 := p0.Header.Revision
	var now atomic.Int64
	now.Store(1000)
	st := memstore.New()
	o := CaptureOptions{Client: cli, Store: st, Layout: watchRigLayout, ClusterID: "c1", BaseBackup: "b1", BaseRev: r0 - 1, SegmentSize: 1 << 30,
		Now: func() time.Time { return time.UnixMilli(now.Load()) }}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	c := &capture{o: o, next: r0, known: map[int64]bool{}, stopWatch: func() {}}
	if rest, err := c.add(ctx, []*clientv3.Event{{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("k0"), Value: []byte("v"),
		ModRevision: r0, CreateRevision: r0, Version: 1}}}); err != nil || len(rest) > 0 {
		t.Fatal(rest, err)
	}
	for i := 1; i <= 5; i++ { // while the watch was down
		if _, err := cli.Put(ctx, fmt.Sprint("k", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	now.Store(7000) // SIGTERM
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	if err := c.catchUp(wctx, nil); err != nil {
		t.Fatal(err)
	}
	c.stopWatch()
	p, err := c.seal(false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writeRaw(ctx, st, watchRigLayout.JournalSegmentKey("c1", p.h.FirstRev, p.h.LastRev), p.h, p.raw,
		objectio.Encoding{Compression: objectio.CompressZstd}, objectio.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var ce *CatchUpError
	if pt, err := NewSource(st, watchRigLayout, "c1", nil).PointAt(ctx, time.UnixMilli(4000)); !errors.As(err, &ce) || ce.Before != r0 {
		t.Errorf("after %d was received, before the backlog written meanwhile: %+v %v (caught up %+v); want refused", r0, pt, err, p.h.CaughtUp)
	}
}
