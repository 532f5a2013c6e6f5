package cos_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// Each fault of internal/testing/faults does what its package comment
// says around this backend, on a real MinIO.
func TestFaultStore(t *testing.T) {
	t.Parallel()
	mi := testenv.SharedMinIO(t)
	inner := testfix.Store(t, mi, mi.NewBucket(t))
	p := testenv.Prefix(t) + "/"
	ctx := context.Background()
	body := func() io.Reader { return strings.NewReader(strings.Repeat("x", 3<<20)) }

	s := faults.Wrap(inner)
	s.Inject(faults.Fault{Op: faults.OpPut, KeySuffix: "stall", Kind: faults.Stall, After: 1 << 20, Delay: 200 * time.Millisecond, Times: 1})
	s.Inject(faults.Fault{Op: faults.OpPut, KeySuffix: "reset", Kind: faults.Reset, Times: 1})
	s.Inject(faults.Fault{Op: faults.OpPut, KeySuffix: "vanish", Kind: faults.Vanish})
	s.Inject(faults.Fault{Op: faults.OpGet, KeySuffix: "ok", Kind: faults.NotFound, Times: 1})
	s.Inject(faults.Fault{Op: faults.OpList, Kind: faults.ServerError, Times: 1})

	if _, err := s.Put(ctx, p+"stall", body()); !errors.Is(err, store.ErrStalled) {
		t.Errorf("stall: %v", err)
	}
	if _, err := s.PutIfAbsent(ctx, p+"reset", body()); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("reset: %v", err)
	}
	if _, err := s.Put(ctx, p+"vanish", body()); err != nil {
		t.Errorf("vanish: %v", err)
	}
	if _, err := s.Put(ctx, p+"ok", body()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, p+"ok"); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "NoSuchKey") {
		t.Errorf("404: %v", err)
	}
	if _, err := s.List(ctx, p); err == nil || !strings.Contains(err.Error(), "HTTP 503") {
		t.Errorf("5xx: %v", err)
	}
	// Every fault has fired its times: the store is itself again, and the
	// failed Puts left nothing (the real store aborted their uploads).
	objs, err := s.List(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Key != p+"ok" {
		t.Errorf("objects: %+v, want only %sok", objs, p)
	}
	if ups, err := inner.ListUploads(ctx, p); err != nil || len(ups) != 0 {
		t.Errorf("uploads left: %+v %v", ups, err)
	}
	if n := s.CountCalls(faults.OpPut, "stall"); n != 1 {
		t.Errorf("CountCalls = %d", n)
	}
}
