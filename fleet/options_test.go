package fleet_test

import (
	"context"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/usage"
)

// DrillAll checks its options first: a mistake is a usage error naming
// the flag, returned before the (absent) Kubernetes client or store is
// used.
func TestOptionsValidateUsage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dr := func(o fleet.DrillAllOptions) error { _, err := fleet.DrillAll(ctx, o); return err }
	for _, c := range []struct {
		err  error
		want string
	}{
		{dr(fleet.DrillAllOptions{Template: drill.Options{ClusterID: "c1"}}), "exclusive"},
		{dr(fleet.DrillAllOptions{Template: drill.Options{Backup: "20260101T000000.000Z-manual"}}), "--backup names one cluster's backup"},
		{dr(fleet.DrillAllOptions{Parallel: -2}), "--parallel -2: want at least 1"},
		{dr(fleet.DrillAllOptions{Names: []string{"a/b"}}), `invalid cluster id "a/b"`},
	} {
		if !usage.Is(c.err) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%v; want a usage error with %q", c.err, c.want)
		}
	}
}
