package prune

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// The clock check. Every age retention computes is this node's now minus
// a time the store recorded (an object's LastModified, an upload's
// Initiated, a lock's retain-until), so a node whose clock runs ahead sees
// everything older than it is: journal segments past the window, another
// run's backup in flight abandoned, an orphan's grace over, a lock
// expired. Before it deletes anything, a prune (and the orphan pass) with
// a ClockTolerance compares its Now with the store's own time
// (store.Clock) and refuses, deleting nothing, when they differ by more.

// DefaultClockTolerance is the difference between this node's clock and
// the store's that a prune tolerates (the CLI's: the skew a backup's time
// is allowed, catalog.DefaultFutureTolerance).
const DefaultClockTolerance = catalog.DefaultFutureTolerance

// PruneStepClock and OrphanStepClock: comparing the node's clock (Now)
// with the store's.
const (
	PruneStepClock  = "check the clock"
	OrphanStepClock = PruneStepClock
)

// ClockError is a prune refused because this node's clock (Now) differs
// from the object store's by more than the tolerance.
type ClockError struct {
	// Whose is what the prune was for: "cluster c1", "clusters a, b",
	// "every cluster under prefix p/", "the orphans of namespace n".
	Whose     string
	Node      time.Time // the prune's Now
	Store     time.Time // the store's time (store.Clock)
	Tolerance time.Duration
}

// Skew is how far the node's clock is ahead of the store's (negative:
// behind).
func (e *ClockError) Skew() time.Duration { return e.Node.Sub(e.Store) }

func (e *ClockError) Error() string {
	skew, dir := e.Skew(), "ahead of"
	if skew < 0 {
		skew, dir = -skew, "behind"
	}
	return fmt.Sprintf("%s: this node's clock reads %s, the object store's %s: the node is %s %s the store, more than the %s tolerated; "+
		"retention ages are the node's time minus times the store recorded: fix the node's clock (NTP) and run again",
		e.Whose, e.Node.UTC().Format(time.RFC3339), e.Store.UTC().Format(time.RFC3339), skew.Round(time.Second), dir, e.Tolerance)
}

// checkClock compares now with st's time when tolerance is positive and
// st has a store.Clock: a *ClockError when they differ by more than
// tolerance, an error naming whose when the store's time cannot be read.
func checkClock(ctx context.Context, st store.Store, now time.Time, tolerance time.Duration, whose string) error {
	if tolerance <= 0 {
		return nil
	}
	storeNow, ok, err := store.TimeOf(ctx, st)
	switch {
	case err != nil:
		return fmt.Errorf("%s: read the object store's time, to check this node's clock against it: %w", whose, err)
	case !ok:
		return nil
	}
	if d := now.Sub(storeNow); d > tolerance || -d > tolerance {
		return &ClockError{Whose: whose, Node: now, Store: storeNow, Tolerance: tolerance}
	}
	return nil
}

// pruneWhose names what a prune is for, in its clock error.
func pruneWhose(opts PruneOptions) string {
	switch {
	case opts.All:
		return fmt.Sprintf("every cluster under prefix %q", opts.Layout.RootPrefix())
	case len(opts.ClusterIDs) == 1:
		return "cluster " + opts.ClusterIDs[0]
	default:
		return "clusters " + strings.Join(opts.ClusterIDs, ", ")
	}
}
