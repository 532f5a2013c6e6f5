package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/internal/bytesize"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/undelete"
)

// Defaults of undelete's flags: the package's (etcd's own limits:
// --max-txn-ops 128; --max-request-bytes 1.5 MiB, of which a batch takes
// at most 1 MiB).
const (
	defaultUndeleteTxnOps = undelete.DefaultMaxTxnOps
	defaultKubePrefix     = undelete.DefaultKubePrefix
)

// defaultUndeleteTxnBytes is --max-txn-bytes's default, as a size.
var defaultUndeleteTxnBytes = fmt.Sprintf("%dMiB", undelete.DefaultMaxTxnBytes>>20)

// undeleteOpts are undelete's flags: the live cluster (etcd flags, as
// journal takes them), the store and site (as restore reads them), the
// keys and the point.
type undeleteOpts struct {
	etcd                              etcdOpts
	store                             storeOpts
	site                              siteOpts
	clusterID, toTime, kubePrefix     string
	identityFile, tempDir, output     string
	operator, maxTxnBytes             string
	keyPrefixes, namespaces           cli.StringSlice
	toRevision                        int64
	settle                            time.Duration
	maxTxnOps                         int
	dryRun, replace                   bool
	acceptUnproven, acceptTerminating bool
	acceptOtherCluster                bool
}

