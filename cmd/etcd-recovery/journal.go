package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/bytesize"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/kube"
)

// journalOpts are journal's flags: one cluster (--cluster-id, the etcd
// flags) or every EtcdCluster of the namespace (--all, the kube flags);
// the gap backup's are backup's (probe timeout, object lock and the
// retention policy its lock derives from).
type journalOpts struct {
	etcd                                           etcdOpts
	store                                          storeOpts
	kube                                           kubeOpts
	encryption                                     encryptionOpts
	escrowRecipients                               cli.StringSlice
	policy                                         policyOpts
	lock                                           lockOpts
	clusterID, compress, segmentSize, identityFile string
	// memoryBudget: the captures' shared memory budget (journal.Budget).
	memoryBudget                              string
	all, noEvents                             bool
	segmentInterval, rediscover, probeTimeout time.Duration
	leader                                    leaderOpts
	// journalRetention: with an explicit --lock-mode, how long segments
	// are locked (retention.SegmentLockUntil).
	journalRetention time.Duration
	// listen: the address of /metrics, /livez and /healthz ("": none);
	// unreadyAfter, how long a segment may stay unstored before
	// /healthz fails.
	listen       string
	unreadyAfter time.Duration
}

func journalCommand(g *globalOpts) *cli.Command {
	o := &journalOpts{}
	return &cli.Command{
		Name:  "journal",
		Usage: "continuous backup: journal every change of one cluster (or of every EtcdCluster: --all), from its newest full backup, into segments in COS (runs until SIGTERM)",
		Description: "Watches the whole keyspace of the cluster (--cluster-id, the etcd flags) from the newest committed full\n" +
			"backup's revision + 1, or, when that backup's journal is stored, from where its segments end (a restart\n" +
			"resumes exactly). A segment goes out once it is --segment-interval old or --segment-size big, never empty,\n" +
			"compressed and, with recipients, encrypted as backups are: <prefix>/_journal/<cluster>/<first>-<last>.seg.\n" +
			"With --all: every EtcdCluster of the namespace (endpoints and client TLS found as backup --all finds them),\n" +
			"listed again every --rediscover: a new one starts, a deleted one stops after writing what it holds.\n" +
			"When a journal cannot continue exactly (a watch compacted past or cancelled, stored segments that do not\n" +
			"continue each other, no full backup at all), the gap is recorded (<prefix>/_journal/<cluster>/gaps/<from>.json,\n" +
			"an Event JournalGap with --all, an error log), a scheduled full backup is taken at once and the journal\n" +
			"starts again from it. Other failures restart that cluster's journal after a backoff (1s doubling to 1m);\n" +
			"one cluster never stops another. SIGTERM writes what each journal holds and exits 0. One writer per cluster:\n" +
			"with --leader-elect (the Deployment's two replicas) it runs only while it holds the namespace's Lease, and a\n" +
			"leader that loses it stops writing at once and exits 1. See docs/journal.md.",
		Flags: concat(o.etcd.flags(true), o.store.flags(), o.kube.flags(), []cli.Flag{
			clusterIDFlag(&o.clusterID),
			allFlag(&o.all),
			&cli.DurationFlag{Name: "rediscover", Value: fleet.DefaultRediscover, Usage: "with --all: list the EtcdClusters again this often (new ones start, deleted ones stop)", Destination: &o.rediscover},
			&cli.BoolFlag{Name: "no-events", Usage: "with --all/--cluster: do not record Kubernetes Events", Destination: &o.noEvents},
			&cli.StringFlag{Name: "compress", Value: "zstd", Usage: "zstd or none", Destination: &o.compress},
			&cli.DurationFlag{Name: "segment-interval", Value: journal.DefaultSegmentInterval, Usage: "write a segment once its first change is this old (the RPO: at most this plus one upload)", Destination: &o.segmentInterval},
			&cli.StringFlag{Name: "memory-budget", Value: fmt.Sprintf("%dMiB", journal.DefaultMemoryBudget>>20), Destination: &o.memoryBudget,
				Usage: "the events every cluster's journal holds at once, in this process (bytes, or KiB/MiB: 1024-based; KB/MB: 1000-based): when all catch up at once (a restart, a leader change) they take turns; measured at 100 clusters catching up at once: peak RSS 352 MiB with the default, 1,150 MiB without (docs/journal.md, Bounds)"},
			&cli.StringFlag{Name: "segment-size", Value: "4MiB", Usage: "write a segment once it is this big (bytes, or KiB/MiB: 1024-based; KB/MB: 1000-based): a cluster writing faster than the interval gets shorter segments", Destination: &o.segmentSize},
			probeTimeoutFlag(&o.probeTimeout),
			identityFileFlag(&o.identityFile),
			journalRetentionFlag(&o.journalRetention),
			&cli.StringFlag{Name: "listen", Usage: listenUsage, Destination: &o.listen},
			&cli.DurationFlag{Name: "unready-after", Value: journal.DefaultUnreadyAfter, Destination: &o.unreadyAfter,
				Usage: "with --listen: /healthz fails once a cluster's segment has stayed unstored this long (uploads failing, the store frozen), until a segment is stored; a follower waiting for the Lease is ready"},
		}, o.encryption.flags(), []cli.Flag{escrowRecipientFlag(&o.escrowRecipients)}, o.policy.flags(), o.lock.flags(), o.leader.flags()),
		Action:      func(c *cli.Context) error { return runJournal(c, g, o) },
		Subcommands: []*cli.Command{journalFindCommand(g), journalProveCommand(g)},
	}
}

