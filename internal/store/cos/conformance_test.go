package cos_test

import (
	"testing"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/storetest"
)

// The COS backend follows the store contract, on a real MinIO: one new
// bucket for the run, a Store per subtest. 12 MiB puts go through
// multipart uploads (5 MiB parts).
func TestConformance(t *testing.T) {
	t.Parallel()
	m := sharedMinIO(t)
	bucket := m.NewBucket(t)
	storetest.Run(t, func(tb testing.TB) store.Store { return newStore(tb, m, bucket) },
		storetest.BigSize(12*mib))
}
