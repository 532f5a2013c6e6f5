package main

import (
	"context"
	"errors"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/site"
	"github.com/armada/etcd-recovery/internal/store"
)

// sites: the window each site can restore, side by side (site.Compare).

// sitesOpts are sites' flags.
type sitesOpts struct {
	store                           storeOpts
	second                          secondStoreOpts
	clusterID, identityFile, output string
	checkTimeout, timeout           time.Duration
}

func sitesCommand(g *globalOpts) *cli.Command {
	o := &sitesOpts{}
	return &cli.Command{
		Name: "sites",
		Usage: "the window each site can restore, side by side: per cluster, on the primary and on the second site, the newest backup, " +
			"the journal's end and the restorable window, and how far the second site is behind; a site that cannot be read says so",
		Description: "Reads the primary (--store, or the COS flags) and the second site (--second-store) with their own credentials.\n" +
			"Each site is checked first (--site-timeout): an unreachable one is shown so, and the other is still read.\n" +
			"Under the table, each site's location, and for the second site the copier's status record (_replica/status.json):\n" +
			"when it last wrote, as of when it was in sync with the primary, what is pending and any copy that failed verification.\n" +
			"Exit 0 when every reachable site was read; 1 when a cluster could not be read on one (its row says why).",
		Flags: concat(o.store.flags(), o.second.flags(), []cli.Flag{
			clusterIDFlag(&o.clusterID),
			identityFileFlag(&o.identityFile),
			siteTimeoutFlag(&o.checkTimeout),
			timeoutFlag(&o.timeout),
			outputFlag(&o.output),
		}),
		Action: func(c *cli.Context) error { return runSites(c, g, o) },
	}
}

func runSites(c *cli.Context, g *globalOpts, o *sitesOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	if !o.second.configured() {
		return usagef("sites: %v", site.ErrNoSecondSite)
	}
	if err := requirePositive("sites", positive{"site-timeout", o.checkTimeout}, positive{"timeout", o.timeout}); err != nil {
		return err
	}
	if o.clusterID != "" {
		if err := catalog.ValidateClusterID(o.clusterID); err != nil {
			return asUsage(err)
		}
	}
	ids, err := e.identityOf(o.identityFile)
	if err != nil {
		return err
	}
	t, err := e.withTimeout(o.timeout, nil)
	if err != nil {
		return err
	}
	defer t.cancel()
	primary := site.Side{Site: site.Primary}
	primary.Store, primary.Layout, err = e.openStore(&o.store, nil)
	if err != nil {
		return err
	}
	primary.Where = o.store.where(c, primary.Layout)
	second := site.Side{Site: site.Second}
	if second.Store, second.Layout, err = e.openSecondStore(&o.second); err != nil {
		return err
	}
	cfg, _ := store.ParseURL(o.second.url)
	second.Where = cfg.Bucket + "/" + second.Layout.Prefix
	for _, s := range []*site.Side{&primary, &second} {
		s.Err = site.Check(t.ctx, s.Store, s.Layout, o.checkTimeout)
		if s.Err != nil && t.ctx.Err() == nil {
			e.log.Warn("sites: a site cannot be read", "site", s.Site, "err", s.Err)
		}
	}
	opts := site.CompareOptions{Sides: []site.Side{primary, second}, Identities: ids}
	if o.clusterID != "" {
		opts.ClusterIDs = []string{o.clusterID}
	}
	rep, err := site.Compare(t.ctx, opts)
	if err != nil {
		return t.atStep("compare", err)
	}
	if err := e.render(rep.Table(), rep); err != nil {
		return err
	}
	if rep.Err != nil {
		return rep.Err
	}
	if errors.Is(t.ctx.Err(), context.DeadlineExceeded) {
		return t.atStep("render", t.ctx.Err())
	}
	return nil
}
