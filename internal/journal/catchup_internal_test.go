package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store/memstore"
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
}
