package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/site"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/kube"
)

// siteOpts choose the site a reader reads (internal/site): --site, its
// check's deadline and the second store's flags. list, inspect, restore,
// drill, restore-all, journal find and sites take them.
type siteOpts struct {
	mode         string
	checkTimeout time.Duration
	second       secondStoreOpts
}

// envSite is --site's environment variable.
const envSite = "ETCD_RECOVERY_SITE"

func (o *siteOpts) flags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "site", EnvVars: []string{envSite}, Value: string(site.Auto), Destination: &o.mode,
			Usage: "the site read: primary (the --store/COS flags' bucket), second (--second-store), or auto: the primary, " +
				"else the second site when the primary is unreachable (no answer within --site-timeout, a network error, a 5xx), said so; " +
				"a primary that answers and refuses (access denied, no bucket) is an error, never replaced"},
		siteTimeoutFlag(&o.checkTimeout),
	}, o.second.flags()...)
}

func siteTimeoutFlag(dest *time.Duration) cli.Flag {
	return &cli.DurationFlag{Name: "site-timeout", Value: site.DefaultCheckTimeout, Destination: dest,
		Usage: "how long a site has to answer its check (one HEAD of the bucket): --site auto reads the second site past it; sites shows the site unreachable"}
}

// check refuses, before anything is contacted, a mode that is not one,
// --site second without a second site, and a zero --site-timeout.
func (o *siteOpts) check(command string) (site.Mode, error) {
	mode, err := site.ParseMode(o.mode)
	if err != nil {
		return "", usagef("%s: %v", command, err)
	}
	if mode == site.Second && !o.second.configured() {
		return "", usagef("%s: --site second: %v", command, site.ErrNoSecondSite)
	}
	if o.checkTimeout <= 0 {
		return "", usagef("%s: --site-timeout must be positive", command)
	}
	return mode, nil
}

// openSite opens the store a reader reads (site.Choose): the primary
// (openStore, with k's secret as its fallback credential) or the second
// site (openSecondStore). When auto falls back, it logs a warning and
// prints "etcd-recovery: reading the second site: the primary is
// unreachable: <cause>" on stderr (tables and -o json alike: stdout stays
// the report).
func (e *env) openSite(o *siteOpts, primary *storeOpts, k *kube.Client) (site.Chosen, error) {
	mode, err := o.check(e.c.Command.FullName())
	if err != nil {
		return site.Chosen{}, err
	}
	opts := site.Options{Mode: mode, CheckTimeout: o.checkTimeout, Log: e.log,
		Primary: func(_ context.Context) (store.Store, catalog.Layout, error) { return e.openStore(primary, k) }}
	if o.second.configured() {
		opts.Second = func(_ context.Context) (store.Store, catalog.Layout, error) { return e.openSecondStore(&o.second) }
	}
	ch, err := site.Choose(e.ctx(), opts)
	if err != nil {
		return site.Chosen{}, err
	}
	if ch.FellBack() {
		fmt.Fprintf(e.c.App.ErrWriter, "etcd-recovery: %s\n", ch.Note())
	} else if ch.Site == site.Second {
		e.log.Info("reading the second site", "store", store.RedactURL(o.second.url))
	}
	return ch, nil
}

// reopen opens the site ch chose again, without a check (restore-all's
// other namespaces: one choice for the run).
func (e *env) reopen(ch site.Chosen, o *siteOpts, primary *storeOpts, k *kube.Client) (store.Store, catalog.Layout, error) {
	if ch.Site == site.Second {
		return e.openSecondStore(&o.second)
	}
	return e.openStore(primary, k)
}

// siteLocation is the chosen site's bucket and endpoint (what etcd-operator
// is told to read a staged copy from).
func (o *siteOpts) siteLocation(c *cli.Context, ch site.Chosen, primary *storeOpts) (store.Config, error) {
	if ch.Site == site.Second {
		return store.ParseURL(o.second.url)
	}
	return primary.given(c)
}

// drillNoRecord: a drill of the second site records nothing there (no
// drill.json, no journal proof). Its records are the copier's create-only
// copies of the primary's: a record of its own would be one the copier
// then finds with other bytes. The result is printed (and pushed).
func drillNoRecord(e *env, ch site.Chosen) bool {
	if ch.Site != site.Second {
		return false
	}
	e.log.Info("drill: reading the second site: the result is printed, not recorded there (its drill records are the primary's, copied)")
	return true
}

// storeGiven reports whether a command whose store is optional (inspect)
// reads one: the primary's flags, or --site second with a second site.
func (o *siteOpts) storeGiven(primary *storeOpts) bool {
	return primary.configured() || (o.mode == string(site.Second) && o.second.configured())
}

// where is "bucket/prefix" of the chosen site, as inspect shows it, with
// "(second site)" after the second's.
func (o *siteOpts) where(c *cli.Context, ch site.Chosen, primary *storeOpts) string {
	if ch.Site != site.Second {
		return primary.where(c, ch.Layout)
	}
	cfg, _ := store.ParseURL(o.second.url)
	return strings.TrimRight(cfg.Bucket+"/"+strings.Trim(ch.Layout.Prefix, "/"), "/") + " (second site)"
}