// journalFindOpts are journal find's flags.
type journalFindOpts struct {
	store                                               storeOpts
	site                                                siteOpts
	clusterID, key, prefix, since, identityFile, output string
	matchPrefix                                         bool
}

func journalFindCommand(g *globalOpts) *cli.Command {
	o := &journalFindOpts{}
	return &cli.Command{
		Name:      "find",
		Usage:     "list the revisions and times at which a key, or the keys under a prefix, changed or were deleted, from the journal",
		ArgsUsage: "KEY",
		UsageText: "etcd-recovery journal find --cluster-id ID [--since T] [-o json] KEY [--match-prefix]\n" +
			"etcd-recovery journal find --cluster-id ID (--exact-key K | --key-prefix P) [--since T] [-o json]",
		Description: "Reads every stored segment of the cluster's journal (each verified) and lists the changes of the\n" +
			"matching keys, newest last: the revision (and its index within a txn), put or delete, the key and when the\n" +
			"journal received the revision (to within 100 ms). The key is the argument, as etcdctl's (flags may follow\n" +
			"it); --match-prefix makes it a prefix, as etcdctl's --prefix (--prefix is the store's, --key etcd's TLS key).\n" +
			"Restore to the revision just before a bad change with `restore --to-revision`. --since T (RFC 3339, or a\n" +
			"duration before now: 2h) leaves out changes received before T (to within 100 ms).",
		Flags: concat(o.store.flags(), o.site.flags(), []cli.Flag{
			clusterIDFlag(&o.clusterID),
			&cli.StringFlag{Name: "exact-key", Usage: "the key to look for, instead of the KEY argument (--key is etcd's TLS key)", Destination: &o.key},
			&cli.StringFlag{Name: "key-prefix", Usage: keyPrefixUsage, Destination: &o.prefix},
			&cli.BoolFlag{Name: "match-prefix", Usage: "the KEY argument is a prefix: every key under it (etcdctl's --prefix; --prefix is the store's)", Destination: &o.matchPrefix},
			sinceFlag(&o.since),
			identityFileFlag(&o.identityFile),
			outputFlag(&o.output),
		}),
		// --key is etcd's TLS key flag, which journal find (it reads the
		// store only) does not have: an etcdctl habit, pointed to the
		// key argument.
		OnUsageError: func(c *cli.Context, err error, sub bool) error {
			if undefinedFlag(err) == "key" {
				return usagef("journal find: --key is etcd's TLS client key flag, not the key to look for: " +
					"give the key as the argument, as etcdctl's (journal find --cluster-id ID /registry/pods/NS/NAME; " +
					"--match-prefix for every key under it), or --exact-key K")
			}
			return onUsageError(c, err, sub)
		},
		Action: func(c *cli.Context) error { return runJournalFind(c, g, o) },
	}
}

