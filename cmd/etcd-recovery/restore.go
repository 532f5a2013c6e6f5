package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/restore"
)

const defaultVerifyTimeout = 5 * time.Minute

func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:  "restore",
		Usage: "rebuild a quorum-lost cluster from the newest snapshot (a surviving member's, or COS), verified before and after",
		UsageText: "etcd-recovery restore --cluster-id ID --initial-cluster NAME=PEER_URL,... [--endpoints OLD,...] [--data-dir-root DIR] [--dry-run] [options]\n" +
			"etcd-recovery restore --cluster NAME --via etcd-operator [--namespace NS] [--wait-timeout 10m] [--temp-dir DIR] [--dry-run] [options]",
		Description: "1. If a member of the old cluster (--endpoints) still answers, a snapshot of it is committed to COS first\n" +
			"   as a pre-restore backup (not with --no-live; a dry run only says it would).\n" +
			"2. The snapshot with the highest revision wins (time breaks ties); --backup forces one.\n" +
			"3. It is streamed into a temp file (next to the data dirs, or in --temp-dir) while the stored sha256, the database sha256\n" +
			"   and etcd's trailing hash are checked. A corrupt or truncated backup is refused, naming the next good one.\n" +
			"4. Each member's data dir is written with etcdutl's restore code: a new cluster token (generated when\n" +
			"   not given), the revision bumped by --bump-revision and marked compacted so watchers never go back.\n" +
			"   Data dirs: --data-dir-root DIR gives DIR/<name>.etcd; --data-dir may contain {name}; without {name}\n" +
			"   it is one member's (--name). Default <name>.etcd, as etcdutl. A non-empty data dir is refused;\n" +
			"   --force moves it aside to <dir>.moved-<UTC time> and never deletes it.\n" +
			"5. With --verify-endpoints, waits for the new members (start them with the same etcd minor version as\n" +
			"   the backup, --initial-cluster-state new and the token printed) and verifies them: all healthy, the\n" +
			"   revision at least the snapshot's plus the bump, the live key count equal to the snapshot's.\n" +
			"Then put the legacy v2 keys back with `restore v2`.\n\n" +
			"With --via etcd-operator --cluster NAME, the EtcdCluster NAME (found through Kubernetes) is restored by\n" +
			"etcd-operator's restore operator: steps 1-3 as above (the old members are the EtcdCluster's pods), then the\n" +
			"verified snapshot is staged uncompressed at <prefix>/restore/NAME/<backup>/snapshot.db and read back, an\n" +
			"EtcdRestore is created (the EtcdCluster's spec is kept in its annotations; the operator replaces the\n" +
			"EtcdCluster), and, up to --wait-timeout, the restored EtcdCluster must report all members ready; it is then\n" +
			"verified: all members healthy, the revision at least the snapshot's (no bump), the live key count equal.\n" +
			"First, the secret etcd-operator will read (--aws-secret) must have keys credentials and config in AWS\n" +
			"shared-file format (a warning when the tool may not read it). An EtcdRestore NAME left by an earlier restore\n" +
			"is deleted (and logged with its annotations) if the tool created it and etcd-operator is done with it;\n" +
			"any other is refused.",
		Flags: concat(restoreEtcdFlags(), cosFlags(), kubeFlags(), []cli.Flag{
			clusterIDFlag(),
			backupFlag(),
			&cli.BoolFlag{Name: "no-live", Usage: "do not snapshot a surviving member first"},
			probeTimeoutFlag(),
			&cli.StringFlag{Name: "initial-cluster", Usage: "the new cluster, as etcd's --initial-cluster: name=peerURL,..."},
			&cli.StringFlag{Name: "name", Usage: "restore only this member (etcdutl's --name); needs --backup and --initial-cluster-token when the cluster has others"},
			&cli.StringSliceFlag{Name: "initial-advertise-peer-urls", Usage: "--name's peer URLs (default: from --initial-cluster, which they must match)"},
			&cli.StringFlag{Name: "initial-cluster-token", Usage: "the new cluster's token (default: generated and printed)"},
			&cli.StringFlag{Name: "data-dir", Usage: "a member's data dir; may contain {name} (default {name}.etcd)", TakesFile: true},
			&cli.StringFlag{Name: "data-dir-root", Usage: "put every member's data dir at DIR/<name>.etcd", TakesFile: true},
			bumpRevisionFlag(),
			&cli.BoolFlag{Name: "mark-compacted", Value: true, Usage: "mark the bumped revision compacted, so watchers re-list (etcdutl's --mark-compacted)"},
			&cli.IntFlag{Name: "parallel-data-dirs", Usage: "data dirs written at a time (0: all at once; each maps the database while it is written)"},
			&cli.BoolFlag{Name: "force", Usage: "move non-empty data dirs aside (<dir>.moved-<UTC time>) instead of refusing; nothing is deleted"},
			dryRunFlag(),
			tempDirFlag(),
			&cli.StringSliceFlag{Name: "verify-endpoints", Usage: "client URLs of the new members: wait for them and verify the rebuilt cluster"},
			verifyTimeoutFlag(),
			&cli.StringFlag{Name: "via", Usage: "etcd-operator: restore the EtcdCluster --cluster through an EtcdRestore"},
			clusterFlag(),
			timeoutFlag(),
			&cli.DurationFlag{Name: "wait-timeout", Value: kube.DefaultOperatorRestoreTimeout, Usage: "with --via etcd-operator: how long to wait for the restored EtcdCluster's members to be ready"},
			&cli.StringFlag{Name: "aws-secret", Value: kube.COSSecretName, Usage: "with --via etcd-operator: the secret etcd-operator reads the S3 credentials from (spec.s3.awsSecret; keys credentials and config, AWS shared-file format, checked first)"},
			&cli.BoolFlag{Name: "force-path-style", Value: true, Usage: "with --via etcd-operator: spec.s3.forcePathStyle"},
			outputFlag(),
		}, deprecatedFlagsOf("restore")),
		Action: runRestore,
		Subcommands: []*cli.Command{
			restoreV2Command(),
			restoreVerifyCommand(),
		},
	}
}

