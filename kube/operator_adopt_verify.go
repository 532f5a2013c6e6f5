package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/restore"
)

// VerifiedRevisionOnly is OperatorRestoreReport.Verification of an adopted
// restore whose staged snapshot was gone: the members, their count and the
// revision were checked, not the key count (nothing left to count).
const VerifiedRevisionOnly = "verified: revision only"

// adoptedRevision is the staged snapshot's revision from the EtcdRestore's
// annotation: missing or not a positive number is an error (the verification
// would have no minimum, and an empty cluster would pass).
func adoptedRevision(ann map[string]string, name string) (int64, error) {
	v, ok := ann[AnnotationRevision]
	if !ok {
		return 0, fmt.Errorf("etcdrestore %s has no annotation %s: the restored cluster cannot be verified against its snapshot", name, AnnotationRevision)
	}
	rev, err := strconv.ParseInt(v, 10, 64)
	if err != nil || rev < 1 {
		return 0, fmt.Errorf("etcdrestore %s: annotation %s %q is not a revision: the restored cluster cannot be verified against its snapshot", name, AnnotationRevision, v)
	}
	return rev, nil
}

// adoptedFacts reads the staged copy (rep.StagedKey) an earlier attempt
// left, when it is still there: its sha256 must be the EtcdRestore's
// AnnotationStagedSHA256 (what etcd-operator was given), and its facts
// (the key count, the revision) are what the restored cluster must hold,
// as a fresh restore checks. nil facts and no error: the copy is gone
// (that attempt, or prune, deleted it). The copy is read into a private
// directory under the scratch root (--temp-dir) and removed after.
func (o *OperatorRestoreOptions) adoptedFacts(ctx context.Context, rep *OperatorRestoreReport) (*restore.SnapshotFacts, error) {
	if rep.StagedKey == "" {
		return nil, nil
	}
	rc, err := o.Store.Get(ctx, rep.StagedKey)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the staged snapshot %s: %w", rep.StagedKey, err)
	}
	defer rc.Close()
	dir, err := PrivateDirIn(restore.ScratchRoot(o.TempDir), "etcd-recovery-adopt-")
	if err != nil {
		return nil, fmt.Errorf("scratch dir for the staged snapshot (--temp-dir / TMPDIR): %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "snapshot.db")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("reading the staged snapshot %s: %w", rep.StagedKey, err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	switch {
	case rep.StagedSHA256 == "":
		return nil, fmt.Errorf("the staged snapshot %s is there but the EtcdRestore has no annotation %s: what etcd-operator restored cannot be told",
			rep.StagedKey, AnnotationStagedSHA256)
	case got != rep.StagedSHA256:
		return nil, fmt.Errorf("the staged snapshot %s has sha256 %s, the EtcdRestore's annotation %s says %s: it is not what etcd-operator was given",
			rep.StagedKey, got, AnnotationStagedSHA256, rep.StagedSHA256)
	}
	facts, err := restore.ReadSnapshotFacts(path)
	if err != nil {
		return nil, fmt.Errorf("the staged snapshot %s: %w", rep.StagedKey, err)
	}
	return &facts, nil
}
