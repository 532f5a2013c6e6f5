package deploy

import (
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
)

// The ConfigMap ships the journal's retention (prune and backup --prune's
// --journal-retention, by environment): the default, 7 days.
func TestJournalRetentionFromConfigMap(t *testing.T) {
	t.Parallel()
	v, ok := kubetest.ShippedConfig(t)["ETCD_RECOVERY_JOURNAL_RETENTION"]
	if !ok {
		t.Fatal("deploy/20-config.yaml has no ETCD_RECOVERY_JOURNAL_RETENTION")
	}
	if d, err := time.ParseDuration(v); err != nil || d != retention.DefaultJournalRetention {
		t.Fatalf("ETCD_RECOVERY_JOURNAL_RETENTION=%q: %v, %v; want %v", v, d, err, retention.DefaultJournalRetention)
	}
}
