package prune

import (
	"context"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// Relock extends the retention of every object of e to at least until
// (mode for an object without one; an object keeps its own mode), so
// that the newest backup of an idle cluster stays locked. It returns how
// many objects it extended.
func Relock(ctx context.Context, st store.Store, e catalog.Entry, mode store.LockMode, until time.Time) (int, error) {
	lk, ok := st.(store.Locker)
	if !ok || until.IsZero() {
		return 0, nil
	}
	n := 0
	for _, o := range e.Objects {
		r, err := lk.Retention(ctx, o.Key, "")
		if err != nil {
			if store.IsNotFound(err) {
				continue
			}
			return n, err
		}
		if !r.Until.Before(until) {
			continue
		}
		if r.Mode == "" {
			r.Mode = mode
		}
		if err := lk.SetRetention(ctx, o.Key, "", store.Retention{Mode: r.Mode, Until: until}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
