package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/output"
)

const defaultProbeTimeout = 3 * time.Second

func listCommand() *cli.Command {
	return &cli.Command{
		Name: "list",
		Usage: "list a cluster's backups, newest first, with each one's state (committed, incomplete, damaged), " +
			"its restore drill (passed, FAILED, never, unreadable) and why retention keeps or deletes it",
		Flags:  concat(cosFlags(), []cli.Flag{clusterIDFlag(), outputFlag(), timeoutFlag()}, policyFlags()),
		Action: runList,
	}
}

// noArgs refuses stray positional arguments (exit 4).
func noArgs(c *cli.Context) error {
	if c.Args().Present() {
		return usagef("%s: unexpected argument %q (this command takes flags only)", c.Command.Name, c.Args().First())
	}
	return nil
}

// runDeadline is the command's context bounded by --timeout, and a function
// that names the step and the limit when err is that deadline.
func runDeadline(c *cli.Context) (context.Context, context.CancelFunc, func(step string, err error) error, error) {
	d := c.Duration("timeout")
	if d <= 0 {
		return nil, nil, nil, usagef("--timeout must be positive, got %v", d)
	}
	ctx, cancel := context.WithTimeout(c.Context, d)
	named := func(step string, err error) error {
		if err != nil && ctx.Err() == context.DeadlineExceeded && c.Context.Err() == nil {
			return fmt.Errorf("%s: timed out after %s (--timeout) at step %q: %w", c.Command.Name, d, step, err)
		}
		return err
	}
	return ctx, cancel, named, nil
}

// listRow is one backup in `list`, for both the table and JSON.
type listRow struct {
	Name string      `json:"name"`
	Kind backup.Kind `json:"kind"`
	Time time.Time   `json:"time"`
	// Status is committed, incomplete, "damaged: <why>" (it cannot
	// restore: manifest unreadable, an object missing or of the wrong size)
	// or "unknown: ..." (its manifest could not be read: a store error).
	Status   string `json:"status"`
	Damaged  string `json:"damaged,omitempty"`
	Revision int64  `json:"revision,omitempty"`
	RawSize  int64  `json:"rawSize,omitempty"`
	// StoredSize is the snapshot object's size as stored (compressed), as
	// backup's STORED; TotalSize is every object of the backup (snapshot,
	// v2 export, manifest, marker), as the bucket bills it.
	StoredSize int64            `json:"storedSize,omitempty"`
	TotalSize  int64            `json:"totalSize"`
	V2Keys     *int             `json:"v2Keys,omitempty"`
	Source     string           `json:"source,omitempty"`
	Error      string           `json:"error,omitempty"`
	Manifest   *backup.Manifest `json:"manifest,omitempty"`
	// Drill is the backup's restore drill (drill.json): {passed, at,
	// failed, mode, error}; null when it was never drilled.
	Drill *backup.DrillResult `json:"drill"`
	// Retention is what prune would do with the backup now.
	Retention retention `json:"retention"`
	// Orphan is the cluster's orphan marker (the same on every row): the
	// last orphan pass found no EtcdCluster of this name; its backups go
	// after deleteAfter. Absent when the cluster is not an orphan.
	Orphan *backup.OrphanMarker `json:"orphan,omitempty"`
}

// retention is the retention decision for one backup in `list`.
type retention struct {
	Keep   bool     `json:"keep"`
	Rules  []string `json:"rules,omitempty"`
	Reason string   `json:"reason"`
}

func (r retention) String() string {
	if r.Keep {
		return "keep: " + r.Reason
	}
	return "would delete: " + r.Reason
}

