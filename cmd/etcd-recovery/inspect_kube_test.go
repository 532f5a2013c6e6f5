package main

import (
	"testing"
)

// inspect --all / --cluster: flag errors are usage errors (exit 4), found
// before any connection. The runs against Kubernetes are in kube/.
func TestInspectKubeUsage(t *testing.T) {
	t.Parallel()
	assertUsageErrors(t, []string{"inspect"}, []usageCase{
		{[]string{"--all", "--cluster", "a"}, "--all and --cluster are exclusive"},
		{[]string{"--all", "--cluster-id", "a"}, "--cluster-id is for one cluster"},
		{[]string{"--cluster", "a", "--cluster-id", "a"}, "--cluster-id is for one cluster"},
		{[]string{"--all", "--parallel", "0"}, "--parallel 0"},
		{[]string{"--all", "--probe-timeout", "0s"}, "--probe-timeout"},
		{[]string{"--all", "-o", "xml"}, "xml"},
		{[]string{"--all", "--kubeconfig", "/nonexistent/kubeconfig"}, "kubernetes"},
		{[]string{"--cluster", "a", "--kubeconfig", "/nonexistent/kubeconfig"}, "kubernetes"},
	})
}
