package journal_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// Two writers for a moment (a second capture of the same cluster from the
// same base, started 1.5 s after the first, as `journal --cluster-id`
// beside the Deployment): their segments overlap, and a running capture
// finds it by itself at its next check: a *GapError naming the other
// writer's segment (the caller pages and takes a full backup). Before,
// neither noticed, and every reader stopped at the overlap.
func TestCaptureFindsASecondWriter(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	rig := newCaptureRig(t, ctx)
	cli, o := rig.cli, rig.o
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() {
		for i := 0; wctx.Err() == nil; i++ {
			cli.Put(wctx, fmt.Sprintf("/w/%d", i%20), fmt.Sprint(i))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	errs := make(chan error, 2)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { errs <- journal.Capture(cctx, o) }()
	time.Sleep(1500 * time.Millisecond)
	go func() { errs <- journal.Capture(cctx, o) }()
	var err1 error
	select {
	case err1 = <-errs:
	case <-time.After(30 * time.Second):
		t.Fatal("neither capture noticed the other within 30 s")
	}
	var gap *journal.GapError
	if !errors.As(err1, &gap) || !strings.Contains(gap.Reason, "another writer stored segment") {
		// The second may also find its first key taken (the same cut):
		// that is the other way two writers are named.
		if !journal.IsReason(err1, journal.ReasonConflict) {
			t.Fatalf("a capture ended with %v, want a GapError naming the other writer's segment", err1)
		}
	}
	t.Logf("found: %v", err1)
}
