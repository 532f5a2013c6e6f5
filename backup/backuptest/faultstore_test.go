package backuptest_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/backup/backuptest"
	"github.com/armada/etcd-recovery/internal/testenv"
	"github.com/armada/etcd-recovery/internal/testfix"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Each fault does what the package comment says, on the real store.
func TestFaultStore(t *testing.T) {
	t.Parallel()
	mi := testenv.SharedMinIO(t)
	inner := testfix.Store(t, mi, mi.NewBucket(t))
	p := testenv.Prefix(t) + "/"
	ctx := context.Background()
	body := func() io.Reader { return strings.NewReader(strings.Repeat("x", 3<<20)) }

	s := backuptest.Wrap(inner)
	s.Inject(backuptest.Fault{Op: backuptest.OpPut, KeySuffix: "stall", Kind: backuptest.Stall, After: 1 << 20, Delay: 200 * time.Millisecond, Times: 1})
	s.Inject(backuptest.Fault{Op: backuptest.OpPut, KeySuffix: "reset", Kind: backuptest.Reset, Times: 1})
	s.Inject(backuptest.Fault{Op: backuptest.OpPut, KeySuffix: "vanish", Kind: backuptest.Vanish})
	s.Inject(backuptest.Fault{Op: backuptest.OpGet, KeySuffix: "ok", Kind: backuptest.NotFound, Times: 1})
	s.Inject(backuptest.Fault{Op: backuptest.OpList, Kind: backuptest.ServerError, Times: 1})

	if _, err := s.Put(ctx, p+"stall", body()); !errors.Is(err, backup.ErrStalled) {
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
	if n := s.CountCalls(backuptest.OpPut, "stall"); n != 1 {
		t.Errorf("CountCalls = %d", n)
	}
}
