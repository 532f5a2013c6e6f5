package deploy

import (
	"os"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/podrun"
)

// The ConfigMap ships the journal's retention (prune and backup --prune's
// --journal-retention, by environment): the default, 7 days.
func TestJournalRetentionFromConfigMap(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(kubetest.DeployPath(t, "20-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cm, err := podrun.ParseConfigMap(b)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := cm.Data["ETCD_RECOVERY_JOURNAL_RETENTION"]
	if !ok {
		t.Fatal("deploy/20-config.yaml has no ETCD_RECOVERY_JOURNAL_RETENTION")
	}
	if d, err := time.ParseDuration(v); err != nil || d != retention.DefaultJournalRetention {
		t.Fatalf("ETCD_RECOVERY_JOURNAL_RETENTION=%q: %v, %v; want %v", v, d, err, retention.DefaultJournalRetention)
	}
}
