package prune

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/usage"
)

// Every options mistake is a usage error (exit 4 in the CLI), named by the
// flag, returned by the function itself before the store is touched (every
// listing of the store fails with a 503: a check made after one would
// return that instead), and the wiring errors are not.
func TestOptionsValidateUsage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := faults.Wrap(memstore.New())
	st.Inject(faults.Fault{Op: faults.OpList, Kind: faults.ServerError})
	layout := catalog.Layout{Prefix: "p"}
	name := catalog.BackupName(time.Now(), catalog.KindManual)
	bad := retention.DefaultPolicy()
	bad.Recent = -1
	cases := []struct {
		what string
		run  func() error
		want string
	}{
		{"prune both", func() error {
			_, err := Prune(ctx, PruneOptions{Store: st, Layout: layout, All: true, ClusterIDs: []string{"c1"}, Policy: retention.DefaultPolicy()})
			return err
		}, "exclusive"},
		{"prune neither", func() error {
			_, err := Prune(ctx, PruneOptions{Store: st, Layout: layout, Policy: retention.DefaultPolicy()})
			return err
		}, "is required"},
		{"prune bad id", func() error {
			_, err := Prune(ctx, PruneOptions{Store: st, Layout: layout, ClusterIDs: []string{"../x"}, Policy: retention.DefaultPolicy()})
			return err
		}, `invalid cluster id "../x"`},
		{"prune bad policy", func() error {
			_, err := Prune(ctx, PruneOptions{Store: st, Layout: layout, All: true, Policy: bad})
			return err
		}, "recent count must not be negative"},
		{"delete no id", func() error {
			_, err := Delete(ctx, DeleteOptions{Store: st, Layout: layout, Names: []string{name}})
			return err
		}, "--cluster-id is required"},
		{"delete no names", func() error {
			_, err := Delete(ctx, DeleteOptions{Store: st, Layout: layout, ClusterID: "c1"})
			return err
		}, "--backup or --all-backups is required"},
		{"delete bad name", func() error {
			_, err := Delete(ctx, DeleteOptions{Store: st, Layout: layout, ClusterID: "c1", Names: []string{"yesterday"}})
			return err
		}, "not a backup name"},
		{"delete all bad id", func() error {
			_, err := DeleteAll(ctx, DeleteAllOptions{Store: st, Layout: layout, ClusterID: "a/b"})
			return err
		}, `invalid cluster id "a/b"`},
		{"list no id", func() error {
			_, err := List(ctx, ListOptions{Store: st, Layout: layout, Policy: retention.DefaultPolicy()})
			return err
		}, "--cluster-id is required"},
		{"list bad policy", func() error {
			_, err := List(ctx, ListOptions{Store: st, Layout: layout, ClusterID: "c1", Policy: bad})
			return err
		}, "recent count must not be negative"},
		{"orphans short grace", func() error {
			_, err := Orphans(ctx, OrphanOptions{Store: st, Layout: layout, Grace: time.Minute})
			return err
		}, "--orphan-grace 1m0s: want at least"},
	}
	for _, c := range cases {
		err := c.run()
		if !usage.Is(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want a usage error with %q", c.what, err, c.want)
		}
	}
	// Without a store: a programming error, not the user's.
	_, err := Delete(ctx, DeleteOptions{Layout: layout, ClusterID: "c1", Names: []string{name}})
	if err == nil || usage.Is(err) {
		t.Errorf("delete without a store: %v; want a plain error", err)
	}
	_, err = Prune(ctx, PruneOptions{Layout: layout, All: true, Policy: retention.DefaultPolicy()})
	var pe *PruneError
	if !errors.As(err, &pe) || pe.Step() != PruneStepValidate || usage.Is(err) {
		t.Errorf("prune without a store: %v; want a plain validate-step error", err)
	}
	// Valid options pass.
	for _, err := range []error{
		PruneOptions{ClusterIDs: []string{"c1", "c1"}, Policy: retention.DefaultPolicy()}.Validate(),
		DeleteOptions{ClusterID: "c1", Names: []string{name}}.Validate(),
		DeleteAllOptions{ClusterID: "c1"}.Validate(),
		OrphanOptions{}.Validate(),
		OrphanOptions{Grace: MinOrphanGrace}.Validate(),
	} {
		if err != nil {
			t.Errorf("valid options refused: %v", err)
		}
	}
}