func undeleteCommand(g *globalOpts) *cli.Command {
	o := &undeleteOpts{}
	return &cli.Command{
		Name:      "undelete",
		Usage:     "bring back the keys a prefix (or a Kubernetes namespace) had at a revision before a bad delete, into the live cluster, without rolling back anything else",
		UsageText: "etcd-recovery undelete --cluster-id ID (--to-revision R | --to-time T) (--key-prefix P | --kube-namespace NS)... [--dry-run] [--replace] [-o json] [options]",
		Description: "Builds the cluster's keyspace at the point (the newest backup at or below it plus the journal, checked as\n" +
			"restore --to-revision checks them) in --temp-dir, reads every key under the prefixes there and in the live\n" +
			"cluster (--endpoints), and writes back, through etcd's API, each key that existed at the point and is absent\n" +
			"now, with its value from then: stored bytes unchanged, so Kubernetes objects keep their uid, ownerReferences\n" +
			"and encrypted values. Each write is guarded: the key is still absent (its create revision is 0), so nothing\n" +
			"written since is overwritten; a key created meanwhile is left alone (appeared). A key that exists now with\n" +
			"other bytes is listed (differs) and left alone, unless --replace (then guarded by the mod revision read).\n" +
			"Keys that had a lease at the point (Events, Leases) are skipped and listed (leased). --kube-namespace NS is\n" +
			"the namespace object and every namespaced object of NS (custom resources too), under --kube-prefix.\n" +
			"Order: namespaces, then CRDs, then owners before their dependents, in batches within --max-txn-ops and\n" +
			"--max-txn-bytes; every written key is read back. Idempotent: a second run writes nothing (present); a run\n" +
			"stopped by SIGTERM (exit 130) finishes when run again. An object already being deleted at the point is\n" +
			"skipped (terminating); Kubernetes objects written are read back again after --settle, and one a controller\n" +
			"deleted again fails the run. Refused (exit 1, naming the flag that accepts it): a point outside the journal's\n" +
			"proven window (--accept-unproven-journal), a namespace or CRD being deleted at the point (the refusal names\n" +
			"the revision before; --accept-terminating), a live cluster that is not the one the journal watches\n" +
			"(--accept-other-cluster). --dry-run lists every key it would write, skip or leave. A real\n" +
			"run is recorded under <prefix>/_undeletes/<cluster>/: who (--operator), when, the prefixes, the point, every\n" +
			"key. Find the point with `journal find`. Exit 1 when any key failed. See docs/undelete.md.",
		Flags: concat(o.etcd.flags(true), o.store.flags(), o.site.flags(), []cli.Flag{
			clusterIDFlag(&o.clusterID),
			&cli.StringSliceFlag{Name: "key-prefix", Usage: keyPrefixUsage, Destination: &o.keyPrefixes},
			&cli.StringSliceFlag{Name: "kube-namespace", Destination: &o.namespaces,
				Usage: "a Kubernetes namespace whose objects come back: its namespace object and every namespaced object of it, custom resources too (repeatable; --namespace is the EtcdClusters')"},
			&cli.StringFlag{Name: "kube-prefix", Value: defaultKubePrefix, Destination: &o.kubePrefix,
				Usage: "with --kube-namespace: kube-apiserver's --etcd-prefix, under which its objects are stored"},
			&cli.Int64Flag{Name: "to-revision", Usage: toRevisionUsage, Destination: &o.toRevision},
			toTimeFlag(&o.toTime),
			acceptUnprovenJournalFlag(&o.acceptUnproven),
			&cli.BoolFlag{Name: "accept-terminating", Destination: &o.acceptTerminating,
				Usage: "write objects that were already being deleted at the point (metadata.deletionTimestamp set): without it such an object is skipped (terminating), and a namespace or CRD refuses the run, naming the revision before its deletion"},
			&cli.BoolFlag{Name: "accept-other-cluster", Destination: &o.acceptOtherCluster,
				Usage: "write into a live cluster whose etcd cluster ID is not the one the journal watches (refused without it)"},
			dryRunFlag(&o.dryRun),
			replaceFlag(&o.replace),
			&cli.IntFlag{Name: "max-txn-ops", Value: defaultUndeleteTxnOps, Destination: &o.maxTxnOps,
				Usage: "keys written per guarded txn, at most the server's --max-txn-ops (etcd's own default is the same); halved when the server refuses a batch"},
			&cli.StringFlag{Name: "max-txn-bytes", Value: defaultUndeleteTxnBytes, Destination: &o.maxTxnBytes,
				Usage: "bytes written per guarded txn (bytes, or KiB/MiB: 1024-based; KB/MB: 1000-based), below the server's --max-request-bytes; a single key over it is written alone"},
			&cli.DurationFlag{Name: "settle", Value: undelete.DefaultSettle, Destination: &o.settle,
				Usage: "once Kubernetes objects are written, wait this long and read them back again: one a controller deleted again (the namespace controller, the garbage collector) fails the run (deleted-again); 0s: no second read"},
			&cli.StringFlag{Name: "operator", Destination: &o.operator,
				Usage: "who runs it, recorded with the run (default $USER@<hostname>; in a pod, the pod's hostname)"},
			identityFileFlag(&o.identityFile),
			tempDirFlag(&o.tempDir),
			outputFlag(&o.output),
		}),
		// --prefix is the store's and --namespace the EtcdClusters':
		// habits from etcdctl and kubectl, pointed to undelete's own.
		OnUsageError: func(c *cli.Context, err error, sub bool) error {
			if f := undefinedFlag(err); f == "n" || f == "namespace" {
				return usagef("undelete: --namespace (-n) is the EtcdClusters' namespace on other commands; the Kubernetes namespace whose objects come back is --kube-namespace NS")
			}
			return onUsageError(c, err, sub)
		},
		Action: func(c *cli.Context) error { return runUndelete(c, g, o) },
	}
}

// keyPrefixUsage is --key-prefix on journal find and undelete.
const keyPrefixUsage = "an etcd key prefix: every key under it (journal find: instead of KEY --match-prefix; undelete: repeatable; " +
	"raw bytes: /registry/namespaces/ns1 also matches ns10); --prefix is the store's"

// toRevisionUsage is --to-revision on restore and undelete.
const toRevisionUsage = "point in time: restore the cluster as of exactly this revision, from the newest backup at or below it and the journal's segments after it " +
	"(undelete: the keys as they were at it)"

func acceptUnprovenJournalFlag(dest *bool) cli.Flag {
	return &cli.BoolFlag{Name: "accept-unproven-journal", Destination: dest,
		Usage: "point in time: replay the journal even through a window whose journal proof failed (journal prove; refused without it)"}
}

