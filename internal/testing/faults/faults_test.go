package faults_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/storetest"
)

// With no fault injected, the wrapper is a conforming store.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(testing.TB) store.Store { return faults.Wrap(memstore.New()) })
}

// plainStore hides every capability of the store it holds.
type plainStore struct{ store.Store }

// A GetRange takes OpGet faults too (a ranged read is a read), and
// records itself as OpGetRange; around a store without store.Ranger it is
// the inner Get cut to the range (store.RangeOfGet), with GetRange's
// contract: short at the end, empty past it, ErrNotFound named "get range".
func TestGetRangeTakesGetFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, inner := range []store.Store{memstore.New(), plainStore{memstore.New()}} {
		f := faults.Wrap(inner)
		if _, err := f.Put(ctx, "a/obj", strings.NewReader("0123456789")); err != nil {
			t.Fatal(err)
		}
		f.Inject(faults.Fault{Op: faults.OpGet, Key: "a/obj", Kind: faults.ServerError, Times: 1})
		_, err := f.GetRange(ctx, "a/obj", 2, 3)
		if !store.IsTransient(err) || !strings.Contains(err.Error(), "get range a/obj") {
			t.Errorf("GetRange with an OpGet 503 injected: %v; want a transient store error naming get range a/obj", err)
		}
		rc, err := f.GetRange(ctx, "a/obj", 2, 3)
		if err != nil {
			t.Fatalf("GetRange after the fault was spent: %v", err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "234" {
			t.Errorf("GetRange(2, 3) = %q, want \"234\"", b)
		}
		if n := f.CountCalls(faults.OpGetRange, "a/obj"); n != 2 {
			t.Errorf("%d OpGetRange calls recorded, want 2", n)
		}
		for off, want := range map[int64]string{8: "89", 10: "", 99: ""} {
			rc, err := f.GetRange(ctx, "a/obj", off, 3)
			if err != nil {
				t.Fatalf("GetRange(%d, 3): %v", off, err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if string(b) != want {
				t.Errorf("GetRange(%d, 3) = %q, want %q", off, b, want)
			}
		}
		_, err = f.GetRange(ctx, "a/missing", 0, 3)
		var se *store.Error
		if !errors.Is(err, store.ErrNotFound) || !errors.As(err, &se) || se.Op != "get range" {
			t.Errorf("GetRange of a missing key: %v; want a store error \"get range\" wrapping ErrNotFound", err)
		}
	}
}

// Injected errors follow the contract and name the inner backend.
func TestInjectedErrorsFollowTheContract(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := faults.Wrap(memstore.New())
	f.Inject(faults.Fault{Op: faults.OpGet, Key: "a", Kind: faults.NotFound, Times: 1})
	f.Inject(faults.Fault{Op: faults.OpList, Kind: faults.ServerError, Times: 1})
	f.Inject(faults.Fault{Op: faults.OpPut, Key: "b", Kind: faults.Reset, Times: 1})
	_, err := f.Get(ctx, "a")
	if !errors.Is(err, store.ErrNotFound) || !strings.HasPrefix(err.Error(), "memstore: get a: NoSuchKey") || store.IsTransient(err) {
		t.Errorf("NotFound: %v", err)
	}
	_, err = f.List(ctx, "p/")
	if !store.IsStoreError(err) || !store.IsTransient(err) || !strings.HasPrefix(err.Error(), "memstore: list p/: ") {
		t.Errorf("ServerError: %v", err)
	}
	_, err = f.Put(ctx, "b", strings.NewReader("x"))
	if !store.IsStoreError(err) || !store.IsTransient(err) {
		t.Errorf("Reset: %v", err)
	}
}

// Locker and Versioner pass through, and their calls take faults.
func TestLockAndVersions(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(testing.TB) store.Store { return faults.Wrap(memstore.NewLocked(store.LockInfo{})) },
		storetest.LockExpiry(300*time.Millisecond))
	ctx := context.Background()
	f := faults.Wrap(memstore.NewLocked(store.LockInfo{}))
	res, err := f.PutWith(ctx, "a/k", strings.NewReader("x"), store.PutOptions{})
	if err != nil || res.VersionID == "" {
		t.Fatalf("PutWith: %+v, %v", res, err)
	}
	f.Inject(faults.Fault{Op: faults.OpGet, Key: "a/k", Kind: faults.ServerError, Times: 1})
	f.Inject(faults.Fault{Op: faults.OpListVersions, Kind: faults.Reset, Times: 1})
	if _, err := f.GetVersion(ctx, "a/k", res.VersionID); !store.IsTransient(err) || !strings.Contains(err.Error(), "get version a/k") {
		t.Errorf("GetVersion with an OpGet 503: %v", err)
	}
	if _, err := f.ListVersions(ctx, "a/"); !store.IsTransient(err) {
		t.Errorf("ListVersions with a reset: %v", err)
	}
	if vs, err := f.ListVersions(ctx, "a/"); err != nil || len(vs) != 1 {
		t.Errorf("ListVersions after the fault: %+v, %v", vs, err)
	}
}
