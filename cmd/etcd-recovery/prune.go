package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/kube"
)

func pruneCommand() *cli.Command {
	return &cli.Command{
		Name:  "prune",
		Usage: "apply the retention policy in COS: delete old backups (manifest first) and stale multipart uploads",
		Description: "Lists the cluster (or, with --all-cluster-ids, every cluster under the prefix) once, checks every committed\n" +
			"backup (its manifest parses and every object it names is stored with the recorded size), decides for\n" +
			"every backup whether to keep or delete it and why, then deletes. Damaged backups count for no rule; the\n" +
			"exit is 1 while a cluster's newest backup that checks out is older than its newest backup. If a listing\n" +
			"or a manifest read fails, nothing is deleted.\n" +
			"Manual and pre-restore backups are never deleted here: use `etcd-recovery delete`.\n" +
			"With --orphans (Kubernetes: in a pod, or --kubeconfig/--namespace): the cluster ids under --prefix without an EtcdCluster\n" +
			"in the namespace are orphans, recorded (<prefix>/<id>/orphan.json) and, once --orphan-grace has passed since their\n" +
			"newest backup, deleted with every backup (any kind) - only when the namespace owns the prefix (--claim-prefix, once),\n" +
			"every listing succeeded and no EtcdRestore references them. Otherwise orphans are only reported.",
		Flags: concat(cosFlags(), kubeFlags(), []cli.Flag{
			clusterIDFlag(),
			&cli.BoolFlag{Name: "all-cluster-ids", Usage: "prune every cluster id with backups under --prefix (instead of --cluster-id); " +
				"with a prefix shared by several namespaces, that is all of them"},
			orphansFlag(),
			orphanGraceFlag(),
			&cli.BoolFlag{Name: "claim-prefix", Usage: "record (once, with a conditional create) that the namespace owns --prefix: " +
				"<prefix>/" + backup.OwnerObject + "; orphans are deleted only under an owned, non-empty prefix"},
			dryRunFlag(),
			outputFlag(),
			timeoutFlag(),
		}, policyFlags(), deprecatedFlagsOf("prune")),
		Action: runPrune,
	}
}

// policyFlags are the retention policy flags of prune, backup --prune and
// list.
func policyFlags() []cli.Flag {
	d := backup.DefaultPolicy()
	days := make([]string, len(d.AnchorDays))
	for i, n := range d.AnchorDays {
		days[i] = strconv.Itoa(n)
	}
	return []cli.Flag{
		&cli.IntFlag{Name: "keep-recent", Value: d.Recent, Usage: "keep this many newest committed scheduled backups"},
		&cli.IntFlag{Name: "keep-anchors", Value: d.Anchors, Usage: "keep the earliest backup of this many most recent anchor dates"},
		&cli.StringFlag{Name: "anchor-days", Value: strings.Join(days, ","), Usage: "days of the month that are anchor dates (comma-separated, UTC)"},
		&cli.BoolFlag{Name: "keep-today-updates", Value: d.KeepTodayUpdates, Usage: "keep every update backup taken today (UTC)"},
		&cli.DurationFlag{Name: "incomplete-after", Value: d.IncompleteAfter, Usage: "delete folders without a manifest last written longer ago than this (at least " + backup.MinIncompleteAfter.String() + ": a backup may be in flight)"},
	}
}

// policyFromFlags builds and validates the policy from policyFlags.
func policyFromFlags(c *cli.Context) (backup.Policy, error) {
	p := backup.DefaultPolicy()
	p.Recent = c.Int("keep-recent")
	p.Anchors = c.Int("keep-anchors")
	p.KeepTodayUpdates = c.Bool("keep-today-updates")
	p.IncompleteAfter = c.Duration("incomplete-after")
	p.AnchorDays = nil
	for _, f := range strings.Split(c.String("anchor-days"), ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return p, usagef("--anchor-days %q: %q is not a day of the month", c.String("anchor-days"), f)
		}
		p.AnchorDays = append(p.AnchorDays, n)
	}
	if err := p.Validate(); err != nil {
		return p, usageError{err}
	}
	return p, nil
}

