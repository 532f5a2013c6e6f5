package main

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/site"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/kube"
)

// restore-all: every EtcdCluster of the namespaces that needs it, through
// fleet.RestoreAll.

// restoreAllOpts are restore-all's flags.
type restoreAllOpts struct {
	store                                    storeOpts
	site                                     siteOpts
	kube                                     kubeOpts
	encryption                               encryptionOpts
	namespaces, clusters, first              cli.StringSlice
	prefixTemplate, selector, order, toTime  string
	awsSecret, identityFile, tempDir, output string
	force, rebuild, replace, dryRun, newRun  bool
	forcePathStyle, noEvents, takeOver       bool
	parallel                                 int
	bumpRevision                             uint64
	probeTimeout, dialTimeout, verifyTimeout time.Duration
	waitTimeout, clusterTimeout, fixedCost   time.Duration
}

// namespaceToken is what --prefix-template replaces with each namespace.
const namespaceToken = "{namespace}"

func restoreAllCommand(g *globalOpts) *cli.Command {
	o := &restoreAllOpts{}
	return &cli.Command{
		Name:  "restore-all",
		Usage: "restore every EtcdCluster of the namespace(s) that lost quorum, in parallel, through etcd-operator; resumable",
		UsageText: "etcd-recovery restore-all [--namespace NS | --namespaces NS,...] [--cluster NAME ...] [--selector L] [--force | --to-time T] " +
			"[--rebuild --identity-file F] [--parallel N] [--order smallest|largest|name] [--first NAME,...] [--dry-run] [options]",
		Description: "Each EtcdCluster of the namespace (--cluster, --selector: some of them) is probed, every member with a short deadline\n" +
			"(--probe-timeout). Quorum lost (fewer than a majority of its members healthy): restored through etcd-operator, as\n" +
			"restore --via etcd-operator restores one (a survivor's snapshot when a member answers, else the newest backup).\n" +
			"Healthy, and degraded with quorum (etcd-operator heals those), are left alone and reported; --force restores them\n" +
			"too, from the store; --to-time restores every selected cluster to its own revision at that time (from its journal).\n" +
			"--rebuild also rebuilds every cluster id with backups under the prefix and no EtcdCluster from its escrow\n" +
			"(decrypted with --identity-file), as restore --rebuild does one.\n" +
			"--parallel clusters at a time across every namespace (default: from the pod's CPU and memory limits), in --order\n" +
			"(smallest first: most customers back soonest), the --first ones before. Each cluster has its own deadline\n" +
			"(--cluster-timeout); its failure is reported with its step and the runbook section to follow, and never stops the\n" +
			"others. The run is recorded under <prefix>/_restores/<run>/: the plan, each attempt's start and end, and a done\n" +
			"record per cluster once verified. Running the same command again resumes the newest unfinished run: clusters done\n" +
			"are skipped and not touched, a restore a killed attempt left in flight is finished and verified; a run whose\n" +
			"attempt is in progress is refused (--take-over when that process is gone; --new-run starts another). --dry-run prints the plan (each cluster's backup,\n" +
			"bytes, and the expected time from the store's measured throughput) and changes nothing.\n" +
			"On a terminal a live table shows each cluster's step; otherwise one log line per step. The report lists each\n" +
			"cluster's client URL and the NodePort of <id>-client-service-np: restart the kube-apiserver that uses it.\n" +
			"Exit 0 when every cluster is restored, healthy or done; 1 when any failed; 130 when cancelled.",
		Flags: concat(o.kube.flags(), o.store.flags(), o.site.flags(), []cli.Flag{
			&cli.StringSliceFlag{Name: "namespaces", Usage: "several namespaces (comma-separated, or repeated), restored under one --parallel limit; instead of --namespace", Destination: &o.namespaces},
			&cli.StringFlag{Name: "prefix-template", Value: namespaceToken + "/", Usage: "restore-all --namespaces: each namespace's store prefix, " + namespaceToken + " (required) replaced by its name (the chart's default prefix <name>/); " +
				"one namespace's is --prefix (COS_PREFIX) as given, empty: the bucket's root", Destination: &o.prefixTemplate},
			&cli.StringSliceFlag{Name: "cluster", Usage: clusterFlagUsage, Destination: &o.clusters},
			&cli.StringFlag{Name: "selector", Usage: "restore-all: only the EtcdClusters with these labels (a label selector, as kubectl -l)", Destination: &o.selector},
			forceFlag(&o.force),
			toTimeFlag(&o.toTime),
			rebuildFlag(&o.rebuild),
			replaceFlag(&o.replace),
			identityFileFlag(&o.identityFile),
			dryRunFlag(&o.dryRun),
			&cli.BoolFlag{Name: "new-run", Usage: "restore-all: start a new run even when an unfinished one of the same request exists (it is not resumed)", Destination: &o.newRun},
			&cli.BoolFlag{Name: "take-over", Usage: "restore-all: resume the run even though its attempt counts as in progress (start record, no end, a beat less than 3m old, even past its deadline): that process is gone (its pod deleted, its node lost)", Destination: &o.takeOver},
			parallelFlag(&o.parallel, 0),
			&cli.StringFlag{Name: "order", Value: fleet.OrderSmallest, Usage: "restore-all: smallest (fewest bytes first: most customers back soonest), largest or name", Destination: &o.order},
			&cli.StringSliceFlag{Name: "first", Usage: "restore-all: clusters restored before the --order (NAME or NAMESPACE/NAME, comma-separated, in this order)", Destination: &o.first},
			&cli.DurationFlag{Name: "cluster-timeout", Value: fleet.DefaultClusterTimeout, Usage: "restore-all: each cluster's deadline (its transfers, etcd-operator's restore, the verification); past it the cluster fails, the others go on", Destination: &o.clusterTimeout},
			&cli.DurationFlag{Name: "fixed-cost", Value: fleet.DefaultRestoreFixedCost, Usage: "restore-all: the plan's time of one cluster's restore besides its bytes (etcd-operator's pods, the verification)", Destination: &o.fixedCost},
			probeTimeoutFlag(&o.probeTimeout),
			&cli.DurationFlag{Name: "dial-timeout", EnvVars: []string{"ETCDCTL_DIAL_TIMEOUT"}, Value: 5 * time.Second, Usage: "dial timeout per endpoint", Destination: &o.dialTimeout},
			waitTimeoutFlag(&o.waitTimeout),
			verifyTimeoutFlag(&o.verifyTimeout),
			awsSecretFlag(&o.awsSecret),
			forcePathStyleFlag(&o.forcePathStyle),
			bumpRevisionFlag(&o.bumpRevision),
			tempDirFlag(&o.tempDir),
			&cli.BoolFlag{Name: "no-events", Usage: "with --all/--cluster: do not record Kubernetes Events", Destination: &o.noEvents},
			outputFlag(&o.output),
		}, o.encryption.flags()),
		Action: func(c *cli.Context) error { return runRestoreAll(c, g, o) },
	}
}

