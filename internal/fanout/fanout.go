// Package fanout bounds parallel work: ForEach runs an index range at most
// limit at a time, and a Limiter is the semaphore under it, for work whose
// slot is handed on before the work ends.
package fanout

import (
	"context"
	"sync"
	"sync/atomic"
)

// Limiter is a counting semaphore: at most its size of Slots are held at
// once.
type Limiter struct{ ch chan struct{} }

// NewLimiter returns a Limiter of size n (1 when n < 1).
func NewLimiter(n int) *Limiter {
	if n < 1 {
		n = 1
	}
	return &Limiter{ch: make(chan struct{}, n)}
}

// Acquire waits for a free slot. It returns ctx.Err() instead, and takes no
// slot, when ctx has ended by the time it would get one (even a free one).
func (l *Limiter) Acquire(ctx context.Context) (*Slot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case l.ch <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// A slot freed as ctx ends: the end wins, whichever select saw.
	if err := ctx.Err(); err != nil {
		<-l.ch
		return nil, err
	}
	return &Slot{l: l}, nil
}

// Slot is a held place in a Limiter.
type Slot struct {
	l    *Limiter
	done atomic.Bool
}

// Release gives the slot back. Only the first call does: a slot handed on
// early may be released again by a deferred call.
func (s *Slot) Release() {
	if s != nil && s.done.CompareAndSwap(false, true) {
		<-s.l.ch
	}
}

// ForEach calls fn(ctx, i) for every i in [0, n), each in its own
// goroutine, at most limit at once (limit <= 0: all n at once), in index
// order, and returns when every call has returned. Once ctx has ended it
// starts no more: it returns the indices it did not start, in order (none
// when ctx did not end), for the caller to record as not run.
func ForEach(ctx context.Context, n, limit int, fn func(ctx context.Context, i int)) (notStarted []int) {
	if limit <= 0 || limit > n {
		limit = n
	}
	lim := NewLimiter(limit)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		s, err := lim.Acquire(ctx)
		if err != nil {
			for j := i; j < n; j++ {
				notStarted = append(notStarted, j)
			}
			break
		}
		wg.Go(func() {
			defer s.Release()
			fn(ctx, i)
		})
	}
	wg.Wait()
	return notStarted
}