func sinceFlag(dest *string) cli.Flag {
	return &cli.StringFlag{Name: "since", Usage: "only changes received at or after this time: " + timeFlagForms, Destination: dest}
}

// journalFindResult is journal find's -o json.
type journalFindResult struct {
	ClusterID string           `json:"clusterID"`
	Key       *string          `json:"key,omitempty"`
	KeyPrefix *string          `json:"keyPrefix,omitempty"`
	Since     *time.Time       `json:"since,omitempty"`
	Segments  int              `json:"segments"`
	Changes   []journal.Change `json:"changes"`
}

func runJournalFind(c *cli.Context, g *globalOpts, o *journalFindOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	if o.clusterID == "" {
		return usagef("journal find: --cluster-id is required")
	}
	if err := catalog.ValidateClusterID(o.clusterID); err != nil {
		return asUsage(err)
	}
	res := journalFindResult{ClusterID: o.clusterID, Changes: []journal.Change{}}
	var q journal.Query
	args := positional(c)
	if len(args) > 1 {
		return usagef("journal find: one key, not %d (%q)", len(args), args)
	}
	hasArg := len(args) == 1
	var arg string
	if hasArg {
		arg = args[0]
	}
	given := 0
	for _, set := range []bool{hasArg, c.IsSet("exact-key"), c.IsSet("key-prefix")} {
		if set {
			given++
		}
	}
	switch {
	case given != 1:
		return usagef("journal find: give the key as the argument (etcdctl's way: journal find --cluster-id ID KEY [--match-prefix]), " +
			"or one of --exact-key and --key-prefix")
	case o.matchPrefix && !hasArg:
		return usagef("journal find: --match-prefix makes the KEY argument a prefix (--key-prefix P takes its own)")
	case hasArg && arg == "" && !o.matchPrefix:
		return usagef("journal find: the key is empty (every key: \"\" --match-prefix)")
	case hasArg && o.matchPrefix:
		q.Prefix, res.KeyPrefix = []byte(arg), &arg
	case hasArg:
		q.Key, res.Key = []byte(arg), &arg
	case c.IsSet("exact-key"):
		if o.key == "" {
			return usagef("journal find: --exact-key is empty")
		}
		q.Key, res.Key = []byte(o.key), &o.key
	default:
		q.Prefix, res.KeyPrefix = []byte(o.prefix), &o.prefix
	}
	if o.since != "" {
		if q.Since, err = parseTimeFlag("journal find", "since", o.since, time.Now()); err != nil {
			return err
		}
		res.Since = &q.Since
	}
	ids, err := e.identityOf(o.identityFile)
	if err != nil {
		return err
	}
	chosen, err := e.openSite(&o.site, &o.store, nil)
	if err != nil {
		return err
	}
	st, layout := chosen.Store, chosen.Layout
	ctx := e.ctx()
	src := journal.NewSource(st, layout, o.clusterID, ids)
	segs, err := journal.ListSegments(ctx, st, layout, o.clusterID, 0)
	if err != nil {
		return fmt.Errorf("journal find: listing the journal of %s: %w", o.clusterID, err)
	}
	if len(segs.All) == 0 {
		return fmt.Errorf("journal find: %w of cluster %s under %s", journal.ErrNoJournal, o.clusterID, layout.JournalPrefix(o.clusterID))
	}
	f := journal.NewFinder(q)
	for _, seg := range segs.All {
		if err := findIn(ctx, src, seg.Key, f); err != nil {
			return fmt.Errorf("journal find: %w", err)
		}
	}
	res.Segments = len(segs.All)
	res.Changes = append(res.Changes, f.Changes()...)
	t := output.Table{Header: []string{"REVISION", "SUB", "TIME", "TYPE", "KEY", "VERSION", "SIZE"}}
	for _, ch := range res.Changes {
		at := "-"
		if !ch.Time.IsZero() {
			at = ch.Time.Format("2006-01-02T15:04:05.000Z")
		}
		ver, size := "-", "-"
		if ch.Type == journal.Put {
			ver, size = strconv.FormatInt(ch.Version, 10), strconv.Itoa(ch.ValueSize)
		}
		t.Rows = append(t.Rows, []string{strconv.FormatInt(ch.Rev, 10), strconv.FormatInt(ch.Sub, 10), at, ch.Type, strconv.Quote(ch.Key)[1 : len(strconv.Quote(ch.Key))-1], ver, size})
	}
	t.Footer = fmt.Sprintf("%s in %s of cluster %s.\n", output.Count(len(res.Changes), "change"), output.Count(res.Segments, "segment"), o.clusterID)
	return e.render(t, res)
}

