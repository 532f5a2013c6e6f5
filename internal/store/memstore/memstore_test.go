package memstore_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(testing.TB) store.Store { return memstore.New() }, storetest.BigSize(12<<20))
}

// One store shared by every subtest: the prefixes keep them apart.
func TestConformanceShared(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	storetest.Run(t, func(testing.TB) store.Store { return st })
}

// A Put in progress is an upload; aborting it fails the Put and stores
// nothing. AddUpload leaves one behind.
func TestUploads(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	ctx := context.Background()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := st.Put(ctx, "a/k", pr)
		done <- err
	}()
	if _, err := pw.Write([]byte("some")); err != nil {
		t.Fatal(err)
	}
	ups, err := st.ListUploads(ctx, "a/")
	if err != nil || len(ups) != 1 || ups[0].Key != "a/k" {
		t.Fatalf("uploads during a Put: %+v, %v", ups, err)
	}
	if err := st.AbortUpload(ctx, ups[0]); err != nil {
		t.Fatal(err)
	}
	go pw.Write([]byte("more")) //nolint:errcheck // unblocks the Put's read
	if err := <-done; err == nil || !strings.Contains(err.Error(), "memstore: put a/k: upload aborted") {
		t.Fatalf("aborted Put: %v", err)
	}
	pw.Close()
	if objs, _ := st.List(ctx, ""); len(objs) != 0 {
		t.Fatalf("aborted Put stored %+v", objs)
	}
	u := st.AddUpload("b/k", time.Unix(1, 0))
	if ups, _ := st.ListUploadsForKey(ctx, "b/k"); len(ups) != 1 || ups[0] != u {
		t.Fatalf("ListUploadsForKey: %+v, want %+v", ups, u)
	}
	if _, err := st.Get(ctx, "b/k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get: %v", err)
	}
}

// The suite on a versioned bucket and on a locked one (its lock cases
// wait out a short retention in real time, as on a real server).
func TestConformanceVersioned(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(testing.TB) store.Store { return memstore.NewVersioned() }, storetest.BigSize(12<<20))
}

func TestConformanceLocked(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(testing.TB) store.Store { return memstore.NewLocked(store.LockInfo{}) }, storetest.BigSize(12<<20),
		storetest.LockExpiry(500*time.Millisecond))
}

func TestConformanceLockedNoBypass(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(testing.TB) store.Store {
		st := memstore.NewLocked(store.LockInfo{})
		st.DenyBypass = true
		return st
	}, storetest.NoBypass(), storetest.LockExpiry(500*time.Millisecond))
}

// Retention on the store's clock: compliance is never bypassed, a default
// retention applies to writes without one, and moving the clock past the
// retain-until time frees the version.
func TestLockClock(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := memstore.NewLocked(store.LockInfo{DefaultMode: store.LockCompliance, DefaultPeriod: 24 * time.Hour})
	st.Now = func() time.Time { return now }
	ctx := context.Background()
	res, err := st.PutWith(ctx, "a/k", strings.NewReader("x"), store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.Retention(ctx, "a/k", res.VersionID)
	if err != nil || r != (store.Retention{Mode: store.LockCompliance, Until: now.Add(24 * time.Hour)}) {
		t.Fatalf("default retention: %+v, %v", r, err)
	}
	refs := []store.VersionRef{{Key: "a/k", VersionID: res.VersionID}}
	err = st.DeleteVersions(ctx, refs, store.DeleteOptions{BypassGovernance: true})
	if u, ok := store.LockedUntil(err); !store.IsLocked(err) || !ok || !u.Equal(now.Add(24*time.Hour)) {
		t.Fatalf("bypassing compliance: %v; want locked until %v", err, now.Add(24*time.Hour))
	}
	if want := "memstore: delete version a/k: object is locked (COMPLIANCE retention until 2026-01-02T00:00:00Z) [version v000001]"; err.Error() != want {
		t.Errorf("error text %q, want %q", err, want)
	}
	if err := st.SetRetention(ctx, "a/k", res.VersionID, store.Retention{Mode: store.LockGovernance, Until: now.Add(48 * time.Hour)}); !store.IsLocked(err) {
		t.Errorf("compliance to governance: %v; want store.ErrLocked", err)
	}
	now = now.Add(24*time.Hour + time.Second)
	if err := st.DeleteVersions(ctx, refs, store.DeleteOptions{}); err != nil {
		t.Fatalf("after the retention: %v", err)
	}
	if _, err := st.PutWith(ctx, "a/k", strings.NewReader("x"), store.PutOptions{Retention: &store.Retention{Mode: "forever", Until: now}}); err == nil || store.IsTransient(err) {
		t.Errorf("a bad mode: %v", err)
	}
	if _, err := memstore.New().PutWith(ctx, "a/k", strings.NewReader("x"), store.PutOptions{Retention: &store.Retention{Mode: store.LockGovernance, Until: now}}); err == nil {
		t.Errorf("a retention on a bucket without lock: no error")
	}
}
