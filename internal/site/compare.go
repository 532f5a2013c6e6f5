package site

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
)

// The window each site can restore, side by side (`etcd-recovery sites`):
// per cluster and site, the newest committed backup, the journal's end
// and the restorable window (journal.LoadWindow, as list computes it),
// and how far the second site is behind the primary.

// Side is one site to compare: opened and checked (Err: why it cannot be
// read; it is then shown so, and the other site still is).
type Side struct {
	Site Name
	// Where is "bucket/prefix" as shown.
	Where  string
	Store  store.Store
	Layout catalog.Layout
	Err    error
}

// CompareOptions compare the sites.
type CompareOptions struct {
	Sides []Side
	// ClusterIDs are the clusters compared; empty: every cluster id with
	// a backup or a journal on any reachable site.
	ClusterIDs []string
	// Identities read an encrypted segment's header (the journal's
	// receive time); without them the end time is the segment's stored
	// time.
	Identities *seal.Identities
	Parallel   int
	Now        time.Time
}

// SiteInfo is a site as the comparison saw it.
type SiteInfo struct {
	Site  Name   `json:"site"`
	Where string `json:"where"`
	// Error is why the site could not be read (unreachable, refused).
	Error string `json:"error,omitempty"`
	// Replica is the copier's status record on the second site, when it
	// has one (catalog.ReplicaStatus); ReplicaError why it could not be
	// read (absent: no copier has written one).
	Replica      *catalog.ReplicaStatus `json:"replica,omitempty"`
	ReplicaError string                 `json:"replicaError,omitempty"`
}

// SiteWindow is one cluster on one site.
type SiteWindow struct {
	Site Name `json:"site"`
	// Error is why this cluster could not be read on this site (the
	// site's own error when it is unreachable).
	Error string `json:"error,omitempty"`
	// NewestBackup is the newest committed backup that checks out, its
	// revision and time.
	NewestBackup     string    `json:"newestBackup,omitempty"`
	NewestBackupRev  int64     `json:"newestBackupRevision,omitempty"`
	NewestBackupTime time.Time `json:"newestBackupTime,omitzero"`
	// Window is the restorable window (nil when it could not be read).
	Window *journal.Window `json:"window,omitempty"`
}

// ClusterSites is a cluster on every site, and the gap between the
// primary and the second site: how many revisions and how much time the
// second site's newest restorable point is behind the primary's (set
// only when both were read).
type ClusterSites struct {
	ClusterID    string       `json:"clusterID"`
	Sites        []SiteWindow `json:"sites"`
	GapRevisions *int64       `json:"gapRevisions,omitempty"`
	GapSeconds   *float64     `json:"gapSeconds,omitempty"`
}

// Comparison is `sites`' report.
type Comparison struct {
	Sites    []SiteInfo     `json:"sites"`
	Clusters []ClusterSites `json:"clusters"`
	// Err is the first cluster that could not be read on a reachable
	// site (shown in its row); nil when every reachable site read.
	Err error `json:"-"`
	now time.Time
}

