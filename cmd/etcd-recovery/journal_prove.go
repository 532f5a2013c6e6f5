package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/restore"
)

// journalProveOpts are journal prove's flags.
type journalProveOpts struct {
	store                                            storeOpts
	kube                                             kubeOpts
	clusterID, backup, identityFile, tempDir, output string
	allUnproven, noRecord, allClusterIDs             bool
	all                                              bool
	parallel                                         int
	timeout                                          time.Duration
}

func journalProveCommand(g *globalOpts) *cli.Command {
	o := &journalProveOpts{}
	return &cli.Command{
		Name:  "prove",
		Usage: "prove the journal before a full backup: the backup before it plus the journal, built offline, must hash as the backup does",
		UsageText: "etcd-recovery journal prove --cluster-id ID [--backup NAME | --all-unproven] [-o json]\n" +
			"etcd-recovery journal prove (--all [--namespace NS] | --all-cluster-ids) [--prove-parallel N] [--no-record] [-o json]",
		Description: "For backup k+1 (--backup, else the newest backup with an unproven journal before it) and the committed\n" +
			"backup k before it, downloads and verifies both, replays the journal's events after k's revision up to k+1's\n" +
			"into k (as restore --to-revision does, in a scratch dir under --temp-dir, removed after), and compares etcd's\n" +
			"HashKV of both, computed offline at k+1's revision for the same compact revision (the larger of the two\n" +
			"databases'), and their revisions. The verdict, passed or failed, is recorded once, create-only, at\n" +
			"<prefix>/_journal/<cluster>/proofs/<k+1>.json: a failed proof withdraws the window from k to k+1 from\n" +
			"restore --to-revision/--to-time (unless --accept-unproven-journal) and raises EtcdJournalProofFailed.\n" +
			"No journal between the two backups: nothing to prove, nothing recorded, exit 0. A proof that cannot judge\n" +
			"(a store error, a backup that cannot be fetched, --timeout) records nothing and exits 1; so does a failed one.\n" +
			"With --all-cluster-ids: every cluster id with a journal under --prefix (one listing of the store: clusters being restored,\n" +
			"without an EtcdCluster, included), each with every unproven backup proven as --all-unproven does, --prove-parallel\n" +
			"clusters at a time (default 1: each proof holds two databases in --temp-dir, and each download is refused\n" +
			"before it starts when it does not fit the scratch space left), one row per cluster; --timeout bounds each\n" +
			"proof. One cluster's failure never stops the others; the exit is 1 when any proof failed or was\n" +
			"inconclusive, naming the clusters. With --all (--namespace, or --kubeconfig's): only the cluster ids that are\n" +
			"EtcdClusters of the namespace (in a pod, POD_NAMESPACE sets it; one listing of the API, intersected with the\n" +
			"store's); a cluster being restored, its EtcdCluster deleted until etcd-operator recreates it, is proven by a\n" +
			"later run. The CronJob etcd-recovery-prove (deploy/70-prove.yaml) runs it hourly with --namespace, its own.",
		Flags: concat(o.store.flags(), o.kube.flags(), []cli.Flag{
			clusterIDFlag(&o.clusterID),
			backupFlag(&o.backup),
			&cli.BoolFlag{Name: "all-unproven", Usage: "prove every backup with an unproven journal before it, newest first", Destination: &o.allUnproven},
			allFlag(&o.all),
			allClusterIDsFlag(&o.allClusterIDs),
			&cli.IntFlag{Name: "prove-parallel", Value: 1, Usage: "with --all: clusters proven at once (each proof needs room for two databases in --temp-dir)", Destination: &o.parallel},
			noRecordFlag(&o.noRecord),
			&cli.DurationFlag{Name: "timeout", Value: drill.DefaultProveTimeout, Usage: timeoutUsage, Destination: &o.timeout},
			tempDirFlag(&o.tempDir),
			identityFileFlag(&o.identityFile),
			outputFlag(&o.output),
		}, deprecatedFlagsOf("journal prove")),
		Action: func(c *cli.Context) error { return runJournalProve(c, g, o) },
	}
}

// journalProveResult is journal prove's -o json.
type journalProveResult struct {
	ClusterID string                  `json:"clusterID"`
	Proofs    []*catalog.JournalProof `json:"proofs"`
	// NotProven are the targets that could not be judged (or had no
	// journal before them), each with why.
	NotProven []journalNotProven `json:"notProven,omitempty"`
}

type journalNotProven struct {
	Target    string `json:"target,omitempty"`
	NoJournal bool   `json:"noJournal"`
	Reason    string `json:"reason"`
}

