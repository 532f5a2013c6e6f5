package prune

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
)

// The options checks of Prune, Delete, DeleteAll and Orphans: what the
// caller asked for, checked before anything is contacted. Each returns a
// usage error (internal/usage), which the CLI maps to exit 4; the package
// functions call them first, so an options error is never a failure of the
// work. They do not check the wiring (a store, the listings): a missing
// store is a programming error, not a usage error. The messages name the
// CLI's flags, as the CLI is their one caller that takes input from a user.

// Validate checks the clusters to prune (named, or All, not both or
// neither; each id valid) and the policy.
func (o PruneOptions) Validate() error {
	switch {
	case o.All && len(o.ClusterIDs) > 0:
		return usage.Errorf("prune: --cluster-id and --all are exclusive")
	case !o.All && len(o.ClusterIDs) == 0:
		return usage.Errorf("prune: --cluster-id or --all-cluster-ids is required")
	}
	for _, id := range o.ClusterIDs {
		if err := catalog.ValidateClusterID(id); err != nil {
			return usage.Wrap(fmt.Errorf("prune: %w", err))
		}
	}
	if err := o.Policy.Validate(); err != nil {
		return usage.Wrap(err)
	}
	return nil
}

// Validate checks the cluster id and the backup names.
func (o DeleteOptions) Validate() error {
	if err := validateDeleteCluster(o.ClusterID); err != nil {
		return err
	}
	if len(o.Names) == 0 {
		return usage.Errorf("delete: --backup or --all-backups is required")
	}
	for _, n := range o.Names {
		if _, _, err := catalog.ParseBackupName(n); err != nil {
			return usage.Errorf("delete: --backup: %w", err)
		}
	}
	return nil
}

// Validate checks the cluster id.
func (o DeleteAllOptions) Validate() error { return validateDeleteCluster(o.ClusterID) }

func validateDeleteCluster(id string) error {
	if id == "" {
		return usage.Errorf("delete: --cluster-id is required")
	}
	if err := catalog.ValidateClusterID(id); err != nil {
		return usage.Wrap(fmt.Errorf("delete: %w", err))
	}
	return nil
}

// Validate checks the grace: zero (DefaultOrphanGrace) or at least
// MinOrphanGrace.
func (o OrphanOptions) Validate() error {
	if o.Grace < 0 || o.Grace > 0 && o.Grace < MinOrphanGrace {
		return usage.Errorf("--orphan-grace %s: want at least %s", o.Grace, MinOrphanGrace)
	}
	return nil
}

// errNoStore is the wiring error of a function called without a store.
var errNoStore = errors.New("no object store")

// checkDelete is the start of Delete and DeleteAll: their options' check
// (valid is its result), a store, and the log (discarded when nil).
func checkDelete(valid error, st store.Store, log *slog.Logger) (*slog.Logger, error) {
	if valid != nil {
		return nil, valid
	}
	if st == nil {
		return nil, fmt.Errorf("delete: %w", errNoStore)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return log, nil
}
