// Package store is the object-store seam: the interface every backend
// implements, the error contract callers rely on, and the optional
// capabilities a backend may add. Backups, restores, retention and drills
// use only this package; they never name a backend's types.
//
// # Backends
//
// A backend is one package under internal/store (today internal/store/cos:
// IBM COS and any S3 API, and internal/store/memstore: in memory, for
// tests). A new backend passes the conformance suite,
// internal/testing/storetest.Run, from a test in its own package; that suite
// is the executable form of the contract below.
//
// # Opening a store
//
// Stores open by kind from a registry (registry.go): each backend calls
// Register from an init function in its register.go, a program links the
// backends with a blank import (internal/store/all: the production ones;
// a test imports memstore, kind "mem"), and callers build a store with
// Open and a backend-neutral Config. Only a backend and internal/store/all
// name a backend package (internal/testing/archtest checks it).
//
// # Error contract
//
// Every error a backend returns from a call (including errors from reading a
// Get's body) is a *Error naming the backend, the operation and the key (or
// prefix): "<backend>: <op> <key>: <cause>". The text never carries a
// credential (a backend redacts what its service echoes back). The cause is
// classified with errors.Is and IsTransient:
//
//   - ErrNotFound: Get of a key that does not exist. Delete of a missing key
//     is NOT an error, and a missing bucket is NOT ErrNotFound (the store is
//     unusable, not the object gone). ErrNotFound also matches
//     fs.ErrNotExist.
//   - ErrExists: a conditional create (Conditional.PutIfAbsent) found the
//     key taken; nothing was stored.
//   - ErrStalled: the backend made no progress for its stall timeout and
//     aborted the call. It is the store's fault, never the caller's data
//     source's.
//   - context.Canceled / context.DeadlineExceeded: the caller's context
//     ended; a call with a cancelled context fails promptly with an error
//     wrapping the context's error.
//   - ErrLocked: a version under object-lock retention refused a delete
//     (or a shortened retention): IsLocked, and LockedUntil for the
//     retain-until time when the backend knows it (a *LockedError). Never
//     reported as a plain denial.
//   - ErrUnsupported: a wrapper was asked for a capability its inner store
//     lacks.
//   - IsTransient: whether repeating the call may succeed (5xx, throttling,
//     resets, timeouts, stalls). ErrNotFound, ErrExists, ErrLocked, a
//     cancelled context, denied access and a missing bucket are permanent.
//
// IsStoreError tells a store's error from any other (a restore tells "the
// store could not be read" from "the bytes are corrupt" with it).
//
// # Capabilities
//
// Optional abilities are separate interfaces, found by a type assertion:
// Conditional (create only if absent), Multipart (list and abort unfinished
// multipart uploads), KeyUploadLister (Multipart's exact-key listing),
// Ranger (read part of an object), AfterLister (list only the keys after a
// key), Checker (reachability, up front), Clock (the store's own time,
// which deleting callers compare theirs with: clock.go),
// Locker (object lock: the bucket's lock configuration, writes with a
// retention, a version's retention) and Versioner (a versioned bucket's
// versions and delete markers: list, read and remove exact versions). A
// store without Multipart has no unfinished uploads to clean up; a store
// without Conditional is written with Put. Locker and Versioner are in
// lock.go, with their error contract (ErrLocked) and what create-only
// writes do on a versioned bucket. The wrappers below always have both
// (and Clock):
// whether a bucket uses them is LockConfig's Enabled and Versioning's
// answer, not the type assertion.
//
// Object lock protects versions, not keys: on a locked bucket Delete still
// succeeds (it adds a delete marker) and Put still adds a newer version;
// only removing a locked version (Versioner.DeleteVersions) is refused.
// Every PUT and every multipart part a backend with Locker sends carries a
// checksum (Content-MD5), which a locked bucket requires.
//
// Keys: slash-separated, never starting with a slash, and no key is also
// the "directory" of another (a/b beside a/b/c): MinIO cannot hold both.
// The backup layout (catalog.Layout) never makes such keys.
//
// # Wrappers
//
// internal/testing/faults injects exact faults into any store (tests);
// internal/store/retry repeats transient failures for a backend that does
// not retry itself. Both are stores, and pass the suite.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"sort"
	"strconv"
	"syscall"
	"time"
)

