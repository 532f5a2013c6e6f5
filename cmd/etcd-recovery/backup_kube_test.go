package main

import (
	"context"
	"strings"
	"testing"
)

// backup --all / --cluster: flag errors are usage errors (exit 4), found
// before any connection.
func TestBackupAllUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--all", "--cluster", "a"}, "--all and --cluster are exclusive"},
		{[]string{"--all", "--cluster-id", "a"}, "--cluster-id is for one cluster"},
		{[]string{"--cluster", "a", "--parallel", "0"}, "--parallel 0"},
		{[]string{"--all", "--kind", "pre-restore"}, "--kind"},
		{[]string{"--all", "--kubeconfig", "/nonexistent/kubeconfig"}, "kubernetes"},
	} {
		code, _, stderr := runCtx(t, context.Background(), append([]string{"backup"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("backup %v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}