// defaultOperator is who runs undelete when --operator is not given:
// $USER@<hostname>, or the hostname alone where $USER is not set (a pod,
// whose hostname is its name).
func defaultOperator() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown-host"
	}
	if u := os.Getenv("USER"); u != "" {
		return u + "@" + host
	}
	return host
}

// undeleteOptions checks undelete's flags (usage errors, before anything
// is contacted) and builds the package's options, without the store.
func undeleteOptions(c *cli.Context, e *env, o *undeleteOpts) (undelete.Options, error) {
	const cmd = "undelete"
	var opts undelete.Options
	if o.clusterID == "" {
		return opts, usagef("undelete: --cluster-id is required")
	}
	if err := catalog.ValidateClusterID(o.clusterID); err != nil {
		return opts, asUsage(err)
	}
	prefixes, namespaces := o.keyPrefixes.Value(), o.namespaces.Value()
	if len(prefixes) == 0 && len(namespaces) == 0 {
		if c.IsSet("prefix") && strings.HasPrefix(o.store.prefix, "/") {
			return opts, usagef("undelete: --prefix %q is the store's key prefix in the bucket (COS_PREFIX); the etcd keys to bring back are --key-prefix %s", o.store.prefix, o.store.prefix)
		}
		return opts, usagef("undelete: say which keys: --key-prefix P (an etcd key prefix) or --kube-namespace NS (a Kubernetes namespace), each repeatable")
	}
	for _, p := range prefixes {
		if p == "" {
			return opts, usagef("undelete: --key-prefix is empty: that is the whole keyspace (to roll the whole cluster back: restore --to-revision)")
		}
	}
	for _, ns := range namespaces {
		if ns == "" || strings.Contains(ns, "/") {
			return opts, usagef("undelete: --kube-namespace %q: want a namespace name", ns)
		}
	}
	if c.IsSet("kube-prefix") && len(namespaces) == 0 {
		return opts, usagef("undelete: --kube-prefix goes with --kube-namespace")
	}
	if kp := o.kubePrefix; !strings.HasPrefix(kp, "/") || strings.HasSuffix(kp, "/") {
		return opts, usagef("undelete: --kube-prefix %q: want kube-apiserver's --etcd-prefix, as %s", kp, defaultKubePrefix)
	}
	switch {
	case c.IsSet("to-revision") && c.IsSet("to-time"):
		return opts, usagef("undelete: --to-revision and --to-time: give one")
	case !c.IsSet("to-revision") && !c.IsSet("to-time"):
		return opts, usagef("undelete: the point before the delete is required: --to-revision R or --to-time T (find it with journal find)")
	case c.IsSet("to-revision") && o.toRevision <= 0:
		return opts, usagef("undelete: --to-revision must be a revision (positive)")
	}
	if o.toTime != "" {
		t, err := parseTimeFlag(cmd, "to-time", o.toTime, time.Now())
		if err != nil {
			return opts, err
		}
		opts.ToTime = t
	}
	if o.maxTxnOps <= 0 {
		return opts, usagef("undelete: --max-txn-ops must be positive")
	}
	txnBytes, err := bytesize.Parse(o.maxTxnBytes)
	if err != nil || txnBytes <= 0 || txnBytes > 1<<30 {
		why := "want more than 0 and at most 1GiB"
		if err != nil {
			why = err.Error()
		}
		return opts, usagef("undelete: --max-txn-bytes %q: %s", o.maxTxnBytes, why)
	}
	if err := requirePositive(cmd, positive{"dial-timeout", o.etcd.dialTimeout}); err != nil {
		return opts, err
	}
	if o.settle < 0 {
		return opts, usagef("undelete: --settle must not be negative (0s: no second read)")
	}
	operator := strings.TrimSpace(o.operator)
	if c.IsSet("operator") && operator == "" {
		return opts, usagef("undelete: --operator is empty")
	}
	if operator == "" {
		operator = defaultOperator()
	}
	etcd, err := o.etcd.config()
	if err != nil {
		return opts, err
	}
	ids, err := e.identityOf(o.identityFile)
	if err != nil {
		return opts, err
	}
	host, _ := os.Hostname()
	opts = undelete.Options{
		ClusterID: o.clusterID, Etcd: etcd, Prefixes: prefixes, Namespaces: namespaces, KubePrefix: o.kubePrefix,
		ToRevision: o.toRevision, ToTime: opts.ToTime,
		AcceptUnprovenJournal: o.acceptUnproven, AcceptTerminating: o.acceptTerminating, AcceptOtherCluster: o.acceptOtherCluster,
		Replace: o.replace, DryRun: o.dryRun, Identities: ids, ScratchDir: o.tempDir,
		MaxTxnOps: o.maxTxnOps, MaxTxnBytes: int(txnBytes), Settle: o.settle, Operator: operator, Host: host, Log: e.log,
	}
	return opts, nil
}