// Store is an object store: keys to byte streams.
//
// Keys are slash-separated paths; List takes a plain string prefix (not a
// directory), so "a/b" lists "a/b/c" and "a/bc". Every method honours its
// context: a cancelled context makes a call fail promptly.
type Store interface {
	// Put streams r into key, replacing any object there, and returns the
	// number of bytes stored. A failed Put leaves no (new) object behind:
	// a backend that uploads in parts aborts the upload (one that could not
	// even be aborted is left for Multipart cleanup). An error reading r
	// fails the Put.
	Put(ctx context.Context, key string, r io.Reader) (int64, error)
	// Get opens key for streaming. A missing key fails with ErrNotFound.
	// The caller closes the body; errors reading it follow the contract
	// too.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns every object whose key starts with prefix (the empty
	// prefix: all), in ascending key order. A prefix with nothing under it
	// is an empty listing, not an error. It returns an error rather than a
	// partial listing.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	// Delete removes keys (a backend may batch them). A key that does not
	// exist is not an error. Keys that could not be deleted are reported in
	// a *DeleteError; the other keys are still deleted.
	Delete(ctx context.Context, keys []string) error
}

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	Key          string
	Size         int64
	LastModified time.Time
}

// Conditional is implemented by stores that can create an object only if
// its key is free (S3: If-None-Match: * on PutObject and
// CompleteMultipartUpload). Backups write every object through it when the
// store has it, so a write never replaces an existing backup's object.
type Conditional interface {
	// PutIfAbsent is Put that fails with an error wrapping ErrExists,
	// storing nothing, when key already exists.
	PutIfAbsent(ctx context.Context, key string, r io.Reader) (int64, error)
}

// Multipart is implemented by stores whose Put may leave an unfinished
// upload behind (a process killed mid-upload): prune lists and aborts the
// stale ones. A store without it has no uploads to clean up.
type Multipart interface {
	// ListUploads returns the unfinished uploads whose key starts with
	// prefix.
	ListUploads(ctx context.Context, prefix string) ([]Upload, error)
	// AbortUpload aborts one upload. An upload that no longer exists
	// counts as aborted.
	AbortUpload(ctx context.Context, u Upload) error
}

// KeyUploadLister is an optional refinement of Multipart: list the uploads
// of exactly one key, asking the server with the key itself as the prefix.
// MinIO's bucket-wide listing can miss an upload left by a server killed
// mid-upload and restarted; a listing by its exact key finds it. Stores
// without it are asked ListUploads(ctx, key).
type KeyUploadLister interface {
	ListUploadsForKey(ctx context.Context, key string) ([]Upload, error)
}

// Ranger is implemented by stores that can read part of an object (S3: a
// Range header on GetObject). A caller that needs only the start of an
// object (the age header of an encrypted snapshot) reads a few KiB instead
// of the whole object; a store without it is read with Get, closed early.
type Ranger interface {
	// GetRange opens at most length bytes of key, from byte offset
	// (offset >= 0, length > 0; otherwise an error naming the op and key).
	// The body is shorter when the object ends sooner, and empty when
	// offset is at or past its end. A missing key fails with ErrNotFound;
	// errors follow the contract, as Get's.
	GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
}

// RangeOfGet is GetRange for a store without Ranger: st.Get, the bytes
// before offset read and dropped, the body cut at length. Errors are Get's
// (and the skipped bytes' read errors, op "get range").
func RangeOfGet(ctx context.Context, st Store, key string, offset, length int64) (io.ReadCloser, error) {
	backend := "store"
	if b, ok := st.(interface{ Backend() string }); ok {
		backend = b.Backend()
	}
	if offset < 0 || length <= 0 {
		return nil, &Error{Backend: backend, Op: "get range", Key: key, Err: Permanent(fmt.Errorf("invalid range: offset %d, length %d", offset, length))}
	}
	body, err := st.Get(ctx, key)
	if err != nil {
		var se *Error
		if errors.As(err, &se) && se.Op == "get" {
			c := *se
			c.Op = "get range"
			return nil, &c
		}
		return nil, err
	}
	if _, err := io.CopyN(io.Discard, body, offset); err != nil && err != io.EOF {
		body.Close()
		if !IsStoreError(err) {
			err = &Error{Backend: backend, Op: "get range", Key: key, Err: err}
		}
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(body, length), body}, nil
}

