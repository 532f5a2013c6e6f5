package journal

import (
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Backoff is the journal's retry delay (a segment's upload, a cluster's
// restart, a gap's full backup): doubling from min up to max, each delay
// jittered, so that journals failing together (every cluster of a
// process, or every namespace's journal, on one store outage) spread
// their retries instead of retrying in lockstep. It is apimachinery's
// wait.Backoff ("equal jitter"): the n-th delay is uniform in [d/2, d],
// d = min(min·2ⁿ, max), so a delay never exceeds max and is at least
// half of what the unjittered backoff would wait. Not safe for
// concurrent use: one per retry loop.
type Backoff struct {
	min, max time.Duration
	b        wait.Backoff
}

// backoffJitter is wait.Backoff's Jitter: a delay is its base plus up to
// this fraction of it, the base being half the unjittered delay.
const backoffJitter = 1.0

// NewBackoff is a backoff from lo doubling up to hi (hi < lo: lo).
func NewBackoff(lo, hi time.Duration) *Backoff {
	b := &Backoff{min: lo, max: max(lo, hi)}
	b.Reset()
	return b
}

// Next is the delay before the next retry.
func (b *Backoff) Next() time.Duration { return b.b.Step() }

// Reset starts again from min (after a success).
func (b *Backoff) Reset() {
	half := func(d time.Duration) time.Duration { return time.Duration(float64(d) / (1 + backoffJitter)) }
	b.b = wait.Backoff{Duration: half(b.min), Factor: 2, Jitter: backoffJitter, Steps: 64, Cap: half(b.max)}
}

// Bounds are the least and the most the n-th delay (from 0) waits.
func (b *Backoff) Bounds(n int) (lo, hi time.Duration) {
	hi = b.max
	if n < 62 && b.min<<n < b.max && b.min<<n > 0 {
		hi = b.min << n
	}
	return hi / 2, hi
}
