package kube

import (
	"fmt"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/usage"
)

// The options checks of OperatorRestore and DrillAll: what the caller
// asked for, checked before anything is contacted, as usage errors
// (internal/usage: the CLI exits 4). The functions call them first. They
// do not check the wiring (a Kubernetes client, a store): that is a
// programming error, not a usage error. The messages name the CLI's flags.

// Validate checks the EtcdCluster's name (it is also the cluster id in
// COS), the backup's name if one is given, what the operator is told (the
// bucket and the COS endpoint) and the durations (0 is the default).
func (o OperatorRestoreOptions) Validate() error {
	const cmd = "restore --via etcd-operator"
	if o.Cluster == "" {
		return usage.Errorf("%s: --cluster NAME (the EtcdCluster) is required", cmd)
	}
	if err := catalog.ValidateClusterID(o.Cluster); err != nil {
		return usage.Errorf("%s: --cluster: %w", cmd, err)
	}
	if o.Backup != "" {
		if _, _, err := catalog.ParseBackupName(o.Backup); err != nil {
			return usage.Errorf("restore: --backup: %w", err)
		}
	}
	if o.Bucket == "" {
		return usage.Errorf("%s: --bucket is required (the operator is told <bucket>/<key>)", cmd)
	}
	if o.Endpoint == "" {
		return usage.Errorf("%s: --cos-endpoint is required (the operator is told it)", cmd)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"wait-timeout", o.Timeout}, {"verify-timeout", o.VerifyTimeout}, {"probe-timeout", o.ProbeTimeout},
		{"dial-timeout", o.DialTimeout}, {"poll interval", o.PollInterval}} {
		if d.v < 0 {
			return usage.Errorf("%s: --%s %v: must be positive", cmd, d.flag, d.v)
		}
	}
	return nil
}

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
