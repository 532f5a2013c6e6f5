package restore

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// Survivor is the pre-restore snapshot of a surviving member.
type Survivor struct {
	Member   string `json:"member,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Revision int64  `json:"revision,omitempty"`
	// Backup is the committed pre-restore backup.
	Backup string `json:"backup,omitempty"`
	// Planned: a dry run found the member and would take the snapshot.
	Planned bool `json:"planned,omitempty"`
	// Skipped says why no survivor snapshot was taken.
	Skipped string `json:"skipped,omitempty"`
}

// Plan is what a restore does (or, in a dry run, would do).
type Plan struct {
	ClusterID string `json:"clusterID"`
	DryRun    bool   `json:"dryRun"`
	// Site is the store read when it is not the primary (Options.Site).
	Site       string      `json:"site,omitempty"`
	Survivor   *Survivor   `json:"survivor"`
	Candidates []Candidate `json:"candidates"`
	Ignored    []Ignored   `json:"ignored,omitempty"`
	// Fallbacks are the candidates refused at verification, in the order
	// tried, each with the one tried next (no --backup: see Fallback).
	Fallbacks []Fallback `json:"fallbacks,omitempty"`
	Chosen    *Candidate `json:"chosen,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	// Checks of the chosen backup, before anything is written.
	Checks   []Check        `json:"checks"`
	Snapshot *SnapshotFacts `json:"snapshot,omitempty"`
	// Members and their data dirs.
	Members        []Member `json:"members"`
	InitialCluster string   `json:"initialCluster"`
	Token          string   `json:"initialClusterToken"`
	TokenGenerated bool     `json:"tokenGenerated,omitempty"`
	BumpRevision   uint64   `json:"bumpRevision"`
	MarkCompacted  bool     `json:"markCompacted"`
	// MinRevision is the lowest revision the rebuilt cluster may report:
	// the revision of the snapshot's last key plus the bump, as etcdutl
	// bumps it (the manifest's revision plus the bump until the snapshot
	// is read).
	MinRevision int64 `json:"minRevision"`
	// EtcdVersion is the server version the backup was taken from: start
	// the data dirs with the same minor version.
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// Problems stop the restore; a dry run lists them all.
	Problems []string `json:"problems,omitempty"`
	// Replay is the journal replayed up to Options.ToRevision.
	Replay *Replayed `json:"replay,omitempty"`
	// Latest is what Options.ToLatest resolved to.
	Latest *Latest `json:"latest,omitempty"`
	// Warnings are what the restore did that a reader must know.
	Warnings []string `json:"warnings,omitempty"`
}

// Result is a finished (or failed) restore.
type Result struct {
	Plan
	// Duration is from the start to the data dirs written.
	Duration time.Duration `json:"duration"`
	// Verify is the check of the rebuilt cluster, when asked for.
	Verify *VerifyReport `json:"verify,omitempty"`
	// TotalToVerified is from the start to a verified cluster.
	TotalToVerified time.Duration `json:"totalToVerified,omitempty"`
	// start is when the restore started (Run).
	start time.Time
}

// Step names, used in errors.
const (
	StepValidate      = "validate"
	StepDataDirs      = "check data dirs"
	StepStore         = "check object store"
	StepSurvivor      = "survivor snapshot"
	StepList          = "list backups"
	StepSelect        = "select backup"
	StepVerifyBackup  = "verify backup"
	StepReplay        = "replay journal"
	StepMoveAside     = "move data dir aside"
	StepWrite         = "write data dirs"
	StepVerifyCluster = "verify cluster"
)

// Error is a failed restore: the cluster, the step and the cause.
type Error struct {
	ClusterID string
	At        string // the step that failed (Step)
	Err       error
}

// Step is the step that failed (one of the Step* constants).
func (e *Error) Step() string { return e.At }

func (e *Error) Error() string {
	if e.ClusterID == "" {
		return fmt.Sprintf("restore failed at step %q: %v", e.Step(), e.Err)
	}
	return fmt.Sprintf("restore of cluster %s failed at step %q: %v", e.ClusterID, e.Step(), e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// BackupError is a backup refused because it failed verification. Next is
// the next-newest backup that passed, empty when none did.
type BackupError struct {
	Backup       string
	Err          error
	Next         string
	NextRevision int64
	// NextErr is why the next backups could not be checked (the store
	// failed while they were read).
	NextErr error
}

func (e *BackupError) Error() string {
	msg := fmt.Sprintf("backup %s is corrupt, truncated or missing an object, refusing it: %v", e.Backup, e.Err)
	if e.NextErr != nil {
		return msg + fmt.Sprintf("; the older backups could not be checked: %v", e.NextErr)
	}
	if e.Next != "" {
		return msg + fmt.Sprintf("; the next-newest good backup is %s (revision %d, verified): restore it with --backup %s", e.Next, e.NextRevision, e.Next)
	}
	return msg + "; no other backup passed verification"
}

func (e *BackupError) Unwrap() error { return e.Err }

// ProblemsError is a restore stopped before anything was changed.
type ProblemsError struct{ Problems []string }

func (e *ProblemsError) Error() string { return strings.Join(e.Problems, "; ") }

// IsVerifyError reports whether err is a backup refused for its bytes (a
// checksum, a truncated or undecodable stream, an object gone, a database
// below the manifest's revision), not a store or disk failure.
func IsVerifyError(err error) bool {
	var ve *verifyError
	return errors.As(err, &ve)
}

// IsLocalFailure tells a failure of the local file system (no room, no
// permission, read-only, an I/O error, a data dir changed under the run)
// from a backup's database being refused.
func IsLocalFailure(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EROFS) ||
		errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrPermission) || strings.Contains(err.Error(), "changed since it was checked")
}

// Manifest is the candidate's manifest (nil for the survivor a dry run
// plans).
func (c Candidate) Manifest() *catalog.Manifest { return c.manifest }