// AfterLister is implemented by stores that can list only the keys after
// a given one (S3: ListObjectsV2's StartAfter), so that a poll of a folder
// whose keys grow in order (a journal's segments) reads only what is new.
// ListAfterOf is the same for a store without it.
type AfterLister interface {
	// ListAfter is List of the objects under prefix whose key sorts after
	// startAfter ("": every one), in ascending key order (op "list", the
	// prefix named).
	ListAfter(ctx context.Context, prefix, startAfter string) ([]ObjectInfo, error)
}

// ListAfterOf lists the objects under prefix whose key sorts after
// startAfter: the store's AfterLister when it has one, else its List with
// the earlier keys dropped.
func ListAfterOf(ctx context.Context, st Store, prefix, startAfter string) ([]ObjectInfo, error) {
	if al, ok := st.(AfterLister); ok {
		return al.ListAfter(ctx, prefix, startAfter)
	}
	objs, err := st.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	i := sort.Search(len(objs), func(i int) bool { return objs[i].Key > startAfter })
	return objs[i:], nil
}

// Checker is implemented by stores that can verify, before any work starts,
// that they are reachable and usable (the bucket exists, the credentials
// may use it), so a backup fails before it opens a snapshot stream.
type Checker interface {
	Check(ctx context.Context) error
}

// Upload is an unfinished multipart upload.
type Upload struct {
	Key       string
	UploadID  string
	Initiated time.Time
}

// ErrNotFound means the key does not exist (Get). It matches fs.ErrNotExist
// too.
var ErrNotFound error = notFound{}

type notFound struct{}

func (notFound) Error() string        { return "object not found" }
func (notFound) Is(target error) bool { return target == fs.ErrNotExist }

// ErrExists means a conditional create found the key already there: a
// write never replaces an existing backup's object.
var ErrExists = errors.New("object already exists (conditional create refused to overwrite it)")

// ErrStalled means the object store made no progress on a call for the
// stall timeout (internal/store/cos Config.StallTimeout): the call was
// aborted. It is the store's fault, never the etcd member's: a backup that
// sees it stops at once instead of trying another member.
var ErrStalled = errors.New("object store stalled")

// Error is the error of one store call: "<backend>: <op> <key>: <cause>".
// Err's text is free of credentials (the backend's duty).
type Error struct {
	Backend string // "cos", "memstore", ...
	Op      string // "put", "get", "get range", "list", "delete", "list uploads", "abort upload", "head bucket", "get lock config", "put retention", "get retention", "get versioning", "list versions", "get version", "delete version"
	Key     string // the key, the prefix of a listing, or the bucket
	Err     error
	Hint    string // what the operator can do, when the backend knows
}