func runRestoreAll(c *cli.Context, g *globalOpts, o *restoreAllOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	if err := requirePositive("restore-all", positive{"probe-timeout", o.probeTimeout}, positive{"dial-timeout", o.dialTimeout},
		positive{"wait-timeout", o.waitTimeout}, positive{"verify-timeout", o.verifyTimeout}, positive{"cluster-timeout", o.clusterTimeout}); err != nil {
		return err
	}
	if o.force && o.toTime != "" {
		return usagef("restore-all: --force and --to-time: --to-time restores every selected cluster already")
	}
	namespaces, err := o.namespaceList(c)
	if err != nil {
		return err
	}
	if len(namespaces) > 1 && !strings.Contains(o.prefixTemplate, namespaceToken) {
		// One prefix for every namespace: each one's --rebuild would
		// rebuild the others' cluster ids in it.
		return usagef("restore-all: --namespaces with --prefix-template %q: it must contain %s (each namespace its own prefix; "+
			"the chart's default prefix <name>/ is %s/); restore a namespace whose prefix follows no pattern alone, with --namespace and --prefix",
			o.prefixTemplate, namespaceToken, namespaceToken)
	}
	opts := fleet.RestoreAllOptions{
		Names: splitList(o.clusters.Value()), Selector: o.selector, Force: o.force, Rebuild: o.rebuild, Replace: o.replace,
		DryRun: o.dryRun, NewRun: o.newRun, TakeOver: o.takeOver, Parallel: o.parallel, Order: o.order, First: splitList(o.first.Value()),
		ClusterTimeout: o.clusterTimeout, HealthTimeout: o.probeTimeout, NoEvents: o.noEvents, FixedCost: o.fixedCost,
	}
	if o.toTime != "" {
		if opts.ToTime, err = parseTimeFlag("restore-all", "to-time", o.toTime, time.Now()); err != nil {
			return err
		}
		if _, rfcErr := time.Parse(time.RFC3339Nano, o.toTime); rfcErr != nil {
			// A duration before now: whole seconds, so that the absolute
			// time printed (what a rerun must give to resume this run;
			// the run's request records it) is exactly the one used.
			opts.ToTime = opts.ToTime.Truncate(time.Second)
		}
		opts.ToTime = opts.ToTime.UTC()
		e.log.Info("restore-all: point in time", "to_time", opts.ToTime.Format(time.RFC3339Nano), "given", o.toTime,
			"resume_with", fleet.ToTimeFlag(opts.ToTime))
	}
	if opts.Parallel == 0 {
		opts.Parallel, opts.ScratchCap = fleet.DefaultRestoreParallel(fleet.PodLimits()), true
	}
	ids, rs, err := e.identityAndRecipients(o.identityFile, &o.encryption)
	if err != nil {
		return err
	}
	loc, err := o.store.given(c)
	if err != nil {
		return err
	}
	opts.Template = kube.OperatorRestoreOptions{Bucket: loc.Bucket, Endpoint: loc.Endpoint, AWSSecret: o.awsSecret, ForcePathStyle: o.forcePathStyle,
		ProbeTimeout: o.probeTimeout, DialTimeout: o.dialTimeout, Timeout: o.waitTimeout, VerifyTimeout: o.verifyTimeout, TempDir: o.tempDir,
		Identities: ids, Recipients: rs, RequireEncryption: o.encryption.requireEncryption, BumpRevision: o.bumpRevision, NoBump: o.bumpRevision == 0}
	// Every option checked before anything is contacted.
	if err := opts.Validate(); err != nil {
		return err
	}
	if _, err := o.site.check("restore-all"); err != nil {
		return err
	}
	// One site for the run: chosen on the first namespace (one check),
	// then opened as it is for the others.
	var ch site.Chosen
	for i, ns := range namespaces {
		k, err := e.kube(&kubeOpts{kubeconfig: o.kube.kubeconfig, namespace: ns})
		if err != nil {
			return err
		}
		var st store.Store
		var layout catalog.Layout
		if i == 0 {
			if ch, err = e.openSite(&o.site, &o.store, k); err != nil {
				return err
			}
			st, layout = ch.Store, ch.Layout
			if ch.Site == site.Second {
				// etcd-operator reads the staged copies where they are;
				// the run's records go there too (never to the primary).
				if loc, err = o.site.siteLocation(c, ch, &o.store); err != nil {
					return err
				}
				opts.Template.Bucket, opts.Template.Endpoint = loc.Bucket, loc.Endpoint
			}
		} else if st, layout, err = e.reopen(ch, &o.site, &o.store, k); err != nil {
			return err
		}
		// One namespace: its prefix is --prefix (COS_PREFIX) as given, the
		// bucket's root when empty, never replaced. Several: each one's
		// from --prefix-template.
		if len(namespaces) > 1 {
			if layout.Prefix != "" {
				e.log.Info("restore-all: several namespaces: each one's prefix is --prefix-template's, not --prefix (COS_PREFIX)",
					"namespace", k.Namespace, "ignored_prefix", layout.Prefix, "template", o.prefixTemplate)
			}
			p := strings.ReplaceAll(o.prefixTemplate, namespaceToken, k.Namespace)
			if layout.Prefix, err = catalog.ValidatePrefix(p); err != nil {
				return usagef("restore-all: --prefix-template %q for namespace %s: %v", o.prefixTemplate, k.Namespace, err)
			}
		}
		opts.Namespaces = append(opts.Namespaces, fleet.RestoreAllNamespace{Kube: k, Store: st, Layout: layout})
	}
	// Watchable: a live table on a terminal, else one log line per step.
	// The restores' own logs go to the log as usual off a terminal; on
	// one, only their warnings, under the table.
	terminal := term.IsTerminal(int(os.Stderr.Fd()))
	watch := fleet.NewRestoreAllWatch(c.App.ErrWriter, terminal, e.log)
	opts.OnStep, opts.Log, opts.Template.Log = watch.Step, e.log, e.log
	if terminal {
		quiet := slog.New(minLevel{Handler: e.log.Handler(), min: slog.LevelWarn})
		opts.Log, opts.Template.Log = quiet, quiet
	}
	rep, err := fleet.RestoreAll(e.ctx(), opts)
	watch.Stop()
	if rep != nil {
		rep.Site = ch.Describe()
	}
	if rep != nil && (len(rep.Clusters) > 0 || err == nil) {
		if rerr := e.renderAll(rep.Tables(), rep); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// namespaceList is --namespaces (comma-separated or repeated), else
// --namespace (else the kubeconfig's, as every command's: "" here).
func (o *restoreAllOpts) namespaceList(c *cli.Context) ([]string, error) {
	list := splitList(o.namespaces.Value())
	if len(list) == 0 {
		return []string{o.kube.namespace}, nil
	}
	if c.IsSet("namespace") && o.kube.namespace != "" && os.Getenv("POD_NAMESPACE") != o.kube.namespace {
		return nil, usagef("restore-all: --namespace and --namespaces: give one (--namespaces NS,... for several)")
	}
	slices.Sort(list)
	if d := slices.Compact(slices.Clone(list)); len(d) != len(list) {
		return nil, usagef("restore-all: --namespaces %s: a namespace given twice", strings.Join(list, ","))
	}
	return list, nil
}

// splitList splits comma-separated values (a StringSlice flag already
// splits on commas; this trims and drops empty ones).
func splitList(vs []string) []string {
	var out []string
	for _, v := range vs {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// minLevel drops the records below min (the restores' info lines under
// the live table).
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(as), min: h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}
