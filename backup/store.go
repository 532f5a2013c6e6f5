package backup

import (
	"context"

	"github.com/armada/etcd-recovery/internal/store"
)

// Store is the object store backups live in: the store seam
// (internal/store), whose package documents the error contract every
// backend follows. The one production backend is internal/store/cos (IBM
// COS SDK, S3 API); tests also use internal/store/memstore.
// Multipart uploads are an optional capability (store.Multipart): prune
// and list find it by a type assertion, and a store without it has no
// uploads to clean.
type Store = store.Store

// The store types, moved to internal/store; these aliases keep the code
// that names them through backup compiling unchanged.
type (
	ObjectInfo       = store.ObjectInfo
	Upload           = store.Upload
	DeleteError      = store.DeleteError
	ConditionalStore = store.Conditional
	Multipart        = store.Multipart
	KeyUploadLister  = store.KeyUploadLister
	Checker          = store.Checker
)

// The store's sentinel errors (see internal/store).
var (
	ErrStalled  = store.ErrStalled
	ErrExists   = store.ErrExists
	ErrNotFound = store.ErrNotFound
)

// listUploads is st's store.Multipart ListUploads; a store without
// Multipart has no unfinished uploads, so none.
func listUploads(ctx context.Context, st store.Store, prefix string) ([]Upload, error) {
	if mp, ok := st.(store.Multipart); ok {
		return mp.ListUploads(ctx, prefix)
	}
	return nil, nil
}

// abortUpload is st's store.Multipart AbortUpload; a store without
// Multipart has no upload to abort.
func abortUpload(ctx context.Context, st store.Store, u Upload) error {
	if mp, ok := st.(store.Multipart); ok {
		return mp.AbortUpload(ctx, u)
	}
	return nil
}
