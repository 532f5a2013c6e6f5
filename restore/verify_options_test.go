package restore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/usage"
	"github.com/armada/etcd-recovery/restore"
)

// restore verify's options mistakes are usage errors naming the flag,
// returned by CheckCluster before anything is contacted (no store is set:
// a check after the backup's download would fail otherwise).
func TestClusterCheckOptionsValidate(t *testing.T) {
	t.Parallel()
	eps := restore.VerifyOptions{Etcd: etcdconn.Config{Endpoints: []string{"http://127.0.0.1:9"}}}
	const name = "20261122T031500.123Z-manual"
	for _, c := range []struct {
		opts restore.ClusterCheckOptions
		want string
	}{
		{restore.ClusterCheckOptions{VerifyOptions: eps, Backup: name, ManifestFile: "m.json"}, "exclusive"},
		{restore.ClusterCheckOptions{VerifyOptions: eps, Backup: name}, "--backup needs --cluster-id"},
		{restore.ClusterCheckOptions{VerifyOptions: eps, Backup: name, ClusterID: "../x"}, `invalid cluster id "../x"`},
		{restore.ClusterCheckOptions{VerifyOptions: eps, Backup: "yesterday", ClusterID: "c1"}, "--backup: not a backup name"},
		{restore.ClusterCheckOptions{}, "--endpoints"},
		{restore.ClusterCheckOptions{VerifyOptions: restore.VerifyOptions{Etcd: eps.Etcd, Timeout: -time.Second}}, "--verify-timeout"},
	} {
		_, err := restore.CheckCluster(context.Background(), c.opts)
		if !usage.Is(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want a usage error with %q", c.opts, err, c.want)
		}
	}
	if err := (restore.ClusterCheckOptions{VerifyOptions: eps, Backup: name, ClusterID: "c1"}).Validate(); err != nil {
		t.Errorf("valid options refused: %v", err)
	}
}
