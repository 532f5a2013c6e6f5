package catalog

import (
	"context"

	"github.com/armada/etcd-recovery/internal/store"
)

// listUploads is st's store.Multipart ListUploads; a store without
// Multipart has no unfinished uploads, so none.
func listUploads(ctx context.Context, st store.Store, prefix string) ([]store.Upload, error) {
	if mp, ok := st.(store.Multipart); ok {
		return mp.ListUploads(ctx, prefix)
	}
	return nil, nil
}

// abortUpload is st's store.Multipart AbortUpload; a store without
// Multipart has no upload to abort.
func abortUpload(ctx context.Context, st store.Store, u store.Upload) error {
	if mp, ok := st.(store.Multipart); ok {
		return mp.AbortUpload(ctx, u)
	}
	return nil
}
