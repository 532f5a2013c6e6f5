package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
)

func pruneCommand() *cli.Command {
	return &cli.Command{
		Name:  "prune",
		Usage: "apply the retention policy in COS: delete old backups (manifest first) and stale multipart uploads",
		Description: "Lists the cluster (or, with --all-cluster-ids, every cluster under the prefix) once, checks every committed\n" +
			"backup (its manifest parses and every object it names is stored with the recorded size), decides for\n" +
			"every backup whether to keep or delete it and why, then deletes. Damaged backups count for no rule; the\n" +
			"exit is 1 while a cluster's newest backup that checks out is older than its newest backup. If a listing\n" +
			"or a manifest read fails, nothing is deleted. Staged plaintext copies (<prefix>/restore/, left by a restore via\n" +
			"etcd-operator) older than 1h are deleted too; one that cannot be deleted is counted (stagedFailed) and exits 1, naming its key.\n" +
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
				"<prefix>/" + catalog.OwnerObject + "; orphans are deleted only under an owned, non-empty prefix"},
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
	d := catalog.DefaultPolicy()
	days := make([]string, len(d.AnchorDays))
	for i, n := range d.AnchorDays {
		days[i] = strconv.Itoa(n)
	}
	return []cli.Flag{
		&cli.IntFlag{Name: "keep-recent", Value: d.Recent, Usage: "keep this many newest committed scheduled backups"},
		&cli.IntFlag{Name: "keep-anchors", Value: d.Anchors, Usage: "keep the earliest backup of this many most recent anchor dates"},
		&cli.StringFlag{Name: "anchor-days", Value: strings.Join(days, ","), Usage: "days of the month that are anchor dates (comma-separated, UTC)"},
		&cli.BoolFlag{Name: "keep-today-updates", Value: d.KeepTodayUpdates, Usage: "keep every update backup taken today (UTC)"},
		&cli.DurationFlag{Name: "incomplete-after", Value: d.IncompleteAfter, Usage: "delete folders without a manifest last written longer ago than this (at least " + catalog.MinIncompleteAfter.String() + ": a backup may be in flight)"},
	}
}

// policyFromFlags builds and validates the policy from policyFlags.
func policyFromFlags(c *cli.Context) (catalog.Policy, error) {
	p := catalog.DefaultPolicy()
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
		return p, asUsage(err)
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
	opts := catalog.PruneOptions{All: c.Bool("all-cluster-ids"), DryRun: c.Bool("dry-run"), Log: log}
	id := c.String("cluster-id")
	lifecycle := c.Bool("orphans") || c.Bool("claim-prefix")
	// The prune's options are catalog's to check; --orphans and
	// --claim-prefix (Kubernetes) are this command's.
	switch {
	case !opts.All && id == "" && !lifecycle:
		return usagef("prune: --cluster-id, --all-cluster-ids or --orphans is required")
	case c.IsSet("orphan-grace") && !c.Bool("orphans"):
		return usagef("prune: --orphan-grace is for --orphans")
	case c.Bool("orphans"):
		if err := (catalog.OrphanOptions{Grace: c.Duration("orphan-grace")}).Validate(); err != nil {
			return fmt.Errorf("prune: %w", err)
		}
	}
	if id != "" {
		opts.ClusterIDs = []string{id}
	}
	if opts.Policy, err = policyFromFlags(c); err != nil {
		return err
	}
	if id != "" || opts.All {
		if err := opts.Validate(); err != nil {
			return err
		}
	}
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return asUsage(err)
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
	rep, err := catalog.Prune(ctx, opts)
	if rep != nil {
		if rerr := output.Render(c.App.Writer, format, rep.Table(), rep); rerr != nil && err == nil {
			err = rerr
		}
	}
	var pe *catalog.PruneError
	if errors.As(err, &pe) {
		return named(pe.Step, err)
	}
	return named("prune", err)
}

