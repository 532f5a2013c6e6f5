package main

import (
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// journal prove --all's flags: what does not go with it is a usage error
// (exit 4) naming the flag, before any store is contacted (the endpoint
// given is one nothing listens on: a store call would be exit 1).
func TestJournalProveAllUsage(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	store := []string{"--cos-endpoint", "http://127.0.0.1:1", "--bucket", "b"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--all", "--cluster-id", "c1"}, "--all and --cluster-id are exclusive"},
		{[]string{"--all", "--backup", "scheduled-20261125T030300Z"}, "--backup names one cluster's backup"},
		{[]string{"--all", "--all-unproven"}, "drop --all-unproven"},
		{[]string{"--all", "--prove-parallel", "0"}, "--prove-parallel 0"},
		{[]string{"--cluster-id", "c1", "--prove-parallel", "2"}, "--prove-parallel is --all's"},
		{[]string{}, "--cluster-id (or --all, --all-cluster-ids) is required"},
		{[]string{"--all-cluster-ids", "--cluster-id", "c1"}, "--all and --cluster-id are exclusive"},
		{[]string{"--all", "--namespace", "ns", "--all-cluster-ids"}, "--all (every EtcdCluster of the namespace) and --all-cluster-ids (every cluster id under --prefix): give one"},
	} {
		code, _, errOut := runCtx(t, ctx, append(append([]string{"journal", "prove"}, tc.args...), store...)...)
		if code != 4 || !strings.Contains(errOut, tc.want) {
			t.Errorf("journal prove %v: exit %d, want 4 naming %q:\n%s", tc.args, code, tc.want, errOut)
		}
	}
}
