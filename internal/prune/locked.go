package prune

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/store"
)

// Deleting on a bucket with object lock. A delete of a locked
// object succeeds but only adds a delete marker: the version, and its
// bytes and bill, stay until its retention ends. So delete --all-backups,
// delete of named backups and the orphan lifecycle do not "delete" a
// backup any of whose objects is still locked: it is retained
// (ActionRetained), with the time its last lock ends
// (BackupAction.LockedUntil), and that is not a failure. The orphan
// marker of a cluster with a retained backup stays, so a later orphan
// pass deletes the backup once its lock expired.

// holdLocked, on a bucket with object lock, marks each of acts (planned
// deletions) whose current object versions are still locked at now as
// retained, and returns the others. A retention that cannot be read fails
// that backup's action (nothing of it is deleted). Without object lock, or
// when the lock configuration cannot be read (logged: deleted as before),
// it returns acts as they are.
func holdLocked(ctx context.Context, st store.Store, acts []*BackupAction, now time.Time, log *slog.Logger) []*BackupAction {
	lk, ok := st.(store.Locker)
	if !ok || len(acts) == 0 {
		return acts
	}
	info, err := lk.LockConfig(ctx)
	if err != nil {
		// As before object lock was known (a credential may not read the
		// bucket's lock configuration): deleted, and on a locked bucket
		// a locked object only gets a delete marker.
		log.Warn("delete: the bucket's object lock configuration could not be read: deleting as on a bucket without lock", "err", err)
		return acts
	}
	if !info.Enabled {
		return acts
	}
	type objRef struct{ act, obj int }
	var refs []objRef
	for i, a := range acts {
		for j := range a.entry.Objects {
			refs = append(refs, objRef{i, j})
		}
	}
	rets := make([]store.Retention, len(refs))
	errs := make([]error, len(refs))
	fanout.ForEach(ctx, len(refs), catalog.DefaultCheckParallel, func(ctx context.Context, k int) {
		rets[k], errs[k] = lk.Retention(ctx, acts[refs[k].act].entry.Objects[refs[k].obj].Key, "")
	})
	until := make([]time.Time, len(acts))
	failed := make([]error, len(acts))
	for k, r := range refs {
		switch {
		case errs[k] != nil && !store.IsNotFound(errs[k]):
			failed[r.act] = errors.Join(failed[r.act], errs[k])
		case rets[k].Locked(now) && rets[k].Until.After(until[r.act]):
			until[r.act] = rets[k].Until
		}
	}
	if err := ctx.Err(); err != nil {
		for i := range failed {
			failed[i] = errors.Join(failed[i], err)
		}
	}
	var rest []*BackupAction
	for i, a := range acts {
		switch {
		case failed[i] != nil:
			a.fail(fmt.Errorf("delete backup %s/%s: the object lock of its objects could not be read, so nothing of it was deleted: %w", a.ClusterID, a.Name, failed[i]))
		case !until[i].IsZero():
			u := until[i].UTC()
			a.Action, a.LockedUntil = ActionRetained, &u
			a.Reason += "; retained until " + u.Format(time.RFC3339) + " (object lock: deleting it now would only hide it behind a delete marker)"
			log.Info("backup retained: object lock", "cluster", a.ClusterID, "backup", a.Name, "until", u)
		default:
			rest = append(rest, a)
		}
	}
	return rest
}
