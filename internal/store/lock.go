package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// LockMode is an object-lock retention mode (S3 Object Lock).
type LockMode string

const (
	// LockGovernance: the version cannot be deleted, nor its retention
	// shortened, until its retain-until time, except by a credential
	// allowed to bypass governance retention that asks to
	// (DeleteOptions.BypassGovernance).
	LockGovernance LockMode = "GOVERNANCE"
	// LockCompliance: nobody can delete the version, nor shorten its
	// retention, until its retain-until time.
	LockCompliance LockMode = "COMPLIANCE"
)

// Retention is the lock of one object version: Mode until Until. The zero
// Retention is "not locked".
type Retention struct {
	Mode  LockMode
	Until time.Time
}

// Check refuses a retention a backend cannot set: a mode other than
// governance or compliance, or no retain-until time. Its error is
// permanent: the same request would fail again. Every backend with Locker
// checks with it, so that they refuse the same retentions in the same
// words.
func (r Retention) Check() error {
	if r.Mode != LockGovernance && r.Mode != LockCompliance {
		return Permanent(fmt.Errorf("invalid retention mode %q (want %s or %s)", r.Mode, LockGovernance, LockCompliance))
	}
	if r.Until.IsZero() {
		return Permanent(errors.New("a retention needs a retain-until time"))
	}
	return nil
}

// Locked reports whether the retention still holds at now.
func (r Retention) Locked(now time.Time) bool {
	return r.Mode != "" && now.Before(r.Until)
}

// LockInfo is a bucket's object-lock configuration.
type LockInfo struct {
	// Enabled: the bucket was created with object lock (it is then
	// versioned too, for good).
	Enabled bool
	// DefaultMode and DefaultPeriod: the retention the bucket gives a new
	// version written without one (empty and 0: none).
	DefaultMode   LockMode
	DefaultPeriod time.Duration
}

// PutOptions are the options of Locker.PutWith.
type PutOptions struct {
	// IfAbsent: create only, as Conditional.PutIfAbsent (ErrExists when a
	// live object holds the key).
	IfAbsent bool
	// Retention locks the new version (nil: the bucket's default, if any).
	// A store whose bucket has no object lock refuses a retention with a
	// permanent error.
	Retention *Retention
}

// PutResult is what Locker.PutWith stored.
type PutResult struct {
	Size      int64
	VersionID string // empty on a bucket without versioning
}

// Locker is implemented by stores that can use a bucket's object lock (S3
// Object Lock, IBM COS's object lock). A store has the capability when it
// implements Locker; the bucket uses it when LockConfig says Enabled.
//
// Errors follow the contract; on top of it, a call refused because a
// version is locked fails with an error matching ErrLocked (IsLocked; the
// retain-until time, when the backend could learn it, from LockedUntil),
// permanent, never a generic denial.
//
// Every write of a backend with Locker carries a checksum (Content-MD5 or
// an x-amz-checksum header) on every request that sends object bytes,
// whole object or part, as locked buckets require.
type Locker interface {
	// LockConfig returns the bucket's object-lock configuration. A bucket
	// without object lock is LockInfo{} and no error.
	LockConfig(ctx context.Context) (LockInfo, error)
	// PutWith is Put (or, with IfAbsent, PutIfAbsent) with options,
	// returning the size and the version id it stored (op "put").
	PutWith(ctx context.Context, key string, r io.Reader, opts PutOptions) (PutResult, error)
	// SetRetention sets the retention of a version (versionID "": the
	// current one), op "put retention". Extending a retention always
	// works; shortening or removing one is refused with ErrLocked.
	SetRetention(ctx context.Context, key, versionID string, r Retention) error
	// Retention returns a version's retention (versionID "": the current
	// one), op "get retention": Retention{} for a version without one, an
	// error wrapping ErrNotFound for a missing key or version.
	Retention(ctx context.Context, key, versionID string) (Retention, error)
}

// Version is one version of a key in a versioned bucket: an object's
// bytes or a delete marker.
type Version struct {
	Key          string
	VersionID    string // "null" for a version written while versioning was off
	Size         int64
	LastModified time.Time
	IsLatest     bool // the key's current version
	DeleteMarker bool // a delete marker: the key reads as missing while it is the latest
}

// VersionRef names one version for Versioner.DeleteVersions.
type VersionRef struct {
	Key       string
	VersionID string
}

// DeleteOptions are the options of Versioner.DeleteVersions.
type DeleteOptions struct {
	// BypassGovernance asks to delete versions under governance retention
	// (S3: x-amz-bypass-governance-retention). It works only for a
	// credential allowed to (s3:BypassGovernanceRetention); compliance
	// retention is never bypassed.
	BypassGovernance bool
}

