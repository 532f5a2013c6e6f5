package catalog

import (
	"context"

	"github.com/armada/etcd-recovery/internal/store"
)

// ListUploads is st's store.Multipart ListUploads; a store without
// Multipart has no unfinished uploads, so none.
func ListUploads(ctx context.Context, st store.Store, prefix string) ([]store.Upload, error) {
	if mp, ok := st.(store.Multipart); ok {
		return mp.ListUploads(ctx, prefix)
	}
	return nil, nil
}

// AbortUpload is st's store.Multipart AbortUpload; a store without
// Multipart has no upload to abort.
func AbortUpload(ctx context.Context, st store.Store, u store.Upload) error {
	if mp, ok := st.(store.Multipart); ok {
		return mp.AbortUpload(ctx, u)
	}
	return nil
}
