package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/etcdconn"
)

// DrillOptions configure a restore drill of one backup (see Drill).
type DrillOptions struct {
	ClusterID string
	Store     backup.Store
	Layout    backup.Layout
	// Backup is the backup to drill; empty: the newest committed one.
	Backup string
	// Source is the cluster the backup was taken of. When it has
	// endpoints, the member the snapshot came from (the manifest's source
	// endpoint, else any member of Source) is asked for HashKV at the
	// snapshot's revision and the restored keyspace must hash the same.
	// Without endpoints, or when the source can no longer answer for that
	// revision, the drill checks self-consistency only and says so.
	Source etcdconn.Config
	// EtcdBinDir holds the etcd servers a drill runs, named etcd-<minor>
	// (etcd-3.5, etcd-3.6). Empty: looked up as etcd-<minor> in $PATH.
	EtcdBinDir string
	// ScratchDir is the parent of the drill's private scratch directory
	// (default os.TempDir(), i.e. $TMPDIR). It needs room for about the
	// database's size twice; checked before anything is downloaded.
	ScratchDir string
	// StartTimeout bounds the wait for the drill's etcd to serve (default
	// 2m); ProbeTimeout each request to it or to the source (default 10s).
	StartTimeout time.Duration
	ProbeTimeout time.Duration
	// NoRecord skips writing drill.json (the result is only returned).
	NoRecord bool
	Progress func(label string) Progress
	Log      *slog.Logger
	Now      func() time.Time
}

// Drill steps, used in errors and in DrillRecord.Steps.
const (
	DrillStepValidate = "validate"
	DrillStepSelect   = "select backup"
	DrillStepEtcd     = "find etcd"
	DrillStepSpace    = "check free space"
	DrillStepVerify   = "download and verify"
	DrillStepRestore  = "restore"
	DrillStepStart    = "start etcd"
	DrillStepChecks   = "check restored member"
	DrillStepCompare  = "compare with source"
	DrillStepRecord   = "record result"
	DrillStepCleanup  = "clean up"
)

// DrillError is a drill that failed: the cluster, the backup, the step and
// the cause. Record is the result when the failure is the backup's (a
// check failed, etcd could not start on it: the record says passed=false);
// nil when the drill could not run (the store failed, no room, no etcd of
// the backup's version, cancelled), and then nothing was recorded.
type DrillError struct {
	ClusterID string
	Backup    string
	Step      string
	Err       error
	Record    *backup.DrillRecord
}

func (e *DrillError) Error() string {
	b := e.Backup
	if b == "" {
		b = "(newest)"
	}
	return fmt.Sprintf("drill of cluster %s backup %s failed at step %q: %v", e.ClusterID, b, e.Step, e.Err)
}

func (e *DrillError) Unwrap() error { return e.Err }

// Drill downloads and verifies a backup exactly as restore does, restores
// it into a private scratch directory with restore's own code (the revision
// bump included), starts a real single-member etcd of the backup's minor
// version on it on loopback ports chosen at run time, checks that it serves
// and holds what the snapshot holds, compares it with the source where it
// can, records the result next to the backup (drill.json) and removes
// everything it started and wrote, on every exit path.
func Drill(ctx context.Context, opts DrillOptions) (*backup.DrillRecord, error) {
	return nil, &DrillError{ClusterID: opts.ClusterID, Backup: opts.Backup, Step: DrillStepValidate, Err: errors.New("not implemented yet")}
}
