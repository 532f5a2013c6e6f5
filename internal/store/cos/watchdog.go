package cos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
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
//
// With a minimum throughput (Config.MinThroughput), a call is stalled too
// when fewer than its Bytes move in any Window of its transfer time: a
// store that trickles a few bytes per interval keeps resetting the
// no-progress clock, yet moves a backup at a few bytes a second. Transfer
// time is the time a request body is being sent or a response body read
// is blocked: the server's own work between them (a request sent, its
// answer not begun, as a CompleteMultipartUpload of a large object) is
// the no-progress rule's alone, and time outside the store counts for
// neither. The rule looks back one Window over that clock, and judges
// nothing before the call has transferred for one whole Window.
type watchdog struct {
	timeout time.Duration // no progress for this long: stalled (0: off)
	minRate Throughput    // fewer bytes than this per window: stalled (zero: off)
	cancel  context.CancelCauseFunc
	done    <-chan struct{} // the call's context: once done, nothing to watch
	op, key string
	onStall func(op, key string)

	mu      sync.Mutex
	waiting int       // requests in flight plus body reads blocked
	last    time.Time // last progress, or when waiting went from 0 to 1
	timer   *time.Timer
	cause   error // why the watchdog fired; nil until it does
	stopped bool

	// The transfer clock: how long bytes have been moving (or blocked)
	// between the call and the store.
	moving     int           // request bodies being sent plus body reads blocked
	moved      int64         // bytes sent and received so far
	waited     time.Duration // transfer time before movingFrom
	movingFrom time.Time     // when moving went from 0 to 1 (valid while moving > 0)
	samples    []sample      // moved, by transfer time, spaced by Window/16 at least
}

// sample is the bytes moved by a point of a call's transfer clock.
type sample struct {
	at    time.Duration
	moved int64
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

// slowError is the cause a call is cancelled with when it moved fewer
// bytes than the minimum throughput in a window of its waiting time.
type slowError struct {
	moved int64
	min   Throughput
}

func (e *slowError) Error() string {
	return fmt.Sprintf("%s (throughput %s in the last %s of transfer, below the minimum %s)",
		store.ErrStalled, formatBytes(e.moved), formatWindow(e.min.Window), e.min)
}

func (e *slowError) Unwrap() error { return store.ErrStalled }

// watch starts a watchdog for one call. stop must be called when the call
// (and, for Get, its body) is done. With no stall timeout it only adds a
// cancellable context.
func (s *Store) watch(ctx context.Context, op, key string) (context.Context, *watchdog, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	timeout, minRate := max(s.cfg.StallTimeout, 0), s.cfg.MinThroughput
	if !minRate.enabled() {
		minRate = Throughput{}
	}
	if timeout == 0 && minRate.Window == 0 {
		return ctx, nil, func() { cancel(nil) }
	}
	w := &watchdog{timeout: timeout, minRate: minRate, cancel: cancel, done: ctx.Done(), op: op, key: key, onStall: s.cfg.OnStall,
		samples: []sample{{}}}
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
	return w.cause
}

// begin marks a request sent or a body read blocked: the call waits on
// the store. With move, bytes are being transferred too (a request body,
// a response body).
func (w *watchdog) begin(move bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.waiting == 0 {
		w.last = now
	}
	w.waiting++
	if move {
		w.beginMoveLocked(now)
	}
	if w.timer == nil && !w.stopped {
		w.timer = time.AfterFunc(w.interval(), w.check)
	}
}

func (w *watchdog) end(move bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	w.waiting--
	w.last = now
	if move {
		w.endMoveLocked(now)
	}
}

func (w *watchdog) beginMoveLocked(now time.Time) {
	if w.moving == 0 {
		w.movingFrom = now
	}
	w.moving++
}

func (w *watchdog) endMoveLocked(now time.Time) {
	w.moving--
	if w.moving == 0 {
		w.waited += now.Sub(w.movingFrom)
	}
}

// sent marks a request body sent to its end (or abandoned): its bytes no
// longer move, the request now waits on the server's answer.
func (w *watchdog) sent() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.endMoveLocked(time.Now())
}

