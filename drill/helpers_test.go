package drill_test

import (
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// storeRig is one test's bucket and prefix on the shared MinIO
// (testfix.StoreRig), with this package's own helpers.
type storeRig struct{ *testfix.StoreRig }

func newStoreRig(tb testing.TB) *storeRig {
	tb.Helper()
	return &storeRig{testfix.NewStoreRig(tb)}
}
