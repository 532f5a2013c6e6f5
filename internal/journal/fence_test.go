package journal_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

var errNotLeader = errors.New("not the leader any more")

// A fence that refuses stops the capture at once: the segment it was
// about to write is not written, nor any later one, and a stop while
// fenced writes no final segment.
func TestCaptureFenceStopsAtOnce(t *testing.T) {
	t.Parallel()
	_, cli := startEtcd(t, testenv.V35)
	layout := memLayout
	enc := zstdEnc
	wantFenced := func(t *testing.T, err error) {
		t.Helper()
		var se *journal.SegmentError
		if !errors.As(err, &se) || se.Reason != journal.ReasonFenced || !errors.Is(err, errNotLeader) {
			t.Fatalf("Capture: %v, want a %q segment error wrapping the fence's", err, journal.ReasonFenced)
		}
		t.Log(err)
	}

	t.Run("before an upload", func(t *testing.T) {
		ctx := testfix.Context(t, 30*time.Second)
		base := headRev(t, ctx, cli)
		st := memstore.New()
		var refuse atomic.Bool
		var asked atomic.Int64
		o := captureOptions(t, cli, st, layout, enc, base)
		o.ClusterID = "fence1"
		o.SegmentInterval = 300 * time.Millisecond
		o.Fence = func() error {
			asked.Add(1)
			if refuse.Load() {
				return errNotLeader
			}
			return nil
		}
		done := make(chan error, 1)
		go func() { done <- journal.Capture(ctx, o) }()
		testenv.PutKeys(t, cli, "/fence1/a/", 5, 8)
		first := headRev(t, ctx, cli)
		waitChain(t, ctx, st, layout, o.ClusterID, base, first, 10*time.Second)
		refuse.Store(true)
		testenv.PutKeys(t, cli, "/fence1/b/", 5, 8)
		select {
		case err := <-done:
			wantFenced(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Capture did not stop when its fence refused")
		}
		ch, err := journal.ListSegments(ctx, st, layout, o.ClusterID, base)
		if err != nil || ch.Problem != nil || ch.Reach != first {
			t.Fatalf("after the fence refused: reach %d (want %d, nothing after), %v %v", ch.Reach, first, err, ch.Problem)
		}
		if asked.Load() == 0 {
			t.Fatal("the fence was never asked")
		}
	})

	t.Run("no final flush", func(t *testing.T) {
		ctx := testfix.Context(t, 30*time.Second)
		base := headRev(t, ctx, cli)
		st := memstore.New()
		var refuse atomic.Bool
		o := captureOptions(t, cli, st, layout, enc, base)
		o.ClusterID = "fence2"
		o.SegmentInterval = time.Hour // only the final flush would write
		o.Fence = func() error {
			if refuse.Load() {
				return errNotLeader
			}
			return nil
		}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- journal.Capture(cctx, o) }()
		// The capture holds the events once its watch delivered them: a
		// stop with an open fence would write them (the control below).
		testenv.PutKeys(t, cli, "/fence2/", 5, 8)
		last := headRev(t, ctx, cli)
		time.Sleep(2 * time.Second)
		refuse.Store(true)
		cancel()
		select {
		case err := <-done:
			wantFenced(t, err)
			// The refusal names the segment held (so there was one to flush).
			var se *journal.SegmentError
			if errors.As(err, &se); se.Key != layout.JournalSegmentKey(o.ClusterID, base+1, last) {
				t.Fatalf("fenced segment %s, want %s", se.Key, layout.JournalSegmentKey(o.ClusterID, base+1, last))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Capture did not stop")
		}
		ch, err := journal.ListSegments(ctx, st, layout, o.ClusterID, base)
		if err != nil || len(ch.All) != 0 {
			t.Fatalf("a fenced stop wrote %d segments (%v), want none", len(ch.All), err)
		}

		// Control: the same stop with the fence open writes the final segment.
		refuse.Store(false)
		cctx2, cancel2 := context.WithCancel(ctx)
		go func() { done <- journal.Capture(cctx2, o) }()
		testenv.PutKeys(t, cli, "/fence2/b/", 5, 8)
		time.Sleep(2 * time.Second)
		cancel2()
		if err := <-done; err != nil {
			t.Fatalf("stop with an open fence: %v", err)
		}
		if ch, err := journal.ListSegments(ctx, st, layout, o.ClusterID, base); err != nil || len(ch.All) != 1 {
			t.Fatalf("stop with an open fence: %d segments (%v), want the final one", len(ch.All), err)
		}
	})
}
