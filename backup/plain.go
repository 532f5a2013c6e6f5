package backup

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
)

// plainSnapshotName is the plaintext copy's file name in its scratch dir.
const plainSnapshotName = "snapshot.db"

// plainCopy is the plaintext of an encrypted backup's snapshot, kept for
// the drill that follows the backup (Options.KeepPlaintext), so that the
// backup job never needs an identity: the raw stream is tee'd, before
// compression, into a 0600 file of a 0700 seal.Scratch dir, checked
// against the manifest's raw sha256 once the backup is committed
// (Taken.Plaintext), and removed by Taken.Release and on every failed
// return of Take. A failure to write it is kept (err) and makes the drill
// not run; it never fails the backup.
//
// Every method is safe on a nil *plainCopy (no copy wanted).
type plainCopy struct {
	scratch *seal.Scratch
	f       *os.File
	err     error
}

func newPlainCopy(parent string) (*plainCopy, error) {
	sc, err := seal.NewScratch(parent)
	if err != nil {
		return nil, err
	}
	f, err := sc.Create(plainSnapshotName)
	if err != nil {
		sc.Remove()
		return nil, err
	}
	return &plainCopy{scratch: sc, f: f}, nil
}

// reset empties the copy before a (new) member's stream.
func (p *plainCopy) reset() {
	if p == nil || p.f == nil {
		return
	}
	p.err = nil
	if err := p.f.Truncate(0); err != nil {
		p.err = err
		return
	}
	if _, err := p.f.Seek(0, io.SeekStart); err != nil {
		p.err = err
	}
}

// write appends a chunk of the raw stream; the first error stops the copy.
func (p *plainCopy) write(b []byte) {
	if p == nil || p.f == nil || p.err != nil {
		return
	}
	if _, err := p.f.Write(b); err != nil {
		p.err = fmt.Errorf("writing the plaintext copy: %w", err)
	}
}

// verify closes the copy and checks it against the manifest (etcd's
// trailer, the database's size and sha256), reading it back from disk. It
// returns the file's path.
func (p *plainCopy) verify(m *catalog.Manifest) (string, error) {
	if p == nil {
		return "", errors.New("no plaintext copy was kept")
	}
	if p.err != nil {
		return "", p.err
	}
	path := p.f.Name()
	if err := p.f.Sync(); err != nil {
		return "", fmt.Errorf("writing the plaintext copy: %w", err)
	}
	if _, err := p.f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	h := objectio.NewSnapshotHasher()
	if _, err := io.Copy(h, p.f); err != nil {
		return "", fmt.Errorf("reading the plaintext copy back: %w", err)
	}
	if err := p.f.Close(); err != nil {
		return "", err
	}
	p.f = nil
	size, sum, err := h.Verify()
	switch {
	case err != nil:
		return "", fmt.Errorf("plaintext copy %s: %w", path, err)
	case size != m.Snapshot.RawSize || sum != m.Snapshot.RawSHA256:
		return "", fmt.Errorf("plaintext copy %s: %d bytes hashing to %s, the manifest says %d bytes, raw sha256 %s",
			path, size, sum, m.Snapshot.RawSize, m.Snapshot.RawSHA256)
	}
	return path, nil
}

// remove deletes the copy and its directory (idempotent).
func (p *plainCopy) remove() error {
	if p == nil || p.scratch == nil {
		return nil
	}
	if p.f != nil {
		p.f.Close()
		p.f = nil
	}
	return p.scratch.Remove()
}

func (p *plainCopy) dir() string {
	if p == nil || p.scratch == nil {
		return ""
	}
	return p.scratch.Dir()
}
