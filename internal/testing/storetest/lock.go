package storetest

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
)

// locker returns st's Locker; Run runs the lock cases only on a bucket
// with object lock.
func locker(t *testing.T, st store.Store) store.Locker {
	t.Helper()
	l, ok := st.(store.Locker)
	if !ok {
		t.Fatal("no store.Locker")
	}
	info, err := l.LockConfig(ctxT(t))
	if err != nil {
		t.Fatalf("LockConfig: %v", err)
	}
	if !info.Enabled {
		t.Fatal("the bucket has no object lock")
	}
	if v, ok := st.(store.Versioner); ok {
		if on, err := v.Versioning(ctxT(t)); err != nil || !on {
			t.Errorf("a bucket with object lock: Versioning() = %v, %v; want true", on, err)
		}
	}
	return l
}

// versioner returns st's Versioner; Run runs the version cases only on
// a bucket that keeps versions.
func versioner(t *testing.T, st store.Store) store.Versioner {
	t.Helper()
	v, ok := st.(store.Versioner)
	if !ok {
		t.Fatal("no store.Versioner")
	}
	on, err := v.Versioning(ctxT(t))
	if err != nil {
		t.Fatalf("Versioning: %v", err)
	}
	if !on {
		t.Fatal("the bucket keeps no versions")
	}
	return v
}

