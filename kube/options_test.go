package kube_test

import (
	"context"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/usage"
	"github.com/armada/etcd-recovery/kube"
)

// OperatorRestore and DrillAll check their options first: a mistake is a
// usage error naming the flag, returned before the (absent) Kubernetes
// client or store is used.
func TestOptionsValidateUsage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	op := func(o kube.OperatorRestoreOptions) error { _, err := kube.OperatorRestore(ctx, o); return err }
	dr := func(o kube.DrillAllOptions) error { _, err := kube.DrillAll(ctx, o); return err }
	full := kube.OperatorRestoreOptions{Cluster: "c1", Bucket: "b", Endpoint: "https://s3.example:443"}
	with := func(f func(*kube.OperatorRestoreOptions)) kube.OperatorRestoreOptions { o := full; f(&o); return o }
	for _, c := range []struct {
		err  error
		want string
	}{
		{op(with(func(o *kube.OperatorRestoreOptions) { o.Cluster = "" })), "--cluster NAME (the EtcdCluster) is required"},
		{op(with(func(o *kube.OperatorRestoreOptions) { o.Cluster = "../x" })), `--cluster: invalid cluster id "../x"`},
		{op(with(func(o *kube.OperatorRestoreOptions) { o.Backup = "yesterday" })), "--backup: not a backup name"},
		{op(with(func(o *kube.OperatorRestoreOptions) { o.Bucket = "" })), "--bucket is required"},
		{op(with(func(o *kube.OperatorRestoreOptions) { o.Endpoint = "" })), "--cos-endpoint is required"},
		{op(with(func(o *kube.OperatorRestoreOptions) { o.VerifyTimeout = -1 })), "--verify-timeout"},
		{dr(kube.DrillAllOptions{Template: drill.Options{ClusterID: "c1"}}), "exclusive"},
		{dr(kube.DrillAllOptions{Template: drill.Options{Backup: "20260101T000000.000Z-manual"}}), "--backup names one cluster's backup"},
		{dr(kube.DrillAllOptions{Parallel: -2}), "--parallel -2: want at least 1"},
		{dr(kube.DrillAllOptions{Names: []string{"a/b"}}), `invalid cluster id "a/b"`},
	} {
		if !usage.Is(c.err) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%v; want a usage error with %q", c.err, c.want)
		}
	}
	// Complete options pass; the missing client is then a plain error.
	if err := full.Validate(); err != nil {
		t.Errorf("valid options refused: %v", err)
	}
	if err := op(full); err == nil || usage.Is(err) {
		t.Errorf("without a client: %v; want a plain error", err)
	}
}
