package faults_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
