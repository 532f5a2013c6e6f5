package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/restore/survivor"
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
			"2. The snapshot with the highest revision wins (a drilled one, then time, breaks ties); --backup forces one.\n" +
			"3. It is streamed into a temp file (next to the data dirs, or in --temp-dir) while the stored sha256, the database sha256\n" +
			"   and etcd's trailing hash are checked. A backup `list` calls damaged is never chosen; one that fails a check is\n" +
			"   refused and the next candidate tried (each at most once, each refusal logged and in -o json's fallbacks).\n" +
			"   A backup named with --backup is refused instead, naming the next good one.\n" +
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
			identityFileFlag(),
			outputFlag(),
		}, encryptionFlags(), deprecatedFlagsOf("restore")),
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
		return asUsage(err)
	}
	ids, err := identityOf(c, log)
	if err != nil {
		return err
	}
	// The survivor snapshot restore commits is encrypted like a backup.
	rs, err := recipientsFromFlags(c)
	if err != nil {
		return err
	}
	if c.IsSet("via") || c.IsSet("cluster") {
		return runRestoreViaOperator(c, log, format, ids, rs)
	}
	for _, f := range []string{"wait-timeout", "aws-secret", "force-path-style"} {
		if c.IsSet(f) {
			return usagef("restore: --%s goes with --via etcd-operator", f)
		}
	}
	if c.IsSet("timeout") && !c.Bool("dry-run") {
		return usagef("restore: --timeout is a dry run's overall deadline; a real restore is not cut short (--verify-timeout bounds the wait for the new members)")
	}
	// On the command line these are deadlines with non-zero defaults; to
	// restore.Options zero means "the default".
	if err := requirePositive(c, "restore", "probe-timeout", "verify-timeout", "timeout"); err != nil {
		return err
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
		Old:               etcdConfigFor(c, c.StringSlice("endpoints")),
		Survivor:          survivor.Backup{},
		Identities:        ids,
		Recipients:        rs,
		RequireEncryption: c.Bool("require-encryption"),
		Log:               log,
		Progress:          func(label string) restore.Progress { return output.NewProgress(label) },
	}
	if eps := c.StringSlice("verify-endpoints"); len(eps) > 0 {
		opts.Verify = restore.VerifyOptions{Etcd: etcdConfigFor(c, eps), Timeout: c.Duration("verify-timeout"), Log: log}
		opts.OnDataDirs = func(p *restore.Plan) {
			log.Info("data dirs written: start the new members now; waiting for them", "cluster", p.ClusterID,
				"etcd_version", p.EtcdVersion, "initial_cluster_token", p.Token, "endpoints", strings.Join(eps, ","),
				"timeout", opts.Verify.Timeout)
		}
	}
	// Options first, before the store is set up: a usage error names the
	// flag, and nothing is contacted.
	if err := opts.Validate(); err != nil {
		return usagef("restore: %w", err)
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
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, fmt.Errorf("restore --dry-run: the overall deadline (--timeout %v) passed", timeout))
		defer cancel()
	}
	res, err := restore.Run(ctx, opts)
	if err != nil && opts.DryRun && c.Context.Err() == nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: %v", context.Cause(ctx), err)
	}
	if res != nil && (err == nil || opts.DryRun || res.Duration > 0) {
		if rerr := output.RenderAll(c.App.Writer, format, res.Tables(), res); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// etcdConfigFor is the etcd connection for the given endpoints with the
// command's TLS flags; the package that uses it validates it.
func etcdConfigFor(c *cli.Context, endpoints []string) etcdconn.Config {
	return etcdconn.Config{
		Endpoints:   endpoints,
		CACert:      c.String("cacert"),
		Cert:        c.String("cert"),
		Key:         c.String("key"),
		DialTimeout: c.Duration("dial-timeout"),
	}
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
			identityFileFlag(),
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
		return asUsage(err)
	}
	ids, err := identityOf(c, log)
	if err != nil {
		return err
	}
	opts := restore.V2Options{ClusterID: c.String("cluster-id"), Backup: c.String("backup"), Etcd: etcdConfigFor(c, c.StringSlice("endpoints")),
		Identities: ids, Log: log}
	if err := opts.Validate(); err != nil {
		return usagef("restore v2: %w", err)
	}
	store, layout, err := cosStore(c)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout = store, layout
	rep, err := restore.RestoreV2(c.Context, opts)
	if rep != nil && rep.Endpoint != "" {
		if rerr := output.Render(c.App.Writer, format, rep.Table(), rep); rerr != nil && err == nil {
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
			identityFileFlag(),
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
		return asUsage(err)
	}
	opts := restore.ClusterCheckOptions{
		ClusterID: c.String("cluster-id"), Backup: c.String("backup"), ManifestFile: c.String("manifest"),
		BumpRevision: c.Uint64("bump-revision"), TempDir: c.String("temp-dir"),
		Progress: func(label string) restore.Progress { return output.NewProgress(label) },
	}
	opts.Timeout, opts.Log = c.Duration("verify-timeout"), log
	opts.ExpectedMembers, opts.ExpectedKeys, opts.MinRevision = c.Int("expect-members"), -1, 0
	if opts.Timeout <= 0 {
		// The flag's 0 is a mistake; the package's 0 is its default.
		return usagef("restore verify: --verify-timeout must be positive")
	}
	if c.IsSet("endpoints") {
		// etcdctl's default endpoint (127.0.0.1:2379) is not a request:
		// it would be waited for, in silence, for --verify-timeout.
		opts.Etcd.Endpoints = c.StringSlice("endpoints")
	}
	if opts.Backup == "" && c.IsSet("identity-file") {
		return usagef("restore verify: --identity-file decrypts the snapshot of --backup: use it with --backup")
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	if opts.Backup != "" {
		store, layout, err := cosStore(c)
		if err != nil {
			return err
		}
		opts.Store, opts.Layout = store, layout
		if opts.Identities, err = identityOf(c, log); err != nil {
			return err
		}
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
		if rerr := output.RenderAll(c.App.Writer, format, chk.Tables(), chk); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// runRestoreViaOperator is restore --via etcd-operator: see
// kube.OperatorRestore.
func runRestoreViaOperator(c *cli.Context, log *slog.Logger, format output.Format, ids *seal.Identities, rs seal.Recipients) error {
	if via := c.String("via"); via != "etcd-operator" {
		return usagef("restore: --via %q: the only one is etcd-operator (with --cluster NAME)", via)
	}
	name := c.String("cluster")
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
	if c.IsSet("timeout") && !c.Bool("dry-run") {
		// The old spelling of --wait-timeout.
		if c.IsSet("wait-timeout") {
			return usagef("restore --via etcd-operator: --timeout is a dry run's overall deadline; the wait for etcd-operator is --wait-timeout")
		}
		if err := c.Set("wait-timeout", c.Duration("timeout").String()); err != nil {
			return asUsage(err)
		}
		fmt.Fprintf(c.App.ErrWriter, "etcd-recovery: restore --via etcd-operator: --timeout for the wait is deprecated, use --wait-timeout (same meaning)\n")
	}
	if err := requirePositive(c, "restore", "timeout", "wait-timeout", "verify-timeout", "probe-timeout"); err != nil {
		return err
	}
	opts := kube.OperatorRestoreOptions{
		Cluster: name, Backup: c.String("backup"),
		Bucket: c.String("bucket"), Endpoint: c.String("cos-endpoint"), AWSSecret: c.String("aws-secret"),
		ForcePathStyle: c.Bool("force-path-style"), NoLive: c.Bool("no-live"),
		ProbeTimeout: c.Duration("probe-timeout"), DialTimeout: c.Duration("dial-timeout"),
		Timeout: c.Duration("wait-timeout"), VerifyTimeout: c.Duration("verify-timeout"),
		TempDir: c.String("temp-dir"), DryRun: c.Bool("dry-run"), Identities: ids, Log: log,
		Recipients: rs, RequireEncryption: c.Bool("require-encryption"),
		Progress: func(label string) restore.Progress { return output.NewProgress(label) },
	}
	// Checked before any client is built: a mistake never waits on the
	// API server or COS.
	if err := opts.Validate(); err != nil {
		return err
	}
	k, err := kubeClient(c)
	if err != nil {
		return err
	}
	if opts.Store, opts.Layout, err = cosStoreKube(c, k); err != nil {
		return err
	}
	opts.Kube = k
	ctx := c.Context
	if c.Bool("dry-run") {
		// As the manual dry run: it changes nothing, so it has an overall
		// deadline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.Duration("timeout"),
			fmt.Errorf("restore --dry-run: the overall deadline (--timeout %v) passed", c.Duration("timeout")))
		defer cancel()
	}
	rep, err := kube.OperatorRestore(ctx, opts)
	if rep != nil {
		if rerr := output.RenderAll(c.App.Writer, format, rep.Tables(), rep); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
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

// identityOf loads --identity-file (nil without one) and logs the
// warning a group-readable file gets.
func identityOf(c *cli.Context, log *slog.Logger) (*seal.Identities, error) {
	ids, err := identityFromFlags(c)
	if err != nil {
		return nil, err
	}
	if ids != nil && ids.Warning != "" {
		log.Warn("identity file accepted with a remark", "command", c.Command.FullName(), "identity_file", c.String("identity-file"), "warning", ids.Warning)
	}
	return ids, nil
}