// restoreEtcdFlags are etcdctl's connection flags for the old cluster, with
// no default endpoint: no --endpoints means no survivor snapshot.
func restoreEtcdFlags() []cli.Flag {
	flags := etcdFlags()
	for _, f := range flags {
		if sf, ok := f.(*cli.StringSliceFlag); ok && sf.Name == "endpoints" {
			sf.Value = nil
		}
	}
	return flags
}

func runRestore(c *cli.Context) error {
	if c.Args().Present() {
		return usagef("restore: unexpected argument %q (subcommands: v2, verify)", c.Args().First())
	}
	log, err := logger(c)
	if err != nil {
		return err
	}
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return usageError{err}
	}
	if c.IsSet("via") || c.IsSet("cluster") {
		return runRestoreViaOperator(c, log, format)
	}
	for _, f := range []string{"wait-timeout", "aws-secret", "force-path-style"} {
		if c.IsSet(f) {
			return usagef("restore: --%s goes with --via etcd-operator", f)
		}
	}
	if c.IsSet("timeout") && !c.Bool("dry-run") {
		return usagef("restore: --timeout is a dry run's overall deadline; a real restore is not cut short (--verify-timeout bounds the wait for the new members)")
	}
	opts := restore.Options{
		ClusterID:     c.String("cluster-id"),
		NoLive:        c.Bool("no-live"),
		ProbeTimeout:  c.Duration("probe-timeout"),
		Backup:        c.String("backup"),
		Token:         c.String("initial-cluster-token"),
		BumpRevision:  c.Uint64("bump-revision"),
		MarkCompacted: c.Bool("mark-compacted"),
		Force:         c.Bool("force"),
		Parallel:      c.Int("parallel-data-dirs"),
		DryRun:        c.Bool("dry-run"),
		ScratchDir:    c.String("temp-dir"),
		Targets: restore.Targets{
			InitialCluster:           c.String("initial-cluster"),
			Name:                     c.String("name"),
			InitialAdvertisePeerURLs: c.StringSlice("initial-advertise-peer-urls"),
			DataDir:                  c.String("data-dir"),
			DataDirRoot:              c.String("data-dir-root"),
		},
		Log:      log,
		Progress: func(label string) restore.Progress { return output.NewProgress(label) },
	}
	if opts.ClusterID == "" {
		return usagef("restore: --cluster-id is required")
	}
	if err := backup.ValidateClusterID(opts.ClusterID); err != nil {
		return usageError{err}
	}
	if opts.InitialCluster == "" {
		return usagef("restore: --initial-cluster is required (name=peerURL,... of the new cluster)")
	}
	if opts.Backup != "" {
		if _, _, err := backup.ParseBackupName(opts.Backup); err != nil {
			return usagef("restore: --backup: %v", err)
		}
	}
	if (opts.BumpRevision > 0) != opts.MarkCompacted {
		return usagef("restore: --bump-revision %d with --mark-compacted=%t: set both (the default), or --bump-revision 0 with --mark-compacted=false",
			opts.BumpRevision, opts.MarkCompacted)
	}
	if opts.ProbeTimeout <= 0 {
		return usagef("restore: --probe-timeout must be positive")
	}
	if opts.Parallel < 0 {
		return usagef("restore: --parallel-data-dirs must be 0 (all at once) or more")
	}
	members, err := restore.ValidateTargets(opts.Targets)
	if err != nil {
		return usagef("restore: %v", err)
	}
	if opts.Name != "" && members > 1 && (opts.Backup == "" || opts.Token == "") {
		return usagef("restore: --name restores 1 of %d members: pass --backup and --initial-cluster-token so every member "+
			"comes from the same snapshot with the same token (or restore all members in one run)", members)
	}
	if opts.Old, err = restoreEtcdConfig(c, c.StringSlice("endpoints")); err != nil {
		return err
	}
	if eps := c.StringSlice("verify-endpoints"); len(eps) > 0 {
		if opts.DryRun {
			return usagef("restore: --verify-endpoints with --dry-run: a dry run writes no data dir to verify")
		}
		if opts.Verify.Etcd, err = restoreEtcdConfig(c, eps); err != nil {
			return err
		}
		opts.Verify.Timeout = c.Duration("verify-timeout")
		if opts.Verify.Timeout <= 0 {
			return usagef("restore: --verify-timeout must be positive")
		}
		opts.Verify.Log = log
		opts.OnDataDirs = func(p *restore.Plan) {
			log.Info("data dirs written: start the new members now; waiting for them", "cluster", p.ClusterID,
				"etcd_version", p.EtcdVersion, "initial_cluster_token", p.Token, "endpoints", strings.Join(eps, ","),
				"timeout", opts.Verify.Timeout)
		}
	}
	store, layout, err := cosStore(c)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout = store, layout

	ctx := c.Context
	if opts.DryRun {
		// A dry run changes nothing, so nothing is lost by stopping it:
		// it has an overall deadline, as list and inspect do.
		timeout := c.Duration("timeout")
		if timeout <= 0 {
			return usagef("restore: --timeout must be positive")
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, fmt.Errorf("restore --dry-run: the overall deadline (--timeout %v) passed", timeout))
		defer cancel()
	}
	res, err := restore.Run(ctx, opts)
	if err != nil && opts.DryRun && c.Context.Err() == nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: %v", context.Cause(ctx), err)
	}
	if res != nil && (err == nil || opts.DryRun || res.Duration > 0) {
		if rerr := renderRestore(c.App.Writer, format, res); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// restoreEtcdConfig is the etcd connection for the given endpoints with the
// command's TLS flags. No endpoints is valid: nothing to connect to.
func restoreEtcdConfig(c *cli.Context, endpoints []string) (etcdconn.Config, error) {
	cfg := etcdconn.Config{
		Endpoints:   endpoints,
		CACert:      c.String("cacert"),
		Cert:        c.String("cert"),
		Key:         c.String("key"),
		DialTimeout: c.Duration("dial-timeout"),
	}
	if len(endpoints) == 0 {
		return cfg, nil
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

func renderRestore(w io.Writer, format output.Format, res *restore.Result) error {
	if format == output.FormatJSON {
		return output.Render(w, format, output.Table{}, res)
	}
	p := &res.Plan
	if p.DryRun {
		fmt.Fprintf(w, "Restore plan for cluster %s (dry run: nothing was changed)\n\n", p.ClusterID)
	} else {
		fmt.Fprintf(w, "Restore of cluster %s\n\n", p.ClusterID)
	}
	if err := renderSelection(w, format, p); err != nil {
		return err
	}
	if len(p.Members) > 0 {
		fmt.Fprintf(w, "\nData dirs:\n")
		t := output.Table{Header: []string{"MEMBER", "PEER URLS", "DATA DIR", "FOUND", "ACTION"},
			Wide: []string{"MEMBER", "PEER URLS"}, Long: []string{"ACTION"}, Key: "DATA DIR"}
		for _, m := range p.Members {
			t.Rows = append(t.Rows, []string{m.Name, strings.Join(m.PeerURLs, ","), m.DataDir, m.State, memberAction(p, m)})
		}
		if err := output.Render(w, format, t, nil); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\nNew cluster: --initial-cluster %s --initial-cluster-token %s --initial-cluster-state new\n", p.InitialCluster, p.Token)
	if p.TokenGenerated {
		fmt.Fprintf(w, "  (the token was generated: members restored in other runs must use it)\n")
	}
	if p.EtcdVersion != "" {
		fmt.Fprintf(w, "Start the members with etcd %s, the version the backup was taken from.\n", p.EtcdVersion)
	}
	switch {
	case p.Snapshot != nil:
		fmt.Fprintf(w, "Expected: revision >= %d (snapshot revision %d + bump %d), %d live keys",
			p.MinRevision, p.Snapshot.Revision, p.BumpRevision, p.Snapshot.LiveKeys)
		if p.Snapshot.LeasedKeys > 0 {
			fmt.Fprintf(w, " (%d on leases, which etcd may expire once the cluster runs: verify counts them apart)", p.Snapshot.LeasedKeys)
		}
		fmt.Fprintf(w, ".\n")
	case p.Chosen != nil:
		fmt.Fprintf(w, "Expected: revision >= %d (manifest revision %d + bump %d).\n", p.MinRevision, p.Chosen.Revision, p.BumpRevision)
	}
	for _, pr := range p.Problems {
		fmt.Fprintf(w, "PROBLEM: %s\n", pr)
	}
	if res.Duration > 0 {
		fmt.Fprintf(w, "\nData dirs written in %s.\n", res.Duration.Round(time.Millisecond))
	}
	if res.Verify != nil {
		fmt.Fprintln(w)
		if err := renderVerifyReport(w, format, res.Verify); err != nil {
			return err
		}
	}
	if res.TotalToVerified > 0 {
		fmt.Fprintf(w, "\nTotal time from start to a verified cluster: %s.\n", res.TotalToVerified.Round(time.Millisecond))
	} else if !p.DryRun && res.Duration > 0 && res.Verify == nil && p.Snapshot != nil {
		fmt.Fprintf(w, "\nOnce the members run: etcd-recovery restore verify --endpoints ... --min-revision %d --expect-keys %d --expect-members %d\n",
			p.MinRevision, p.Snapshot.LiveKeys, len(strings.Split(p.InitialCluster, ",")))
	}
	if !p.DryRun && res.Duration > 0 && p.Chosen != nil && p.Chosen.V2Keys != nil && *p.Chosen.V2Keys > 0 {
		fmt.Fprintf(w, "The backup holds %d v2 keys: once the cluster runs with --enable-v2, run `etcd-recovery restore v2 --cluster-id %s --backup %s --endpoints ...`.\n",
			*p.Chosen.V2Keys, p.ClusterID, p.Chosen.Name)
	}
	return nil
}

// renderSelection prints the survivor, the candidates, the choice and the
// checks of the chosen backup.
func renderSelection(w io.Writer, format output.Format, p *restore.Plan) error {
	switch s := p.Survivor; {
	case s == nil:
	case s.Planned:
		fmt.Fprintf(w, "Survivor: member %s (%s) answers at revision %d: a pre-restore snapshot of it would be committed to COS first.\n",
			s.Member, s.Endpoint, s.Revision)
	case s.Backup != "":
		fmt.Fprintf(w, "Survivor: member %s (%s) answered: its snapshot was committed to COS first as %s (revision %d).\n",
			s.Member, s.Endpoint, s.Backup, s.Revision)
	default:
		fmt.Fprintf(w, "Survivor: none (%s).\n", s.Skipped)
	}
	if len(p.Candidates) > 0 {
		fmt.Fprintf(w, "\nCandidates, best first:\n")
		t := output.Table{Header: []string{"BACKUP", "KIND", "TIME (UTC)", "REVISION", "SOURCE", "ETCD", "RAW", "V2 KEYS", "STATUS", "DETAIL"},
			Wide: []string{"KIND", "TIME (UTC)", "SOURCE", "ETCD", "V2 KEYS"}, Long: []string{"DETAIL"}}
		for _, cd := range p.Candidates {
			v2, raw := "-", "-"
			if cd.V2Keys != nil {
				v2 = fmt.Sprint(*cd.V2Keys)
			}
			if cd.RawSize > 0 {
				raw = output.Bytes(cd.RawSize)
			}
			t.Rows = append(t.Rows, []string{cd.Name, string(cd.Kind), cd.Time.UTC().Format("2006-01-02 15:04:05"),
				fmt.Sprint(cd.Revision), cd.Source, cd.ServerVersion, raw, v2, cd.Status, cd.Detail})
		}
		if err := output.Render(w, format, t, nil); err != nil {
			return err
		}
	}
	for _, ig := range p.Ignored {
		fmt.Fprintf(w, "Ignored: %s: %s\n", ig.Name, ig.Reason)
	}
	if p.Chosen != nil {
		fmt.Fprintf(w, "\nChosen: %s, because %s.\n", p.Chosen.Name, p.Reason)
	}
	if len(p.Checks) > 0 {
		fmt.Fprintf(w, "\nChecks before anything is written:\n")
		t := output.Table{Header: []string{"CHECK", "STATUS", "DETAIL"}, Long: []string{"DETAIL"}}
		for _, ck := range p.Checks {
			t.Rows = append(t.Rows, []string{ck.Name, ck.Status, ck.Detail})
		}
		if err := output.Render(w, format, t, nil); err != nil {
			return err
		}
	}
	return nil
}

func memberAction(p *restore.Plan, m restore.Member) string {
	switch {
	case m.Restored && m.MovedTo != "":
		return "moved aside to " + m.MovedTo + ", then written"
	case m.Restored:
		return "written"
	case m.Problem != "":
		return "REFUSED: " + m.Problem
	case m.State == restore.DirNonEmpty && m.MovedTo == "":
		return "REFUSED: not empty (--force moves it aside)"
	case p.DryRun && m.MovedTo != "":
		return "would move aside to " + m.MovedTo + ", then write"
	case p.DryRun:
		return "would write"
	}
	return "not written"
}

func renderVerifyReport(w io.Writer, format output.Format, rep *restore.VerifyReport) error {
	t := output.Table{Header: []string{"MEMBER", "ID", "ENDPOINT", "HEALTHY", "VERSION", "REVISION", "ERROR"},
		Wide: []string{"ID"}, Long: []string{"ERROR"}}
	for _, m := range rep.Members {
		rev := "-"
		if m.Revision > 0 {
			rev = fmt.Sprint(m.Revision)
		}
		t.Rows = append(t.Rows, []string{m.Name, m.ID, m.Endpoint, fmt.Sprint(m.Healthy), m.Version, rev, m.Error})
	}
	if err := output.Render(w, format, t, nil); err != nil {
		return err
	}
	ct := output.Table{Header: []string{"CHECK", "STATUS", "DETAIL"}, Long: []string{"DETAIL"}}
	for _, ck := range rep.Checks {
		ct.Rows = append(ct.Rows, []string{ck.Name, ck.Status, ck.Detail})
	}
	if err := output.Render(w, format, ct, nil); err != nil {
		return err
	}
	verdict := "FAILED"
	if rep.Verified {
		verdict = "VERIFIED"
	}
	fmt.Fprintf(w, "Rebuilt cluster: %s (waited %s)\n", verdict, rep.Waited.Round(time.Millisecond))
	return nil
}

func restoreV2Command() *cli.Command {
	return &cli.Command{
		Name:  "v2",
		Usage: "put a backup's v2 keys (directories, keys, values, remaining TTLs) into a healthy cluster; idempotent",
		Description: "Reads the v2 export of --backup (default: the backup restore would choose) and writes, through the\n" +
			"v2 HTTP API of --endpoints (the new cluster, started with --enable-v2), only what differs: running it\n" +
			"twice reports everything unchanged the second time. Keys whose TTL ran out since the backup are skipped.",
		Flags: concat(etcdFlags(), cosFlags(), []cli.Flag{
			clusterIDFlag(),
			backupFlag(),
			outputFlag(),
		}),
		Action: runRestoreV2,
	}
}

func runRestoreV2(c *cli.Context) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return usageError{err}
	}
	opts := restore.V2Options{ClusterID: c.String("cluster-id"), Backup: c.String("backup"), Log: log}
	if opts.ClusterID == "" {
		return usagef("restore v2: --cluster-id is required")
	}
	if err := backup.ValidateClusterID(opts.ClusterID); err != nil {
		return usageError{err}
	}
	if opts.Backup != "" {
		if _, _, err := backup.ParseBackupName(opts.Backup); err != nil {
			return usagef("restore v2: --backup: %v", err)
		}
	}
	if opts.Etcd, err = etcdConfig(c); err != nil {
		return err
	}
	store, layout, err := cosStore(c)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout = store, layout
	rep, err := restore.RestoreV2(c.Context, opts)
	if rep != nil && rep.Endpoint != "" {
		t := output.Table{
			Header: []string{"CLUSTER", "BACKUP", "ENDPOINT", "KEYS", "DIRS", "CREATED", "UPDATED", "UNCHANGED", "EXPIRED", "FAILED"},
			Wide:   []string{"CLUSTER", "ENDPOINT"},
			Rows: [][]string{{rep.ClusterID, rep.Backup, rep.Endpoint, fmt.Sprint(rep.Keys), fmt.Sprint(rep.Dirs), fmt.Sprint(rep.Created),
				fmt.Sprint(rep.Updated), fmt.Sprint(rep.Unchanged), fmt.Sprint(rep.Expired), fmt.Sprint(rep.Failed)}},
		}
		if rerr := output.Render(c.App.Writer, format, t, rep); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

func restoreVerifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "check a rebuilt cluster: every member healthy, the revision not behind, the live key count as in the snapshot",
		Description: "Expectations come from --cluster-id and --backup (the snapshot is downloaded, verified and read: its\n" +
			"revision plus --bump-revision, and its live key count), from --manifest (a manifest.json: the revision only),\n" +
			"or from --min-revision / --expect-keys. Waits up to --verify-timeout for the members to be healthy. Exit 1 on failure.",
		Flags: concat(etcdFlags(), cosFlags(), []cli.Flag{
			clusterIDFlag(),
			backupFlag(),
			&cli.StringFlag{Name: "manifest", Usage: "the backup's manifest.json on disk, instead of --backup", TakesFile: true},
			bumpRevisionFlag(),
			&cli.Int64Flag{Name: "min-revision", Usage: "the revision must be at least this (overrides --backup/--manifest)"},
			&cli.Int64Flag{Name: "expect-keys", Value: -1, Usage: "the number of live keys (overrides --backup; -1: not checked)"},
			&cli.IntFlag{Name: "expect-members", Usage: "the number of members (0: not checked)"},
			verifyTimeoutFlag(),
			tempDirFlag(),
			outputFlag(),
		}, deprecatedFlagsOf("restore verify")),
		Action: runRestoreVerify,
	}
}

func runRestoreVerify(c *cli.Context) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return usageError{err}
	}
	opts := restore.ClusterCheckOptions{
		ClusterID: c.String("cluster-id"), Backup: c.String("backup"), ManifestFile: c.String("manifest"),
		BumpRevision: c.Uint64("bump-revision"), TempDir: c.String("temp-dir"),
		Progress: func(label string) restore.Progress { return output.NewProgress(label) },
	}
	opts.Timeout, opts.Log = c.Duration("verify-timeout"), log
	opts.ExpectedMembers, opts.ExpectedKeys, opts.MinRevision = c.Int("expect-members"), -1, 0
	if opts.Timeout <= 0 {
		return usagef("restore verify: --verify-timeout must be positive")
	}
	if opts.Backup != "" && opts.ManifestFile != "" {
		return usagef("restore verify: --backup and --manifest are exclusive")
	}
	if opts.Backup != "" {
		if opts.ClusterID == "" {
			return usagef("restore verify: --backup needs --cluster-id")
		}
		if err := backup.ValidateClusterID(opts.ClusterID); err != nil {
			return usageError{err}
		}
		if _, _, err := backup.ParseBackupName(opts.Backup); err != nil {
			return usagef("restore verify: --backup: %v", err)
		}
		store, layout, err := cosStore(c)
		if err != nil {
			return err
		}
		opts.Store, opts.Layout = store, layout
	}
	if !c.IsSet("endpoints") || len(c.StringSlice("endpoints")) == 0 {
		// Without it, etcdctl's default (127.0.0.1:2379) would be waited
		// for, in silence, for --verify-timeout.
		return usagef("restore verify: --endpoints (the rebuilt cluster's client URLs, or ETCDCTL_ENDPOINTS) is required")
	}
	if opts.Etcd, err = etcdConfig(c); err != nil {
		return err
	}
	if c.IsSet("min-revision") {
		opts.MinRevision = c.Int64("min-revision")
	}
	if c.IsSet("expect-keys") {
		opts.ExpectedKeys = c.Int64("expect-keys")
	}
	opts.OverrideMinRevision, opts.OverrideKeys = c.IsSet("min-revision"), c.IsSet("expect-keys")
	chk, err := restore.CheckCluster(c.Context, opts)
	if chk != nil && chk.VerifyReport != nil {
		if format == output.FormatJSON {
			if rerr := output.Render(c.App.Writer, format, output.Table{}, chk); rerr != nil && err == nil {
				err = rerr
			}
		} else {
			if chk.Backup != "" {
				fmt.Fprintf(c.App.Writer, "Restored from %s of cluster %s", chk.Backup, chk.ClusterID)
				if chk.Snapshot != nil {
					fmt.Fprintf(c.App.Writer, ": snapshot revision %d, %d live keys (%d on leases)", chk.Snapshot.Revision, chk.Snapshot.LiveKeys, chk.Snapshot.LeasedKeys)
				}
				fmt.Fprintln(c.App.Writer)
			}
			if rerr := renderVerifyReport(c.App.Writer, format, chk.VerifyReport); rerr != nil && err == nil {
				err = rerr
			}
		}
	}
	return err
}

