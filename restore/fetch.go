package restore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
)

// Check is one verification of a backup or of a rebuilt cluster.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // passed, failed, skipped, planned
	Detail string `json:"detail,omitempty"`
}

// Check statuses.
const (
	CheckPassed  = "passed"
	CheckFailed  = "failed"
	CheckSkipped = "skipped"
	CheckPlanned = "planned"
)

// Names of the checks a backup passes before it is used.
const (
	CheckStoredSHA = "stored sha256"      // of the object as stored (compressed)
	CheckRawSHA    = "raw sha256"         // of the bbolt database
	CheckEtcdHash  = "etcd trailing hash" // etcd's own sha256 after the database
	CheckSizes     = "sizes"              // stored and raw sizes match the manifest
)

// fetchResult is what one streamed verification measured.
type fetchResult struct {
	Checks     []Check
	StoredSize int64
	RawSize    int64
}

// errVerify marks a backup whose bytes do not match its manifest (corrupt
// or truncated), as opposed to a store that could not be read.
type verifyError struct{ err error }

func (e *verifyError) Error() string { return e.err.Error() }
func (e *verifyError) Unwrap() error { return e.err }

// chunkSize is the buffer verifyLocal reads a local file with (the size of
// objectio's streaming buffers).
const chunkSize = 1 << 20

// snapshotExpect is what the snapshot object of m must hold.
func snapshotExpect(m *catalog.Manifest, ids *seal.Identities, progress func(int64)) objectio.Expect {
	return objectio.Expect{StoredSize: m.Snapshot.StoredSize, StoredSHA256: m.Snapshot.StoredSHA256,
		RawSize: m.Snapshot.RawSize, RawSHA256: m.Snapshot.RawSHA256, Compression: m.Snapshot.Compression,
		Snapshot: true, Encrypted: m.Encryption.Encrypted(), Recipients: m.Recipients(), Identities: ids,
		Progress: progress}
}

// errWriter remembers a failed write of the destination (our disk, not
// the backup).
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
}

// fetchSnapshot streams a backup's snapshot object from the store through
// objectio.Open, which checks, in one pass, the sha256 of the stored
// object, the sha256 of the database and etcd's trailing hash, against the
// manifest. When dst is non-nil the decompressed stream (database plus
// etcd's trailer, the file etcdutl expects) is written to it; otherwise it
// is discarded. Progress reports stored bytes read.
//
// An encrypted backup (m.Encryption) is decrypted with ids between the
// download and the decompression: without a matching identity nothing is
// downloaded (an *IdentityError, from the manifest), and an object whose
// age header or payload does not authenticate is refused as damaged
// (a verifyError wrapping seal.ErrTampered): no plaintext reaches dst
// before the header opened.
//
// version, when set, is the snapshot object's version to read (a backup
// only object versions hold: Candidate.Versions).
func fetchSnapshot(ctx context.Context, st store.Store, layout catalog.Layout, m *catalog.Manifest, version string, ids *seal.Identities, dst io.Writer, progress func(int64)) (*fetchResult, error) {
	key := layout.Key(m.ClusterID, m.Name, m.Snapshot.Object)
	if err := checkIdentity(layout, m, ids); err != nil {
		return nil, err
	}
	exp := snapshotExpect(m, ids, progress)
	exp.VersionID = version
	r, err := objectio.Open(ctx, st, key, exp)
	if err != nil {
		var oe *objectio.Error
		if errors.As(err, &oe) && oe.Kind == objectio.KindDecode {
			return nil, &verifyError{fmt.Errorf("%s: %w", key, oe.Err)}
		}
		return snapshotFailed(key, m, err)
	}
	defer r.Close()
	w := &errWriter{w: io.Discard}
	if dst != nil {
		w.w = dst
	}
	_, err = r.WriteTo(w)
	if w.err != nil {
		return nil, w.err // our disk, not the backup
	}
	if err != nil {
		return snapshotFailed(key, m, err)
	}
	return snapshotChecks(key, m, r.Result(), m.Encryption.Encrypted())
}

