package main

import (
	"testing"
)

// backup --all / --cluster: flag errors are usage errors (exit 4), found
// before any connection.
func TestBackupAllUsage(t *testing.T) {
	t.Parallel()
	assertUsageErrors(t, []string{"backup"}, []usageCase{
		{[]string{"--all", "--cluster", "a"}, "--all and --cluster are exclusive"},
		{[]string{"--all", "--cluster-id", "a"}, "--cluster-id is for one cluster"},
		{[]string{"--cluster", "a", "--parallel", "0"}, "--parallel 0"},
		{[]string{"--all", "--kind", "pre-restore"}, "--kind"},
		{[]string{"--all", "--kubeconfig", "/nonexistent/kubeconfig"}, "kubernetes"},
	})
}
