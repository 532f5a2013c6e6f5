// Package faults injects exact object-store faults, in the style of
// restic's test backends: a Store wraps any store.Store (the real COS
// backend on a real MinIO, or internal/store/memstore) and makes chosen
// calls fail in a chosen way, while every other call goes through to the
// inner store. It is a generic store wrapper: it knows nothing of any
// backend, and its injected errors follow the store contract (a
// *store.Error naming the inner store's backend, the operation and the
// key; a Stall wraps store.ErrStalled, a NotFound store.ErrNotFound, a
// Reset and a ServerError are transient by store.IsTransient).
//
// Use it where a real process fault (SIGSTOP/SIGKILL of MinIO, a listener
// that never answers) cannot hit the exact moment a test needs:
//
//	fs := faults.Wrap(testfix.Store(t, m, bucket))
//	// The snapshot upload stalls after 1 MiB: reads of its body block until
//	// the call's context ends or 2s pass, then the Put fails with an error
//	// that errors.Is(err, store.ErrStalled).
//	fs.Inject(faults.Fault{Op: faults.OpPut, KeySuffix: catalog.SnapshotObjectZstd,
//		Kind: faults.Stall, After: 1 << 20, Delay: 2 * time.Second, Times: 1})
//	opts.Store = fs
//
// Faults (Kind):
//   - Stall: the call blocks (mid-body for Put/Get with After > 0) until its
//     context is done or Delay has passed, then fails wrapping
//     store.ErrStalled (or the context's error). It stands for a store that
//     stopped answering and the store's own watchdog firing.
//   - Reset: the call fails with "connection reset by peer" (wrapping
//     syscall.ECONNRESET), after After bytes of the body: a reset that
//     outlasted the store's own retries.
//   - ServerError: the call fails with an HTTP 503 error (*StatusError).
//   - NotFound: the call fails with S3's NoSuchKey (HTTP 404, Code()
//     "NoSuchKey", errors.Is store.ErrNotFound and fs.ErrNotExist). For Get
//     with After > 0, the body fails after After bytes instead.
//   - Slow: each read of the Put or Get body waits Delay first (a slow link).
//   - Vanish: the Put succeeds, then the object is deleted from the inner
//     store before the Put returns (a concurrent prune, a lifecycle rule).
//   - Hook: the call goes through, and Func runs first (Put: after the body
//     is consumed, before the Put returns).
//
// A Put that fails through an injected fault stops reading its body and
// the inner store aborts its multipart upload, exactly as with a real fault.
// Faults match by Op and key (Key exact, KeySuffix, or KeyContains; empty
// matches every key) and fire Times times (0: on every matching call), in
// the order injected; the first matching fault that has firings left wins.
// A GetRange is a Get: it takes an OpGetRange fault, else an OpGet one.
// Calls records every call for assertions (e.g. how many snapshot Puts a
// backup made: a store fault must not be retried on another member).
//
// Capabilities: a Store always has AfterLister (the inner store's, or its
// List filtered; an OpList fault matches it), Conditional (PutIfAbsent is the inner
// store's, or its Put when the inner store has none), Multipart (an inner
// store without it has no uploads: none are listed, aborting is a no-op),
// KeyUploadLister only through Multipart's ListUploads, Ranger (the inner
// store's GetRange, or its Get cut to the range), Checker (the inner
// store's Check, or nil), and Locker and Versioner (the inner store's; on
// an inner store without them, as internal/store/retry: no lock, no
// versioning, the objects listed as version "null", the rest
// store.ErrUnsupported).
package faults

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
)

// Op is a store operation.
type Op string

// The operations of store.Store and its capabilities (Conditional's
// PutIfAbsent matches OpPut too).
const (
	OpPut         Op = "put"
	OpGet         Op = "get"
	OpGetRange    Op = "get range"
	OpList        Op = "list"
	OpDelete      Op = "delete"
	OpListUploads Op = "list uploads"
	OpAbortUpload Op = "abort upload"
	// OpTime is store.Clock's Time.
	OpTime Op = "time"

	// store.Locker's and store.Versioner's (Locker's PutWith matches
	// OpPut; a GetVersion takes an OpGetVersion fault, else an OpGet one).
	OpLockConfig    Op = "get lock config"
	OpPutRetention  Op = "put retention"
	OpGetRetention  Op = "get retention"
	OpVersioning    Op = "get versioning"
	OpListVersions  Op = "list versions"
	OpGetVersion    Op = "get version"
	OpDeleteVersion Op = "delete version"
)

// Kind is what a fault does.
type Kind int

