package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Flag checks of restore --via etcd-operator, before anything is contacted
// (the run against a real kube-apiserver is kube's
// TestOperatorRestore, which runs the built binary).
func TestRestoreViaOperatorUsage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cos := []string{"--cos-endpoint", "http://127.0.0.1:1", "--bucket", "b"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"restore", "--via", "velero", "--cluster", "etcd-a"}, `--via "velero": the only one is etcd-operator`},
		{[]string{"restore", "--via", "etcd-operator"}, "--cluster NAME (the EtcdCluster) is required"},
		{[]string{"restore", "--cluster", "etcd-a"}, `--via "": the only one is etcd-operator`},
		{[]string{"restore", "--via", "etcd-operator", "--cluster", "../x"}, "--cluster:"},
		{[]string{"restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--initial-cluster", "m0=https://10.0.0.1:2380"}, "--initial-cluster does not apply"},
		{[]string{"restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--endpoints", "https://10.0.0.1:2379"}, "--endpoints does not apply"},
		{[]string{"restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--verify-endpoints", "https://10.0.0.1:2379"}, "--verify-endpoints does not apply"},
		{[]string{"restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--backup", "nope"}, "--backup:"},
		{[]string{"restore", "--cluster-id", "c1", "--initial-cluster", "m0=https://10.0.0.1:2380", "--timeout", "1m"}, "--timeout is a dry run's overall deadline"},
	} {
		code, out, errOut := runCtx(t, ctx, append(tc.args, cos...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q (stdout %q), want exit %d and %q", tc.args, code, errOut, out, exitUsage, tc.want)
		}
	}
	// Without --bucket or --cos-endpoint: the operator must be told both.
	code, _, errOut := runCtx(t, ctx, "restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--cos-endpoint", "http://127.0.0.1:1")
	if code != exitUsage || !strings.Contains(errOut, "--bucket is required") {
		t.Errorf("no bucket: exit %d, %q", code, errOut)
	}
	code, _, errOut = runCtx(t, ctx, "restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--bucket", "b")
	if code != exitUsage || !strings.Contains(errOut, "--cos-endpoint is required") {
		t.Errorf("no endpoint: exit %d, %q", code, errOut)
	}
}
