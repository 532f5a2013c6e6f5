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