func runPrune(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	log, err := logger(c)
	if err != nil {
		return err
	}
	opts := backup.PruneOptions{All: c.Bool("all-cluster-ids"), DryRun: c.Bool("dry-run"), Log: log}
	id := c.String("cluster-id")
	lifecycle := c.Bool("orphans") || c.Bool("claim-prefix")
	switch {
	case opts.All && id != "":
		return usagef("prune: --cluster-id and --all are exclusive")
	case !opts.All && id == "" && !lifecycle:
		return usagef("prune: --cluster-id, --all-cluster-ids or --orphans is required")
	case c.IsSet("orphan-grace") && !c.Bool("orphans"):
		return usagef("prune: --orphan-grace is for --orphans")
	case c.Bool("orphans") && c.Duration("orphan-grace") < backup.MinOrphanGrace:
		return usagef("prune: --orphan-grace %s: want at least %s", c.Duration("orphan-grace"), backup.MinOrphanGrace)
	case id != "":
		if err := backup.ValidateClusterID(id); err != nil {
			return usageError{err}
		}
		opts.ClusterIDs = []string{id}
	}
	if opts.Policy, err = policyFromFlags(c); err != nil {
		return err
	}
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return usageError{err}
	}
	if lifecycle {
		return runPruneLifecycle(c, opts, id != "" || opts.All, format)
	}
	store, layout, err := cosStore(c)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout = store, layout
	ctx, cancel, named, err := runDeadline(c)
	if err != nil {
		return err
	}
	defer cancel()
	rep, err := backup.Prune(ctx, opts)
	if rep != nil {
		if rerr := renderPrune(c, format, rep); rerr != nil && err == nil {
			err = rerr
		}
	}
	var pe *backup.PruneError
	if errors.As(err, &pe) {
		return named(pe.Step, err)
	}
	return named("prune", err)
}

// pruneHeader is the table of prune, backup --prune and delete.
var pruneHeader = []string{"CLUSTER", "BACKUP", "KIND", "TIME (UTC)", "ACTION", "REASON"}

// pruneTableOf is the table: the time is in the backup's name (-o wide
// shows it apart), and the reasons go below it by default, one line per
// backup.
func pruneTableOf(rows [][]string) output.Table {
	return output.Table{Header: pruneHeader, Rows: rows, Wide: []string{"TIME (UTC)"}, Long: []string{"REASON"}, Key: "BACKUP"}
}

// pruneRows are the table rows of a prune report: every backup, then every
// multipart upload, per cluster.
func pruneRows(rep *backup.PruneReport) [][]string {
	var rows [][]string
	for _, c := range rep.Clusters {
		for _, a := range c.Backups {
			rows = append(rows, backupRow(a))
		}
		for _, u := range c.Uploads {
			reason := u.Reason
			if u.Error != "" {
				reason += "; " + u.Error
			}
			rows = append(rows, []string{u.ClusterID, u.Name, "upload: " + pathBase(u.Key), fmtTime(u.Initiated), u.Action, reason})
		}
	}
	return rows
}

func backupRow(a backup.BackupAction) []string {
	reason := a.Reason
	if a.Error != "" {
		reason += "; " + a.Error
	}
	kind := string(a.Kind)
	switch {
	case !a.Committed:
		kind += " (incomplete)"
	case a.Damaged != "":
		kind += " (damaged)"
	}
	return []string{a.ClusterID, a.Name, kind, fmtTime(a.Time), a.Action, reason}
}

