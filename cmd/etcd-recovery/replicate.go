package main

import (
	"errors"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/replicate"
)

// replicateOpts are replicate's flags: the primary (read), the second site
// (written create-only) and the copier's pace.
type replicateOpts struct {
	store                                      storeOpts
	second                                     secondStoreOpts
	lock                                       lockOpts
	journalRetention                           time.Duration
	journalInterval, scanInterval, statusEvery time.Duration
	auditInterval                              time.Duration
	parallel                                   int
	once                                       bool
	copier, output                             string
}

func replicateCommand(g *globalOpts) *cli.Command {
	o := &replicateOpts{}
	return &cli.Command{
		Name:      "replicate",
		Usage:     "copy every complete backup, journal segment, record and escrow to the second site, create-only, verified by sha256",
		UsageText: "etcd-recovery replicate --second-store URL [--once] [primary store flags] [-o json]\netcd-recovery replicate status --second-store URL [-o json]",
		Description: "Runs until SIGTERM (exit 130): each cluster's journal is polled every --journal-interval (listing from\n" +
			"the last segment copied; each whole journal folder compared on both sites at the start and every --audit-interval),\n" +
			"the whole prefix scanned every --scan-interval, and the status record\n" +
			"<prefix>/_replica/status.json written on the second site every --status-every. Every copy is create-only\n" +
			"(never overwriting), hashed while it streams, checked against the manifest for a backup's objects, and read\n" +
			"back; nothing is ever deleted on the second site. With --once: one full pass, its report, exit 1 when\n" +
			"anything complete on the primary is not on the second site. See docs/second-site.md.",
		Flags: concat(o.store.flags(), o.second.flags(), secondLockFlags(&o.lock), []cli.Flag{
			&cli.DurationFlag{Name: "second-journal-retention", EnvVars: []string{"ETCD_RECOVERY_SECOND_JOURNAL_RETENTION"}, Value: retention.DefaultJournalRetention, Destination: &o.journalRetention,
				Usage: "with --second-lock-mode: the second site's journal retention its segments are locked for (less --second-lock-margin)"},
			&cli.DurationFlag{Name: "journal-interval", EnvVars: []string{"ETCD_RECOVERY_REPLICATE_JOURNAL_INTERVAL"}, Value: replicate.DefaultJournalInterval, Destination: &o.journalInterval,
				Usage: "poll each cluster's journal this often (the second site's RPO is about --segment-interval + this + a copy)"},
			&cli.DurationFlag{Name: "scan-interval", EnvVars: []string{"ETCD_RECOVERY_REPLICATE_SCAN_INTERVAL"}, Value: replicate.DefaultScanInterval, Destination: &o.scanInterval,
				Usage: "scan the whole prefix (backups, escrow, records, new clusters) this often"},
			&cli.DurationFlag{Name: "audit-interval", EnvVars: []string{"ETCD_RECOVERY_REPLICATE_AUDIT_INTERVAL"}, Value: replicate.DefaultAuditInterval, Destination: &o.auditInterval,
				Usage: "compare each cluster's whole journal folder on both sites this often (and at the start), copying what the second site misses"},
			&cli.DurationFlag{Name: "status-every", EnvVars: []string{"ETCD_RECOVERY_REPLICATE_STATUS_EVERY"}, Value: replicate.DefaultStatusEvery, Destination: &o.statusEvery,
				Usage: "write the status record on the second site this often (and after each full scan)"},
			&cli.IntFlag{Name: "copy-parallel", EnvVars: []string{"ETCD_RECOVERY_REPLICATE_PARALLEL"}, Value: replicate.DefaultParallel, Destination: &o.parallel,
				Usage: "objects copied at once by the journal polls (and as many by the full scan)"},
			&cli.BoolFlag{Name: "once", Destination: &o.once, Usage: "one full pass, then exit (1 when anything is not copied)"},
			&cli.StringFlag{Name: "copier", EnvVars: []string{"POD_NAME"}, Destination: &o.copier,
				Usage: "the copier's name in the status record (default: the host name)"},
			outputFlag(&o.output),
		}),
		Action:      func(c *cli.Context) error { return runReplicate(c, g, o) },
		Subcommands: []*cli.Command{replicateStatusCommand(g)},
	}
}