// Compare reads each reachable site's clusters (CompareOptions.ClusterIDs,
// else every one found) and puts their windows side by side. An
// unreachable site is a column that says so, never a failure of the
// others; Comparison.Err is set when a cluster could not be read on a
// site that answered.
func Compare(ctx context.Context, opts CompareOptions) (*Comparison, error) {
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	par := opts.Parallel
	if par <= 0 {
		par = 8
	}
	out := &Comparison{now: now}
	ids := slices.Clone(opts.ClusterIDs)
	for i, s := range opts.Sides {
		info := SiteInfo{Site: s.Site, Where: s.Where}
		if s.Err != nil {
			info.Error = output.OneLine(s.Err)
		} else {
			if len(opts.ClusterIDs) == 0 {
				found, err := clusterIDs(ctx, s.Store, s.Layout)
				if err != nil {
					opts.Sides[i].Err = fmt.Errorf("listing the cluster ids under %q: %w", s.Layout.RootPrefix(), err)
					info.Error = output.OneLine(opts.Sides[i].Err)
				}
				ids = append(ids, found...)
			}
			if s.Site == Second && info.Error == "" {
				rs, err := catalog.ReadReplicaStatus(ctx, s.Store, s.Layout)
				switch {
				case err == nil:
					info.Replica = &rs
				case !store.IsNotFound(err):
					info.ReplicaError = output.OneLine(err)
				}
			}
		}
		out.Sites = append(out.Sites, info)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out.Clusters = make([]ClusterSites, len(ids))
	errs := make([]error, len(ids))
	fanout.ForEach(ctx, len(ids), par, func(ctx context.Context, i int) {
		cs := ClusterSites{ClusterID: ids[i]}
		for _, s := range opts.Sides {
			sw, err := windowOn(ctx, s, ids[i], opts.Identities)
			if err != nil && s.Err == nil && errs[i] == nil {
				errs[i] = err
			}
			cs.Sites = append(cs.Sites, sw)
		}
		cs.GapRevisions, cs.GapSeconds = gap(cs.Sites)
		out.Clusters[i] = cs
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out.Err = errors.Join(errs...)
	return out, nil
}

// clusterIDs are the cluster ids with a backup folder or a journal
// segment under layout's prefix (one listing).
func clusterIDs(ctx context.Context, st store.Store, layout catalog.Layout) ([]string, error) {
	objs, err := st.List(ctx, layout.RootPrefix())
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, o := range objs {
		switch ki := layout.Classify(o.Key); ki.Kind {
		case catalog.KeyBackup, catalog.KeyJournal:
			if len(ids) == 0 || ids[len(ids)-1] != ki.ClusterID {
				ids = append(ids, ki.ClusterID)
			}
		}
	}
	return ids, nil
}

// windowOn reads one cluster's backups and window on one site.
func windowOn(ctx context.Context, s Side, id string, ids *seal.Identities) (SiteWindow, error) {
	sw := SiteWindow{Site: s.Site}
	if s.Err != nil {
		sw.Error = "unreachable: " + output.OneLine(s.Err)
		if !Unreachable(s.Err) {
			sw.Error = "not read: " + output.OneLine(s.Err)
		}
		return sw, s.Err
	}
	listed, err := catalog.ListBackups(ctx, s.Store, s.Layout, id)
	if err != nil {
		err = fmt.Errorf("cluster %s on the %s site: listing its backups: %w", id, s.Site, err)
		sw.Error = output.OneLine(err)
		return sw, err
	}
	var bs []journal.WindowBackup
	for _, l := range listed {
		if !l.Committed || l.Damaged != "" || l.Manifest == nil || l.Manifest.Revision() < 1 {
			continue
		}
		bs = append(bs, journal.WindowBackup{Name: l.Name, Rev: l.Manifest.Revision(), Time: l.Time})
		if sw.NewestBackup == "" || l.Time.After(sw.NewestBackupTime) {
			sw.NewestBackup, sw.NewestBackupRev, sw.NewestBackupTime = l.Name, l.Manifest.Revision(), l.Time
		}
	}
	w, _, err := journal.LoadWindow(ctx, s.Store, s.Layout, id, bs, ids)
	if err != nil {
		err = fmt.Errorf("cluster %s on the %s site: %w", id, s.Site, err)
		sw.Error = output.OneLine(err)
		return sw, err
	}
	sw.Window = &w
	return sw, nil
}

// gap is how far the second site's newest restorable point is behind the
// primary's (nil unless both windows were read and hold something).
func gap(sites []SiteWindow) (*int64, *float64) {
	var p, s *journal.Window
	for _, sw := range sites {
		switch {
		case sw.Site == Primary && sw.Window != nil && sw.Window.ToRev > 0:
			p = sw.Window
		case sw.Site == Second && sw.Window != nil && sw.Window.ToRev > 0:
			s = sw.Window
		}
	}
	if p == nil || s == nil {
		return nil, nil
	}
	revs := p.ToRev - s.ToRev
	secs := p.ToTime.Sub(s.ToTime).Seconds()
	return &revs, &secs
}

// Table is the comparison: one row per cluster and site.
func (c *Comparison) Table() output.Table {
	t := output.Table{
		Header: []string{"CLUSTER", "SITE", "NEWEST BACKUP", "JOURNAL END", "WINDOW", "BEHIND PRIMARY", "ERROR"},
		Wide:   []string{"ERROR"},
		Long:   []string{"ERROR"},
	}
	for _, s := range c.Sites {
		line := fmt.Sprintf("%s site: %s", s.Site, s.Where)
		if s.Error != "" {
			line += ": " + s.Error
		}
		if r := s.Replica; r != nil {
			line += "; " + replicaLine(*r, c.now)
		} else if s.ReplicaError != "" {
			line += "; copier status unreadable: " + s.ReplicaError
		} else if s.Site == Second && s.Error == "" {
			line += "; no copier status (no copier has written _replica/status.json)"
		}
		t.Notes = append(t.Notes, line)
	}
	for _, cs := range c.Clusters {
		for _, sw := range cs.Sites {
			row := []string{cs.ClusterID, string(sw.Site), "-", "-", "-", "", sw.Error}
			if sw.NewestBackup != "" {
				row[2] = fmt.Sprintf("%s (rev %d, %s ago)", sw.NewestBackup, sw.NewestBackupRev, output.Age(c.now.Sub(sw.NewestBackupTime)))
			}
			if w := sw.Window; w != nil {
				if w.Journal {
					row[3] = fmt.Sprintf("rev %d at %s", w.LastRev, w.LastReceived.UTC().Format(time.RFC3339))
				} else {
					row[3] = "no journal"
				}
				if w.ToRev > 0 {
					row[4] = fmt.Sprintf("rev %d..%d (%s .. %s)", w.FromRev, w.ToRev, w.FromTime.UTC().Format(time.RFC3339), w.ToTime.UTC().Format(time.RFC3339))
					if n := len(w.Holes); n > 0 {
						row[4] += fmt.Sprintf(", %s", output.Count(n, "hole"))
					}
				}
			}
			if sw.Error != "" && sw.Window == nil {
				row[4] = "unavailable"
			}
			if sw.Site == Second && cs.GapRevisions != nil {
				n := *cs.GapRevisions
				row[5] = fmt.Sprintf("%d %s, %s", n, output.Plural(int(n), "revision", "revisions"), output.Age(time.Duration(*cs.GapSeconds*float64(time.Second))))
			}
			t.Rows = append(t.Rows, row)
		}
	}
	if len(c.Clusters) == 0 {
		t.Notes = append(t.Notes, "no cluster found on any reachable site")
	}
	return t
}

// replicaLine sums up the copier's status record.
func replicaLine(r catalog.ReplicaStatus, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "copier %s: status written %s ago", r.Copier, output.Age(now.Sub(r.Updated)))
	if r.SyncedAt.IsZero() {
		b.WriteString(", no full pass completed yet")
	} else {
		fmt.Fprintf(&b, ", in sync with the primary as of %s ago", output.Age(now.Sub(r.SyncedAt)))
	}
	fmt.Fprintf(&b, ", %s pending", output.Count(r.Pending, "object"))
	if n := len(r.Failures); n > 0 {
		fmt.Fprintf(&b, ", %d %s FAILED verification", n, output.Plural(n, "copy", "copies"))
	}
	return b.String()
}
