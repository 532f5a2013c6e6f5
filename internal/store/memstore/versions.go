package memstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sort"
	"strings"

	"github.com/armada/etcd-recovery/internal/store"
)

// LockConfig implements store.Locker.
func (s *Store) LockConfig(ctx context.Context) (store.LockInfo, error) {
	if err := ctx.Err(); err != nil {
		return store.LockInfo{}, fail("get lock config", "", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lock, nil
}

// version finds one version of key (versionID "": the latest), s.mu held.
func (s *Store) version(key, versionID string) *object {
	if versionID == "" {
		return s.latest(key)
	}
	for _, o := range s.objects[key] {
		if o.id == versionID {
			return o
		}
	}
	return nil
}

// SetRetention implements store.Locker: extending works, shortening or
// removing a retention that still holds is refused with store.ErrLocked,
// as is changing its mode from compliance.
func (s *Store) SetRetention(ctx context.Context, key, versionID string, r store.Retention) error {
	const op = "put retention"
	if err := ctx.Err(); err != nil {
		return fail(op, key, err)
	}
	if err := r.Check(); err != nil {
		return fail(op, key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.lock.Enabled {
		return fail(op, key, store.Permanent(errors.New("the bucket has no object lock")))
	}
	o := s.version(key, versionID)
	if o == nil || o.marker {
		return fail(op, key, store.ErrNotFound)
	}
	if o.ret.Locked(s.now()) && (r.Until.Before(o.ret.Until) || (o.ret.Mode == store.LockCompliance && r.Mode != store.LockCompliance)) {
		return fail(op, key, &store.LockedError{VersionID: o.id, Retention: o.ret})
	}
	o.ret = r
	return nil
}

// Retention implements store.Locker.
func (s *Store) Retention(ctx context.Context, key, versionID string) (store.Retention, error) {
	const op = "get retention"
	if err := ctx.Err(); err != nil {
		return store.Retention{}, fail(op, key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.version(key, versionID)
	if o == nil || o.marker {
		return store.Retention{}, fail(op, key, store.ErrNotFound)
	}
	return o.ret, nil
}

// Versioning implements store.Versioner.
func (s *Store) Versioning(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fail("get versioning", "", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versioned, nil
}

// ListVersions implements store.Versioner.
func (s *Store) ListVersions(ctx context.Context, prefix string) ([]store.Version, error) {
	if err := ctx.Err(); err != nil {
		return nil, fail("list versions", prefix, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.objects))
	for k := range s.objects {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := []store.Version{}
	for _, k := range keys {
		vs := s.objects[k]
		for i := len(vs) - 1; i >= 0; i-- {
			o := vs[i]
			out = append(out, store.Version{Key: k, VersionID: o.id, Size: int64(len(o.data)), LastModified: o.mod,
				IsLatest: i == len(vs)-1, DeleteMarker: o.marker})
		}
	}
	return out, nil
}

// GetVersion implements store.Versioner.
func (s *Store) GetVersion(ctx context.Context, key, versionID string) (io.ReadCloser, error) {
	const op = "get version"
	if err := ctx.Err(); err != nil {
		return nil, fail(op, key, err)
	}
	if versionID == "" {
		return nil, fail(op, key, store.Permanent(errors.New("no version id")))
	}
	s.mu.Lock()
	o := s.version(key, versionID)
	s.mu.Unlock()
	if o == nil || o.marker {
		return nil, fail(op, key, store.ErrNotFound)
	}
	return &body{ctx: ctx, key: key, op: op, r: bytes.NewReader(o.data)}, nil
}

// DeleteVersions implements store.Versioner: a version whose retention
// still holds is refused (governance: unless bypassed and DenyBypass is
// off), with a *store.LockedError.
func (s *Store) DeleteVersions(ctx context.Context, versions []store.VersionRef, opts store.DeleteOptions) error {
	const op = "delete version"
	if len(versions) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fail(op, versions[0].Key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	failed := map[string]error{}
	for _, v := range versions {
		vs := s.objects[v.Key]
		for i, o := range vs {
			if o.id != v.VersionID {
				continue
			}
			if o.ret.Locked(now) && (o.ret.Mode == store.LockCompliance || !opts.BypassGovernance || s.DenyBypass) {
				failed[v.Key] = fail(op, v.Key, &store.LockedError{VersionID: o.id, Retention: o.ret})
				break
			}
			vs = append(vs[:i:i], vs[i+1:]...)
			if len(vs) == 0 {
				delete(s.objects, v.Key)
			} else {
				s.objects[v.Key] = vs
			}
			break
		}
	}
	if len(failed) > 0 {
		return &store.DeleteError{Failed: failed}
	}
	return nil
}