func runUndelete(c *cli.Context, g *globalOpts, o *undeleteOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	opts, err := undeleteOptions(c, e, o)
	if err != nil {
		return err
	}
	ch, err := e.openSite(&o.site, &o.store, nil)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout, opts.Site = ch.Store, ch.Layout, ch.Describe()
	// The package's own checks (the flags above were checked before the
	// store was opened; these need it).
	if err := opts.Validate(); err != nil {
		return asUsage(err)
	}
	res, err := undelete.Run(e.ctx(), opts)
	// The report when the run got to its keys: always without an error;
	// after an error only once it wrote (its end record names what), or
	// when it was stopped. A refusal is its error alone.
	if res != nil && (err == nil || res.Record != "" || e.ctx().Err() != nil) {
		if rerr := e.renderAll(undeleteTables(res, e.format), res); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return err
	}
	if n := res.Counts[undelete.ActionFailed]; n > 0 {
		return fmt.Errorf("undelete: cluster %s: %s of %d failed (listed with their causes); the others are written: "+
			"run it again once the cause is fixed (what is written is present and left alone)", opts.ClusterID, output.Count(n, "key"), len(res.Keys))
	}
	return nil
}

// elide shortens s to n runes, keeping its start and its end around "…".
func elide(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 3 {
		return s
	}
	head := (n - 1) / 2
	return string(r[:head]) + "…" + string(r[len(r)-(n-1-head):])
}

// undeleteActionOrder is the order actions are counted in the summary.
var undeleteActionOrder = []undelete.Action{
	undelete.ActionRestored, undelete.ActionWouldRestore, undelete.ActionReplaced, undelete.ActionWouldReplace,
	undelete.ActionPresent, undelete.ActionDiffers, undelete.ActionAppeared, undelete.ActionLeased, undelete.ActionTerminating,
	undelete.ActionConflict, undelete.ActionDeletedAgain, undelete.ActionPending, undelete.ActionFailed,
}