func runJournalProve(c *cli.Context, g *globalOpts, o *journalProveOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	if err := allWithoutNamespace(c, "journal prove", &o.all, &o.allClusterIDs); err != nil {
		return err
	}
	if o.all || o.allClusterIDs {
		return runJournalProveAll(c, e, o)
	}
	if c.IsSet("prove-parallel") {
		return usagef("journal prove: --prove-parallel is --all's and --all-cluster-ids'")
	}
	switch {
	case o.clusterID == "":
		return usagef("journal prove: --cluster-id (or --all, --all-cluster-ids) is required")
	case o.backup != "" && o.allUnproven:
		return usagef("journal prove: give --backup or --all-unproven, not both")
	}
	if err := catalog.ValidateClusterID(o.clusterID); err != nil {
		return asUsage(err)
	}
	if o.backup != "" {
		if _, _, err := catalog.ParseBackupName(o.backup); err != nil {
			return usagef("journal prove: --backup: %v", err)
		}
	}
	if err := requirePositive("journal prove", positive{"timeout", o.timeout}); err != nil {
		return err
	}
	ids, err := e.identityOf(o.identityFile)
	if err != nil {
		return err
	}
	st, layout, err := e.openStore(&o.store, nil)
	if err != nil {
		return err
	}
	// --timeout is the run's overall deadline (every proof of
	// --all-unproven included).
	ctx, cancel := context.WithTimeout(e.ctx(), o.timeout)
	defer cancel()
	opts := drill.ProveOptions{ClusterID: o.clusterID, Store: st, Layout: layout, Target: o.backup, Identities: ids,
		ScratchDir: o.tempDir, Timeout: o.timeout, NoRecord: o.noRecord, Log: e.log,
		// One cluster's proofs, one at a time: each download shows its
		// progress (on a terminal only).
		Progress: func(label string) restore.Progress { return output.NewProgress("prove " + o.clusterID + ": " + label) }}
	targets := []string{o.backup}
	if o.allUnproven {
		pairs, err := drill.UnprovenTargets(ctx, st, layout, o.clusterID, ids)
		if err != nil {
			return fmt.Errorf("journal prove: cluster %s: %w", o.clusterID, err)
		}
		targets = targets[:0]
		for _, p := range pairs {
			targets = append(targets, p.Target.Name)
		}
	}
	res := journalProveResult{ClusterID: o.clusterID, Proofs: []*catalog.JournalProof{}}
	var errs []error
	for _, t := range targets {
		opts.Target = t
		p, err := drill.ProveJournal(ctx, opts)
		var pe *drill.ProveError
		switch {
		case err == nil:
			res.Proofs = append(res.Proofs, p)
		case errors.As(err, &pe):
			res.NotProven = append(res.NotProven, journalNotProven{Target: pe.Target, NoJournal: pe.NoJournal, Reason: err.Error()})
			if !pe.NoJournal {
				errs = append(errs, err)
			}
		default:
			return err
		}
	}
	t := output.Table{Header: []string{"TARGET", "BASE", "REVISION", "COMPACT", "EVENTS", "HASH", "WANT", "VERDICT", "DETAIL"},
		Wide: []string{"BASE"}, Long: []string{"DETAIL"}}
	failed := 0
	for _, p := range res.Proofs {
		if p.Failed() {
			failed++
		}
		t.Rows = append(t.Rows, []string{p.Target, p.Base, strconv.FormatInt(p.TargetRevision, 10), strconv.FormatInt(p.Compact, 10),
			strconv.FormatInt(p.Events, 10), strconv.FormatUint(uint64(p.Got.Hash), 10), strconv.FormatUint(uint64(p.Want.Hash), 10), p.Verdict, p.Detail})
	}
	var foot strings.Builder
	fmt.Fprintf(&foot, "%s of cluster %s", output.Count(len(res.Proofs), "journal proof"), o.clusterID)
	if o.noRecord {
		foot.WriteString(" (not recorded: --no-record)")
	}
	foot.WriteString(".\n")
	for _, n := range res.NotProven {
		t.Notes = append(t.Notes, n.Reason)
	}
	if len(targets) == 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("No backup of cluster %s has an unproven journal before it: nothing to prove.", o.clusterID))
	}
	t.Footer = foot.String()
	if err := e.render(t, res); err != nil {
		return err
	}
	if failed > 0 {
		errs = append(errs, fmt.Errorf("journal prove: cluster %s: %d journal proof(s) failed: the window before each is withdrawn from point-in-time restore", o.clusterID, failed))
	}
	return errors.Join(errs...)
}

// runJournalProveAll is journal prove --all: fleet.ProveAll over every
// cluster id with a journal under the prefix.
func runJournalProveAll(c *cli.Context, e *env, o *journalProveOpts) error {
	switch {
	case o.clusterID != "":
		return usagef("journal prove: --all and --cluster-id are exclusive")
	case o.backup != "":
		return usagef("journal prove: --backup names one cluster's backup: use it with --cluster-id")
	case o.allUnproven:
		return usagef("journal prove: --all proves every unproven backup already: drop --all-unproven")
	case o.parallel < 1:
		return usagef("journal prove: --prove-parallel %d: want at least 1", o.parallel)
	}
	if err := requirePositive("journal prove", positive{"timeout", o.timeout}); err != nil {
		return err
	}
	ids, err := e.identityOf(o.identityFile)
	if err != nil {
		return err
	}
	// As drill: --all proves only the EtcdClusters of the namespace;
	// --all-cluster-ids every cluster id with a journal under the prefix.
	var k *kube.Client
	if o.all {
		if k, err = e.kube(&o.kube); err != nil {
			return err
		}
	}
	st, layout, err := e.openStore(&o.store, k)
	if err != nil {
		return err
	}
	opts := fleet.ProveAllOptions{Parallel: o.parallel, Log: e.log, Kube: k, Template: drill.ProveOptions{Store: st, Layout: layout,
		Identities: ids, ScratchDir: o.tempDir, Timeout: o.timeout, NoRecord: o.noRecord, Log: e.log}}
	rep, err := fleet.ProveAll(e.ctx(), opts)
	if rep != nil && (len(rep.Clusters) > 0 || err == nil) {
		t := rep.Table()
		if o.noRecord {
			t.Footer = strings.TrimSuffix(t.Footer, ".\n") + " (not recorded: --no-record).\n"
		}
		for _, cl := range rep.Clusters {
			for _, n := range cl.Inconclusive {
				t.Notes = append(t.Notes, n.Reason)
			}
		}
		if rerr := e.render(t, rep); rerr != nil {
			return rerr
		}
	}
	return err
}