func runList(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	clusterID := c.String("cluster-id")
	if clusterID == "" {
		return usagef("list: --cluster-id is required")
	}
	if err := backup.ValidateClusterID(clusterID); err != nil {
		return usageError{err}
	}
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return usageError{err}
	}
	policy, err := policyFromFlags(c)
	if err != nil {
		return err
	}
	store, layout, err := cosStore(c)
	if err != nil {
		return err
	}
	ctx, cancel, named, err := runDeadline(c)
	if err != nil {
		return err
	}
	defer cancel()
	// The same inventory and checks as prune: every committed backup's
	// manifest is read and the objects it names are checked against the
	// listing; incomplete folders are aged with their uploads.
	entries, err := backup.Inventory(ctx, store, layout, clusterID)
	if err != nil {
		return named("list backups", fmt.Errorf("list cluster %s: %w", clusterID, err))
	}
	manifests, merrs, unknownErr := backup.CheckEntries(ctx, store, layout, entries, backup.DefaultCheckParallel)
	if err := ctx.Err(); err != nil {
		return named("read manifests", fmt.Errorf("list cluster %s: read manifests: %w", clusterID, err))
	}
	var uploads []backup.Upload
	if mp, ok := store.(backup.Multipart); ok {
		uploads, err = mp.ListUploads(ctx, layout.ClusterPrefix(clusterID))
	}
	if err == nil {
		var keys []string
		for _, e := range entries {
			if !e.Committed {
				keys = append(keys, backup.UploadKeys(layout, e, nil)...)
			}
		}
		var exact []backup.Upload
		exact, err = backup.ListUploadsAt(ctx, store, keys, backup.DefaultCheckParallel)
		uploads = append(uploads, exact...)
	}
	if err != nil {
		return named("list multipart uploads", fmt.Errorf("list cluster %s: %w", clusterID, err))
	}
	for i := range entries {
		prefix := layout.BackupPrefix(clusterID, entries[i].Name)
		seen := map[string]bool{}
		for _, u := range uploads {
			if len(u.Key) > len(prefix) && u.Key[:len(prefix)] == prefix && !seen[u.UploadID] {
				seen[u.UploadID] = true
				entries[i].Uploads = append(entries[i].Uploads, u)
			}
		}
	}
	// The drill records, as prune reads them: the drilled rule keeps by
	// them. One the store failed to return is shown as unreadable, and the
	// exit is 1 (its proof is unknown).
	drillErr := backup.LoadDrills(ctx, store, layout, entries, backup.DefaultCheckParallel)
	if err := ctx.Err(); err != nil {
		return named("read drill records", fmt.Errorf("list cluster %s: read drill records: %w", clusterID, err))
	}
	listed := make([]backup.Listed, len(entries))
	for i, e := range entries {
		listed[i] = backup.Listed{Entry: e, Manifest: manifests[i], ManifestErr: merrs[i]}
	}
	// Pure: the plan is only shown, nothing is deleted.
	decisions := map[string]backup.Decision{}
	for _, d := range backup.ApplyPolicy(entries, time.Now(), policy).Decisions {
		decisions[d.Entry.Name] = d
	}
	rows := make([]listRow, 0, len(listed))
	for _, l := range listed {
		d := decisions[l.Name]
		r := listRow{Name: l.Name, Kind: l.Kind, Time: l.Time, Status: "committed",
			Retention: retention{Keep: d.Keep, Rules: d.Rules, Reason: d.Reason}, Drill: l.Drill.Result()}
		for _, o := range l.Objects {
			r.TotalSize += o.Size
		}
		r.Damaged = l.Damaged
		switch {
		case !l.Committed:
			r.Status = "incomplete"
		case l.ManifestErr != nil && l.Damaged == "":
			r.Status, r.Error = "unknown: manifest could not be read", l.ManifestErr.Error()
		case l.ManifestErr != nil:
			r.Status, r.Error = "damaged: "+l.Damaged, l.ManifestErr.Error()
		default:
			if l.Damaged != "" {
				r.Status = "damaged: " + l.Damaged
			}
			m := l.Manifest
			r.Revision, r.RawSize, r.Source, r.Manifest = m.RevisionBefore, m.Snapshot.RawSize, m.Source.Name, m
			r.StoredSize = m.Snapshot.StoredSize
			if m.V2 != nil {
				r.V2Keys = &m.V2.Keys
			}
		}
		rows = append(rows, r)
	}
	// The orphan marker (prune --orphans, backup --all --prune): one read.
	marker, markerErr := backup.ReadOrphanMarker(ctx, store, layout, clusterID)
	t := listTable(rows)
	switch {
	case markerErr != nil:
		t.Notes = append(t.Notes, fmt.Sprintf("orphan marker of cluster %s could not be read: %v", clusterID, markerErr))
	case marker != nil:
		for i := range rows {
			rows[i].Orphan = marker
		}
		t.Notes = append(t.Notes, orphanNote(marker, time.Now()))
	}
	if err := output.Render(c.App.Writer, format, t, rows); err != nil {
		return err
	}
	if unknownErr != nil {
		// Shown in the table; the state of those backups is unknown.
		return fmt.Errorf("list cluster %s: %w", clusterID, unknownErr)
	}
	if drillErr != nil {
		return fmt.Errorf("list cluster %s: %w", clusterID, drillErr)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return named("render", ctx.Err())
	}
	return nil
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// drillCell is the DRILL cell: "passed 3h00m ago", "FAILED 2h00m ago",
// "never" or "unreadable".
func drillCell(d *backup.DrillResult, now time.Time) string {
	switch {
	case d == nil:
		return "never"
	case d.Error != "":
		return "unreadable"
	}
	word := "FAILED"
	if d.Passed {
		word = "passed"
	}
	if d.At == nil {
		return word
	}
	return word + " " + shortAge(now.Sub(*d.At)) + " ago"
}

