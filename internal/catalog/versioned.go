package catalog

import (
	"context"

	"github.com/armada/etcd-recovery/internal/store"
)

// Versioned reports whether st keeps versions (a store.Versioner whose
// bucket has versioning on). A store that cannot say is not versioned.
func Versioned(ctx context.Context, st store.Store) (store.Versioner, bool, error) {
	v, ok := st.(store.Versioner)
	if !ok {
		return nil, false, nil
	}
	on, err := v.Versioning(ctx)
	if err != nil {
		return nil, false, err
	}
	return v, on, nil
}