// Versioner is implemented by stores that can see a versioned bucket's
// versions. On a versioned bucket, Store.Put adds a version, Store.Delete
// adds a delete marker (the old versions stay; a key that never existed
// gets a marker too, as S3 does) and Get and List see the latest
// versions only, a key whose latest version is a delete marker being
// missing.
//
// Create-only writes (Conditional.PutIfAbsent, PutOptions.IfAbsent) on a
// versioned bucket refuse, with ErrExists, only when the key's latest
// version is an object: over a delete marker they write a new version (the
// key reads as missing, as S3's If-None-Match: * judges it). The older
// versions behind the marker stay, readable with GetVersion.
type Versioner interface {
	// Versioning reports whether the bucket keeps versions (S3: versioning
	// Enabled; a bucket with object lock always does). Op "get versioning".
	Versioning(ctx context.Context) (bool, error)
	// ListVersions returns every version and delete marker whose key
	// starts with prefix, by key, then newest first (op "list versions").
	// On a bucket without versioning it lists the objects, each as its
	// only, latest, version.
	ListVersions(ctx context.Context, prefix string) ([]Version, error)
	// GetVersion opens one version of key for streaming (op "get
	// version"). A missing key or version, or a delete marker, fails with
	// ErrNotFound.
	GetVersion(ctx context.Context, key, versionID string) (io.ReadCloser, error)
	// DeleteVersions removes exact versions (and delete markers) for good
	// (op "delete version"). A version that does not exist is not an
	// error. Versions that could not be removed are reported in a
	// *DeleteError keyed by Key (the others are still removed); a locked
	// one's cause matches ErrLocked.
	DeleteVersions(ctx context.Context, versions []VersionRef, opts DeleteOptions) error
}

// ErrLocked means a call was refused because an object version is under
// object-lock retention (or a legal hold): a delete of the version, or a
// shortening of its retention. It is permanent (until the retention
// expires). A *LockedError carries the retain-until time when known.
var ErrLocked = errors.New("object is locked (object-lock retention)")

// ErrUnsupported means the store (or the store a wrapper wraps) lacks the
// capability called; it matches errors.ErrUnsupported.
var ErrUnsupported = errors.ErrUnsupported

// LockedError is a refusal because a version is locked: the version, and
// its retention when the backend could learn it (Until zero: unknown).
type LockedError struct {
	VersionID string
	Retention Retention
	Cause     error // the service's own answer, when there is one
}

func (e *LockedError) Error() string {
	msg := ErrLocked.Error()
	if !e.Retention.Until.IsZero() {
		msg = "object is locked (" + string(e.Retention.Mode) + " retention until " + e.Retention.Until.UTC().Format(time.RFC3339) + ")"
	}
	if e.VersionID != "" {
		msg += " [version " + e.VersionID + "]"
	}
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap makes a LockedError match ErrLocked (and its cause).
func (e *LockedError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrLocked}
	}
	return []error{ErrLocked, e.Cause}
}

// Transient: a lock is permanent (until it expires).
func (e *LockedError) Transient() bool { return false }

// IsLocked reports whether err (or, for a *DeleteError, any key's cause)
// is a refusal because a version is locked.
func IsLocked(err error) bool { return errors.Is(err, ErrLocked) }

// LockedUntil returns the retain-until time of the first *LockedError in
// err's chain that knows it.
func LockedUntil(err error) (time.Time, bool) {
	var le *LockedError
	if errors.As(err, &le) && !le.Retention.Until.IsZero() {
		return le.Retention.Until, true
	}
	var de *DeleteError
	if errors.As(err, &de) {
		for _, e := range de.Failed {
			if t, ok := LockedUntil(e); ok {
				return t, true
			}
		}
	}
	return time.Time{}, false
}

// Unsupported is the error of a wrapper asked for a capability its inner
// store st lacks: a *Error for op and key wrapping ErrUnsupported.
func Unsupported(st Store, op, key string) error {
	backend := "store"
	if b, ok := st.(interface{ Backend() string }); ok {
		backend = b.Backend()
	}
	return &Error{Backend: backend, Op: op, Key: key, Err: ErrUnsupported}
}

// VersionsOfList is ListVersions for a store without Versioner (a bucket
// without versioning): each listed object as its only, latest, version
// "null". Errors are List's.
func VersionsOfList(ctx context.Context, st Store, prefix string) ([]Version, error) {
	objs, err := st.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]Version, len(objs))
	for i, o := range objs {
		out[i] = Version{Key: o.Key, VersionID: "null", Size: o.Size, LastModified: o.LastModified, IsLatest: true}
	}
	return out, nil
}
