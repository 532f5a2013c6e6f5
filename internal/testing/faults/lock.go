package faults

import (
	"context"
	"io"

	"github.com/armada/etcd-recovery/internal/store"
)

var (
	_ store.Locker    = (*Store)(nil)
	_ store.Versioner = (*Store)(nil)
)

// LockConfig implements store.Locker (faults of OpLockConfig).
func (s *Store) LockConfig(ctx context.Context) (store.LockInfo, error) {
	var out store.LockInfo
	err := s.simple(ctx, OpLockConfig, "", func() (err error) {
		if l, ok := s.inner.(store.Locker); ok {
			out, err = l.LockConfig(ctx)
		}
		return err
	})
	return out, err
}

// PutWith implements store.Locker: a Put (faults of OpPut), with options.
func (s *Store) PutWith(ctx context.Context, key string, r io.Reader, opts store.PutOptions) (store.PutResult, error) {
	l, ok := s.inner.(store.Locker)
	if !ok {
		return store.PutWithoutLocker(ctx, s, s.inner, key, r, opts)
	}
	var version string
	n, err := s.put(ctx, key, r, func(ctx context.Context, r io.Reader) (int64, error) {
		res, err := l.PutWith(ctx, key, r, opts)
		version = res.VersionID
		return res.Size, err
	})
	return store.PutResult{Size: n, VersionID: version}, err
}

// SetRetention implements store.Locker (faults of OpPutRetention).
func (s *Store) SetRetention(ctx context.Context, key, versionID string, r store.Retention) error {
	return s.simple(ctx, OpPutRetention, key, func() error {
		if l, ok := s.inner.(store.Locker); ok {
			return l.SetRetention(ctx, key, versionID, r)
		}
		return store.Unsupported(s.inner, string(OpPutRetention), key)
	})
}

// Retention implements store.Locker (faults of OpGetRetention).
func (s *Store) Retention(ctx context.Context, key, versionID string) (store.Retention, error) {
	var out store.Retention
	err := s.simple(ctx, OpGetRetention, key, func() (err error) {
		if l, ok := s.inner.(store.Locker); ok {
			out, err = l.Retention(ctx, key, versionID)
		}
		return err
	})
	return out, err
}

// Versioning implements store.Versioner (faults of OpVersioning).
func (s *Store) Versioning(ctx context.Context) (bool, error) {
	var out bool
	err := s.simple(ctx, OpVersioning, "", func() (err error) {
		if v, ok := s.inner.(store.Versioner); ok {
			out, err = v.Versioning(ctx)
		}
		return err
	})
	return out, err
}

// ListVersions implements store.Versioner (faults of OpListVersions).
func (s *Store) ListVersions(ctx context.Context, prefix string) ([]store.Version, error) {
	var out []store.Version
	err := s.simple(ctx, OpListVersions, prefix, func() (err error) {
		if v, ok := s.inner.(store.Versioner); ok {
			out, err = v.ListVersions(ctx, prefix)
		} else {
			out, err = store.VersionsOfList(ctx, s.inner, prefix)
		}
		return err
	})
	return out, err
}

// GetVersion implements store.Versioner: faults of OpGetVersion apply, and
// so do those of OpGet (a version read is a read).
func (s *Store) GetVersion(ctx context.Context, key, versionID string) (io.ReadCloser, error) {
	f := s.take(OpGetVersion, key)
	if f == nil {
		f = s.take(OpGet, key)
	}
	return s.get(ctx, OpGetVersion, key, f, func() (io.ReadCloser, error) {
		if v, ok := s.inner.(store.Versioner); ok {
			return v.GetVersion(ctx, key, versionID)
		}
		return nil, store.Unsupported(s.inner, string(OpGetVersion), key)
	})
}

// DeleteVersions implements store.Versioner (faults of OpDeleteVersion,
// matched on the first version's key).
func (s *Store) DeleteVersions(ctx context.Context, versions []store.VersionRef, opts store.DeleteOptions) error {
	key := ""
	if len(versions) > 0 {
		key = versions[0].Key
	}
	return s.simple(ctx, OpDeleteVersion, key, func() error {
		if v, ok := s.inner.(store.Versioner); ok {
			return v.DeleteVersions(ctx, versions, opts)
		}
		if len(versions) == 0 {
			return nil
		}
		return store.Unsupported(s.inner, string(OpDeleteVersion), key)
	})
}
