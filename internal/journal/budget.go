package journal

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Budget bounds the memory of every capture that shares it (one journal
// process: all the clusters of a namespace): the bytes of the events they
// hold, buffered or sealed into segments not yet stored. A capture takes
// budget for a watch message's events before it buffers them; when none
// is left it seals what it holds (if it ends at a revision's end) and
// waits, not reading its watch (gRPC's flow control stops the stream,
// etcd holds the events), until an upload somewhere stores a segment and
// gives its bytes back. So when every cluster catches up at once (a
// restart, a leader change) the process holds about the budget, not the
// clusters' catch-ups; they take turns.
//
// Two exceptions keep every capture moving, each bounded by one watch
// message or one revision: a capture holding nothing may take a message
// larger than what is left (its own, alone, past the limit), and the rest
// of a revision a fragment left incomplete is always taken (the buffer
// cannot be sealed inside a revision, so waiting could wait forever).
//
// A cost is what the capture counts for its segment size: a key and value
// as base64 in a segment's JSON plus a line's overhead (eventCost).
type Budget struct {
	mu    sync.Mutex
	limit int64
	used  int64
	peak  int64
	wake  chan struct{}
	// waiting counts the captures waiting for budget: the others seal
	// what they hold at once rather than at their interval (pressed).
	waiting int
	// uploads are the upload slots: an upload holds buffers of its own
	// (the store's part buffer, the compressor's), outside the bytes
	// counted, so the segments being stored at once are bounded too.
	uploads chan struct{}
}

// DefaultMemoryBudget is journal --memory-budget's default: with it the
// journal process of 100 clusters catching up at once peaked at
// BenchmarkJournalCatchUp100's figure in docs/benchmarks.md, under the
// Deployment's memory limit.
const DefaultMemoryBudget = 128 << 20

// BudgetUploads is how many segments the captures sharing a Budget store
// at once: 8 uploads of a segment take well under a second, where 100
// clusters seal about 3 segments a second at the default interval.
const BudgetUploads = 8

// NewBudget is a budget of limit bytes (limit <= 0: none, nil), with
// BudgetUploads upload slots.
func NewBudget(limit int64) *Budget {
	if limit <= 0 {
		return nil
	}
	return &Budget{limit: limit, wake: make(chan struct{}), uploads: make(chan struct{}, BudgetUploads)}
}

// upload takes an upload slot (none to take without a budget) until ctx
// ends; done gives it back.
func (b *Budget) upload(ctx context.Context) (done func(), err error) {
	if b == nil {
		return func() {}, nil
	}
	select {
	case b.uploads <- struct{}{}:
		return func() { <-b.uploads }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Used and Peak are the bytes taken now and at most so far.
func (b *Budget) Used() (used, peak int64) {
	if b == nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.peak
}

// take takes n bytes when they fit, or when force, or when holder holds
// nothing (see Budget); it reports whether it took them, and else a
// channel closed at the next give.
func (b *Budget) take(n int64, force, holdsNothing bool) (bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if force || b.used+n <= b.limit || (holdsNothing && b.used < b.limit) {
		b.used += n
		b.peak = max(b.peak, b.used)
		return true, nil
	}
	return false, b.wake
}

// Waiting is how many captures wait for budget now.
func (b *Budget) Waiting() int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiting
}

// pressed says whether a capture waits for budget: a capture holding a
// buffer seals it now, not at its interval, so that its bytes come back.
func (b *Budget) pressed() bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiting > 0
}

// give gives n bytes back and wakes the captures waiting.
func (b *Budget) give(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	close(b.wake)
	b.wake = make(chan struct{})
}

// eventCost is what an event counts for the segment size and the budget.
func eventCost(key, value []byte) int64 {
	return int64(len(key)*4/3 + len(value)*4/3 + 96)
}

// reserve takes budget for evs before they are buffered (the capture's
// credit, spent by add). With no budget left and a buffer that can be
// sealed it returns seal (the caller hands the buffer off and calls it
// again); with nothing to seal it returns wait, the bytes it needs: the
// caller stops its watch (a waiting capture holds no message and no
// stream), waits for them (waitBudget) and watches again from its next
// revision. cont: evs continue the buffer's last revision
// (resolvePartial), taken always.
func (c *capture) reserve(evs []*clientv3.Event, cont bool) (seal bool, wait int64) {
	var need int64
	for _, ev := range evs {
		need += eventCost(ev.Kv.Key, ev.Kv.Value)
	}
	need -= c.credit
	if need <= 0 {
		return false, 0
	}
	b := c.o.Budget
	if b == nil {
		c.credit += need
		return false, 0
	}
	// The rest of a revision a fragment began is always taken.
	if took, _ := b.take(need, cont, c.holdsNothing()); took {
		c.credit += need
		return false, 0
	}
	if len(c.events) > 0 {
		return true, 0
	}
	return false, need
}

// waitBudget waits until need bytes of the budget are free and takes them
// (the capture's credit for the messages its next watch delivers), until
// ctx ends.
func (c *capture) waitBudget(ctx context.Context, need int64) error {
	b := c.o.Budget
	c.budgetWaits++
	c.o.Metrics.beat(c.o.ClusterID, true)
	defer c.o.Metrics.beat(c.o.ClusterID, false)
	b.mu.Lock()
	b.waiting++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.waiting--
		b.mu.Unlock()
	}()
	for {
		// Its credit was given back; its sealed segments may still be
		// uploading, and until they are stored it waits like the others.
		took, wake := b.take(need, false, c.holdsNothing())
		if took {
			c.credit += need
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// holdsNothing says whether the capture holds no budget at all: nothing
// buffered, no credit, and no sealed segment still uploading. Only such a
// capture may take a message past the limit (Budget), so the budget's
// overshoot stays one message a capture.
func (c *capture) holdsNothing() bool {
	return len(c.events) == 0 && c.credit == 0 && c.sealedHeld.Load() == 0
}

// release gives back what a capture holds: its buffer and credit (on its
// end).
func (c *capture) release() {
	c.o.Budget.give(c.size + c.credit)
	c.size, c.credit = 0, 0
}