// secondLockFlags are the second site's own object-lock flags (lockOpts
// under --second-lock-*).
func secondLockFlags(o *lockOpts) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "second-lock-mode", EnvVars: []string{"ETCD_RECOVERY_SECOND_LOCK_MODE"}, Destination: &o.mode,
			Usage: "the second site's object lock of its copies: off (default), governance or compliance (each copy locked as backup and journal lock the primary's), or bucket-default; a bucket without object lock is refused"},
		&cli.DurationFlag{Name: "second-lock-period", EnvVars: []string{"ETCD_RECOVERY_SECOND_LOCK_PERIOD"}, Value: retention.DefaultLockPeriod, Destination: &o.period,
			Usage: "with --second-lock-mode: the time between two scheduled backups, as --lock-period"},
		&cli.DurationFlag{Name: "second-lock-margin", EnvVars: []string{"ETCD_RECOVERY_SECOND_LOCK_MARGIN"}, Value: retention.DefaultLockMargin, Destination: &o.margin,
			Usage: "with --second-lock-mode: taken off every lock's end, as --lock-margin"},
	}
}

func runReplicate(c *cli.Context, g *globalOpts, o *replicateOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	if err := requirePositive("replicate", positive{"journal-interval", o.journalInterval}, positive{"scan-interval", o.scanInterval},
		positive{"status-every", o.statusEvery}, positive{"audit-interval", o.auditInterval}, positive{"second-journal-retention", o.journalRetention}); err != nil {
		return err
	}
	if o.parallel < 1 {
		return usagef("replicate: --copy-parallel %d: want 1 or more", o.parallel)
	}
	if c.IsSet("output") && !o.once {
		return usagef("replicate: -o is --once's (the loop reports by its log and status record)")
	}
	lp, err := o.lock.policy("replicate")
	if err != nil {
		return err
	}
	if !o.second.configured() {
		return usagef("replicate: --second-store (%s) is required", envSecondStore)
	}
	primary, pl, err := e.openStore(&o.store, nil)
	if err != nil {
		return err
	}
	second, sl, err := e.openSecondStore(&o.second)
	if err != nil {
		return err
	}
	if o.copier == "" {
		o.copier, _ = os.Hostname()
	}
	opts := replicate.Options{Primary: primary, PrimaryLayout: pl, Second: second, SecondLayout: sl,
		Lock: lp, JournalRetention: o.journalRetention,
		JournalInterval: o.journalInterval, ScanInterval: o.scanInterval, StatusEvery: o.statusEvery, AuditInterval: o.auditInterval,
		Parallel: o.parallel, Copier: o.copier, Log: e.log}
	if !o.once {
		return replicate.Run(e.ctx(), opts)
	}
	p, err := replicate.Once(e.ctx(), opts)
	if p.Started.IsZero() {
		return err
	}
	if rerr := e.renderAll(p.Tables(), p); rerr != nil {
		return rerr
	}
	return err
}

// replicateStatusOpts are replicate status's flags.
type replicateStatusOpts struct {
	second secondStoreOpts
	output string
}

func replicateStatusCommand(g *globalOpts) *cli.Command {
	o := &replicateStatusOpts{}
	return &cli.Command{
		Name:      "status",
		Usage:     "the copier's progress and lag, and the copies that failed verification, read from the second site alone",
		UsageText: "etcd-recovery replicate status --second-store URL [-o json]",
		Flags:     concat(o.second.flags(), []cli.Flag{outputFlag(&o.output)}),
		Action: func(c *cli.Context) error {
			e, err := newEnv(c, g, o.output)
			if err != nil {
				return err
			}
			st, l, err := e.openSecondStore(&o.second)
			if err != nil {
				return err
			}
			r, err := replicate.ReadStatus(e.ctx(), st, l, time.Now())
			if errors.Is(err, store.ErrNotFound) {
				return errors.New("replicate status: no status record on the second site: no copier has written to it (" + l.ReplicaStatusKey() + ")")
			}
			if err != nil {
				return err
			}
			return e.renderAll(r.Tables(), r)
		},
	}
}