// snapshotFailed turns what objectio found into restore's checks: a
// damaged backup is a verifyError, anything else (the store, the context,
// a missing identity) is returned as it is.
func snapshotFailed(key string, m *catalog.Manifest, err error) (*fetchResult, error) {
	var oe *objectio.Error
	if !errors.As(err, &oe) {
		return nil, err
	}
	got := oe.Got
	switch {
	case oe.Kind == objectio.KindMissing:
		// The manifest names an object that is not there: the
		// backup is damaged, not the store down.
		return &fetchResult{Checks: []Check{{Name: CheckStoredSHA, Status: CheckFailed, Detail: "the snapshot object is missing"}}},
			&verifyError{fmt.Errorf("%s: the snapshot object the manifest names is missing: %w", key, oe.Err)}
	case oe.Kind == objectio.KindNoIdentity:
		return nil, fmt.Errorf("%s: %w", key, oe.Err)
	case oe.Kind == objectio.KindTampered:
		return &fetchResult{StoredSize: got.StoredSize, Checks: []Check{{Name: CheckDecrypt, Status: CheckFailed, Detail: oe.Err.Error()}}},
			&verifyError{tamperedError(key, oe.Err)}
	case oe.Kind == objectio.KindStoredSHA && oe.Err != nil:
		// Read to its end, but it did not decompress either.
		return &fetchResult{StoredSize: got.StoredSize, Checks: []Check{{Name: CheckStoredSHA, Status: CheckFailed,
				Detail: fmt.Sprintf("object hashes to %x (%d bytes), manifest says %s (%d bytes)", got.StoredSHA256, got.StoredSize, m.Snapshot.StoredSHA256, m.Snapshot.StoredSize)}}},
			&verifyError{fmt.Errorf("%s: %s mismatch: the object (%d bytes) hashes to %.12x…, the manifest says %.12s… (%d bytes); decompressing it failed: %w",
				key, CheckStoredSHA, got.StoredSize, got.StoredSHA256, m.Snapshot.StoredSHA256, m.Snapshot.StoredSize, oe.Err)}
	case oe.Kind == objectio.KindDecode:
		return nil, &verifyError{fmt.Errorf("%s: decompress after %d stored bytes: %w", key, got.StoredSize, oe.Err)}
	case oe.Mismatch():
		if res, verr := snapshotChecks(key, m, got, m.Encryption.Encrypted()); verr != nil {
			return res, verr
		}
		return nil, &verifyError{err}
	}
	return nil, err
}

// snapshotChecks reports each check of a snapshot read to its end, in
// order, up to the first that failed (a verifyError).
func snapshotChecks(key string, m *catalog.Manifest, got objectio.Result, encrypted bool) (*fetchResult, error) {
	res := &fetchResult{StoredSize: got.StoredSize, RawSize: got.RawSize}
	fail := func(name, detail string) (*fetchResult, error) {
		res.Checks = append(res.Checks, Check{Name: name, Status: CheckFailed, Detail: detail})
		return res, &verifyError{fmt.Errorf("%s: %s: %s", key, name, detail)}
	}
	if got.StoredSHA256 != m.Snapshot.StoredSHA256 {
		return fail(CheckStoredSHA, fmt.Sprintf("object hashes to %s (%d bytes), manifest says %s (%d bytes)",
			got.StoredSHA256, got.StoredSize, m.Snapshot.StoredSHA256, m.Snapshot.StoredSize))
	}
	res.Checks = append(res.Checks, Check{Name: CheckStoredSHA, Status: CheckPassed, Detail: got.StoredSHA256})
	if encrypted {
		res.Checks = append(res.Checks, Check{Name: CheckDecrypt, Status: CheckPassed,
			Detail: "age, encrypted to " + strings.Join(m.Encryption.Recipients, ", ")})
	}
	if name, detail := checkDatabase(res, got, m); name != "" {
		return fail(name, detail)
	}
	if got.StoredSize != m.Snapshot.StoredSize || got.RawSize != m.Snapshot.RawSize {
		return fail(CheckSizes, fmt.Sprintf("stored %d / raw %d bytes, manifest says %d / %d",
			got.StoredSize, got.RawSize, m.Snapshot.StoredSize, m.Snapshot.RawSize))
	}
	res.Checks = append(res.Checks, Check{Name: CheckSizes, Status: CheckPassed,
		Detail: fmt.Sprintf("stored %d bytes, database %d bytes", got.StoredSize, got.RawSize)})
	return res, nil
}

// checkDatabase checks etcd's trailing sha256 against the database bytes
// before it, then the database's sha256 against the manifest, appending
// each passed check to res; on a failure it returns the check's name and
// why (the caller records and returns it).
func checkDatabase(res *fetchResult, raw objectio.Result, m *catalog.Manifest) (string, string) {
	trailer := raw.Trailer
	if len(trailer) < sha256.Size {
		return CheckEtcdHash, fmt.Sprintf("snapshot is %d bytes: too short to hold etcd's sha256", raw.RawSize+int64(len(trailer)))
	}
	if hex.EncodeToString(trailer) != raw.RawSHA256 {
		return CheckEtcdHash, fmt.Sprintf("etcd's trailing sha256 is %x, the database hashes to %s", trailer, raw.RawSHA256)
	}
	res.Checks = append(res.Checks, Check{Name: CheckEtcdHash, Status: CheckPassed, Detail: hex.EncodeToString(trailer)})
	if got := raw.RawSHA256; got != m.Snapshot.RawSHA256 {
		return CheckRawSHA, fmt.Sprintf("database hashes to %s, the manifest says %s", got, m.Snapshot.RawSHA256)
	}
	res.Checks = append(res.Checks, Check{Name: CheckRawSHA, Status: CheckPassed, Detail: m.Snapshot.RawSHA256})
	return "", ""
}
