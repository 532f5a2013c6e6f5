// Package retry is a generic store wrapper that repeats calls failing with a
// transient error (store.IsTransient), with exponential backoff, for
// backends that do not retry themselves. (internal/store/cos retries inside
// the SDK, per HTTP request, and does not need it.)
//
// What is repeated, and what is not:
//   - List, Delete, Get and GetRange (opening the object; not a read of
//     its body that fails midway), ListUploads, AbortUpload and Check:
//     repeated.
//   - Put: repeated only when its body is an io.Seeker (rewound to where
//     the first attempt started); a stream that was partly consumed cannot
//     be sent again.
//   - PutIfAbsent: never repeated: after an attempt whose outcome is
//     unknown, a repeat could find its own first write and report
//     store.ErrExists.
//
// A call stops at once when its context ends, and is not repeated after a
// connection that could not be made under store.FailFastOnConnect. The wrapper always has
// AfterLister (the inner store's, or its List filtered), Conditional
// (the inner store's, or Put when it has none), Multipart (an
// inner store without it has no uploads), Ranger (a Get cut to the range
// when the inner store has none), Checker (nil when the inner store has
// none), and Locker and Versioner (lock.go: PutWith repeated as Put is,
// the other calls repeated; on an inner store without them, no lock, no
// versioning, and store.ErrUnsupported for what needs them).
package retry

import (
	"context"
	"io"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
)

// Policy bounds the retries.
type Policy struct {
	MaxRetries int           // repeats after the first attempt; default 5
	MinBackoff time.Duration // default 200ms
	MaxBackoff time.Duration // default 10s
}

// Store is a store.Store that retries transient errors.
type Store struct {
	inner store.Store
	p     Policy
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

// Wrap returns inner with retries.
func Wrap(inner store.Store, p Policy) *Store {
	if p.MaxRetries == 0 {
		p.MaxRetries = 5
	}
	if p.MaxRetries < 0 {
		p.MaxRetries = 0
	}
	if p.MinBackoff <= 0 {
		p.MinBackoff = 200 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 10 * time.Second
	}
	return &Store{inner: inner, p: p}
}

// Inner is the wrapped store.
func (s *Store) Inner() store.Store { return s.inner }

// do runs fn until it succeeds, fails permanently, the retries are spent or
// ctx ends. It returns fn's last error.
func (s *Store) do(ctx context.Context, fn func() error) error {
	delay := s.p.MinBackoff
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || attempt >= s.p.MaxRetries || !store.IsTransient(err) || ctx.Err() != nil ||
			(store.FailsFastOnConnect(ctx) && store.IsConnectFailure(err)) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, s.p.MaxBackoff)
	}
}

// Put implements store.Store; see the package comment for when it repeats.
func (s *Store) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	return putRepeated(ctx, s, r, func() (int64, error) { return s.inner.Put(ctx, key, r) })
}

// putRepeated is put of body r, repeated as s repeats a call, each attempt
// after the first reading r again from where it stood; tried once when r
// cannot seek back.
func putRepeated[T any](ctx context.Context, s *Store, r io.Reader, put func() (T, error)) (T, error) {
	seeker, ok := r.(io.Seeker)
	if !ok {
		return put()
	}
	start, err := seeker.Seek(0, io.SeekCurrent)
	if err != nil {
		return put()
	}
	var res T
	first := true
	err = s.do(ctx, func() error {
		if !first {
			if _, serr := seeker.Seek(start, io.SeekStart); serr != nil {
				return store.Permanent(serr)
			}
		}
		first = false
		var err error
		res, err = put()
		return err
	})
	return res, err
}

// PutIfAbsent implements store.Conditional (never repeated; Put when the
// inner store has no Conditional).
func (s *Store) PutIfAbsent(ctx context.Context, key string, r io.Reader) (int64, error) {
	if cs, ok := s.inner.(store.Conditional); ok {
		return cs.PutIfAbsent(ctx, key, r)
	}
	return s.Put(ctx, key, r)
}

// Get implements store.Store: opening the object is repeated.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	var rc io.ReadCloser
	err := s.do(ctx, func() (err error) {
		rc, err = s.inner.Get(ctx, key)
		return err
	})
	return rc, err
}

// GetRange implements store.Ranger: opening the range is repeated. On an
// inner store without Ranger it is Get, the bytes before offset skipped
// and the body cut at length.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if r, ok := s.inner.(store.Ranger); ok {
		var rc io.ReadCloser
		err := s.do(ctx, func() (err error) {
			rc, err = r.GetRange(ctx, key, offset, length)
			return err
		})
		return rc, err
	}
	return store.RangeOfGet(ctx, s, key, offset, length)
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]store.ObjectInfo, error) {
	var out []store.ObjectInfo
	err := s.do(ctx, func() (err error) {
		out, err = s.inner.List(ctx, prefix)
		return err
	})
	return out, err
}

// ListAfter implements store.AfterLister: the inner store's, or its List
// with the earlier keys dropped (store.ListAfterOf); repeated as List is.
func (s *Store) ListAfter(ctx context.Context, prefix, startAfter string) ([]store.ObjectInfo, error) {
	var out []store.ObjectInfo
	err := s.do(ctx, func() (err error) {
		out, err = store.ListAfterOf(ctx, s.inner, prefix, startAfter)
		return err
	})
	return out, err
}

// Delete implements store.Store (deleting is idempotent: the whole call is
// repeated).
func (s *Store) Delete(ctx context.Context, keys []string) error {
	return s.do(ctx, func() error { return s.inner.Delete(ctx, keys) })
}

// ListUploads implements store.Multipart.
func (s *Store) ListUploads(ctx context.Context, prefix string) ([]store.Upload, error) {
	mp, ok := s.inner.(store.Multipart)
	if !ok {
		return nil, nil
	}
	var out []store.Upload
	err := s.do(ctx, func() (err error) {
		out, err = mp.ListUploads(ctx, prefix)
		return err
	})
	return out, err
}

// AbortUpload implements store.Multipart.
func (s *Store) AbortUpload(ctx context.Context, u store.Upload) error {
	mp, ok := s.inner.(store.Multipart)
	if !ok {
		return nil
	}
	return s.do(ctx, func() error { return mp.AbortUpload(ctx, u) })
}

// Time implements store.Clock (ErrUnsupported when the inner store has
// none). A retried read is the time of the attempt that succeeded.
func (s *Store) Time(ctx context.Context) (time.Time, error) {
	c, ok := s.inner.(store.Clock)
	if !ok {
		return time.Time{}, store.Unsupported(s.inner, "time", "")
	}
	var t time.Time
	err := s.do(ctx, func() (err error) {
		t, err = c.Time(ctx)
		return err
	})
	return t, err
}

// Check implements store.Checker (nil when the inner store has none).
func (s *Store) Check(ctx context.Context) error {
	c, ok := s.inner.(store.Checker)
	if !ok {
		return nil
	}
	return s.do(ctx, func() error { return c.Check(ctx) })
}
