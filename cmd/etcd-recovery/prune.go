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
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
)

// pruneOpts are prune's flags.
type pruneOpts struct {
	store                                       storeOpts
	kube                                        kubeOpts
	policy                                      policyOpts
	lock                                        lockOpts
	clusterID, output                           string
	allClusterIDs, orphans, claimPrefix, dryRun bool
	orphanGrace, timeout                        time.Duration
	journalRetention                            time.Duration
}

func pruneCommand(g *globalOpts) *cli.Command {
	o := &pruneOpts{}
	return &cli.Command{
		Name:  "prune",
		Usage: "apply the retention policy in COS: delete old backups (manifest first) and stale multipart uploads",
		Description: "Lists the cluster (or, with --all-cluster-ids, every cluster under the prefix) once, checks every committed\n" +
			"backup (its manifest parses and every object it names is stored with the recorded size), decides for\n" +
			"every backup whether to keep or delete it and why, then deletes. Damaged backups count for no rule; the\n" +
			"exit is 1 while a cluster's newest backup that checks out is older than its newest backup. If a listing\n" +
			"or a manifest read fails, nothing is deleted. Staged plaintext copies (<prefix>/_staged/, older: <prefix>/restore/, left by a restore via\n" +
			"etcd-operator) older than 1h are deleted too; one that cannot be deleted is counted (stagedFailed) and exits 1, naming its key.\n" +
			"Manual and pre-restore backups are never deleted here: use `etcd-recovery delete`.\n" +
			"With --orphans (Kubernetes: in a pod, or --kubeconfig/--namespace): the cluster ids under --prefix without an EtcdCluster\n" +
			"in the namespace are orphans, recorded (<prefix>/<id>/orphan.json) and, once --orphan-grace has passed since both\n" +
			"their newest backup and the run that first recorded them, deleted with every backup (any kind) - only when the\n" +
			"namespace owns the prefix (--claim-prefix, once), every listing succeeded and no EtcdRestore references them.\n" +
			"Otherwise orphans are only reported.",
		Flags: concat(o.store.flags(), o.kube.flags(), []cli.Flag{
			clusterIDFlag(&o.clusterID),
			allClusterIDsFlag(&o.allClusterIDs),
			orphansFlag(&o.orphans),
			orphanGraceFlag(&o.orphanGrace),
			&cli.BoolFlag{Name: "claim-prefix", Destination: &o.claimPrefix, Usage: "record (once, with a conditional create) that the namespace owns --prefix: " +
				"<prefix>/" + catalog.OwnerObject + "; orphans are deleted only under an owned, non-empty prefix"},
			dryRunFlag(&o.dryRun),
			outputFlag(&o.output),
			timeoutFlag(&o.timeout),
			journalRetentionFlag(&o.journalRetention),
		}, o.policy.flags(), o.lock.flags(), deprecatedFlagsOf("prune")),
		Action: func(c *cli.Context) error { return runPrune(c, g, o) },
	}
}

// policyOpts are the retention policy flags of prune, backup --prune and
// list.
type policyOpts struct {
	recent, anchors  int
	anchorDays       string
	keepTodayUpdates bool
	incompleteAfter  time.Duration
}

func (o *policyOpts) flags() []cli.Flag {
	d := retention.DefaultPolicy()
	days := make([]string, len(d.AnchorDays))
	for i, n := range d.AnchorDays {
		days[i] = strconv.Itoa(n)
	}
	return []cli.Flag{
		&cli.IntFlag{Name: "keep-recent", Value: d.Recent, Usage: "keep this many newest committed scheduled backups", Destination: &o.recent},
		&cli.IntFlag{Name: "keep-anchors", Value: d.Anchors, Usage: "keep the earliest backup of this many most recent anchor dates", Destination: &o.anchors},
		&cli.StringFlag{Name: "anchor-days", Value: strings.Join(days, ","), Usage: "days of the month that are anchor dates (comma-separated, UTC)", Destination: &o.anchorDays},
		&cli.BoolFlag{Name: "keep-today-updates", Value: d.KeepTodayUpdates, Usage: "keep every update backup taken today (UTC)", Destination: &o.keepTodayUpdates},
		&cli.DurationFlag{Name: "incomplete-after", Value: d.IncompleteAfter, Usage: "delete folders without a manifest last written longer ago than this (at least " + retention.MinIncompleteAfter.String() + ": a backup may be in flight)", Destination: &o.incompleteAfter},
	}
}

// policy builds and validates the policy from the flags.
func (o *policyOpts) policy() (retention.Policy, error) {
	p := retention.DefaultPolicy()
	p.Recent = o.recent
	p.Anchors = o.anchors
	p.KeepTodayUpdates = o.keepTodayUpdates
	p.IncompleteAfter = o.incompleteAfter
	p.AnchorDays = nil
	for _, f := range strings.Split(o.anchorDays, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return p, usagef("--anchor-days %q: %q is not a day of the month", o.anchorDays, f)
		}
		p.AnchorDays = append(p.AnchorDays, n)
	}
	if err := p.Validate(); err != nil {
		return p, asUsage(err)
	}
	return p, nil
}

