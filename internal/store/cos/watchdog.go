package cos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
)

// A watchdog guards one store call (a Put with all its part uploads, a
// Get and the reads of its body, a List with all its pages...): while the
// call waits on the store (an HTTP request in flight, or a read of a
// response body blocked), some bytes must move at least every
// StallTimeout. When none do, the call's context is cancelled with a
// *stallError, so the SDK neither waits out its own timeouts nor retries,
// and the call fails with an error wrapping store.ErrStalled.
//
// Time spent outside the store does not count: a Put whose body (the etcd
// snapshot stream) is slow is not stalled while no request is in flight,
// and a Get whose reader pauses between reads is not stalled either.
type watchdog struct {
	timeout time.Duration
	cancel  context.CancelCauseFunc
	done    <-chan struct{} // the call's context: once done, nothing to watch
	op, key string
	onStall func(op, key string)

	mu      sync.Mutex
	waiting int       // requests in flight plus body reads blocked
	last    time.Time // last progress, or when waiting went from 0 to 1
	timer   *time.Timer
	fired   bool
	stopped bool
}

type watchdogKey struct{}

// stallError is the cause a stalled call's context is cancelled with.
type stallError struct {
	timeout time.Duration
}

func (e *stallError) Error() string {
	return fmt.Sprintf("%s: no progress for %v", store.ErrStalled, e.timeout)
}

func (e *stallError) Unwrap() error { return store.ErrStalled }

// watch starts a watchdog for one call. stop must be called when the call
// (and, for Get, its body) is done. With no stall timeout it only adds a
// cancellable context.
func (s *Store) watch(ctx context.Context, op, key string) (context.Context, *watchdog, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	if s.cfg.StallTimeout <= 0 {
		return ctx, nil, func() { cancel(nil) }
	}
	w := &watchdog{timeout: s.cfg.StallTimeout, cancel: cancel, done: ctx.Done(), op: op, key: key, onStall: s.cfg.OnStall}
	ctx = context.WithValue(ctx, watchdogKey{}, w)
	return ctx, w, func() {
		w.mu.Lock()
		w.stopped = true
		if w.timer != nil {
			w.timer.Stop()
		}
		w.mu.Unlock()
		cancel(nil)
	}
}

// stalled returns the stall error if the watchdog fired.
func (w *watchdog) stalled() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return &stallError{timeout: w.timeout}
	}
	return nil
}

func (w *watchdog) begin() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting == 0 {
		w.last = time.Now()
	}
	w.waiting++
	if w.timer == nil && !w.stopped {
		w.timer = time.AfterFunc(w.timeout, w.check)
	}
}

func (w *watchdog) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiting--
	w.last = time.Now()
}

func (w *watchdog) progress() {
	w.mu.Lock()
	w.last = time.Now()
	w.mu.Unlock()
}

// check runs from the timer: it fires when the call has waited on the
// store without progress for the timeout, else re-arms.
func (w *watchdog) check() {
	w.mu.Lock()
	if w.stopped || w.fired {
		w.mu.Unlock()
		return
	}
	select {
	case <-w.done: // cancelled by the caller: stop re-arming (a Get body never closed)
		w.mu.Unlock()
		return
	default:
	}
	idle := time.Since(w.last)
	if w.waiting > 0 && idle >= w.timeout {
		w.fired = true
		w.mu.Unlock()
		// Cancel first: the hook (tests thaw a frozen store in it) must
		// not let a late answer slip through a call already judged stalled.
		w.cancel(&stallError{timeout: w.timeout})
		if w.onStall != nil {
			w.onStall(w.op, w.key)
		}
		return
	}
	next := w.timeout
	if w.waiting > 0 {
		next = w.timeout - idle
	}
	w.timer.Reset(next)
	w.mu.Unlock()
}

// watchTransport reports the progress of every request made under a
// watchdog: bytes of the request body read (sent), the response headers,
// and bytes of the response body read.
type watchTransport struct{ next http.RoundTripper }

func (t watchTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	w, _ := req.Context().Value(watchdogKey{}).(*watchdog)
	if w == nil {
		return t.next.RoundTrip(req)
	}
	r2 := *req
	if req.Body != nil && req.Body != http.NoBody {
		r2.Body = &progressBody{ReadCloser: req.Body, w: w}
		if gb := req.GetBody; gb != nil {
			r2.GetBody = func() (io.ReadCloser, error) {
				b, err := gb()
				if err != nil || b == nil || b == http.NoBody {
					return b, err
				}
				return &progressBody{ReadCloser: b, w: w}, nil
			}
		}
	}
	w.begin()
	resp, err := t.next.RoundTrip(&r2)
	w.end()
	if err == nil && resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = &watchedBody{ReadCloser: resp.Body, w: w}
	}
	return resp, err
}

// progressBody marks progress as the transport reads a request body.
type progressBody struct {
	io.ReadCloser
	w *watchdog
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.progress()
	}
	return n, err
}

// watchedBody counts a blocked read of a response body as waiting on the
// store.
type watchedBody struct {
	io.ReadCloser
	w *watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.w.begin()
	n, err := b.ReadCloser.Read(p)
	b.w.end()
	return n, err
}