const (
	Stall Kind = iota + 1
	Reset
	ServerError
	NotFound
	Slow
	Vanish
	Hook
)

func (k Kind) String() string {
	switch k {
	case Stall:
		return "stall"
	case Reset:
		return "reset"
	case ServerError:
		return "5xx"
	case NotFound:
		return "404"
	case Slow:
		return "slow"
	case Vanish:
		return "vanish"
	case Hook:
		return "hook"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Fault is one injected fault.
type Fault struct {
	Op          Op
	Key         string // exact key; empty: any
	KeySuffix   string // key must end with it; empty: any
	KeyContains string // key must contain it; empty: any
	Kind        Kind
	// After is how many body bytes pass before the fault fires (Put and Get
	// bodies); 0 fires at the call.
	After int64
	// Delay: Stall gives up after it (0: only when the context ends); Slow
	// waits it before each body read.
	Delay time.Duration
	// Times the fault fires; 0: every matching call.
	Times int
	// Func runs for Hook faults, with the key.
	Func func(ctx context.Context, key string)

	fired int
}

func (f *Fault) matches(op Op, key string) bool {
	if f.Op != op {
		return false
	}
	if f.Key != "" && f.Key != key {
		return false
	}
	if f.KeySuffix != "" && !strings.HasSuffix(key, f.KeySuffix) {
		return false
	}
	if f.KeyContains != "" && !strings.Contains(key, f.KeyContains) {
		return false
	}
	return f.Times == 0 || f.fired < f.Times
}

// Call is one recorded call.
type Call struct {
	Op    Op
	Key   string // the key, prefix, first key of a Delete, or upload key
	Fault Kind   // 0 when none fired
	Err   error
}

// Store wraps a store.Store and injects faults.
type Store struct {
	inner store.Store
	name  string // the inner store's backend name, for errors

	mu     sync.Mutex
	faults []*Fault
	calls  []Call
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.Conditional = (*Store)(nil)
	_ store.Multipart   = (*Store)(nil)
	_ store.Checker     = (*Store)(nil)
	_ store.Clock       = (*Store)(nil)
	_ store.Ranger      = (*Store)(nil)
	_ store.AfterLister = (*Store)(nil)
)

// Wrap returns a Store around inner with no faults. Injected errors name
// the inner store's backend (its Backend() string method; "faults" when it
// has none), as the inner store's own errors would.
func Wrap(inner store.Store) *Store {
	name := "faults"
	if b, ok := inner.(interface{ Backend() string }); ok {
		name = b.Backend()
	}
	return &Store{inner: inner, name: name}
}

// Inner is the wrapped store.
func (s *Store) Inner() store.Store { return s.inner }

// Backend is the inner store's backend name.
func (s *Store) Backend() string { return s.name }

// Inject adds a fault.
func (s *Store) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fc := f
	s.faults = append(s.faults, &fc)
}

// Clear removes every fault.
func (s *Store) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// Calls returns the calls made so far.
func (s *Store) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// CountCalls counts the calls of op whose key ends with suffix.
func (s *Store) CountCalls(op Op, suffix string) int {
	n := 0
	for _, c := range s.Calls() {
		if c.Op == op && strings.HasSuffix(c.Key, suffix) {
			n++
		}
	}
	return n
}

// take returns the fault for this call (counted as fired), or nil.
func (s *Store) take(op Op, key string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.faults {
		if f.matches(op, key) {
			f.fired++
			fc := *f
			return &fc
		}
	}
	return nil
}

func (s *Store) record(op Op, key string, f *Fault, err error) {
	c := Call{Op: op, Key: key, Err: err}
	if f != nil {
		c.Fault = f.Kind
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

// StatusError is an injected HTTP error answer.
type StatusError struct {
	Status int
	Code_  string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: injected by faults (HTTP %d)", e.Code_, e.Status)
}

// Code is the S3 error code (NoSuchKey, ServiceUnavailable).
func (e *StatusError) Code() string { return e.Code_ }

// StatusCode is the HTTP status.
func (e *StatusError) StatusCode() int { return e.Status }

// Is makes a 404 match store.ErrNotFound and fs.ErrNotExist.
func (e *StatusError) Is(target error) bool {
	return e.Status == 404 && (target == fs.ErrNotExist || target == store.ErrNotFound)
}

// ResetError returns a "connection reset by peer" error as net/http
// returns it.
func ResetError() error {
	return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

// faultError is the error an injected fault ends a call with.
func (s *Store) faultError(ctx context.Context, op Op, key string, f *Fault) error {
	var cause error
	switch f.Kind {
	case Stall:
		cause = stall(ctx, f.Delay)
	case Reset:
		cause = ResetError()
	case ServerError:
		cause = &StatusError{Status: 503, Code_: "ServiceUnavailable"}
	case NotFound:
		cause = &StatusError{Status: 404, Code_: "NoSuchKey"}
	default:
		return nil
	}
	return &store.Error{Backend: s.name, Op: string(op), Key: key, Err: cause}
}

// stall blocks until ctx is done or d (when > 0) has passed.
func stall(ctx context.Context, d time.Duration) error {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
		if c := context.Cause(ctx); c != nil {
			return c
		}
		return ctx.Err()
	case <-timeout:
		return fmt.Errorf("%w: no progress for %v (injected by faults)", store.ErrStalled, d)
	}
}

// faultReader passes After bytes of r, then fails with the fault (or, for
// Slow, delays every read).
type faultReader struct {
	s     *Store
	ctx   context.Context
	r     io.Reader
	op    Op
	key   string
	f     *Fault
	n     int64
	err   error // the injected error, once fired
	fired bool
}

func (fr *faultReader) Read(p []byte) (int, error) {
	if fr.err != nil {
		return 0, fr.err
	}
	if fr.f.Kind == Slow {
		if err := sleepCtx(fr.ctx, fr.f.Delay); err != nil {
			return 0, err
		}
		return fr.r.Read(p)
	}
	if left := fr.f.After - fr.n; left > 0 {
		if int64(len(p)) > left {
			p = p[:left]
		}
		n, err := fr.r.Read(p)
		fr.n += int64(n)
		return n, err
	}
	fr.fired = true
	fr.err = fr.s.faultError(fr.ctx, fr.op, fr.key, fr.f)
	return 0, fr.err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Put implements store.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	return s.put(ctx, key, r, func(ctx context.Context, r io.Reader) (int64, error) {
		return s.inner.Put(ctx, key, r)
	})
}

// PutIfAbsent implements store.Conditional when the inner store does (else
// it is Put).
func (s *Store) PutIfAbsent(ctx context.Context, key string, r io.Reader) (int64, error) {
	cs, ok := s.inner.(store.Conditional)
	if !ok {
		return s.Put(ctx, key, r)
	}
	return s.put(ctx, key, r, func(ctx context.Context, r io.Reader) (int64, error) {
		return cs.PutIfAbsent(ctx, key, r)
	})
}

func (s *Store) put(ctx context.Context, key string, r io.Reader, do func(context.Context, io.Reader) (int64, error)) (int64, error) {
	f := s.take(OpPut, key)
	if f == nil {
		n, err := do(ctx, r)
		s.record(OpPut, key, nil, err)
		return n, err
	}
	switch f.Kind {
	case Stall, Reset, ServerError, NotFound, Slow:
		if f.After == 0 && f.Kind != Slow {
			err := s.faultError(ctx, OpPut, key, f)
			s.record(OpPut, key, f, err)
			return 0, err
		}
		// The real upload runs, and its body fails mid-way: the real store
		// sees a failed upload and aborts it.
		fr := &faultReader{s: s, ctx: ctx, r: r, op: OpPut, key: key, f: f}
		n, err := do(ctx, fr)
		if fr.err != nil {
			if err != nil {
				err = fmt.Errorf("%w (the store then reported: %v)", fr.err, err)
			} else {
				err = fr.err
			}
		}
		s.record(OpPut, key, f, err)
		return n, err
	case Vanish:
		n, err := do(ctx, r)
		if err == nil {
			err2 := s.inner.Delete(context.WithoutCancel(ctx), []string{key})
			if err2 != nil {
				err = fmt.Errorf("faults: vanish %s: %w", key, err2)
			}
		}
		s.record(OpPut, key, f, err)
		return n, err
	case Hook:
		n, err := do(ctx, r)
		if f.Func != nil {
			f.Func(ctx, key)
		}
		s.record(OpPut, key, f, err)
		return n, err
	}
	return 0, fmt.Errorf("faults: fault %v does not apply to put", f.Kind)
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.get(ctx, OpGet, key, s.take(OpGet, key), func() (io.ReadCloser, error) { return s.inner.Get(ctx, key) })
}

// GetRange implements store.Ranger: the inner store's GetRange, or its Get
// cut to the range (store.RangeOfGet) when it has none. Faults of OpGetRange
// apply, and so do those of OpGet (a ranged read is a read); After counts
// the range's bytes.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	f := s.take(OpGetRange, key)
	if f == nil {
		f = s.take(OpGet, key)
	}
	return s.get(ctx, OpGetRange, key, f, func() (io.ReadCloser, error) {
		if r, ok := s.inner.(store.Ranger); ok {
			return r.GetRange(ctx, key, offset, length)
		}
		return store.RangeOfGet(ctx, s.inner, key, offset, length)
	})
}

func (s *Store) get(ctx context.Context, op Op, key string, f *Fault, open func() (io.ReadCloser, error)) (io.ReadCloser, error) {
	if f == nil {
		rc, err := open()
		s.record(op, key, nil, err)
		return rc, err
	}
	if f.Kind == Hook {
		if f.Func != nil {
			f.Func(ctx, key)
		}
		rc, err := open()
		s.record(op, key, f, err)
		return rc, err
	}
	if f.After == 0 && f.Kind != Slow {
		err := s.faultError(ctx, op, key, f)
		s.record(op, key, f, err)
		return nil, err
	}
	rc, err := open()
	s.record(op, key, f, err)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{&faultReader{s: s, ctx: ctx, r: rc, op: op, key: key, f: f}, rc}, nil
}

// simple runs a call that has no body: a fault fires at the call.
func (s *Store) simple(ctx context.Context, op Op, key string, do func() error) error {
	f := s.take(op, key)
	if f != nil {
		switch f.Kind {
		case Stall, Reset, ServerError, NotFound:
			err := s.faultError(ctx, op, key, f)
			s.record(op, key, f, err)
			return err
		case Slow:
			if err := sleepCtx(ctx, f.Delay); err != nil {
				s.record(op, key, f, err)
				return err
			}
		case Hook:
			if f.Func != nil {
				f.Func(ctx, key)
			}
		}
	}
	err := do()
	s.record(op, key, f, err)
	return err
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]store.ObjectInfo, error) {
	var out []store.ObjectInfo
	err := s.simple(ctx, OpList, prefix, func() (err error) {
		out, err = s.inner.List(ctx, prefix)
		return err
	})
	return out, err
}

// ListAfter implements store.AfterLister: the inner store's, or its List
// with the earlier keys dropped (store.ListAfterOf). It takes OpList
// faults, matched on the prefix.
func (s *Store) ListAfter(ctx context.Context, prefix, startAfter string) ([]store.ObjectInfo, error) {
	var out []store.ObjectInfo
	err := s.simple(ctx, OpList, prefix, func() (err error) {
		out, err = store.ListAfterOf(ctx, s.inner, prefix, startAfter)
		return err
	})
	return out, err
}

// Delete implements store.Store. A fault matches on any of the keys and
// fails the whole call.
func (s *Store) Delete(ctx context.Context, keys []string) error {
	key := ""
	for _, k := range keys {
		s.mu.Lock()
		hit := false
		for _, f := range s.faults {
			if f.matches(OpDelete, k) {
				hit = true
				break
			}
		}
		s.mu.Unlock()
		if hit {
			key = k
			break
		}
	}
	if key == "" && len(keys) > 0 {
		key = keys[0]
	}
	return s.simple(ctx, OpDelete, key, func() error { return s.inner.Delete(ctx, keys) })
}

// ListUploads implements store.Multipart: the inner store's uploads, or
// none when it has no Multipart.
func (s *Store) ListUploads(ctx context.Context, prefix string) ([]store.Upload, error) {
	var out []store.Upload
	err := s.simple(ctx, OpListUploads, prefix, func() (err error) {
		if mp, ok := s.inner.(store.Multipart); ok {
			out, err = mp.ListUploads(ctx, prefix)
		}
		return err
	})
	return out, err
}

// AbortUpload implements store.Multipart (a no-op when the inner store has
// no Multipart: it has no uploads).
func (s *Store) AbortUpload(ctx context.Context, u store.Upload) error {
	return s.simple(ctx, OpAbortUpload, u.Key, func() error {
		if mp, ok := s.inner.(store.Multipart); ok {
			return mp.AbortUpload(ctx, u)
		}
		return nil
	})
}

// Time implements store.Clock (faults of OpTime; ErrUnsupported when
// the inner store has no Clock).
func (s *Store) Time(ctx context.Context) (time.Time, error) {
	var out time.Time
	err := s.simple(ctx, OpTime, "", func() (err error) {
		if c, ok := s.inner.(store.Clock); ok {
			out, err = c.Time(ctx)
			return err
		}
		return store.Unsupported(s.inner, string(OpTime), "")
	})
	return out, err
}

// Check passes through to the inner store's Check when it has one.
func (s *Store) Check(ctx context.Context) error {
	if c, ok := s.inner.(store.Checker); ok {
		return c.Check(ctx)
	}
	return nil
}
