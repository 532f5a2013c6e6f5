package store

import (
	"context"
	"io"
)

// PutWithoutLocker is Locker.PutWith for a wrapper w (the retry wrapper,
// the test fault injector) whose inner store has no Locker: with a
// retention, ErrUnsupported (Unsupported(inner, "put", key)); otherwise
// w's PutIfAbsent when opts.IfAbsent, else w's Put, so that the wrapper's
// own Put applies.
func PutWithoutLocker(ctx context.Context, w interface {
	Store
	Conditional
}, inner Store, key string, r io.Reader, opts PutOptions) (PutResult, error) {
	if opts.Retention != nil {
		return PutResult{}, Unsupported(inner, "put", key)
	}
	var n int64
	var err error
	if opts.IfAbsent {
		n, err = w.PutIfAbsent(ctx, key, r)
	} else {
		n, err = w.Put(ctx, key, r)
	}
	return PutResult{Size: n}, err
}