// readVersion reads one version of key whole.
func readVersion(t *testing.T, v store.Versioner, key, versionID string) ([]byte, error) {
	t.Helper()
	rc, err := v.GetVersion(ctxT(t), key, versionID)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// sameTime: a store may keep a retain-until time to the second.
func sameTime(a, b time.Time) bool {
	d := a.Sub(b)
	return d > -time.Second && d < time.Second
}

// lockRefusesDelete: a version put with governance retention reads back
// its retention; removing it is refused with a permanent ErrLocked error
// that names the retain-until time; a plain Delete only hides it behind a
// delete marker (it stays readable by version); the retention can be
// extended but not shortened; a governance bypass removes it (or, for a
// credential without that right, is refused too).
func (s *suite) lockRefusesDelete(t *testing.T, st store.Store, p string) {
	l := locker(t, st)
	v := versioner(t, st)
	key := p + "locked"
	until := time.Now().Add(time.Hour).Truncate(time.Second)
	want := data(1000, 3)
	res, err := l.PutWith(ctxT(t), key, bytes.NewReader(want), store.PutOptions{Retention: &store.Retention{Mode: store.LockGovernance, Until: until}})
	if err != nil {
		t.Fatalf("PutWith a governance retention: %v", err)
	}
	if res.Size != int64(len(want)) || res.VersionID == "" {
		t.Fatalf("PutWith: %+v; want %d bytes and a version id", res, len(want))
	}
	for _, id := range []string{res.VersionID, ""} {
		r, err := l.Retention(ctxT(t), key, id)
		if err != nil || r.Mode != store.LockGovernance || !sameTime(r.Until, until) {
			t.Errorf("Retention(%q): %+v, %v; want GOVERNANCE until %v", id, r, err, until)
		}
	}
	refs := []store.VersionRef{{Key: key, VersionID: res.VersionID}}
	err = v.DeleteVersions(ctxT(t), refs, store.DeleteOptions{})
	if !store.IsLocked(err) {
		t.Fatalf("DeleteVersions of a locked version: %v; want an error matching store.ErrLocked", err)
	}
	var de *store.DeleteError
	if !errors.As(err, &de) || de.Failed[key] == nil {
		t.Errorf("DeleteVersions of a locked version: %v; want a *store.DeleteError for %s", err, key)
	} else {
		names(t, de.Failed[key], "delete version", key)
	}
	if store.IsTransient(err) {
		t.Errorf("IsTransient(%v) = true for a lock", err)
	}
	if u, ok := store.LockedUntil(err); !ok || !sameTime(u, until) {
		t.Errorf("LockedUntil(%v) = %v, %v; want %v", err, u, ok, until)
	}
	if !strings.Contains(err.Error(), "locked") {
		t.Errorf("a lock's error %q does not say locked", err)
	}
	// Object lock protects versions, not keys.
	if err := st.Delete(ctxT(t), []string{key}); err != nil {
		t.Fatalf("Delete of a locked key (a delete marker): %v", err)
	}
	if _, err := st.Get(ctxT(t), key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get behind a delete marker: %v; want store.ErrNotFound", err)
	}
	if got, err := readVersion(t, v, key, res.VersionID); err != nil || !bytes.Equal(got, want) {
		t.Errorf("GetVersion of the locked version behind a delete marker: %d bytes, %v", len(got), err)
	}
	// Shortening is refused; extending works.
	err = l.SetRetention(ctxT(t), key, res.VersionID, store.Retention{Mode: store.LockGovernance, Until: until.Add(-30 * time.Minute)})
	if !store.IsLocked(err) || store.IsTransient(err) {
		t.Errorf("SetRetention shortening a lock: %v; want a permanent store.ErrLocked", err)
	} else {
		names(t, err, "put retention", key)
	}
	longer := until.Add(time.Hour)
	if err := l.SetRetention(ctxT(t), key, res.VersionID, store.Retention{Mode: store.LockGovernance, Until: longer}); err != nil {
		t.Errorf("SetRetention extending a lock: %v", err)
	} else if r, err := l.Retention(ctxT(t), key, res.VersionID); err != nil || !sameTime(r.Until, longer) {
		t.Errorf("after extending: %+v, %v; want until %v", r, err, longer)
	}
	err = v.DeleteVersions(ctxT(t), refs, store.DeleteOptions{BypassGovernance: true})
	if s.cfg.noBypass {
		if !store.IsLocked(err) {
			t.Errorf("DeleteVersions with a bypass, by a credential without the right: %v; want store.ErrLocked", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("DeleteVersions with a governance bypass: %v", err)
	}
	if _, err := readVersion(t, v, key, res.VersionID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetVersion of a removed version: %v; want store.ErrNotFound", err)
	}
}

// lockExpires: a short governance retention refuses a delete, then, once
// it has passed (waited out: a real server's clock cannot be moved), the
// version is removed without any bypass.
func (s *suite) lockExpires(t *testing.T, st store.Store, p string) {
	l := locker(t, st)
	v := versioner(t, st)
	key := p + "short"
	until := time.Now().Add(s.cfg.expiry)
	res, err := l.PutWith(ctxT(t), key, strings.NewReader("short-lived"), store.PutOptions{Retention: &store.Retention{Mode: store.LockGovernance, Until: until}})
	if err != nil {
		t.Fatalf("PutWith a short retention: %v", err)
	}
	refs := []store.VersionRef{{Key: key, VersionID: res.VersionID}}
	if err := v.DeleteVersions(ctxT(t), refs, store.DeleteOptions{}); !store.IsLocked(err) {
		t.Fatalf("DeleteVersions before the retention passed: %v; want store.ErrLocked", err)
	}
	r, err := l.Retention(ctxT(t), key, res.VersionID)
	if err != nil {
		t.Fatalf("Retention: %v", err)
	}
	time.Sleep(time.Until(r.Until) + time.Second)
	if err := v.DeleteVersions(ctxT(t), refs, store.DeleteOptions{}); err != nil {
		t.Fatalf("DeleteVersions after the retention passed: %v", err)
	}
	if got := keysOf(list(t, st, key)); len(got) != 0 {
		t.Errorf("after removing the expired version: %q", got)
	}
}

// lockMultipart: an object large enough for the backend's multipart upload
// is written to a locked bucket with a retention (every part carries its
// checksum) and reads back.
func (s *suite) lockMultipart(t *testing.T, st store.Store, p string) {
	l := locker(t, st)
	key := p + "big"
	want := data(s.cfg.bigSize, 9)
	// Nothing here waits the retention out, and a multipart upload on a
	// loaded machine (the race lane) can outlast a short expiry: a server
	// refuses a retain-until date already past when the upload completes.
	until := time.Now().Add(s.cfg.expiry + 10*time.Minute)
	res, err := l.PutWith(ctxT(t), key, io.MultiReader(bytes.NewReader(want)), store.PutOptions{IfAbsent: true, Retention: &store.Retention{Mode: store.LockGovernance, Until: until}})
	if err != nil || res.Size != s.cfg.bigSize {
		t.Fatalf("big PutWith a retention to a locked bucket: %+v, %v", res, err)
	}
	if got := get(t, st, key); !bytes.Equal(got, want) {
		t.Errorf("Get of the big locked object: %d bytes, not the %d put", len(got), len(want))
	}
	if r, err := l.Retention(ctxT(t), key, res.VersionID); err != nil || r.Mode != store.LockGovernance {
		t.Errorf("Retention of the big object: %+v, %v", r, err)
	}
}

// versions: an overwrite adds a version (the old one still readable), a
// Delete adds a delete marker (the key is missing; its versions stay), a
// delete marker reads as missing by version too, and removing the marker
// brings the key back.
func (s *suite) versions(t *testing.T, st store.Store, p string) {
	v := versioner(t, st)
	key := p + "k"
	put(t, st, key, []byte("one"))
	put(t, st, key, []byte("two, longer"))
	vs, err := v.ListVersions(ctxT(t), key)
	if err != nil {
		t.Fatalf("ListVersions: %v", err)
	}
	if len(vs) != 2 || !vs[0].IsLatest || vs[1].IsLatest || vs[0].Size != 11 || vs[1].Size != 3 ||
		vs[0].DeleteMarker || vs[1].DeleteMarker || vs[0].VersionID == vs[1].VersionID || vs[0].Key != key || vs[0].LastModified.IsZero() {
		t.Fatalf("ListVersions after an overwrite: %+v; want two versions of %s, the latest (11 bytes) first", vs, key)
	}
	older, newer := vs[1].VersionID, vs[0].VersionID
	if got, err := readVersion(t, v, key, older); err != nil || string(got) != "one" {
		t.Errorf("GetVersion of the overwritten version: %q, %v", got, err)
	}
	if got := string(get(t, st, key)); got != "two, longer" {
		t.Errorf("Get after an overwrite: %q", got)
	}
	if err := st.Delete(ctxT(t), []string{key}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	vs, err = v.ListVersions(ctxT(t), key)
	if err != nil {
		t.Fatalf("ListVersions: %v", err)
	}
	if len(vs) != 3 || !vs[0].DeleteMarker || !vs[0].IsLatest || vs[1].VersionID != newer || vs[2].VersionID != older || vs[1].IsLatest {
		t.Fatalf("ListVersions after Delete: %+v; want a delete marker (latest) over the two versions", vs)
	}
	marker := vs[0].VersionID
	if got := keysOf(list(t, st, key)); len(got) != 0 {
		t.Errorf("List after Delete: %q; want nothing", got)
	}
	if got, err := readVersion(t, v, key, newer); err != nil || string(got) != "two, longer" {
		t.Errorf("GetVersion behind a delete marker: %q, %v", got, err)
	}
	_, err = readVersion(t, v, key, marker)
	if !errors.Is(err, store.ErrNotFound) || store.IsTransient(err) {
		t.Errorf("GetVersion of a delete marker: %v; want store.ErrNotFound", err)
	} else {
		names(t, err, "get version", key)
	}
	// Removing the marker brings the key back (an undelete).
	if err := v.DeleteVersions(ctxT(t), []store.VersionRef{{Key: key, VersionID: marker}}, store.DeleteOptions{}); err != nil {
		t.Fatalf("DeleteVersions of the delete marker: %v", err)
	}
	if got := string(get(t, st, key)); got != "two, longer" {
		t.Errorf("Get after removing the delete marker: %q", got)
	}
	// Removing a version for good; removing it again is not an error.
	gone := []store.VersionRef{{Key: key, VersionID: older}}
	for i := range 2 {
		if err := v.DeleteVersions(ctxT(t), gone, store.DeleteOptions{}); err != nil {
			t.Fatalf("DeleteVersions (%d): %v", i, err)
		}
	}
	if _, err := readVersion(t, v, key, older); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetVersion of a removed version: %v; want store.ErrNotFound", err)
	}
	if vs, err := v.ListVersions(ctxT(t), p+"nothing/"); err != nil || len(vs) != 0 {
		t.Errorf("ListVersions of an empty prefix: %+v, %v", vs, err)
	}
}

// versionsCreateOnly: on a versioned bucket a create-only write refuses a
// key whose latest version is an object, and writes a new version over a
// delete marker (the key reads as missing), the older versions staying.
func (s *suite) versionsCreateOnly(t *testing.T, st store.Store, p string) {
	v := versioner(t, st)
	cs, ok := st.(store.Conditional)
	if !ok {
		t.Skip("no store.Conditional")
	}
	key := p + "k"
	if _, err := cs.PutIfAbsent(ctxT(t), key, strings.NewReader("first")); err != nil {
		t.Fatalf("PutIfAbsent on a free key: %v", err)
	}
	if _, err := cs.PutIfAbsent(ctxT(t), key, strings.NewReader("second")); !errors.Is(err, store.ErrExists) {
		t.Fatalf("PutIfAbsent on a live key: %v; want store.ErrExists", err)
	}
	if err := st.Delete(ctxT(t), []string{key}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.PutIfAbsent(ctxT(t), key, strings.NewReader("after the marker")); err != nil {
		t.Fatalf("PutIfAbsent over a delete marker: %v; want a new version", err)
	}
	if got := string(get(t, st, key)); got != "after the marker" {
		t.Errorf("Get: %q", got)
	}
	vs, err := v.ListVersions(ctxT(t), key)
	if err != nil || len(vs) != 3 || vs[0].DeleteMarker || !vs[1].DeleteMarker || vs[2].Size != 5 {
		t.Errorf("ListVersions: %+v, %v; want the new version, the marker, the first version", vs, err)
	}
	if _, err := cs.PutIfAbsent(ctxT(t), key, strings.NewReader("third")); !errors.Is(err, store.ErrExists) {
		t.Errorf("PutIfAbsent on the live key again: %v; want store.ErrExists", err)
	}
}
