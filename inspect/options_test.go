package inspect_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/usage"
)

// inspect's options mistakes are usage errors naming the flag, returned by
// Run before any member is probed; zero values are the defaults.
func TestOptionsValidateUsage(t *testing.T) {
	t.Parallel()
	etcd := etcdconn.Config{Endpoints: []string{"http://127.0.0.1:9"}}
	for _, c := range []struct {
		opts inspect.Options
		want string
	}{
		{inspect.Options{}, "no etcd endpoints"},
		{inspect.Options{Etcd: etcd, Timeout: -time.Second}, "--probe-timeout"},
		{inspect.Options{Etcd: etcd, MaxBackupAge: -time.Hour}, "--max-backup-age"},
		{inspect.Options{Etcd: etcd, MaxDrillAge: -time.Hour}, "--max-drill-age"},
		{inspect.Options{Etcd: etcd, Thresholds: inspect.Thresholds{QuotaBytes: -1}}, "--quota-backend-bytes"},
		{inspect.Options{Etcd: etcd, Store: memstore.New()}, "--bucket needs --cluster-id"},
		{inspect.Options{Etcd: etcd, Store: memstore.New(), ClusterID: ".."}, `invalid cluster id ".."`},
	} {
		_, err := inspect.Run(context.Background(), c.opts)
		if !usage.Is(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want a usage error with %q", c.opts, err, c.want)
		}
	}
	if err := (inspect.Options{Etcd: etcd}).Validate(); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
	if err := (inspect.Options{Timeout: -1}).ValidateTemplate(); err == nil {
		t.Error("a negative timeout passes ValidateTemplate")
	}
}