// undeleteTables is undelete's report as tables: a summary (the cluster,
// what was asked, the point, where it was read, the counts per action and
// the record) and one row per key, from res alone (-o json is res). In
// the default format a key too long for output.Width is shortened in its
// middle (…), said below the table: -o wide and -o json have it whole.
func undeleteTables(res *undelete.Result, f output.Format) []output.Table {
	var title strings.Builder
	if res.DryRun {
		fmt.Fprintf(&title, "Undelete plan for cluster %s (dry run: nothing was written or recorded)\n\n", res.ClusterID)
	} else {
		fmt.Fprintf(&title, "Undelete of cluster %s\n\n", res.ClusterID)
	}
	sum := output.Table{Header: []string{"FIELD", "VALUE"}}
	add := func(k, v string) {
		if v != "" {
			sum.Rows = append(sum.Rows, []string{k, v})
		}
	}
	add("run", res.Run)
	add("key prefixes", strings.Join(res.Prefixes, " "))
	add("namespaces", strings.Join(res.Namespaces, " "))
	if res.Revision > 0 {
		point := "revision " + strconv.FormatInt(res.Revision, 10)
		if !res.ToTime.IsZero() {
			point += " (the last one received at or before " + res.ToTime.UTC().Format(time.RFC3339Nano) + ")"
		}
		add("point", point)
	}
	if res.LiveRevision > 0 {
		add("live revision", strconv.FormatInt(res.LiveRevision, 10)+" (when the live cluster was read)")
	}
	add("backup", res.Backup)
	add("site", res.Site)
	var counts []string
	for _, a := range undeleteActionOrder {
		if n := res.Counts[a]; n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", n, a))
		}
	}
	for a, n := range res.Counts {
		if n > 0 && !slices.Contains(undeleteActionOrder, a) {
			counts = append(counts, fmt.Sprintf("%d %s", n, a))
		}
	}
	add("keys", fmt.Sprintf("%d (%s)", len(res.Keys), strings.Join(counts, ", ")))
	if !res.Started.IsZero() && !res.Ended.IsZero() {
		add("took", res.Ended.Sub(res.Started).Round(time.Millisecond).String())
	}
	add("record", res.Record)
	sum.Title = title.String()

	keys := output.Table{Title: "\n", Header: []string{"KEY", "ACTION", "MOD REVISION", "WRITTEN", "SIZE", "REASON"},
		Wide: []string{"MOD REVISION", "WRITTEN", "SIZE"}, Long: []string{"REASON"}}
	// The default table is KEY and ACTION: "│ " + key + " │ " + action + " │".
	room := output.Width - 7 - len("ACTION")
	for _, k := range res.Keys {
		room = min(room, output.Width-7-len(k.Action))
	}
	shortened := 0
	for _, k := range res.Keys {
		written := "-"
		if k.Written > 0 {
			written = strconv.FormatInt(k.Written, 10)
		}
		key := k.Key
		if f != output.FormatWide && utf8.RuneCountInString(key) > room {
			key, shortened = elide(key, room), shortened+1
		}
		keys.Rows = append(keys.Rows, []string{key, string(k.Action), strconv.FormatInt(k.ModRevision, 10), written, strconv.Itoa(k.Size), k.Reason})
	}
	if shortened > 0 {
		keys.Notes = append(keys.Notes, fmt.Sprintf("%s shortened in the middle (…) to fit: -o wide or -o json shows every key whole.",
			output.Plural(shortened, "1 key", fmt.Sprintf("%d keys", shortened))))
	}
	switch {
	case len(res.Keys) == 0:
		keys.Header = nil
		keys.Footer = "No key under the prefixes at the point.\n"
	case res.DryRun:
		keys.Footer = "Dry run: nothing was written. Run it again without --dry-run to write the would-restore keys.\n"
	}
	if res.Counts[undelete.ActionDiffers] > 0 && !res.DryRun {
		keys.Notes = append(keys.Notes, "differs: the key exists now with other bytes and was left alone (--replace overwrites it, guarded by its mod revision).")
	}
	if res.Counts[undelete.ActionTerminating] > 0 {
		keys.Notes = append(keys.Notes, "terminating: the object was already being deleted at the point (a pod in its grace period): not written, it would be deleted again (--accept-terminating writes it).")
	}
	if res.Counts[undelete.ActionConflict] > 0 {
		keys.Notes = append(keys.Notes, "conflict: another live Service holds the Service's cluster IP or node port now: left alone.")
	}
	if res.Counts[undelete.ActionDeletedAgain] > 0 {
		keys.Notes = append(keys.Notes, "deleted-again: written, then deleted again before the run ended (a controller, or someone): find what deletes it, then run again.")
	}
	if res.Counts[undelete.ActionPending] > 0 {
		keys.Notes = append(keys.Notes, "pending: not written, the run stopped first: run the same command again to write them (what is written is then present).")
	}
	keys.Notes = append(keys.Notes, res.Warnings...)
	if res.Counts[undelete.ActionLeased] > 0 {
		keys.Notes = append(keys.Notes, "leased: the key had a lease at the point (an Event, a Lease): not brought back; its writer recreates it.")
	}
	return []output.Table{sum, keys}
}
