package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/kube"
)

// MinOrphanCheckTimeout is the shortest deadline of inspect --all's orphan
// listing: a prefix holds every backup of the namespace, a longer listing
// than one cluster's freshness check (3 × the probe timeout).
const MinOrphanCheckTimeout = 30 * time.Second

// InspectOrphan is one orphan of the namespace's prefix as inspect --all
// shows it: a cluster id with backups under the prefix and no EtcdCluster
// in the namespace, as the orphan pass (prune --orphans, backup --all
// --prune) sees it, computed without writing or deleting anything.
type InspectOrphan struct {
	ClusterID string `json:"clusterID"`
	// State is prune.Orphan's: waiting, delete (due: deleted by the next
	// orphan pass), restoring, report only (prefix not owned), marker only.
	State   string `json:"state"`
	Backups int    `json:"backups"`
	Bytes   int64  `json:"bytes"`
	// NewestBackup is the time of its newest backup folder (complete or not).
	NewestBackup time.Time `json:"newestBackup,omitzero"`
	// Recorded: an orphan pass has written its marker; FirstSeen is the
	// marker's first sighting (zero when not recorded).
	Recorded  bool      `json:"recorded"`
	FirstSeen time.Time `json:"firstSeen,omitzero"`
	// DeleteAfter = the later of NewestBackup and FirstSeen (now, when
	// not recorded) + the grace (prune.OrphanDeadline); Deletion says
	// when (or why not) its backups are deleted, in words.
	DeleteAfter time.Time `json:"deleteAfter,omitzero"`
	Deletion    string    `json:"deletion"`
	Restores    []string  `json:"restores,omitempty"`
	// Reason is the orphan pass's own reason.
	Reason string `json:"reason"`
}

// OrphanCheck is how the orphans of inspect --all were computed.
type OrphanCheck struct {
	// Checked: the orphans were computed (needs --bucket and --all).
	Checked bool   `json:"checked"`
	Prefix  string `json:"prefix"`
	Grace   string `json:"grace,omitempty"`
	// Owned: the namespace owns the prefix (only then are orphans deleted);
	// NotOwned says why not.
	Owned    bool   `json:"owned"`
	NotOwned string `json:"notOwned,omitempty"`
	// Error: the orphans could not be computed (the step and the cause);
	// the verdict and exit code do not change.
	Error     string `json:"error,omitempty"`
	ElapsedMS int64  `json:"elapsedMs"`
}

// ListOrphansOptions configure ListOrphans.
type ListOrphansOptions struct {
	Kube   *kube.Client
	Store  store.Store
	Layout catalog.Layout
	// Grace is the orphan pass's grace (default prune.DefaultOrphanGrace).
	Grace time.Duration
	// Timeout bounds the computation (default MinOrphanCheckTimeout).
	Timeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// ListOrphans computes the orphans of the namespace's prefix exactly as
// inspect --all does (the orphan pass in dry-run mode: it lists and reads,
// never writes or deletes), for the exporter. The check's Error is set
// when they could not be computed.
func ListOrphans(ctx context.Context, opts ListOrphansOptions) ([]InspectOrphan, OrphanCheck) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = MinOrphanCheckTimeout
	}
	return inspectOrphans(ctx, opts.Kube, InspectAllOptions{Kube: opts.Kube, OrphanGrace: opts.Grace, OrphanTimeout: timeout,
		Template: inspect.Options{Store: opts.Store, Layout: opts.Layout, Now: opts.Now}})
}

