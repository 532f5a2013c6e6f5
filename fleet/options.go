package fleet

import (
	"fmt"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/usage"
)

// The options check of DrillAll: what the caller asked for, checked
// before anything is contacted, as usage errors (internal/usage: the CLI
// exits 4). DrillAll calls it first. It does not check the wiring (a
// Kubernetes client, a store): that is a programming error, not a usage
// error. The messages name the CLI's flags.

// Validate checks the clusters (Names), the parallelism (0 is 1) and the
// template: a template for every cluster, so without a cluster id or a
// backup of its own (each cluster's newest is drilled).
func (o DrillAllOptions) Validate() error {
	switch {
	case o.Template.ClusterID != "":
		return usage.Errorf("drill: --all and --cluster-id are exclusive")
	case o.Template.Backup != "":
		return usage.Errorf("drill: --backup names one cluster's backup: use it with --cluster-id")
	case o.Parallel < 0:
		return usage.Errorf("drill: --parallel %d: want at least 1", o.Parallel)
	case o.DialTimeout < 0:
		return usage.Errorf("drill: --dial-timeout %v: must be positive", o.DialTimeout)
	}
	for _, n := range o.Names {
		if err := catalog.ValidateClusterID(n); err != nil {
			return usage.Wrap(fmt.Errorf("drill: %w", err))
		}
	}
	if err := o.Template.Validate(); err != nil {
		return usage.Wrap(fmt.Errorf("drill: %w", err))
	}
	return nil
}
