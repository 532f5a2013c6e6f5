package main

import (
	"context"
	"strings"

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
	}
}

// withLeader runs run, with --leader-elect only while this process holds
// the Lease, its fence passed on (nil without --leader-elect).
func withLeader(e *env, o *leaderOpts, ko *kubeOpts, run func(ctx context.Context, fence func() error) error) error {
	if !o.elect {
		return run(e.ctx(), nil)
	}
	k, err := e.kube(ko)
	if err != nil {
		return err
	}
	return kube.RunAsLeader(e.ctx(), kube.LeaderOptions{Client: k, LeaseName: o.leaseName, Log: e.log}, run)
}