// inspectOrphans runs the orphan pass in dry-run mode (prune.Orphans with
// DryRun lists and reads only: no marker is written or removed, nothing is
// deleted) within its own deadline, and summarizes it.
func inspectOrphans(ctx context.Context, k *kube.Client, opts InspectAllOptions) ([]InspectOrphan, OrphanCheck) {
	start := time.Now()
	store, layout := opts.Template.Store, opts.Template.Layout
	grace := opts.OrphanGrace
	if grace <= 0 {
		grace = prune.DefaultOrphanGrace
	}
	timeout := opts.OrphanTimeout
	if timeout <= 0 {
		timeout = max(3*opts.Template.Timeout, MinOrphanCheckTimeout)
	}
	chk := OrphanCheck{Checked: true, Prefix: strings.TrimSuffix(layout.RootPrefix(), "/"), Grace: grace.String()}
	octx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	now := time.Now()
	if opts.Template.Now != nil {
		now = opts.Template.Now()
	}
	now = now.UTC()
	rep, err := prune.Orphans(octx, prune.OrphanOptions{
		Store: store, Layout: layout, Namespace: k.Namespace,
		Clusters: k.ClusterNames, Restores: k.RestoringClusters,
		Grace: grace, Now: now, DryRun: true,
	})
	chk.ElapsedMS = time.Since(start).Milliseconds()
	if err != nil {
		// Not "prune failed": inspect deletes nothing. The step and the cause.
		var oe *prune.OrphanError
		if errors.As(err, &oe) {
			err = fmt.Errorf("at step %q: %w", oe.Step(), oe.Err)
		}
		if octx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %v (%w)", timeout, err)
		}
		chk.Error = "the orphans of prefix " + chk.Prefix + " could not be computed: " + output.OneLine(err)
		return []InspectOrphan{}, chk
	}
	chk.Owned, chk.NotOwned = rep.Owned, rep.NotOwned
	out := []InspectOrphan{}
	for _, o := range rep.Orphans {
		if o.State == prune.OrphanReturned {
			continue // its EtcdCluster is back: a row of the main table
		}
		// Dry run: an orphan without a marker gets FirstSeen = now.
		recorded := !o.FirstSeen.IsZero() && !o.FirstSeen.Equal(now)
		io := InspectOrphan{ClusterID: o.ClusterID, State: o.State, Backups: o.Backups, Bytes: o.Bytes, NewestBackup: o.NewestBackup,
			Recorded: recorded, DeleteAfter: o.DeleteAfter, Restores: o.Restores, Reason: o.Reason}
		if recorded {
			io.FirstSeen = o.FirstSeen
		}
		io.Deletion = deletionText(io, rep)
		out = append(out, io)
	}
	return out, chk
}

// deletionText says when an orphan's backups are deleted, or why not.
func deletionText(o InspectOrphan, rep *prune.OrphanReport) string {
	switch o.State {
	case prune.OrphanRestoring:
		return "kept: an etcd-operator restore is in flight (EtcdRestore " + strings.Join(o.Restores, ", ") + ")"
	case prune.OrphanNotOwned:
		return "never deleted: the namespace does not own the prefix (report only)"
	case prune.OrphanMarkerOut:
		if rep.Owned {
			return "no backups left: the marker is removed by the next orphan pass"
		}
		return "no backups left: the marker is kept (the namespace does not own the prefix)"
	case prune.OrphanDelete:
		return "deleted by the next orphan pass (grace over since " + fmtUTC(o.DeleteAfter) + ")"
	case prune.OrphanWaiting:
		if !o.Recorded {
			// The grace runs from the pass that records it: the deadline
			// is now + the grace at the earliest.
			return "deleted after " + fmtUTC(o.DeleteAfter) + " at the earliest (the next orphan pass records it; the grace runs from then)"
		}
		return "deleted after " + fmtUTC(o.DeleteAfter)
	}
	return o.State
}

// orphanNotes are the lines below inspect --all's table: one per orphan,
// or why the orphans could not be computed.
func (r *InspectAllReport) orphanNotes() []string {
	c := r.OrphanCheck
	if !c.Checked {
		return nil
	}
	if c.Error != "" {
		return []string{"orphans: " + c.Error}
	}
	var notes []string
	for _, o := range r.Orphans {
		since := "not yet recorded"
		if o.Recorded {
			since = "since " + fmtUTC(o.FirstSeen)
		}
		newest := ""
		if !o.NewestBackup.IsZero() {
			newest = ", newest " + fmtUTC(o.NewestBackup)
		}
		notes = append(notes, fmt.Sprintf("orphan %s: no EtcdCluster (%s), %d backups (%s)%s; %s",
			o.ClusterID, since, o.Backups, output.Bytes(o.Bytes), newest, o.Deletion))
	}
	if len(r.Orphans) > 0 && !c.Owned && c.NotOwned != "" {
		notes = append(notes, "orphans are only reported: "+c.NotOwned)
	}
	return notes
}

func fmtUTC(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }
