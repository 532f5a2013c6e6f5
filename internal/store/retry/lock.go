package retry

import (
	"context"
	"io"

	"github.com/armada/etcd-recovery/internal/store"
)

// The wrapper always has Locker and Versioner. On an inner store without
// them: LockConfig is LockInfo{} (no lock), Retention is Retention{},
// Versioning is false, ListVersions lists the objects as version "null"
// (store.VersionsOfList), PutWith without a retention is Put or
// PutIfAbsent, and the rest fail with store.ErrUnsupported.
var (
	_ store.Locker    = (*Store)(nil)
	_ store.Versioner = (*Store)(nil)
)

// LockConfig implements store.Locker (repeated).
func (s *Store) LockConfig(ctx context.Context) (store.LockInfo, error) {
	l, ok := s.inner.(store.Locker)
	if !ok {
		return store.LockInfo{}, nil
	}
	var out store.LockInfo
	err := s.do(ctx, func() (err error) {
		out, err = l.LockConfig(ctx)
		return err
	})
	return out, err
}

// PutWith implements store.Locker: repeated as Put is (a seekable body,
// and never when IfAbsent).
func (s *Store) PutWith(ctx context.Context, key string, r io.Reader, opts store.PutOptions) (store.PutResult, error) {
	l, ok := s.inner.(store.Locker)
	if !ok {
		return store.PutWithoutLocker(ctx, s, s.inner, key, r, opts)
	}
	if opts.IfAbsent {
		return l.PutWith(ctx, key, r, opts)
	}
	return putRepeated(ctx, s, r, func() (store.PutResult, error) { return l.PutWith(ctx, key, r, opts) })
}

// SetRetention implements store.Locker (repeated: setting it twice is
// setting it once).
func (s *Store) SetRetention(ctx context.Context, key, versionID string, r store.Retention) error {
	l, ok := s.inner.(store.Locker)
	if !ok {
		return store.Unsupported(s.inner, "put retention", key)
	}
	return s.do(ctx, func() error { return l.SetRetention(ctx, key, versionID, r) })
}

// Retention implements store.Locker (repeated).
func (s *Store) Retention(ctx context.Context, key, versionID string) (store.Retention, error) {
	l, ok := s.inner.(store.Locker)
	if !ok {
		return store.Retention{}, nil
	}
	var out store.Retention
	err := s.do(ctx, func() (err error) {
		out, err = l.Retention(ctx, key, versionID)
		return err
	})
	return out, err
}

// Versioning implements store.Versioner (repeated).
func (s *Store) Versioning(ctx context.Context) (bool, error) {
	v, ok := s.inner.(store.Versioner)
	if !ok {
		return false, nil
	}
	var out bool
	err := s.do(ctx, func() (err error) {
		out, err = v.Versioning(ctx)
		return err
	})
	return out, err
}

// ListVersions implements store.Versioner (repeated).
func (s *Store) ListVersions(ctx context.Context, prefix string) ([]store.Version, error) {
	v, ok := s.inner.(store.Versioner)
	if !ok {
		return store.VersionsOfList(ctx, s, prefix)
	}
	var out []store.Version
	err := s.do(ctx, func() (err error) {
		out, err = v.ListVersions(ctx, prefix)
		return err
	})
	return out, err
}

// GetVersion implements store.Versioner: opening the version is repeated.
func (s *Store) GetVersion(ctx context.Context, key, versionID string) (io.ReadCloser, error) {
	v, ok := s.inner.(store.Versioner)
	if !ok {
		return nil, store.Unsupported(s.inner, "get version", key)
	}
	var rc io.ReadCloser
	err := s.do(ctx, func() (err error) {
		rc, err = v.GetVersion(ctx, key, versionID)
		return err
	})
	return rc, err
}

// DeleteVersions implements store.Versioner (repeated: deleting is
// idempotent).
func (s *Store) DeleteVersions(ctx context.Context, versions []store.VersionRef, opts store.DeleteOptions) error {
	v, ok := s.inner.(store.Versioner)
	if !ok {
		if len(versions) == 0 {
			return nil
		}
		return store.Unsupported(s.inner, "delete version", versions[0].Key)
	}
	return s.do(ctx, func() error { return v.DeleteVersions(ctx, versions, opts) })
}
