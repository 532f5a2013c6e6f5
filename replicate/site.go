package replicate

import (
	"bytes"
	"context"
	"io"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// site is the second site as the copier holds it: it reads, lists,
// creates (never replacing an object) and writes its one status record.
// It has no way to delete, nor to replace a copied object: nothing the
// copier does can remove or change what the second site holds. The store
// behind it is captured by these functions only.
type site struct {
	name string // the bucket, for messages
	// get opens an object.
	get func(ctx context.Context, key string) (io.ReadCloser, error)
	// listAfter lists the objects under prefix after a key.
	listAfter func(ctx context.Context, prefix, after string) ([]store.ObjectInfo, error)
	// create writes key only if it is absent (store.ErrExists otherwise),
	// with ret when set.
	create func(ctx context.Context, key string, r io.Reader, ret *store.Retention) (int64, error)
	// putStatus replaces the status record.
	putStatus func(ctx context.Context, s catalog.ReplicaStatus) error
	// lockConfig is the bucket's object lock.
	lockConfig func(ctx context.Context) (store.LockInfo, error)
}

// secondSite is st held as a site. Options.Validate checked that st can
// write create-only.
func secondSite(st store.Store, l catalog.Layout) *site {
	cond := st.(store.Conditional)
	return &site{
		name: catalog.BucketName(st),
		get:  st.Get,
		listAfter: func(ctx context.Context, prefix, after string) ([]store.ObjectInfo, error) {
			return store.ListAfterOf(ctx, st, prefix, after)
		},
		create: func(ctx context.Context, key string, r io.Reader, ret *store.Retention) (int64, error) {
			if ret != nil {
				lk, ok := st.(store.Locker)
				if !ok {
					return 0, store.Unsupported(st, "put", key)
				}
				res, err := lk.PutWith(ctx, key, r, store.PutOptions{IfAbsent: true, Retention: ret})
				return res.Size, err
			}
			return cond.PutIfAbsent(ctx, key, r)
		},
		putStatus: func(ctx context.Context, s catalog.ReplicaStatus) error {
			b, err := catalog.EncodeReplicaStatus(s)
			if err != nil {
				return err
			}
			_, err = st.Put(ctx, l.ReplicaStatusKey(), bytes.NewReader(b))
			return err
		},
		lockConfig: func(ctx context.Context) (store.LockInfo, error) { return catalog.LockConfigOf(ctx, st) },
	}
}
