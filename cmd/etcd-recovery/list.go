package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/store"
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

func runList(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	clusterID := c.String("cluster-id")
	if clusterID == "" {
		return usagef("list: --cluster-id is required")
	}
	if err := catalog.ValidateClusterID(clusterID); err != nil {
		return asUsage(err)
	}
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return asUsage(err)
	}
	policy, err := policyFromFlags(c)
	if err != nil {
		return err
	}
	st, layout, err := cosStore(c)
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
	entries, err := catalog.Inventory(ctx, st, layout, clusterID)
	if err != nil {
		return named("list backups", fmt.Errorf("list cluster %s: %w", clusterID, err))
	}
	manifests, merrs, unknownErr := catalog.CheckEntries(ctx, st, layout, entries, catalog.DefaultCheckParallel)
	if err := ctx.Err(); err != nil {
		return named("read manifests", fmt.Errorf("list cluster %s: read manifests: %w", clusterID, err))
	}
	var uploads []store.Upload
	if mp, ok := st.(store.Multipart); ok {
		uploads, err = mp.ListUploads(ctx, layout.ClusterPrefix(clusterID))
	}
	if err == nil {
		var keys []string
		for _, e := range entries {
			if !e.Committed {
				keys = append(keys, catalog.UploadKeys(layout, e, nil)...)
			}
		}
		var exact []store.Upload
		exact, err = catalog.ListUploadsAt(ctx, st, keys, catalog.DefaultCheckParallel)
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
	drillErr := catalog.LoadDrills(ctx, st, layout, entries, catalog.DefaultCheckParallel)
	if err := ctx.Err(); err != nil {
		return named("read drill records", fmt.Errorf("list cluster %s: read drill records: %w", clusterID, err))
	}
	listed := make([]catalog.Listed, len(entries))
	for i, e := range entries {
		listed[i] = catalog.Listed{Entry: e, Manifest: manifests[i], ManifestErr: merrs[i]}
	}
	// Pure: the plan is only shown, nothing is deleted.
	decisions := map[string]catalog.Decision{}
	for _, d := range catalog.ApplyPolicy(entries, time.Now(), policy).Decisions {
		decisions[d.Entry.Name] = d
	}
	rows := make(catalog.ListRows, 0, len(listed))
	for _, l := range listed {
		d := decisions[l.Name]
		r := catalog.ListRow{Name: l.Name, Kind: l.Kind, Time: l.Time, Status: "committed",
			Retention: catalog.ListRetention{Keep: d.Keep, Rules: d.Rules, Reason: d.Reason}, Drill: l.Drill.Result()}
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
	marker, markerErr := catalog.ReadOrphanMarker(ctx, st, layout, clusterID)
	for i := range rows {
		rows[i].Orphan = marker
	}
	t := rows.Table()
	if markerErr != nil {
		t.Notes = append(t.Notes, fmt.Sprintf("orphan marker of cluster %s could not be read: %v", clusterID, markerErr))
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