// runRestoreViaOperator is restore --via etcd-operator: see
// kube.OperatorRestore.
func runRestoreViaOperator(c *cli.Context, log *slog.Logger, format output.Format) error {
	if via := c.String("via"); via != "etcd-operator" {
		return usagef("restore: --via %q: the only one is etcd-operator (with --cluster NAME)", via)
	}
	name := c.String("cluster")
	if name == "" {
		return usagef("restore --via etcd-operator: --cluster NAME (the EtcdCluster) is required")
	}
	if err := backup.ValidateClusterID(name); err != nil {
		return usagef("restore --via etcd-operator: --cluster: %v", err)
	}
	for _, f := range []string{"cluster-id", "initial-cluster", "name", "initial-advertise-peer-urls", "initial-cluster-token",
		"data-dir", "data-dir-root", "bump-revision", "mark-compacted", "parallel-data-dirs", "parallel", "force", "verify-endpoints", "endpoints"} {
		if !c.IsSet(f) {
			continue
		}
		if f == "endpoints" && fromEnvOnly(c.StringSlice(f), os.Getenv("ETCDCTL_ENDPOINTS")) {
			// ETCDCTL_ENDPOINTS exported for etcdctl (the runbooks'
			// connection settings): not a request to use it here.
			log.Info("ignoring ETCDCTL_ENDPOINTS from the environment: the members are found through the EtcdCluster", "cluster", name)
			continue
		}
		return usagef("restore --via etcd-operator: --%s does not apply: etcd-operator writes the data dirs and the members "+
			"are found through the EtcdCluster --cluster", f)
	}
	if b := c.String("backup"); b != "" {
		if _, _, err := backup.ParseBackupName(b); err != nil {
			return usagef("restore: --backup: %v", err)
		}
	}
	if c.IsSet("timeout") && !c.Bool("dry-run") {
		// The old spelling of --wait-timeout.
		if c.IsSet("wait-timeout") {
			return usagef("restore --via etcd-operator: --timeout is a dry run's overall deadline; the wait for etcd-operator is --wait-timeout")
		}
		if err := c.Set("wait-timeout", c.Duration("timeout").String()); err != nil {
			return usageError{err}
		}
		fmt.Fprintf(c.App.ErrWriter, "etcd-recovery: restore --via etcd-operator: --timeout for the wait is deprecated, use --wait-timeout (same meaning)\n")
	}
	for _, f := range []string{"timeout", "wait-timeout", "verify-timeout", "probe-timeout"} {
		if c.Duration(f) <= 0 {
			return usagef("restore: --%s must be positive", f)
		}
	}
	if c.String("bucket") == "" {
		return usagef("restore --via etcd-operator: --bucket is required (the operator is told <bucket>/<key>)")
	}
	if c.String("cos-endpoint") == "" {
		return usagef("restore --via etcd-operator: --cos-endpoint is required (the operator is told it)")
	}
	k, err := kubeClient(c)
	if err != nil {
		return err
	}
	store, layout, err := cosStoreKube(c, k)
	if err != nil {
		return err
	}
	ctx := c.Context
	if c.Bool("dry-run") {
		// As the manual dry run: it changes nothing, so it has an overall
		// deadline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.Duration("timeout"),
			fmt.Errorf("restore --dry-run: the overall deadline (--timeout %v) passed", c.Duration("timeout")))
		defer cancel()
	}
	rep, err := kube.OperatorRestore(ctx, kube.OperatorRestoreOptions{
		Kube: k, Cluster: name, Backup: c.String("backup"), Store: store, Layout: layout,
		Bucket: c.String("bucket"), Endpoint: c.String("cos-endpoint"), AWSSecret: c.String("aws-secret"),
		ForcePathStyle: c.Bool("force-path-style"), NoLive: c.Bool("no-live"),
		ProbeTimeout: c.Duration("probe-timeout"), DialTimeout: c.Duration("dial-timeout"),
		Timeout: c.Duration("wait-timeout"), VerifyTimeout: c.Duration("verify-timeout"),
		TempDir: c.String("temp-dir"), DryRun: c.Bool("dry-run"), Log: log,
		Progress: func(label string) restore.Progress { return output.NewProgress(label) },
	})
	if rep != nil {
		if rerr := renderOperatorRestore(c.App.Writer, format, rep, err); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

func renderOperatorRestore(w io.Writer, format output.Format, rep *kube.OperatorRestoreReport, runErr error) error {
	if format == output.FormatJSON {
		return output.Render(w, format, output.Table{}, rep)
	}
	if rep.DryRun {
		fmt.Fprintf(w, "Restore of etcdcluster %s/%s via etcd-operator (dry run: nothing was changed)\n\n", rep.Namespace, rep.Cluster)
	} else {
		fmt.Fprintf(w, "Restore of etcdcluster %s/%s via etcd-operator\n\n", rep.Namespace, rep.Cluster)
	}
	if p := rep.Plan; p != nil {
		if err := renderSelection(w, format, p); err != nil {
			return err
		}
		if p.Snapshot != nil {
			fmt.Fprintf(w, "Expected after the restore: revision >= %d (the snapshot's: etcd-operator does not bump it), %d live keys.\n",
				p.Snapshot.Revision, p.Snapshot.LiveKeys)
		}
		fmt.Fprintln(w)
	}
	if rep.OldSpec != nil {
		b, err := yaml.Marshal(map[string]any{"spec": rep.OldSpec})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "EtcdCluster %s/%s (uid %s), replaced by etcd-operator; its spec, also kept in the EtcdRestore's annotation %s:\n%s\n",
			rep.Namespace, rep.Cluster, rep.OldUID, kube.AnnotationClusterSpec, indent(string(b)))
	}
	verb := map[bool]string{true: "Would ", false: ""}[rep.DryRun]
	for _, a := range rep.Actions {
		switch a.Verb {
		case "stage":
			fmt.Fprintf(w, "%s%s: %s", verb, a.Verb, a.What)
			if rep.StagedSHA256 != "" {
				fmt.Fprintf(w, " (%s, sha256 %s, read back and checked)", output.Bytes(rep.StagedSize), rep.StagedSHA256)
			}
			fmt.Fprintln(w)
		case "create":
			b, err := yaml.Marshal(a.Object)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%s%s: %s\n---\n%s---\n", verb, a.Verb, a.What, b)
		case "delete":
			// The old EtcdRestore: its annotations are what it recorded
			// (the backup, the replaced EtcdCluster's uid and spec).
			fmt.Fprintf(w, "%s%s: %s\n", verb, a.Verb, a.What)
			if rep.Replaced != nil && len(rep.Replaced.Annotations) > 0 {
				b, err := yaml.Marshal(map[string]any{"annotations": rep.Replaced.Annotations})
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "%s\n", indent(string(b)))
			}
		default:
			fmt.Fprintf(w, "Then etcd-operator will %s: %s\n", a.Verb, a.What)
		}
	}
	if rep.NewUID != "" || rep.LastSeen != "" && !rep.DryRun {
		fmt.Fprintf(w, "\nWaited %s for etcd-operator; last seen: %s\n", rep.Waited.Round(time.Millisecond), rep.LastSeen)
	}
	if rep.Verify != nil {
		fmt.Fprintf(w, "\nRestored cluster at %s:\n", strings.Join(rep.Endpoints, ","))
		if err := renderVerifyReport(w, format, rep.Verify); err != nil {
			return err
		}
	}
	for _, warning := range rep.Warnings {
		fmt.Fprintf(w, "\nWARNING: %s\n", warning)
	}
	if runErr == nil && !rep.DryRun {
		fmt.Fprintf(w, "\nRestored and verified in %s. The EtcdRestore %s/%s stays as the record of this restore (its annotations keep "+
			"the replaced EtcdCluster's uid and spec); the next restore --via etcd-operator of this cluster deletes it.\n",
			rep.Duration.Round(time.Millisecond), rep.Namespace, rep.Cluster)
	}
	return nil
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// fromEnvOnly reports whether a string-slice flag's value is exactly what
// its environment variable holds (so it came from the environment, or the
// command line repeated it: either way not a deliberate request).
func fromEnvOnly(value []string, env string) bool {
	if env == "" {
		return false
	}
	var fromEnv []string
	for _, v := range strings.Split(env, ",") {
		if v = strings.TrimSpace(v); v != "" {
			fromEnv = append(fromEnv, v)
		}
	}
	return slices.Equal(value, fromEnv)
}