func (e *Error) Error() string {
	cause := "<nil>"
	if e.Err != nil {
		cause = e.Err.Error()
	}
	msg := e.Backend + ": " + e.Op + " " + e.Key + ": " + cause
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// GoString keeps %#v to the error's (redacted) text.
func (e *Error) GoString() string { return "&store.Error{" + strconv.Quote(e.Error()) + "}" }

// IsStoreError reports whether err came from a store call (a *Error is in
// its chain), as opposed to the caller's own work on the bytes.
func IsStoreError(err error) bool {
	var se *Error
	return errors.As(err, &se)
}

// IsNotFound is errors.Is(err, ErrNotFound).
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// DeleteError reports the keys a Delete could not remove.
type DeleteError struct {
	Failed map[string]error // key -> cause (a *Error from a conforming backend)
}

// Unwrap returns the causes, so errors.Is sees through a DeleteError (a
// stalled store: ErrStalled).
func (e *DeleteError) Unwrap() []error {
	out := make([]error, 0, len(e.Failed))
	for _, err := range e.Failed {
		out = append(out, err)
	}
	return out
}

// Error names the first failed key (in key order) with its cause, and how
// many failed.
func (e *DeleteError) Error() string {
	n := 0
	var first string
	var firstErr error
	for k, err := range e.Failed {
		if n == 0 || k < first {
			first, firstErr = k, err
		}
		n++
	}
	if n == 0 {
		return "delete: no key failed"
	}
	msg := "<nil>"
	if firstErr != nil {
		msg = firstErr.Error()
	}
	if !IsStoreError(firstErr) {
		// A cause that does not name its key (a non-conforming wrapper).
		msg = "delete " + first + ": " + msg
	}
	if n == 1 {
		return msg
	}
	return fmt.Sprintf("delete: %d keys failed, first: %s", n, msg)
}

// transience marks an error as transient or permanent, overriding the
// generic classification (see Transient, Permanent).
type transience struct {
	err       error
	transient bool
}

func (t *transience) Error() string   { return t.err.Error() }
func (t *transience) Unwrap() error   { return t.err }
func (t *transience) Transient() bool { return t.transient }

// Transient marks err as worth retrying (IsTransient reports true), for a
// backend that knows better than the generic rules.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &transience{err: err, transient: true}
}

// Permanent marks err as not worth retrying.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &transience{err: err, transient: false}
}

// IsTransient reports whether repeating the call that failed with err may
// succeed. In order: nil, a cancelled context, ErrNotFound, ErrExists,
// ErrLocked and ErrUnsupported are permanent; ErrStalled is transient; then the outermost Transient or
// Permanent mark (or any error with a Transient() bool method) decides;
// then: connection resets, broken pipes, cut messages, network errors,
// timeouts and HTTP 5xx/408/429 (an error with StatusCode() int) are
// transient, other HTTP statuses permanent, and anything else permanent.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, ErrExists) || errors.Is(err, ErrNotFound) ||
		errors.Is(err, ErrLocked) || errors.Is(err, ErrUnsupported) {
		return false
	}
	if errors.Is(err, ErrStalled) {
		return true
	}
	var t interface{ Transient() bool }
	if errors.As(err, &t) {
		return t.Transient()
	}
	var sc interface{ StatusCode() int }
	if errors.As(err, &sc) {
		s := sc.StatusCode()
		if s >= 500 || s == 429 || s == 408 {
			return true
		}
		if s >= 400 {
			return false
		}
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var nerr net.Error
	return errors.As(err, &nerr)
}

// failFastKey marks a context whose store calls give up on a connection
// that cannot be made (FailFastOnConnect).
type failFastKey struct{}

// FailFastOnConnect marks ctx: a store call made under it is not repeated
// when it cannot connect to the store (IsConnectFailure: a connection
// refused, no route to the host, a name that does not resolve). Nothing
// listens there now, and a repeat within a check's deadline only spends
// that deadline: site.Check judges such a store unreachable at once.
// Other transient failures (a 5xx, a throttle, a reset) are repeated as
// always, within ctx; a store that accepts the connection and never
// answers (a frozen server) costs ctx's deadline.
func FailFastOnConnect(ctx context.Context) context.Context {
	return context.WithValue(ctx, failFastKey{}, true)
}

// FailsFastOnConnect reports whether ctx was marked by FailFastOnConnect:
// the retrying layers (internal/store/cos's SDK retryer, internal/store/retry)
// then do not repeat a call that failed with IsConnectFailure.
func FailsFastOnConnect(ctx context.Context) bool {
	v, _ := ctx.Value(failFastKey{}).(bool)
	return v
}

// IsConnectFailure reports whether err is a failure to open a connection
// to the store (a dial error: refused, unreachable, timed out while
// connecting; or a name that does not resolve), as opposed to a failure
// of a connection that was made.
func IsConnectFailure(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}
