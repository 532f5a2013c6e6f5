package kube

import (
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/usage"
)

// The options check of OperatorRestore: what the caller asked for,
// checked before anything is contacted, as usage errors (internal/usage:
// the CLI exits 4). OperatorRestore calls it first. It does not check the
// wiring (a Kubernetes client, a store): that is a programming error, not
// a usage error. The messages name the CLI's flags.

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
