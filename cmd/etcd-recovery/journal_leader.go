package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/armada/etcd-recovery/kube"
)

// leaderOpts are journal's leader election flags: with --leader-elect the
// journal runs only while it holds the Lease (kube.RunAsLeader) and its
// capture is fenced on it.
type leaderOpts struct {
	elect     bool
	leaseName string
	// ignoreLease: run without --leader-elect even while the Lease is
	// held (checkNoLeader).
	ignoreLease bool
}

// flags are --leader-elect and --leader-lease-name; the Lease's API
// server and namespace are journal's --kubeconfig and --namespace (in a
// pod, its service account and namespace).
func (o *leaderOpts) flags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "leader-elect", Destination: &o.elect,
			Usage: "one writer per cluster: run only while holding the Lease (--leader-lease-name) of the namespace; a follower takes over " +
				"within 23.8 s of the leader's death (LeaseDuration 15s + two jittered RetryPeriods of up to 4.4s), within 4.4 s of its clean stop; a leader that loses it stops writing at once and exits 1"},
		&cli.StringFlag{Name: "leader-lease-name", Value: kube.DefaultLeaseName, Destination: &o.leaseName,
			Usage: "with --leader-elect: the coordination.k8s.io Lease of the namespace the journal's replicas elect their leader on",
			Action: func(_ *cli.Context, v string) error {
				if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
					return usagef("journal: --leader-lease-name %q: not a Lease name: %s", v, strings.Join(errs, "; "))
				}
				return nil
			}},
		&cli.BoolFlag{Name: "ignore-leader-lease", Destination: &o.ignoreLease,
			Usage: "without --leader-elect: write even while the journal Deployment's leader holds the Lease (--leader-lease-name); two writers of one cluster overlap their segments, and the running one then records a gap"},
	}
}

// checkNoLeader refuses a journal without --leader-elect while another
// process holds the namespace's Lease (the journal Deployment's leader,
// which writes every cluster of the namespace): a second writer of a
// cluster overlaps its segments. Unless --ignore-leader-lease. Where the
// Lease cannot be read (no Kubernetes configuration, no right to get it,
// no answer within 10 s) it says so in a warning and goes on: it cannot
// know.
func checkNoLeader(e *env, o *leaderOpts, ko *kubeOpts, k *kube.Client) error {
	if o.elect || o.ignoreLease {
		return nil
	}
	if k == nil {
		var err error
		if k, err = kube.New(kube.Config{Kubeconfig: ko.kubeconfig, Namespace: ko.namespace}); err != nil {
			e.log.Warn("journal: cannot check whether the journal Deployment's leader runs (no Kubernetes API): make sure it does not write this cluster", "lease", o.leaseName, "err", err)
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(e.ctx(), 10*time.Second)
	defer cancel()
	holder, renewed, held, err := k.LeaseHolder(ctx, o.leaseName, time.Now())
	switch {
	case err != nil:
		if e.ctx().Err() != nil {
			return e.ctx().Err()
		}
		e.log.Warn("journal: cannot check whether the journal Deployment's leader runs: make sure it does not write this cluster", "lease", k.Namespace+"/"+o.leaseName, "err", err)
		return nil
	case held:
		return fmt.Errorf("journal: Lease %s/%s is held by %s (renewed %s ago): the journal Deployment's leader writes the clusters of this namespace, "+
			"and a second writer overlaps its segments (the running journal then records a gap and takes a full backup). "+
			"Scale the Deployment to 0 first (kubectl -n %s scale deploy/etcd-recovery-journal --replicas 0), or pass --ignore-leader-lease",
			k.Namespace, o.leaseName, holder, time.Since(renewed).Round(time.Second), k.Namespace)
	}
	return nil
}

// withLeader runs run, with --leader-elect only while this process holds
// the Lease, its fence passed on (nil without --leader-elect).
func withLeader(e *env, o *leaderOpts, ko *kubeOpts, identity string, run func(ctx context.Context, fence func() error) error) error {
	if !o.elect {
		return run(e.ctx(), nil)
	}
	k, err := e.kube(ko)
	if err != nil {
		return err
	}
	return kube.RunAsLeader(e.ctx(), kube.LeaderOptions{Client: k, LeaseName: o.leaseName, Identity: identity, Log: e.log}, run)
}
