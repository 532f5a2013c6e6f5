package fanout

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// within fails the test unless ch is ready before a generous deadline: a
// guard against hanging, not a synchronisation.
func within[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestForEachRespectsLimit(t *testing.T) {
	t.Parallel()
	const n, limit = 10, 3
	var cur, peak atomic.Int32
	started := make(chan int)
	release := make([]chan struct{}, n)
	for i := range release {
		release[i] = make(chan struct{})
	}
	var ran [n]atomic.Bool
	done := make(chan []int)
	go func() {
		done <- ForEach(context.Background(), n, limit, func(_ context.Context, i int) {
			c := cur.Add(1)
			for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
			}
			started <- i
			<-release[i]
			ran[i].Store(true)
			cur.Add(-1)
		})
	}()
	var order []int
	for len(order) < limit {
		order = append(order, within(t, started, "the first calls"))
	}
	// Each call ended lets exactly one more start.
	for k := 0; len(order) < n; k++ {
		close(release[order[k]])
		order = append(order, within(t, started, "the next call"))
	}
	for _, i := range order[n-limit:] {
		close(release[i])
	}
	if ns := within(t, done, "ForEach to return"); len(ns) != 0 {
		t.Errorf("not started = %v, want none", ns)
	}
	if got := peak.Load(); got != limit {
		t.Errorf("peak concurrency = %d, want %d", got, limit)
	}
	// The first limit race each other; later ones start in index order.
	first := slices.Sorted(slices.Values(order[:limit]))
	if !slices.Equal(append(first, order[limit:]...), []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Errorf("start order = %v, want index order", order)
	}
	for i := range ran {
		if !ran[i].Load() {
			t.Errorf("call %d had not finished when ForEach returned", i)
		}
	}
}

func TestForEachCancelStopsStarts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	var slowDone atomic.Bool
	notStarted := ForEach(ctx, 10, 2, func(ctx context.Context, i int) {
		calls.Add(1)
		switch i {
		case 0:
			cancel()
		case 1:
			// Started before the end: runs on after it, and ForEach waits.
			<-ctx.Done()
			for range 100 {
				runtime.Gosched()
			}
			slowDone.Store(true)
		default:
			t.Errorf("call %d started after the context ended", i)
		}
	})
	if got := calls.Load(); got != 2 {
		t.Errorf("calls = %d, want 2", got)
	}
	if !slowDone.Load() {
		t.Error("ForEach returned before a started call finished")
	}
	if want := []int{2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(notStarted, want) {
		t.Errorf("not started = %v, want %v", notStarted, want)
	}
}

func TestForEachEndedContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ns := ForEach(ctx, 3, 0, func(context.Context, int) { t.Error("called under an ended context") })
	if !slices.Equal(ns, []int{0, 1, 2}) {
		t.Errorf("not started = %v, want all", ns)
	}
}

func TestForEachZero(t *testing.T) {
	t.Parallel()
	if ns := ForEach(context.Background(), 0, 4, func(context.Context, int) { t.Error("called for n = 0") }); ns != nil {
		t.Errorf("not started = %v, want nil", ns)
	}
}

func TestForEachNoLimitRunsAll(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{0, -1, 100} {
		const n = 6
		var wg sync.WaitGroup
		wg.Add(n)
		all := make(chan struct{})
		go func() { wg.Wait(); close(all) }()
		ForEach(context.Background(), n, limit, func(context.Context, int) {
			wg.Done()
			// Every call is running at once, or this waits forever.
			within(t, all, "every call to be running at once")
		})
	}
}

func TestLimiterSlot(t *testing.T) {
	t.Parallel()
	l := NewLimiter(2)
	s1, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { _, err := l.Acquire(ctx); got <- err }()
	cancel()
	if err := within(t, got, "Acquire to give up"); err != context.Canceled {
		t.Errorf("Acquire on a full limiter, cancelled: %v, want context.Canceled", err)
	}
	s1.Release()
	s1.Release() // a no-op: the other slot stays held
	if _, err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	full, cancelFull := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelFull()
	if _, err := l.Acquire(full); err != context.DeadlineExceeded {
		t.Errorf("a second Release freed another slot: Acquire = %v, want context.DeadlineExceeded", err)
	}
}

func TestLimiterEndedContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s, err := NewLimiter(1).Acquire(ctx); err != context.Canceled || s != nil {
		t.Errorf("Acquire under an ended context with a free slot = %v, %v; want no slot, context.Canceled", s, err)
	}
}
