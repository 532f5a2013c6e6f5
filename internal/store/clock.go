package store

import (
	"context"
	"errors"
	"time"
)

// Clock is implemented by stores that can tell their own time: the time
// by which they stamp what they record (ObjectInfo.LastModified,
// Upload.Initiated, a retention's expiry). Every age retention computes
// is a local now minus such a time, so a deleting caller compares its
// clock with the store's before it deletes (internal/prune: a node clock
// ahead would make every object look older than it is).
//
// Errors follow the contract (op "time" in a wrapper; a backend names the
// request it read the time from, as cos's "head bucket"); a wrapper whose
// inner store lacks Clock fails with ErrUnsupported.
type Clock interface {
	// Time is the store's current time, as the store itself reads it
	// (at least to the second). It costs one cheap request at most.
	Time(ctx context.Context) (time.Time, error)
}

// TimeOf reads st's time: ok is false, with no error, when st has no
// Clock (or is a wrapper whose inner store has none).
func TimeOf(ctx context.Context, st Store) (t time.Time, ok bool, err error) {
	c, has := st.(Clock)
	if !has {
		return time.Time{}, false, nil
	}
	t, err = c.Time(ctx)
	if errors.Is(err, ErrUnsupported) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, true, err
	}
	return t, true, nil
}
