package prune_test

import (
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// rig is a real etcd cluster and a MinIO bucket with its own prefix, for
// the tests that take a real backup (backup --prune, prune during a
// backup), as in the backup package's tests.
type rig struct{ *testfix.BackupRig }

func newRig(tb testing.TB, c *testenv.EtcdCluster, m *testenv.MinIO) *rig {
	tb.Helper()
	return &rig{testfix.NewBackupRig(tb, c, m)}
}
