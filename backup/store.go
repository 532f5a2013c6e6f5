package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Store is the object store backups live in. The one implementation is
// internal/store/cos (IBM COS SDK, S3 API); tests run it against a real MinIO.
// Errors are wrapped as "cos: <op> <key>: <cause>".
type Store interface {
	// Put streams r into key. Large bodies go through a multipart upload that
	// is aborted on any error, so a failed Put leaves no object behind (an
	// upload that could not even be aborted is left for prune to clean up).
	// It returns the number of bytes stored.
	Put(ctx context.Context, key string, r io.Reader) (int64, error)
	// Get opens key for streaming.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns every object under prefix, in key order. It returns an
	// error rather than a partial listing.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	// Delete removes keys in batches. Keys that could not be deleted are
	// reported in a *DeleteError; the other keys are still deleted.
	Delete(ctx context.Context, keys []string) error
	// ListUploads returns the multipart uploads in progress under prefix.
	ListUploads(ctx context.Context, prefix string) ([]Upload, error)
	// AbortUpload aborts one multipart upload.
	AbortUpload(ctx context.Context, u Upload) error
}

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	Key          string
	Size         int64
	LastModified time.Time
}

// Upload is a multipart upload in progress.
type Upload struct {
	Key       string
	UploadID  string
	Initiated time.Time
}

// DeleteError reports the keys a Delete could not remove.
type DeleteError struct {
	Failed map[string]error // key -> cause
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
	msg := firstErr.Error()
	if !strings.HasPrefix(msg, "cos: ") {
		msg = "cos: delete " + first + ": " + msg
	}
	if n == 1 {
		return msg
	}
	return fmt.Sprintf("cos: delete: %d keys failed, first: %s", n, msg)
}

// ErrStalled means the object store made no progress on a call for the
// stall timeout (internal/store/cos Config.StallTimeout): the call was aborted.
// It is the store's fault, never the etcd member's: a backup that sees it
// stops at once instead of trying another member.
var ErrStalled = errors.New("object store stalled")

// ErrExists means a conditional create found the key already there: a
// write never replaces an existing backup's object.
var ErrExists = errors.New("object already exists (conditional create refused to overwrite it)")

// ConditionalStore is implemented by stores that can create an object only
// if its key is free (S3 If-None-Match: * on PutObject and
// CompleteMultipartUpload). Backups write every object through it when the
// store has it.
type ConditionalStore interface {
	// PutIfAbsent is Put that fails with an error wrapping ErrExists,
	// storing nothing, when key already exists.
	PutIfAbsent(ctx context.Context, key string, r io.Reader) (int64, error)
}