// progress records n bytes moved (sent or received).
func (w *watchdog) progress(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	w.last = now
	if w.minRate.Window == 0 {
		return
	}
	w.moved += int64(n)
	at := w.waitedAt(now)
	if last := &w.samples[len(w.samples)-1]; at-last.at < w.minRate.Window/16 {
		last.moved = w.moved
	} else {
		w.samples = append(w.samples, sample{at: at, moved: w.moved})
	}
	// Keep one sample at or before the window's start, none older.
	from := at - w.minRate.Window
	i := 0
	for i+1 < len(w.samples) && w.samples[i+1].at <= from {
		i++
	}
	if i > 0 {
		w.samples = append(w.samples[:0], w.samples[i:]...)
	}
}

// waitedAt is the call's transfer clock at now (under mu).
func (w *watchdog) waitedAt(now time.Time) time.Duration {
	if w.moving > 0 {
		return w.waited + now.Sub(w.movingFrom)
	}
	return w.waited
}

// interval is how often check runs: the stall timeout, or a quarter of
// the throughput window when that is shorter.
func (w *watchdog) interval() time.Duration {
	d := w.timeout
	if q := w.minRate.Window / 4; q > 0 && (d == 0 || q < d) {
		d = q
	}
	return d
}

// tooSlow returns the throughput error when the call has waited at least
// one window and moved fewer than the minimum bytes in the last one (under
// mu). The sample it measures from is at or before the window's start, so
// the count covers at least the window: never an early verdict.
func (w *watchdog) tooSlow(now time.Time) error {
	if w.minRate.Window == 0 || w.moving == 0 {
		return nil
	}
	at := w.waitedAt(now)
	from := at - w.minRate.Window
	if from < 0 {
		return nil
	}
	base := w.samples[0]
	for _, s := range w.samples[1:] {
		if s.at > from {
			break
		}
		base = s
	}
	if moved := w.moved - base.moved; moved < w.minRate.Bytes {
		return &slowError{moved: moved, min: w.minRate}
	}
	return nil
}

// check runs from the timer: it fires when the call has waited on the
// store without progress for the timeout, else re-arms.
func (w *watchdog) check() {
	w.mu.Lock()
	if w.stopped || w.cause != nil {
		w.mu.Unlock()
		return
	}
	select {
	case <-w.done: // cancelled by the caller: stop re-arming (a Get body never closed)
		w.mu.Unlock()
		return
	default:
	}
	now := time.Now()
	idle := now.Sub(w.last)
	if w.waiting > 0 && w.timeout > 0 && idle >= w.timeout {
		w.cause = &stallError{timeout: w.timeout}
	} else {
		w.cause = w.tooSlow(now)
	}
	if cause := w.cause; cause != nil {
		w.mu.Unlock()
		// Cancel first: the hook (tests thaw a frozen store in it) must
		// not let a late answer slip through a call already judged stalled.
		w.cancel(cause)
		if w.onStall != nil {
			w.onStall(w.op, w.key)
		}
		return
	}
	next := w.interval()
	if w.waiting > 0 && w.timeout > 0 {
		next = min(next, w.timeout-idle)
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
	var sending *sendState
	if req.Body != nil && req.Body != http.NoBody {
		sending = &sendState{w: w}
		sending.left.Store(req.ContentLength) // -1: unknown, sent at EOF
		r2.Body = &progressBody{ReadCloser: req.Body, w: w, s: sending}
		if gb := req.GetBody; gb != nil {
			r2.GetBody = func() (io.ReadCloser, error) {
				b, err := gb()
				if err != nil || b == nil || b == http.NoBody {
					return b, err
				}
				return &progressBody{ReadCloser: b, w: w, s: sending}, nil
			}
		}
	}
	w.begin(sending != nil)
	resp, err := t.next.RoundTrip(&r2)
	if sending != nil {
		sending.done()
	}
	w.end(false)
	if err == nil && resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = &watchedBody{ReadCloser: resp.Body, w: w}
	}
	return resp, err
}

// sendState ends a request's transfer time once: when its body has been
// read to the end (its Content-Length read: the transport never asks for
// the EOF then), or the round trip returned.
type sendState struct {
	w    *watchdog
	once sync.Once
	left atomic.Int64 // bytes of the body still to send; -1 when unknown
}

func (s *sendState) done() { s.once.Do(s.w.sent) }

// progressBody marks progress as the transport reads a request body.
type progressBody struct {
	io.ReadCloser
	w *watchdog
	s *sendState
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.progress(n)
		if b.s.left.Load() > 0 && b.s.left.Add(-int64(n)) <= 0 {
			b.s.done()
		}
	}
	if err != nil {
		b.s.done()
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
	b.w.begin(true)
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.progress(n)
	}
	b.w.end(true)
	return n, err
}
