package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/site"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/restore/survivor"
)

const defaultVerifyTimeout = 5 * time.Minute

// restoreOpts are restore's flags (the manual form and --via
// etcd-operator).
type restoreOpts struct {
	etcd                                              etcdOpts
	store                                             storeOpts
	site                                              siteOpts
	kube                                              kubeOpts
	encryption                                        encryptionOpts
	clusterID, backup, initialCluster, name, token    string
	dataDir, dataDirRoot, tempDir, via, cluster       string
	awsSecret, identityFile, output                   string
	escrowFrom                                        string
	rebuild, replace                                  bool
	peerURLs, verifyEndpoints                         cli.StringSlice
	noLive, markCompacted, force, dryRun              bool
	includeDeleted                                    bool
	forcePathStyle                                    bool
	bumpRevision                                      uint64
	toRevision                                        int64
	toTime                                            string
	acceptUnprovenJournal                             bool
	toLatest                                          bool
	parallelDataDirs                                  int
	probeTimeout, verifyTimeout, timeout, waitTimeout time.Duration
}

func restoreCommand(g *globalOpts) *cli.Command {
	o := &restoreOpts{}
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
			"Point in time (--to-revision R, or --to-time T: the last revision the journal received at or before T):\n" +
			"no survivor snapshot; the newest backup at or below R is staged, the journal's segments after it (see\n" +
			"`journal`, `journal find`) are applied into it up to R, then step 4. v2 keys are the backup's.\n" +
			"--to-latest (every member lost): R is the newest revision the journal reaches exactly from the newest backup;\n" +
			"a dry run says R, when the journal received it and how old it is. No journal is an error (restore without it).\n" +
			"A member of --endpoints that still answers is a warning: its survivor snapshot (a plain restore) loses nothing.\n" +
			"With --via etcd-operator, the staged copy is that replayed database, its revision bumped and marked compacted.\n\n" +
			"With --via etcd-operator --cluster NAME, the EtcdCluster NAME (found through Kubernetes) is restored by\n" +
			"etcd-operator's restore operator: steps 1-3 as above (the old members are the EtcdCluster's pods), then the\n" +
			"verified snapshot is staged uncompressed at <prefix>/_staged/NAME/<backup>/snapshot.db and read back, an\n" +
			"EtcdRestore is created (the EtcdCluster's spec is kept in its annotations; the operator replaces the\n" +
			"EtcdCluster), and, up to --wait-timeout, the restored EtcdCluster must report all members ready; it is then\n" +
			"verified: all members healthy, the revision at least the snapshot's (no bump), the live key count equal.\n" +
			"First, the secret etcd-operator will read (--aws-secret) must have keys credentials and config in AWS\n" +
			"shared-file format (a warning when the tool may not read it). An EtcdRestore NAME left by an earlier restore\n" +
			"is deleted (and logged with its annotations) if the tool created it and etcd-operator is done with it;\n" +
			"any other is refused.\n\n" +
			"With --rebuild (the namespace, or the management cluster, is gone): the backup is chosen as above (from the\n" +
			"store: no survivor snapshot), the escrow its manifest names is read and decrypted with --identity-file\n" +
			"(a wrong identity or a tampered escrow fails here, before anything is created), the missing secrets,\n" +
			"Services (same nodePorts and cluster IPs) and the EtcdCluster (paused) are created, then restored as above.\n" +
			"An existing object that differs refuses the rebuild unless --replace; --dry-run lists each object.\n" +
			"A backup whose escrow is not usable is refused, naming its state; --escrow-from BACKUP uses another's.",
		Flags: concat(o.etcd.flags(false), o.store.flags(), o.site.flags(), o.kube.flags(), []cli.Flag{
			clusterIDFlag(&o.clusterID),
			backupFlag(&o.backup),
			&cli.BoolFlag{Name: "no-live", Usage: "do not snapshot a surviving member first", Destination: &o.noLive},
			includeDeletedFlag(&o.includeDeleted),
			probeTimeoutFlag(&o.probeTimeout),
			&cli.StringFlag{Name: "initial-cluster", Usage: "the new cluster, as etcd's --initial-cluster: name=peerURL,...", Destination: &o.initialCluster},
			&cli.StringFlag{Name: "name", Usage: "restore only this member (etcdutl's --name); needs --backup and --initial-cluster-token when the cluster has others", Destination: &o.name},
			&cli.StringSliceFlag{Name: "initial-advertise-peer-urls", Usage: "--name's peer URLs (default: from --initial-cluster, which they must match)", Destination: &o.peerURLs},
			&cli.StringFlag{Name: "initial-cluster-token", Usage: "the new cluster's token (default: generated and printed)", Destination: &o.token},
			&cli.StringFlag{Name: "data-dir", Usage: "a member's data dir; may contain {name} (default {name}.etcd)", TakesFile: true, Destination: &o.dataDir},
			&cli.StringFlag{Name: "data-dir-root", Usage: "put every member's data dir at DIR/<name>.etcd", TakesFile: true, Destination: &o.dataDirRoot},
			bumpRevisionFlag(&o.bumpRevision),
			&cli.BoolFlag{Name: "mark-compacted", Value: true, Usage: "mark the bumped revision compacted, so watchers re-list (etcdutl's --mark-compacted)", Destination: &o.markCompacted},
			&cli.IntFlag{Name: "parallel-data-dirs", Usage: "data dirs written at a time (0: all at once; each maps the database while it is written)", Destination: &o.parallelDataDirs},
			forceFlag(&o.force),
			dryRunFlag(&o.dryRun),
			tempDirFlag(&o.tempDir),
			&cli.StringSliceFlag{Name: "verify-endpoints", Usage: "client URLs of the new members: wait for them and verify the rebuilt cluster", Destination: &o.verifyEndpoints},
			verifyTimeoutFlag(&o.verifyTimeout),
			&cli.StringFlag{Name: "via", Usage: "etcd-operator: restore the EtcdCluster --cluster through an EtcdRestore", Destination: &o.via},
			clusterFlag(&o.cluster),
			timeoutFlag(&o.timeout),
			waitTimeoutFlag(&o.waitTimeout),
			awsSecretFlag(&o.awsSecret),
			forcePathStyleFlag(&o.forcePathStyle),
			&cli.Int64Flag{Name: "to-revision", Usage: toRevisionUsage, Destination: &o.toRevision},
			toTimeFlag(&o.toTime),
			acceptUnprovenJournalFlag(&o.acceptUnprovenJournal),
			&cli.BoolFlag{Name: "to-latest", Usage: "point in time: restore to the newest revision the journal reaches exactly from the newest backup (every member lost: a survivor snapshot, the default, loses nothing)", Destination: &o.toLatest},
			identityFileFlag(&o.identityFile),
			rebuildFlag(&o.rebuild),
			replaceFlag(&o.replace),
			&cli.StringFlag{Name: "escrow-from", Usage: "with --rebuild: rebuild from this backup's escrow when the restored backup's is not usable (missing, mismatch, none)", Destination: &o.escrowFrom},
			outputFlag(&o.output),
		}, o.encryption.flags(), deprecatedFlagsOf("restore")),
		Action: func(c *cli.Context) error { return runRestore(c, g, o) },
		Subcommands: []*cli.Command{
			restoreV2Command(g),
			restoreVerifyCommand(g),
		},
	}
}

