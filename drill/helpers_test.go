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

// drillSource starts a one-member etcd of version v over TLS holding
// fillDrillData's n keys, and makes a new storeRig for its backups.
func drillSource(tb testing.TB, v testenv.Version, n int) (*testenv.EtcdCluster, *storeRig) {
	tb.Helper()
	c := testenv.StartEtcd(tb, testenv.EtcdOptions{Version: v, Members: 1, TLS: true})
	fillDrillData(tb, c.Client(tb), n)
	return c, newStoreRig(tb)
}
