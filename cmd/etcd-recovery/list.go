package main

import (
	"context"
	"errors"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/seal"
)

const defaultProbeTimeout = 3 * time.Second

// listOpts are list's flags.
type listOpts struct {
	store                           storeOpts
	site                            siteOpts
	policy                          policyOpts
	clusterID, output, identityFile string
	timeout                         time.Duration
	journalRetention                time.Duration
	includeDeleted                  bool
}

func listCommand(g *globalOpts) *cli.Command {
	o := &listOpts{}
	return &cli.Command{
		Name: "list",
		Usage: "list a cluster's backups, newest first, with each one's state (committed, incomplete, damaged), " +
			"its restore drill (passed, FAILED, never, unreadable; what it restored) and why retention keeps or deletes it; " +
			"with --identity-file, whether the identity opens each encrypted backup (DECRYPTS); " +
			"then the restorable window (a WINDOW line: from the oldest backup's revision to the newest journaled one, the journal's lag and gaps)",
		Flags: concat(o.store.flags(), o.site.flags(), []cli.Flag{clusterIDFlag(&o.clusterID), outputFlag(&o.output), timeoutFlag(&o.timeout),
			identityFileFlag(&o.identityFile), includeDeletedFlag(&o.includeDeleted), journalRetentionFlag(&o.journalRetention)}, o.policy.flags()),
		Action: func(c *cli.Context) error { return runList(c, g, o) },
	}
}

func runList(c *cli.Context, g *globalOpts, o *listOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	opts := prune.ListOptions{ClusterID: o.clusterID, IncludeDeleted: o.includeDeleted, JournalRetention: o.journalRetention}
	if opts.Policy, err = o.policy.policy(); err != nil {
		return err
	}
	if err := checkJournalRetention(o.journalRetention); err != nil {
		return err
	}
	if opts.Identities, err = loadIdentity(c, o.identityFile); err != nil {
		return err
	}
	if opts.Identities == nil && o.identityFile != "" {
		// The toolkit's mount is empty (the secret never reached the
		// namespace): every encrypted backup shows that no identity
		// opens it.
		opts.Identities = &seal.Identities{}
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	ch, err := e.openSite(&o.site, &o.store, nil)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout = ch.Store, ch.Layout
	t, err := e.withTimeout(o.timeout, nil)
	if err != nil {
		return err
	}
	defer t.cancel()
	res, err := journal.List(t.ctx, opts)
	if err != nil {
		return t.named(err)
	}
	if len(res.Staged) > 0 {
		keys := make([]string, len(res.Staged))
		for i, s := range res.Staged {
			keys[i] = s.Key
		}
		e.log.Warn("staged plaintext snapshots exist", "cluster", opts.ClusterID, "keys", keys)
	}
	if res.StagedErr != nil {
		e.log.Warn("staged plaintext snapshots could not be listed", "cluster", opts.ClusterID, "err", res.StagedErr)
	}
	if len(res.Unknown) > 0 {
		e.log.Warn("keys not in the layout, left alone", "cluster", opts.ClusterID, "count", len(res.Unknown), "keys", res.Unknown)
	}
	if err := e.renderAll(res.Tables(), res.Rows()); err != nil {
		return err
	}
	if res.Err != nil {
		// Shown in the table: the state of those backups, or their
		// proof, is unknown.
		return res.Err
	}
	if errors.Is(t.ctx.Err(), context.DeadlineExceeded) {
		return t.atStep("render", t.ctx.Err())
	}
	return nil
}