func orphansFlag() cli.Flag {
	return &cli.BoolFlag{Name: "orphans", Usage: "also handle orphans: cluster ids under --prefix without an EtcdCluster in the namespace " +
		"(recorded; their backups deleted after --orphan-grace, only under a prefix the namespace owns)"}
}

func orphanGraceFlag() cli.Flag {
	return &cli.DurationFlag{Name: "orphan-grace", Value: catalog.DefaultOrphanGrace,
		Usage: "an orphan's backups are deleted this long after its newest backup (at least " + catalog.MinOrphanGrace.String() + ")"}
}

// pruneLifecycleResult is prune --orphans / --claim-prefix's JSON.
type pruneLifecycleResult struct {
	Claim   *claimResult          `json:"claim,omitempty"`
	Orphans *catalog.OrphanReport `json:"orphans,omitempty"`
	Prune   *catalog.PruneReport  `json:"prune,omitempty"`
}

type claimResult struct {
	Key     string               `json:"key"`
	Created bool                 `json:"created"`
	Owner   *catalog.OwnerRecord `json:"owner,omitempty"`
}

// runPruneLifecycle is prune with --orphans or --claim-prefix: the claim,
// the orphan pass, then (with --cluster-id/--all-cluster-ids) the prune.
func runPruneLifecycle(c *cli.Context, opts catalog.PruneOptions, prune bool, format output.Format) error {
	k, err := kubeClient(c)
	if err != nil {
		return err
	}
	store, layout, err := cosStoreKube(c, k)
	if err != nil {
		return err
	}
	if c.Bool("claim-prefix") && layout.RootPrefix() == "" {
		return asUsage(fmt.Errorf("prune --claim-prefix: %w", catalog.ErrSharedPrefix))
	}
	ctx, cancel, named, err := runDeadline(c)
	if err != nil {
		return err
	}
	defer cancel()
	var res pruneLifecycleResult
	w := c.App.Writer
	if c.Bool("claim-prefix") {
		rec, created, err := catalog.ClaimPrefix(ctx, store, layout, k.Namespace, time.Now())
		if err != nil {
			return named("claim prefix", err)
		}
		res.Claim = &claimResult{Key: catalog.OwnerKey(layout), Created: created, Owner: rec}
		opts.Log.Info("prefix owned by the namespace", "prefix", rec.Prefix, "namespace", rec.Namespace, "claimed_at", rec.ClaimedAt, "created", created)
	}
	var errs []error
	if c.Bool("orphans") {
		rep, err := fleet.Orphans(ctx, k, store, layout, fleet.OrphanOptions{Grace: c.Duration("orphan-grace"), DryRun: opts.DryRun}, opts.Log)
		res.Orphans = rep
		if err != nil {
			var pe *catalog.PruneError
			if errors.As(err, &pe) {
				err = named(pe.Step, err)
			}
			errs = append(errs, err)
		}
	}
	if prune {
		opts.Store, opts.Layout = store, layout
		rep, err := catalog.Prune(ctx, opts)
		res.Prune = rep
		if err != nil {
			var pe *catalog.PruneError
			if errors.As(err, &pe) {
				err = named(pe.Step, err)
			}
			errs = append(errs, err)
		}
	}
	if err := output.RenderAll(w, format, res.Tables(), res); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// Tables are the claim, the orphan pass and the prune, those that ran.
func (res *pruneLifecycleResult) Tables() []output.Table {
	var out []output.Table
	if cl := res.Claim; cl != nil {
		verb := "already owned by"
		if cl.Created {
			verb = "now owned by"
		}
		out = append(out, output.Table{Title: fmt.Sprintf("prefix %s: %s namespace %s (%s, claimed %s)\n", cl.Owner.Prefix, verb,
			cl.Owner.Namespace, cl.Key, cl.Owner.ClaimedAt.UTC().Format("2006-01-02 15:04:05"))})
	}
	if res.Orphans != nil {
		out = append(out, res.Orphans.Table())
	}
	if res.Prune != nil {
		out = append(out, res.Prune.Table())
	}
	return out
}