func renderPrune(c *cli.Context, format output.Format, rep *backup.PruneReport) error {
	if err := output.Render(c.App.Writer, format, pruneTableOf(pruneRows(rep)), rep); err != nil {
		return err
	}
	if format != output.FormatJSON {
		verb := "deleted"
		if rep.DryRun {
			verb = "would delete"
		}
		_, err := fmt.Fprintf(c.App.Writer, "%d kept, %s %d (%d failed), %d damaged, %d of %d multipart uploads to abort; listed %d objects in %s\n",
			rep.Kept, verb, planned(rep), rep.Failed, rep.Damaged, rep.Stale, rep.Uploads, rep.Stats.ObjectsListed, rep.Stats.Duration.Round(time.Millisecond))
		if err != nil {
			return err
		}
		for _, cl := range rep.Clusters {
			if cl.Problem != "" {
				if _, err := fmt.Fprintf(c.App.Writer, "WARNING: %s\n", cl.Problem); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func planned(rep *backup.PruneReport) int {
	if rep.DryRun {
		return rep.Planned
	}
	return rep.Deleted
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

func pathBase(key string) string { return key[strings.LastIndex(key, "/")+1:] }

func orphansFlag() cli.Flag {
	return &cli.BoolFlag{Name: "orphans", Usage: "also handle orphans: cluster ids under --prefix without an EtcdCluster in the namespace " +
		"(recorded; their backups deleted after --orphan-grace, only under a prefix the namespace owns)"}
}

func orphanGraceFlag() cli.Flag {
	return &cli.DurationFlag{Name: "orphan-grace", Value: backup.DefaultOrphanGrace,
		Usage: "an orphan's backups are deleted this long after its newest backup (at least " + backup.MinOrphanGrace.String() + ")"}
}

// pruneLifecycleResult is prune --orphans / --claim-prefix's JSON.
type pruneLifecycleResult struct {
	Claim   *claimResult         `json:"claim,omitempty"`
	Orphans *backup.OrphanReport `json:"orphans,omitempty"`
	Prune   *backup.PruneReport  `json:"prune,omitempty"`
}

type claimResult struct {
	Key     string              `json:"key"`
	Created bool                `json:"created"`
	Owner   *backup.OwnerRecord `json:"owner,omitempty"`
}

// runPruneLifecycle is prune with --orphans or --claim-prefix: the claim,
// the orphan pass, then (with --cluster-id/--all-cluster-ids) the prune.
func runPruneLifecycle(c *cli.Context, opts backup.PruneOptions, prune bool, format output.Format) error {
	k, err := kubeClient(c)
	if err != nil {
		return err
	}
	store, layout, err := cosStoreKube(c, k)
	if err != nil {
		return err
	}
	if c.Bool("claim-prefix") && layout.RootPrefix() == "" {
		return usageError{fmt.Errorf("prune --claim-prefix: %w", backup.ErrSharedPrefix)}
	}
	ctx, cancel, named, err := runDeadline(c)
	if err != nil {
		return err
	}
	defer cancel()
	var res pruneLifecycleResult
	w := c.App.Writer
	if c.Bool("claim-prefix") {
		rec, created, err := backup.ClaimPrefix(ctx, store, layout, k.Namespace, time.Now())
		if err != nil {
			return named("claim prefix", err)
		}
		res.Claim = &claimResult{Key: backup.OwnerKey(layout), Created: created, Owner: rec}
		opts.Log.Info("prefix owned by the namespace", "prefix", rec.Prefix, "namespace", rec.Namespace, "claimed_at", rec.ClaimedAt, "created", created)
	}
	var errs []error
	if c.Bool("orphans") {
		rep, err := kube.Orphans(ctx, k, store, layout, kube.OrphanPlan{Grace: c.Duration("orphan-grace"), DryRun: opts.DryRun}, opts.Log)
		res.Orphans = rep
		if err != nil {
			var pe *backup.PruneError
			if errors.As(err, &pe) {
				err = named(pe.Step, err)
			}
			errs = append(errs, err)
		}
	}
	if prune {
		opts.Store, opts.Layout = store, layout
		rep, err := backup.Prune(ctx, opts)
		res.Prune = rep
		if err != nil {
			var pe *backup.PruneError
			if errors.As(err, &pe) {
				err = named(pe.Step, err)
			}
			errs = append(errs, err)
		}
	}
	if format == output.FormatJSON {
		if err := output.Render(w, format, output.Table{}, res); err != nil {
			return err
		}
		return errors.Join(errs...)
	}
	if cl := res.Claim; cl != nil {
		verb := "already owned by"
		if cl.Created {
			verb = "now owned by"
		}
		fmt.Fprintf(w, "prefix %s: %s namespace %s (%s, claimed %s)\n", cl.Owner.Prefix, verb, cl.Owner.Namespace, cl.Key, fmtTime(cl.Owner.ClaimedAt))
	}
	if res.Orphans != nil {
		if err := renderOrphans(w, format, res.Orphans); err != nil {
			return err
		}
	}
	if res.Prune != nil {
		if err := renderPrune(c, format, res.Prune); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// orphanTable is the table of an orphan pass (prune --orphans, backup
// --all --prune): one row per orphan, the reasons below it.
func orphanTable(rep *backup.OrphanReport) output.Table {
	t := output.Table{Header: []string{"CLUSTER", "BACKUPS", "SIZE", "NEWEST BACKUP", "FIRST SEEN", "DELETE AFTER", "STATE", "REASON"},
		Wide: []string{"SIZE", "NEWEST BACKUP"}, Long: []string{"REASON"}, Key: "CLUSTER"}
	for _, o := range rep.Orphans {
		reason := o.Reason
		if o.Error != "" {
			reason += "; " + o.Error
		}
		t.Rows = append(t.Rows, []string{o.ClusterID, fmt.Sprint(o.Backups), output.Bytes(o.Bytes), fmtTime(o.NewestBackup),
			fmtTime(o.FirstSeen), fmtTime(o.DeleteAfter), o.State, reason})
	}
	own := fmt.Sprintf("prefix %q owned by namespace %s: orphans are deleted after their grace (%s)", rep.Prefix, rep.Namespace, rep.Grace)
	if !rep.Owned {
		own = fmt.Sprintf("orphans are reported, never deleted: %s", rep.NotOwned)
	}
	t.Notes = append(t.Notes, fmt.Sprintf("orphans of namespace %s (%d EtcdClusters): %d; %s", rep.Namespace, rep.EtcdClusters, len(rep.Orphans), own))
	if rep.DryRun {
		t.Notes = append(t.Notes, "dry run: nothing deleted, no marker written")
	}
	return t
}

func renderOrphans(w io.Writer, format output.Format, rep *backup.OrphanReport) error {
	return output.Render(w, format, orphanTable(rep), rep)
}
