package retry_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/store/retry"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/storetest"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

var fast = retry.Policy{MaxRetries: 3, MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}

// The wrapper is itself a conforming store.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(testing.TB) store.Store { return retry.Wrap(memstore.New(), fast) })
}

func TestRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := faults.Wrap(memstore.New())
	st := retry.Wrap(f, fast)
	if _, err := st.Put(ctx, "k", strings.NewReader("v")); err != nil {
		t.Fatal(err)
	}

	// Transient errors are repeated until they stop.
	f.Inject(faults.Fault{Op: faults.OpList, Kind: faults.ServerError, Times: 2})
	if objs, err := st.List(ctx, ""); err != nil || len(objs) != 1 {
		t.Fatalf("List after two 503s: %v, %v", objs, err)
	}
	if n := f.CountCalls(faults.OpList, ""); n != 3 {
		t.Errorf("List calls: %d, want 3", n)
	}

	// A seekable Put body is rewound and sent again after a reset mid-body.
	f.Inject(faults.Fault{Op: faults.OpPut, Key: "seekable", Kind: faults.Reset, After: 3, Times: 1})
	if _, err := st.Put(ctx, "seekable", bytes.NewReader([]byte("0123456789"))); err != nil {
		t.Fatalf("Put with a seekable body after a reset: %v", err)
	}
	if b := read(t, st, "seekable"); b != "0123456789" {
		t.Errorf("seek: %q", b)
	}

	// A stream cannot be sent twice.
	f.Inject(faults.Fault{Op: faults.OpPut, Key: "stream", Kind: faults.Reset, Times: 1})
	if _, err := st.Put(ctx, "stream", io.MultiReader(strings.NewReader("x"))); !store.IsTransient(err) {
		t.Fatalf("Put of a stream after a reset: %v; want the reset", err)
	}
	if n := f.CountCalls(faults.OpPut, "stream"); n != 1 {
		t.Errorf("stream Put calls: %d, want 1", n)
	}

	// Permanent errors are not repeated.
	f.Inject(faults.Fault{Op: faults.OpGet, Key: "k", Kind: faults.NotFound, Times: 1})
	if _, err := st.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get: %v; want ErrNotFound", err)
	}
	if n := f.CountCalls(faults.OpGet, "k"); n != 1 {
		t.Errorf("Get calls after a 404: %d, want 1", n)
	}

	// The retries run out.
	f.Inject(faults.Fault{Op: faults.OpDelete, Kind: faults.ServerError})
	if err := st.Delete(ctx, []string{"k"}); !store.IsTransient(err) || !strings.Contains(err.Error(), "delete k") {
		t.Fatalf("Delete: %v", err)
	}
	if n := f.CountCalls(faults.OpDelete, ""); n != 1+fast.MaxRetries {
		t.Errorf("Delete calls: %d, want %d", n, 1+fast.MaxRetries)
	}
	f.Clear()

	// A cancelled context stops the retries.
	f.Inject(faults.Fault{Op: faults.OpList, Kind: faults.Stall})
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancel)
	slow := retry.Wrap(f, retry.Policy{MaxRetries: 100, MinBackoff: time.Hour})
	start := time.Now()
	if _, err := slow.List(cctx, ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("List cancelled: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancelled List took %v", d)
	}
}

func read(t *testing.T, st store.Store, key string) string {
	t.Helper()
	return string(testfix.ReadObject(t, st, key))
}

// Locker and Versioner pass through: the suite's lock and version cases on
// a locked in-memory bucket; around a store without them, no lock, no
// versioning, the objects listed as version "null", and ErrUnsupported.
func TestConformanceLocked(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(testing.TB) store.Store { return retry.Wrap(memstore.NewLocked(store.LockInfo{}), fast) },
		storetest.LockExpiry(300*time.Millisecond))
}

// plainStore hides every capability of the store it holds.
type plainStore struct{ store.Store }

func TestLockWithoutInner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := retry.Wrap(plainStore{memstore.New()}, fast)
	if info, err := st.LockConfig(ctx); err != nil || info.Enabled {
		t.Errorf("LockConfig: %+v, %v", info, err)
	}
	if on, err := st.Versioning(ctx); err != nil || on {
		t.Errorf("Versioning: %v, %v", on, err)
	}
	if _, err := st.PutWith(ctx, "a/k", strings.NewReader("x"), store.PutOptions{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
	if vs, err := st.ListVersions(ctx, "a/"); err != nil || len(vs) != 1 || vs[0].VersionID != "null" || !vs[0].IsLatest {
		t.Errorf("ListVersions: %+v, %v", vs, err)
	}
	_, err := st.PutWith(ctx, "a/k2", strings.NewReader("x"), store.PutOptions{Retention: &store.Retention{Mode: store.LockGovernance, Until: time.Now().Add(time.Hour)}})
	if !errors.Is(err, store.ErrUnsupported) || store.IsTransient(err) || !strings.Contains(err.Error(), "put a/k2") {
		t.Errorf("PutWith a retention: %v; want a permanent ErrUnsupported naming put a/k2", err)
	}
	if _, err := st.GetVersion(ctx, "a/k", "null"); !errors.Is(err, store.ErrUnsupported) {
		t.Errorf("GetVersion: %v", err)
	}
}