func runRestore(c *cli.Context, g *globalOpts, o *restoreOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	log := e.log
	// The survivor snapshot restore commits is encrypted like a backup.
	ids, rs, err := e.identityAndRecipients(o.identityFile, &o.encryption)
	if err != nil {
		return err
	}
	pitr, err := o.pointInTime(c)
	if err != nil {
		return err
	}
	if c.IsSet("via") || c.IsSet("cluster") {
		return runRestoreViaOperator(e, o, ids, rs, pitr)
	}
	for _, f := range []string{"wait-timeout", "aws-secret", "force-path-style", "rebuild", "replace", "escrow-from"} {
		if c.IsSet(f) {
			return usagef("restore: --%s goes with --via etcd-operator", f)
		}
	}
	if c.IsSet("timeout") && !o.dryRun {
		return usagef("restore: --timeout is a dry run's overall deadline; a real restore is not cut short (--verify-timeout bounds the wait for the new members)")
	}
	// On the command line these are deadlines with non-zero defaults; to
	// restore.Options zero means "the default".
	if err := requirePositive("restore", positive{"probe-timeout", o.probeTimeout}, positive{"verify-timeout", o.verifyTimeout},
		positive{"timeout", o.timeout}); err != nil {
		return err
	}
	opts := restore.Options{
		ClusterID:     o.clusterID,
		NoLive:        o.noLive,
		ProbeTimeout:  o.probeTimeout,
		Backup:        o.backup,
		Token:         o.token,
		BumpRevision:  o.bumpRevision,
		MarkCompacted: o.markCompacted,
		Force:         o.force,
		Parallel:      o.parallelDataDirs,
		DryRun:        o.dryRun,
		ScratchDir:    o.tempDir,
		Targets: restore.Targets{
			InitialCluster:           o.initialCluster,
			Name:                     o.name,
			InitialAdvertisePeerURLs: o.peerURLs.Value(),
			DataDir:                  o.dataDir,
			DataDirRoot:              o.dataDirRoot,
		},
		Old:               o.etcd.configFor(o.etcd.endpoints.Value()),
		Survivor:          survivor.Backup{},
		Identities:        ids,
		Recipients:        rs,
		RequireEncryption: o.encryption.requireEncryption,
		Log:               log,
		Progress:          func(label string) restore.Progress { return output.NewProgress(label) },
	}
	opts.IncludeDeleted = o.includeDeleted
	opts.ToRevision, opts.ToTime, opts.ToLatest = pitr.revision, pitr.at, pitr.latest
	opts.AcceptUnprovenJournal = o.acceptUnprovenJournal
	// The journal is the one in the store opened below.
	opts.JournalInStore = pitr.any()
	if eps := o.verifyEndpoints.Value(); len(eps) > 0 {
		opts.Verify = restore.VerifyOptions{Etcd: o.etcd.configFor(eps), Timeout: o.verifyTimeout, Log: log}
	}
	// Options first, before the store is set up: a usage error names the
	// flag, and nothing is contacted.
	if err := opts.Validate(); err != nil {
		return usagef("restore: %w", err)
	}
	ch, err := e.openSite(&o.site, &o.store, nil)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout, opts.Site = ch.Store, ch.Layout, ch.Describe()

	ctx := e.ctx()
	var t *runTimeout
	if opts.DryRun {
		// A dry run changes nothing, so nothing is lost by stopping it:
		// it has an overall deadline, as list and inspect do.
		if t, err = e.dryRunTimeout(o.timeout); err != nil {
			return err
		}
		defer t.cancel()
		ctx = t.ctx
	}
	res, err := restore.Run(ctx, opts)
	if t != nil {
		err = t.caused(err)
	}
	if res != nil && (err == nil || opts.DryRun || res.Duration > 0) {
		if rerr := e.renderAll(res.Tables(), res); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// restoreV2Opts are restore v2's flags.
type restoreV2Opts struct {
	etcd                                    etcdOpts
	store                                   storeOpts
	site                                    siteOpts
	clusterID, backup, identityFile, output string
	includeDeleted                          bool
}

func restoreV2Command(g *globalOpts) *cli.Command {
	o := &restoreV2Opts{}
	return &cli.Command{
		Name:  "v2",
		Usage: "put a backup's v2 keys (directories, keys, values, remaining TTLs) into a healthy cluster; idempotent",
		Description: "Reads the v2 export of --backup (default: the backup restore would choose) and writes, through the\n" +
			"v2 HTTP API of --endpoints (the new cluster, started with --enable-v2), only what differs: running it\n" +
			"twice reports everything unchanged the second time. Keys whose TTL ran out since the backup are skipped.",
		Flags: concat(o.etcd.flags(true), o.store.flags(), o.site.flags(), []cli.Flag{
			clusterIDFlag(&o.clusterID),
			backupFlag(&o.backup),
			identityFileFlag(&o.identityFile),
			includeDeletedFlag(&o.includeDeleted),
			outputFlag(&o.output),
		}),
		Action: func(c *cli.Context) error { return runRestoreV2(c, g, o) },
	}
}

func runRestoreV2(c *cli.Context, g *globalOpts, o *restoreV2Opts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	ids, err := e.identityOf(o.identityFile)
	if err != nil {
		return err
	}
	opts := restore.V2Options{ClusterID: o.clusterID, Backup: o.backup, Etcd: o.etcd.configFor(o.etcd.endpoints.Value()),
		Identities: ids, IncludeDeleted: o.includeDeleted, Log: e.log}
	if err := opts.Validate(); err != nil {
		return usagef("restore v2: %w", err)
	}
	ch, err := e.openSite(&o.site, &o.store, nil)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout = ch.Store, ch.Layout
	rep, err := restore.RestoreV2(e.ctx(), opts)
	if rep != nil && rep.Endpoint != "" {
		if rerr := e.render(rep.Table(), rep); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// restoreVerifyOpts are restore verify's flags.
type restoreVerifyOpts struct {
	etcd                                               etcdOpts
	store                                              storeOpts
	clusterID, backup, manifest, tempDir, identityFile string
	output                                             string
	bumpRevision                                       uint64
	minRevision, expectKeys                            int64
	expectMembers                                      int
	verifyTimeout                                      time.Duration
}

func restoreVerifyCommand(g *globalOpts) *cli.Command {
	o := &restoreVerifyOpts{}
	return &cli.Command{
		Name:  "verify",
		Usage: "check a rebuilt cluster: every member healthy, the revision not behind, the live key count as in the snapshot",
		Description: "Expectations come from --cluster-id and --backup (the snapshot is downloaded, verified and read: its\n" +
			"revision plus --bump-revision, and its live key count), from --manifest (a manifest.json: the revision only),\n" +
			"or from --min-revision / --expect-keys. Waits up to --verify-timeout for the members to be healthy. Exit 1 on failure.",
		Flags: concat(o.etcd.flags(true), o.store.flags(), []cli.Flag{
			clusterIDFlag(&o.clusterID),
			backupFlag(&o.backup),
			&cli.StringFlag{Name: "manifest", Usage: "the backup's manifest.json on disk, instead of --backup", TakesFile: true, Destination: &o.manifest},
			bumpRevisionFlag(&o.bumpRevision),
			&cli.Int64Flag{Name: "min-revision", Usage: "the revision must be at least this (overrides --backup/--manifest)", Destination: &o.minRevision},
			&cli.Int64Flag{Name: "expect-keys", Value: -1, Usage: "the number of live keys (overrides --backup; -1: not checked)", Destination: &o.expectKeys},
			&cli.IntFlag{Name: "expect-members", Usage: "the number of members (0: not checked)", Destination: &o.expectMembers},
			verifyTimeoutFlag(&o.verifyTimeout),
			tempDirFlag(&o.tempDir),
			identityFileFlag(&o.identityFile),
			outputFlag(&o.output),
		}, deprecatedFlagsOf("restore verify")),
		Action: func(c *cli.Context) error { return runRestoreVerify(c, g, o) },
	}
}

func runRestoreVerify(c *cli.Context, g *globalOpts, o *restoreVerifyOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	opts := restore.ClusterCheckOptions{
		ClusterID: o.clusterID, Backup: o.backup, ManifestFile: o.manifest,
		BumpRevision: o.bumpRevision, TempDir: o.tempDir,
		Progress: func(label string) restore.Progress { return output.NewProgress(label) },
	}
	opts.Timeout, opts.Log = o.verifyTimeout, e.log
	opts.ExpectedMembers, opts.ExpectedKeys, opts.MinRevision = o.expectMembers, -1, 0
	if opts.Timeout <= 0 {
		// The flag's 0 is a mistake; the package's 0 is its default.
		return usagef("restore verify: --verify-timeout must be positive")
	}
	if c.IsSet("endpoints") {
		// etcdctl's default endpoint (127.0.0.1:2379): only endpoints given
		// are a request; the default would be waited for, in silence, for
		// --verify-timeout.
		opts.Etcd.Endpoints = o.etcd.endpoints.Value()
	}
	if opts.Backup == "" && c.IsSet("identity-file") {
		return usagef("restore verify: --identity-file decrypts the snapshot of --backup: use it with --backup")
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	if opts.Backup != "" {
		store, layout, err := e.openStore(&o.store, nil)
		if err != nil {
			return err
		}
		opts.Store, opts.Layout = store, layout
		if opts.Identities, err = e.identityOf(o.identityFile); err != nil {
			return err
		}
	}
	if opts.Etcd, err = o.etcd.config(); err != nil {
		return err
	}
	if c.IsSet("min-revision") {
		opts.MinRevision = o.minRevision
	}
	if c.IsSet("expect-keys") {
		opts.ExpectedKeys = o.expectKeys
	}
	opts.OverrideMinRevision, opts.OverrideKeys = c.IsSet("min-revision"), c.IsSet("expect-keys")
	chk, err := restore.CheckCluster(e.ctx(), opts)
	if chk != nil && chk.VerifyReport != nil {
		if rerr := e.renderAll(chk.Tables(), chk); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// runRestoreViaOperator is restore --via etcd-operator: see
// kube.OperatorRestore.
func runRestoreViaOperator(e *env, o *restoreOpts, ids *seal.Identities, rs seal.Recipients, pitr pitrFlags) error {
	c, log := e.c, e.log
	if o.via != "etcd-operator" {
		return usagef("restore: --via %q: the only one is etcd-operator (with --cluster NAME)", o.via)
	}
	name := o.cluster
	for _, f := range []string{"cluster-id", "initial-cluster", "name", "initial-advertise-peer-urls", "initial-cluster-token",
		"data-dir", "data-dir-root", "mark-compacted", "parallel-data-dirs", "parallel", "force", "verify-endpoints", "endpoints"} {
		if !c.IsSet(f) {
			continue
		}
		if f == "endpoints" && fromEnvOnly(o.etcd.endpoints.Value(), os.Getenv("ETCDCTL_ENDPOINTS")) {
			// ETCDCTL_ENDPOINTS exported for etcdctl (the runbooks'
			// connection settings): not a request to use it here.
			log.Info("ignoring ETCDCTL_ENDPOINTS from the environment: the members are found through the EtcdCluster", "cluster", name)
			continue
		}
		return usagef("restore --via etcd-operator: --%s does not apply: etcd-operator writes the data dirs and the members "+
			"are found through the EtcdCluster --cluster", f)
	}
	if c.IsSet("timeout") && !o.dryRun {
		// The old spelling of --wait-timeout.
		if c.IsSet("wait-timeout") {
			return usagef("restore --via etcd-operator: --timeout is a dry run's overall deadline; the wait for etcd-operator is --wait-timeout")
		}
		if err := c.Set("wait-timeout", o.timeout.String()); err != nil {
			return asUsage(err)
		}
		fmt.Fprintf(c.App.ErrWriter, "etcd-recovery: restore --via etcd-operator: --timeout for the wait is deprecated, use --wait-timeout (same meaning)\n")
	}
	if err := requirePositive("restore", positive{"timeout", o.timeout}, positive{"wait-timeout", o.waitTimeout},
		positive{"verify-timeout", o.verifyTimeout}, positive{"probe-timeout", o.probeTimeout}); err != nil {
		return err
	}
	loc, err := o.store.given(e.c)
	if err != nil {
		return err
	}
	opts := kube.OperatorRestoreOptions{
		Cluster: name, Backup: o.backup,
		Bucket: loc.Bucket, Endpoint: loc.Endpoint, AWSSecret: o.awsSecret,
		ForcePathStyle: o.forcePathStyle, NoLive: o.noLive,
		ProbeTimeout: o.probeTimeout, DialTimeout: o.etcd.dialTimeout,
		Timeout: o.waitTimeout, VerifyTimeout: o.verifyTimeout,
		TempDir: o.tempDir, DryRun: o.dryRun, Identities: ids, Log: log,
		Recipients: rs, RequireEncryption: o.encryption.requireEncryption, BumpRevision: o.bumpRevision, NoBump: o.bumpRevision == 0,
		Progress: func(label string) restore.Progress { return output.NewProgress(label) },
	}
	// Checked before any client is built: a mistake never waits on the
	// API server or COS.
	if err := opts.Validate(); err != nil {
		return err
	}
	if !o.rebuild {
		for _, f := range []string{"replace", "escrow-from"} {
			if c.IsSet(f) {
				return usagef("restore --via etcd-operator: --%s goes with --rebuild", f)
			}
		}
	}
	if o.rebuild && c.IsSet("no-live") {
		return usagef("restore --via etcd-operator --rebuild: --no-live is implied (a rebuilt namespace has no members: the data comes from the store)")
	}
	k, err := e.kube(&o.kube)
	if err != nil {
		return err
	}
	ch, err := e.openSite(&o.site, &o.store, k)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout, opts.Kube = ch.Store, ch.Layout, k
	if ch.Site == site.Second {
		// etcd-operator reads the staged copy where it is: the second
		// site (with --aws-secret's credential, which must be that site's).
		if loc, err = o.site.siteLocation(c, ch, &o.store); err != nil {
			return err
		}
		opts.Bucket, opts.Endpoint = loc.Bucket, loc.Endpoint
	}
	ctx := e.ctx()
	if pitr.any() {
		// Point in time: the EtcdCluster's name is its cluster id in COS.
		src := journal.NewSource(opts.Store, opts.Layout, name, ids).ListOnce()
		opts.Journal, opts.AcceptUnprovenJournal = src, o.acceptUnprovenJournal
		opts.ToRevision, opts.ToTime, opts.ToLatest = pitr.revision, pitr.at, pitr.latest
	}
	if o.dryRun {
		// As the manual dry run: it changes nothing, so it has an overall
		// deadline.
		t, err := e.dryRunTimeout(o.timeout)
		if err != nil {
			return err
		}
		defer t.cancel()
		ctx = t.ctx
	}
	if o.rebuild {
		rep, err := kube.RebuildRestore(ctx, kube.RebuildRestoreOptions{Restore: opts, Replace: o.replace, EscrowFrom: o.escrowFrom})
		if rep != nil {
			if rerr := e.renderAll(rep.Tables(), rep); rerr != nil && err == nil {
				err = rerr
			}
		}
		return err
	}
	rep, err := kube.OperatorRestore(ctx, opts)
	if rep != nil {
		if rerr := e.renderAll(rep.Tables(), rep); rerr != nil && err == nil {
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

// includeDeletedFlag is --include-deleted (list, restore, drill): backups
// only a versioned bucket's object versions hold.
func includeDeletedFlag(dst *bool) cli.Flag {
	return &cli.BoolFlag{Name: "include-deleted", Destination: dst,
		Usage: "also the backups a versioned bucket holds only as object versions (deleted: behind a delete marker; overwritten), " +
			"at the versions they wrote (list: STATUS DELETED/OVERWRITTEN; restore and drill use them without it when no live backup checks out, and say so)"}
}

// The flags restore and restore-all share (one name, one meaning: the
// usage text says what each command does with it).

func forceFlag(dest *bool) cli.Flag {
	return &cli.BoolFlag{Name: "force", Destination: dest,
		Usage: "restore: move non-empty data dirs aside (<dir>.moved-<UTC time>) instead of refusing; nothing is deleted. " +
			"restore-all: restore healthy and degraded clusters too (from the store's newest backup)"}
}

func waitTimeoutFlag(dest *time.Duration) cli.Flag {
	return &cli.DurationFlag{Name: "wait-timeout", Value: kube.DefaultOperatorRestoreTimeout, Destination: dest,
		Usage: "with --via etcd-operator (restore-all: each cluster's): how long to wait for the restored EtcdCluster's members to be ready"}
}

func awsSecretFlag(dest *string) cli.Flag {
	return &cli.StringFlag{Name: "aws-secret", Value: kube.COSSecretName, Destination: dest,
		Usage: "with --via etcd-operator, and restore-all: the secret etcd-operator reads the S3 credentials from (spec.s3.awsSecret; keys credentials and config, AWS shared-file format, checked first)"}
}

func forcePathStyleFlag(dest *bool) cli.Flag {
	return &cli.BoolFlag{Name: "force-path-style", Value: true, Destination: dest,
		Usage: "with --via etcd-operator, and restore-all: spec.s3.forcePathStyle"}
}

func toTimeFlag(dest *string) cli.Flag {
	return &cli.StringFlag{Name: "to-time", Destination: dest,
		Usage: "point in time (" + timeFlagForms + "): restore to the last revision the journal received at or before this time (to within 100 ms; " +
			"restore-all: every selected cluster, healthy ones too, each to its own revision; undelete: the keys as they were then)"}
}

func rebuildFlag(dest *bool) cli.Flag {
	return &cli.BoolFlag{Name: "rebuild", Destination: dest,
		Usage: "with --via etcd-operator: first recreate the cluster's missing secrets, Services and EtcdCluster (paused) from the escrow the backup names, " +
			"decrypted with --identity-file (the namespace is gone); restore-all: so every cluster id with backups under the prefix and no EtcdCluster"}
}

func replaceFlag(dest *bool) cli.Flag {
	return &cli.BoolFlag{Name: "replace", Destination: dest,
		Usage: "with --rebuild: replace existing objects that differ from the escrow (else they refuse the rebuild, named with the fields that differ); " +
			"undelete: overwrite keys that exist now with other bytes, each guarded by the mod revision read (else listed as differs and left alone)"}
}