// findIn feeds one segment to f (passed over when f.Skip says so).
func findIn(ctx context.Context, src *journal.Source, key string, f *journal.Finder) error {
	r, err := src.Open(ctx, key)
	if err != nil {
		return err
	}
	defer r.Close()
	if f.Skip(r.Header()) {
		return nil
	}
	f.Segment(r.Header())
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		f.Event(ev)
	}
}

// runJournal is journal's Action: the flags into fleet.JournalAllOptions
// (one cluster, or --all), then fleet.JournalAll until SIGTERM (exit 0).
func runJournal(c *cli.Context, g *globalOpts, o *journalOpts) error {
	e, err := newEnv(c, g, "")
	if err != nil {
		return err
	}
	opts, err := journalOptions(c, e, o)
	if err != nil {
		return err
	}
	if err := checkNoLeader(e, &o.leader, &o.kube, opts.Kube); err != nil {
		return err
	}
	identity := kube.LeaderIdentity()
	if o.listen != "" {
		m := journal.NewMetrics(journal.MetricsOptions{Budget: opts.Capture.Budget, Identity: identity, Elected: o.leader.elect, UnreadyAfter: o.unreadyAfter})
		opts.Capture.Metrics = m
		stop, err := serveHTTP(e, "journal", o.listen, m.Handler())
		if err != nil {
			return err
		}
		defer stop()
	}
	// With --leader-elect, all of it (each cluster's resume point
	// included) only while this process holds the Lease, fenced on it.
	err = withLeader(e, &o.leader, &o.kube, identity, func(ctx context.Context, fence func() error) error {
		opts.Fence = fence
		opts.Capture.Metrics.SetLeading(true)
		defer opts.Capture.Metrics.SetLeading(false)
		return fleet.JournalAll(ctx, opts)
	})
	if err != nil {
		return err
	}
	// A clean stop on SIGTERM: exit 0, not "cancelled".
	return nil
}

