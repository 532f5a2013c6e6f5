package memstore

import (
	"context"
	"sync"

	"github.com/armada/etcd-recovery/internal/store"
)

// Kind is the kind this backend registers under (store.Open), and the
// scheme of its store URLs (mem://bucket/prefix). Only
// programs that import memstore have it: tests (the binary links the
// production backends only, internal/store/all).
const Kind = "mem"

func init() { store.Register(Kind, open) }

var (
	bucketsMu sync.Mutex
	buckets   = map[string]*Store{}
)

// open returns the process's in-memory store of cfg.Bucket, created empty
// by the first Open of that bucket: two Opens of one bucket see the same
// objects, as two clients of one server would.
func open(_ context.Context, cfg store.Config) (store.Store, error) {
	bucketsMu.Lock()
	defer bucketsMu.Unlock()
	st, ok := buckets[cfg.Bucket]
	if !ok {
		st = New()
		buckets[cfg.Bucket] = st
	}
	return st, nil
}