// shortAge is an age to the unit that matters for a daily drill: 45s, 12m,
// 3h, 26h, then days.
func shortAge(d time.Duration) string {
	switch {
	case d < 0:
		return "in " + shortAge(-d)
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours())/24)
}

// drillNote is the drill's detail for the REASON text: the failed check,
// or why the record could not be read ("" when it passed or never ran).
func drillNote(d *backup.DrillResult) string {
	switch {
	case d == nil:
		return ""
	case d.Error != "":
		return "drill record unreadable: " + d.Error
	case !d.Passed:
		return "drill FAILED: " + d.Failed
	}
	return ""
}

// listTable is list's table: STORED is the snapshot object's size as
// stored (as in backup), TOTAL every object of the backup; RAW (the
// database's size) is in -o wide. DRILL is the restore drill's result and
// age; -o wide adds its comparison (DRILL MODE: source or
// self-consistency), and a failed check goes with the reason.
func listTable(rows []listRow) output.Table {
	now := time.Now()
	t := output.Table{Header: []string{"BACKUP", "KIND", "TIME (UTC)", "STATUS", "REVISION", "RAW", "STORED", "TOTAL", "V2 KEYS", "SOURCE",
		"DRILL", "DRILL MODE", "KEEP", "REASON"},
		Wide: []string{"KIND", "TIME (UTC)", "RAW", "TOTAL", "SOURCE", "DRILL MODE"}, Long: []string{"REASON"}}
	for _, r := range rows {
		v2 := "-"
		if r.V2Keys != nil {
			v2 = fmt.Sprint(*r.V2Keys)
		}
		rev, raw, stored := "-", "-", "-"
		if r.Revision > 0 {
			rev, raw, stored = fmt.Sprint(r.Revision), output.Bytes(r.RawSize), output.Bytes(r.StoredSize)
		}
		// STATUS is one word; what is damaged, and the error, go with
		// the retention reason (below the table by default).
		status, _, _ := strings.Cut(r.Status, ":")
		reason := r.Retention.String()
		if r.Damaged != "" {
			reason += "; damaged: " + r.Damaged
		}
		if r.Error != "" {
			reason += "; " + r.Error
		}
		if n := drillNote(r.Drill); n != "" && !strings.Contains(reason, r.Drill.Failed+r.Drill.Error) {
			reason += "; " + n
		}
		keep := map[bool]string{true: "keep", false: "delete"}[r.Retention.Keep]
		mode := "-"
		if r.Drill != nil && r.Drill.Mode != "" {
			mode = r.Drill.Mode
		}
		t.Rows = append(t.Rows, []string{r.Name, string(r.Kind), r.Time.Format("2006-01-02 15:04:05"), status, rev, raw,
			stored, output.Bytes(r.TotalSize), v2, dashIfEmpty(r.Source), drillCell(r.Drill, now), mode, keep, reason})
	}
	return t
}

// orphanNote is the line list and inspect --all show for an orphan.
func orphanNote(m *backup.OrphanMarker, now time.Time) string {
	when := "after " + fmtTime(m.DeleteAfter) + " UTC"
	if !now.Before(m.DeleteAfter) {
		when = "at the next orphan pass (grace over since " + fmtTime(m.DeleteAfter) + " UTC)"
	}
	return fmt.Sprintf("orphan: no EtcdCluster %s in namespace %s since %s UTC, backups deleted %s (newest backup + %s; only under a prefix the namespace owns)",
		m.ClusterID, m.Namespace, fmtTime(m.FirstSeen), when, m.Grace)
}
