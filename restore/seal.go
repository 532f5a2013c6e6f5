package restore

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
)

// CheckDecrypt is the check of an encrypted backup's age layer: the header
// opened with one of the identities and every payload chunk authenticated.
const CheckDecrypt = "decrypt"

// IdentityError is an encrypted backup that cannot be read with the
// identities given (none, or none of its recipients): found before anything
// is downloaded or written. errors.Is(err, seal.ErrNoIdentity) is true.
type IdentityError struct {
	ClusterID string
	Backup    string
	Object    string
	// Recipients the backup was encrypted to (its manifest's).
	Recipients []string
	// Identities are the public keys of the identities given.
	Identities []string
}

func (e *IdentityError) Error() string {
	to := "recipients not recorded"
	if len(e.Recipients) > 0 {
		to = strings.Join(e.Recipients, ", ")
	}
	have := "no --identity-file given (" + seal.EnvIdentityFile + ")"
	if len(e.Identities) > 0 {
		have = "--identity-file holds " + strings.Join(e.Identities, ", ") + ", none of them"
	}
	return fmt.Sprintf("backup %s of cluster %s (%s) is age-encrypted to %s: %s: %v: pass the identity of one of these recipients",
		e.Backup, e.ClusterID, e.Object, to, have, seal.ErrNoIdentity)
}

// Is makes errors.Is(err, seal.ErrNoIdentity) true.
func (e *IdentityError) Is(target error) bool { return target == seal.ErrNoIdentity }

// checkIdentity checks, from the manifest alone, that ids can decrypt an
// encrypted backup: nothing is read from the store and nothing written.
// A plaintext backup needs no identity. The age header is checked again
// when the object streams (a manifest that lies is caught there).
func checkIdentity(layout catalog.Layout, m *catalog.Manifest, ids *seal.Identities) error {
	if m == nil || !m.Encryption.Encrypted() {
		return nil
	}
	want := m.Encryption.Recipients
	have := ids.Recipients()
	if ids.Len() > 0 {
		for _, p := range have {
			if slices.Contains(want, p) {
				return nil
			}
		}
	}
	return &IdentityError{ClusterID: m.ClusterID, Backup: m.Name, Object: layout.Key(m.ClusterID, m.Name, m.Snapshot.Object),
		Recipients: slices.Clone(want), Identities: have}
}

// tamperedError is the message of a refused encrypted object: the object
// named, and why retrying does not help.
func tamperedError(key string, err error) error {
	return fmt.Errorf("%s: encrypted object damaged/tampered: refusing it (age authentication failed; reading it again will not help): %w", key, err)
}

// localSnapshot is a plaintext snapshot file the caller already has (the
// drill after a backup: the plaintext the backup streamed), used instead
// of downloading the backup's object.
type localSnapshot struct {
	path     string
	manifest *catalog.Manifest
}

// verifyLocal checks a local plaintext snapshot (database plus etcd's
// sha256 trailer) against the manifest as fetchSnapshot checks a
// download: etcd's trailing hash, the raw sha256 and the raw size, and
// copies it into dst unless dst is nil (a drill verifies the plaintext
// copy it owns in place and stages it as it is). A mismatch is a
// verifyError; the file is not changed or removed here.
func verifyLocal(ctx context.Context, src localSnapshot, dst *os.File) (*fetchResult, error) {
	m := src.manifest
	f, err := os.Open(src.path)
	if err != nil {
		return nil, fmt.Errorf("plaintext snapshot of backup %s: %w", m.Name, err)
	}
	defer f.Close()
	raw := objectio.NewSnapshotHasher()
	buf := make([]byte, chunkSize)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n, rerr := f.Read(buf)
		if n > 0 {
			raw.Write(buf[:n])
			if dst != nil {
				if _, err := dst.Write(buf[:n]); err != nil {
					return nil, err
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, fmt.Errorf("plaintext snapshot %s: %w", src.path, rerr)
		}
	}
	got := raw.Result()
	res := &fetchResult{RawSize: got.RawSize}
	fail := func(name, detail string) (*fetchResult, error) {
		res.Checks = append(res.Checks, Check{Name: name, Status: CheckFailed, Detail: detail})
		return res, &verifyError{fmt.Errorf("plaintext snapshot %s of backup %s: %s: %s", src.path, m.Name, name, detail)}
	}
	res.Checks = append(res.Checks, Check{Name: CheckStoredSHA, Status: CheckSkipped, Detail: "local plaintext copy: the stored object is not read"})
	if name, detail := checkDatabase(res, got, m); name != "" {
		return fail(name, detail)
	}
	if raw.Size() != m.Snapshot.RawSize {
		return fail(CheckSizes, fmt.Sprintf("database %d bytes, the manifest says %d", raw.Size(), m.Snapshot.RawSize))
	}
	res.Checks = append(res.Checks, Check{Name: CheckSizes, Status: CheckPassed, Detail: fmt.Sprintf("database %d bytes", raw.Size())})
	return res, nil
}
