package journal

import (
	"testing"
	"time"
)

// Retries are jittered: every delay of every backoff stays within its
// bounds (half the doubling delay up to it, never over the cap), and 100
// journals failing at the same moment do not retry at the same moments.
func TestBackoffJitteredWithinBounds(t *testing.T) {
	t.Parallel()
	const journals, steps = 100, 12
	lo, hi := time.Second, time.Minute
	at := make([][]time.Duration, journals) // cumulative retry times
	for j := range journals {
		b := NewBackoff(lo, hi)
		var sum time.Duration
		for n := range steps {
			d := b.Next()
			min, max := b.Bounds(n)
			if d < min || d > max {
				t.Fatalf("journal %d, retry %d: delay %v outside [%v, %v]", j, n, d, min, max)
			}
			sum += d
			at[j] = append(at[j], sum)
		}
		if _, max := b.Bounds(steps); max != hi {
			t.Fatalf("after %d retries the bound is %v, want the cap %v", steps, max, hi)
		}
		b.Reset()
		if d := b.Next(); d < lo/2 || d > lo {
			t.Fatalf("after Reset: %v, want within [%v, %v]", d, lo/2, lo)
		}
	}
	// At each retry the journals are spread over at least a quarter of
	// the bounds' width, and at the first retry (0.5 to 1 s: fifty 10 ms
	// slots) they fill at least half the slots (about 43 expected; in
	// lockstep they would fill one).
	for n := range steps {
		first, last := at[0][n], at[0][n]
		seen := map[time.Duration]bool{}
		for j := range journals {
			first, last = min(first, at[j][n]), max(last, at[j][n])
			seen[at[j][n].Round(10*time.Millisecond)] = true
		}
		min, max := NewBackoff(lo, hi).Bounds(n)
		if spread := last - first; spread < (max-min)/4 {
			t.Errorf("retry %d: %d journals retry within %v of each other (want a spread of at least %v)", n, journals, spread, (max-min)/4)
		}
		if n == 0 && len(seen) < 25 {
			t.Errorf("first retry: %d journals share %d distinct 10 ms slots", journals, len(seen))
		}
	}
	// A backoff without jitter would be exactly the bound each time: the
	// delays differ from one journal to the next.
	if at[0][steps-1] == at[1][steps-1] && at[1][steps-1] == at[2][steps-1] {
		t.Errorf("three journals retried at the same moments: %v", at[0])
	}
}
