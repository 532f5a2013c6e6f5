package journal_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// A journal restarted after writes it did not see (both replicas down, a
// leader change) receives them in a catch-up, at the catch-up's time. On a
// real etcd 3.5: the segment holding them records the catch-up (from the
// revision the watch opened at to the revision etcd answered it with),
// a segment of a watch that had nothing to catch up records none, a time
// in the window no journal watched maps to no revision, and a time after
// the catch-up holds all of it. Before, the time in the window mapped to
// the revision before the writes: older than the time, with exit 0.
func TestCaptureRecordsItsCatchUps(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	rig := newCaptureRig(t, ctx)
	o := rig.o
	o.SegmentInterval = 300 * time.Millisecond
	put := func(k string) int64 {
		t.Helper()
		r, err := rig.cli.Put(ctx, k, "v")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	stop := startCapture(ctx, o)
	r0 := put("/k0") // perhaps before the watch's first answer: a catch-up
	waitLastSegment(t, ctx, rig.st, rig.layout, rig.base, rig.cli)
	r1 := put("/k1") // received live
	waitLastSegment(t, ctx, rig.st, rig.layout, rig.base, rig.cli)
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	unwatched := time.Now()
	time.Sleep(100 * time.Millisecond)
	put("/k2")
	r3 := put("/k3")
	time.Sleep(200 * time.Millisecond)
	stop = startCapture(ctx, o)
	waitLastSegment(t, ctx, rig.st, rig.layout, rig.base, rig.cli)
	caughtUp := time.Now()
	time.Sleep(100 * time.Millisecond)
	put("/k4")
	waitLastSegment(t, ctx, rig.st, rig.layout, rig.base, rig.cli)
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}

	src := journal.NewSource(rig.st, rig.layout, "c1", nil)
	_, hs, err := src.Headers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var marks []journal.CatchUp
	for _, h := range hs {
		switch {
		case h.FirstRev > r0 && h.LastRev <= r1 && len(h.CaughtUp) > 0:
			t.Errorf("segment %d-%d of a watch with nothing to catch up records %+v", h.FirstRev, h.LastRev, h.CaughtUp)
		case h.FirstRev <= r1+1 && r1+1 <= h.LastRev:
			marks = h.CaughtUp
			if h.Format != journal.FormatCaughtUp {
				t.Errorf("segment %d-%d with a catch-up is format %d", h.FirstRev, h.LastRev, h.Format)
			}
		}
	}
	if !slices.ContainsFunc(marks, func(u journal.CatchUp) bool { return u.From == r1+1 && u.To >= r3 }) {
		t.Fatalf("the segment of revision %d records catch-ups %+v, want one from %d to at least %d", r1+1, marks, r1+1, r3)
	}
	var ce *journal.CatchUpError
	if p, err := src.PointAt(ctx, unwatched); !errors.As(err, &ce) || ce.Before != r1 || ce.CatchUp.From != r1+1 {
		t.Errorf("a time no journal watched: %+v %v, want the window after revision %d", p, err, r1)
	}
	if p, err := src.PointAt(ctx, caughtUp); err != nil || p.Revision != r3 {
		t.Errorf("a time after the catch-up: %+v %v, want revision %d", p, err, r3)
	}
}