// journalOptions checks journal's flags and builds fleet.JournalAll's
// options: the target, the store, the capture and the gap backup.
func journalOptions(c *cli.Context, e *env, o *journalOpts) (fleet.JournalAllOptions, error) {
	var opts fleet.JournalAllOptions
	switch {
	case o.all && o.clusterID != "":
		return opts, usagef("journal: --cluster-id is for one cluster given by --endpoints; with --all the id is the EtcdCluster's name")
	case !o.all && o.clusterID == "":
		return opts, usagef("journal: --cluster-id (or --all) is required")
	case !o.all && (c.IsSet("rediscover") || c.IsSet("no-events")):
		return opts, usagef("journal: --rediscover and --no-events are for --all")
	}
	if !o.all {
		if err := catalog.ValidateClusterID(o.clusterID); err != nil {
			return opts, asUsage(err)
		}
	}
	if err := requirePositive("journal", positive{"segment-interval", o.segmentInterval}, positive{"rediscover", o.rediscover},
		positive{"probe-timeout", o.probeTimeout}, positive{"unready-after", o.unreadyAfter}); err != nil {
		return opts, err
	}
	if err := checkListen("journal", o.listen); err != nil {
		return opts, err
	}
	size, err := parseSegmentSize(o.segmentSize)
	if err != nil {
		return opts, usagef("journal: --segment-size %q: %v", o.segmentSize, err)
	}
	budget, err := parseSegmentSize(o.memoryBudget)
	if err != nil {
		return opts, usagef("journal: --memory-budget %q: %v", o.memoryBudget, err)
	}
	var enc objectio.Encoding
	if enc.Compression, err = objectio.ParseCompression(o.compress); err != nil {
		return opts, asUsage(err)
	}
	if enc.Recipients, err = o.encryption.recipients(c); err != nil {
		return opts, err
	}
	if o.encryption.requireEncryption && enc.Recipients.Len() == 0 {
		return opts, usagef("journal: --require-encryption: no recipient (--encrypt-to, --recipients-file)")
	}
	// The gap backup: scheduled (retention keeps it as the CronJob's),
	// v2 when served, encrypted and locked as backups are.
	bk := backup.Options{Kind: catalog.KindScheduled, V2: backup.V2Auto, Compression: enc.Compression, ProbeTimeout: o.probeTimeout,
		Recipients: enc.Recipients, RequireEncryption: o.encryption.requireEncryption, Log: e.log}
	if bk.EscrowRecipients, err = backup.ParseEscrowRecipients(o.escrowRecipients.Value()); err != nil {
		return opts, usagef("journal: --escrow-recipient: %v", err)
	}
	if bk.Lock, err = o.lock.policy("journal"); err != nil {
		return opts, err
	}
	if err := checkJournalRetention(o.journalRetention); err != nil {
		return opts, err
	}
	if bk.Lock.Enabled() {
		policy, err := o.policy.policy()
		if err != nil {
			return opts, err
		}
		bk.LockRetention = &policy
	}
	ids, err := e.identityOf(o.identityFile)
	if err != nil {
		return opts, err
	}
	opts = fleet.JournalAllOptions{
		ClusterID: o.clusterID, Rediscover: o.rediscover, DialTimeout: o.etcd.dialTimeout, NoEvents: o.noEvents,
		Capture: journal.CaptureOptions{Encoding: enc, Identities: ids, SegmentInterval: o.segmentInterval, SegmentSize: size,
			// Segments are locked as the gap backup is (an explicit
			// --lock-mode), for the journal retention less the margin.
			Lock: bk.Lock, JournalRetention: o.journalRetention,
			// One budget for every cluster of the process.
			Budget: journal.NewBudget(int64(budget))},
		Backup: bk, Log: e.log,
	}
	if o.all {
		if opts.Kube, err = e.kube(&o.kube); err != nil {
			return opts, err
		}
	} else if opts.Etcd, err = o.etcd.config(); err != nil {
		return opts, err
	}
	if opts.Store, opts.Layout, err = e.openStore(&o.store, opts.Kube); err != nil {
		return opts, err
	}
	return opts, nil
}

// parseSegmentSize reads a size (internal/bytesize: "4MiB", "512KiB",
// "1048576"), more than 0 and at most 1 GiB.
func parseSegmentSize(s string) (int, error) {
	n, err := bytesize.Parse(s)
	switch {
	case err != nil:
		return 0, err
	case n <= 0 || n > 1<<30:
		return 0, fmt.Errorf("want more than 0 and at most 1GiB")
	}
	return int(n), nil
}