func runPrune(c *cli.Context, g *globalOpts, o *pruneOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	// The node's clock is checked against the store's before anything is
	// deleted (prune's clock check).
	opts := prune.PruneOptions{All: o.allClusterIDs, DryRun: o.dryRun, Log: e.log, ClockTolerance: prune.DefaultClockTolerance}
	id := o.clusterID
	lifecycle := o.orphans || o.claimPrefix
	// The prune's options are catalog's to check; --orphans and
	// --claim-prefix (Kubernetes) are this command's.
	switch {
	case !opts.All && id == "" && !lifecycle:
		return usagef("prune: --cluster-id, --all-cluster-ids or --orphans is required")
	case c.IsSet("orphan-grace") && !o.orphans:
		return usagef("prune: --orphan-grace is for --orphans")
	case o.orphans:
		if err := (prune.OrphanOptions{Grace: o.orphanGrace}).Validate(); err != nil {
			return fmt.Errorf("prune: %w", err)
		}
	}
	if id != "" {
		opts.ClusterIDs = []string{id}
	}
	if opts.Policy, err = o.policy.policy(); err != nil {
		return err
	}
	if opts.Lock, err = o.lock.policy("prune"); err != nil {
		return err
	}
	if err := checkJournalRetention(o.journalRetention); err != nil {
		return err
	}
	opts.JournalRetention = o.journalRetention
	if id != "" || opts.All {
		if err := opts.Validate(); err != nil {
			return err
		}
	}
	if lifecycle {
		return runPruneLifecycle(e, o, opts, id != "" || opts.All)
	}
	store, layout, t, err := e.storeWithTimeout(&o.store, nil, o.timeout)
	if err != nil {
		return err
	}
	defer t.cancel()
	opts.Store, opts.Layout = store, layout
	rep, err := prune.Prune(t.ctx, opts)
	if rep != nil {
		if rerr := e.render(rep.Table(), rep); rerr != nil && err == nil {
			err = rerr
		}
	}
	return t.atStepOf("prune", err)
}

func orphansFlag(dest *bool) cli.Flag {
	return &cli.BoolFlag{Name: "orphans", Destination: dest, Usage: "also handle orphans: cluster ids under --prefix without an EtcdCluster in the namespace " +
		"(recorded; their backups deleted after --orphan-grace, only under a prefix the namespace owns)"}
}

func orphanGraceFlag(dest *time.Duration) cli.Flag {
	return &cli.DurationFlag{Name: "orphan-grace", Value: prune.DefaultOrphanGrace, Destination: dest,
		Usage: "an orphan's backups are deleted this long after the later of its newest backup and its first sighting (at least " + prune.MinOrphanGrace.String() + ")"}
}

// pruneLifecycleResult is prune --orphans / --claim-prefix's JSON.
type pruneLifecycleResult struct {
	Claim   *claimResult        `json:"claim,omitempty"`
	Orphans *prune.OrphanReport `json:"orphans,omitempty"`
	Prune   *prune.PruneReport  `json:"prune,omitempty"`
}

type claimResult struct {
	Key     string             `json:"key"`
	Created bool               `json:"created"`
	Owner   *prune.OwnerRecord `json:"owner,omitempty"`
}

// runPruneLifecycle is prune with --orphans or --claim-prefix: the claim,
// the orphan pass, then (with --cluster-id/--all-cluster-ids) the prune.
func runPruneLifecycle(e *env, o *pruneOpts, opts prune.PruneOptions, backups bool) error {
	k, store, layout, err := e.kubeStore(&o.kube, &o.store)
	if err != nil {
		return err
	}
	if o.claimPrefix && layout.RootPrefix() == "" {
		return asUsage(fmt.Errorf("prune --claim-prefix: %w", prune.ErrSharedPrefix))
	}
	t, err := e.withTimeout(o.timeout, nil)
	if err != nil {
		return err
	}
	defer t.cancel()
	var res pruneLifecycleResult
	if o.claimPrefix {
		rec, created, err := prune.ClaimPrefix(t.ctx, store, layout, k.Namespace, time.Now())
		if err != nil {
			return t.atStep("claim prefix", err)
		}
		res.Claim = &claimResult{Key: catalog.OwnerKey(layout), Created: created, Owner: rec}
		opts.Log.Info("prefix owned by the namespace", "prefix", rec.Prefix, "namespace", rec.Namespace, "claimed_at", rec.ClaimedAt, "created", created)
	}
	var errs []error
	if o.orphans {
		rep, err := fleet.Orphans(t.ctx, k, store, layout, fleet.OrphanOptions{Grace: o.orphanGrace, DryRun: opts.DryRun,
			ClockTolerance: opts.ClockTolerance}, opts.Log)
		res.Orphans = rep
		if err != nil {
			errs = append(errs, t.named(err))
		}
	}
	if backups {
		opts.Store, opts.Layout = store, layout
		rep, err := prune.Prune(t.ctx, opts)
		res.Prune = rep
		if err != nil {
			errs = append(errs, t.named(err))
		}
	}
	if err := e.renderAll(res.Tables(), res); err != nil {
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
