package deploy

import (
	"testing"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
)

// The lock mode reaches the CronJob and the update Job from the ConfigMap
// (ETCD_RECOVERY_LOCK_MODE, bound to backup --lock-mode): shipped empty
// (off: behaviour as without object lock), a value the tool parses, and
// no pod overrides it.
func TestLockModeFromConfigMap(t *testing.T) {
	cm := kubetest.ShippedConfigMap(t)
	v, ok := cm.Data["ETCD_RECOVERY_LOCK_MODE"]
	if !ok {
		t.Fatal("deploy/20-config.yaml has no ETCD_RECOVERY_LOCK_MODE")
	}
	if mode, err := catalog.ParseLockMode(v); err != nil || mode != catalog.LockOff {
		t.Fatalf("ETCD_RECOVERY_LOCK_MODE=%q: %q, %v; want shipped off", v, mode, err)
	}
	for _, f := range [][]string{{"30-cronjob.yaml"}, {"per-cluster", "update-job.yaml"}, {"70-prove.yaml"}} {
		w := kubetest.Workload(t, f...)
		for _, c := range w.Template.Spec.Containers {
			var fromCM bool
			for _, ef := range c.EnvFrom {
				fromCM = fromCM || (ef.ConfigMapRef != nil && ef.ConfigMapRef.Name == cm.Name)
			}
			if !fromCM {
				t.Errorf("%v: container %s does not take its environment from ConfigMap %s", f, c.Name, cm.Name)
			}
			for _, e := range c.Env {
				if e.Name == "ETCD_RECOVERY_LOCK_MODE" {
					t.Errorf("%v: container %s overrides ETCD_RECOVERY_LOCK_MODE", f, c.Name)
				}
			}
		}
	}
}
