package backup

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/escrow"
	"github.com/armada/etcd-recovery/internal/probe"
	"github.com/armada/etcd-recovery/internal/seal"
)

// StepEscrow is the escrow step (after the data objects, before the
// manifest). It never fails a backup: its failures are the manifest's
// escrow state (missing, mismatch) and problems.
const StepEscrow = "escrow"

// EscrowCapture reads a cluster's escrow (kube.Client.CaptureEscrow):
// the List, the problems that make it incomplete (no List when a secret
// is missing), or the error of reading it.
type EscrowCapture func(ctx context.Context) (*catalog.EscrowList, []string, error)

// NoKubeClient is the problem of a backup asked to escrow without a
// Kubernetes client (plain --endpoints).
const NoKubeClient = "no Kubernetes client: the escrow needs the EtcdCluster and its secrets"

// EnvEscrowRecipient is --escrow-recipient's variable (the ConfigMap
// the CronJob reads its environment from).
const EnvEscrowRecipient = "ETCD_RECOVERY_ESCROW_RECIPIENT"

// ParseEscrowRecipients reads --escrow-recipient's values: each an age
// recipient (age1…) or the path of a recipients file (one age1… per
// line, '#' comments), several in one value separated by commas or
// spaces; empty values are skipped.
func ParseEscrowRecipients(values []string) (seal.Recipients, error) {
	var keys, files []string
	for _, v := range values {
		for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
			if strings.HasPrefix(f, "age1") {
				keys = append(keys, f)
			} else {
				files = append(files, f)
			}
		}
	}
	return seal.LoadRecipients(keys, files)
}

// escrowRecipients are the recipients the escrow is sealed to, and
// whether they are the break-glass ones.
func (o Options) escrowRecipients() (seal.Recipients, bool) {
	if o.EscrowRecipients.Len() > 0 {
		return o.EscrowRecipients, true
	}
	return o.Recipients, false
}

// escrowWanted says whether the run has an escrow step.
func (o Options) escrowWanted() bool { return o.Escrow != nil || o.NoEscrow != "" }

// escrow captures, checks and stores the cluster's escrow and records it
// in the manifest (m.Escrow). It never fails the run: a failure is the
// escrow's state (missing, mismatch) with its problems, logged as a
// warning. A failed run never removes an escrow (not even one it
// created: another backup may name it); prune removes the unnamed ones.
func (r *run) escrow(ctx context.Context, members []probe.Member) {
	opts := r.opts
	if !opts.escrowWanted() {
		return
	}
	rs, breakGlass := opts.escrowRecipients()
	ref := &catalog.EscrowRef{}
	r.m.Escrow = ref
	defer func() {
		switch ref.State {
		case catalog.EscrowPresent:
			r.log.Info("escrow stored", "address", ref.Address, "objects", len(ref.Objects), "nearest_expiry", ref.NearestExpiry())
		case catalog.EscrowNone:
			r.log.Info("no escrow", "why", strings.Join(ref.Problems, "; "))
		default:
			r.log.Warn("escrow "+string(ref.State)+"; the backup itself is not affected", "step", StepEscrow, "problems", strings.Join(ref.Problems, "; "))
		}
	}()
	missing := func(problems ...string) {
		ref.State, ref.Problems = catalog.EscrowMissing, append(ref.Problems, problems...)
	}
	if opts.Escrow == nil {
		if rs.Len() == 0 {
			ref.State, ref.Problems = catalog.EscrowNone, []string{noRecipient}
			return
		}
		missing(opts.NoEscrow)
		return
	}
	// The capture is a few GETs of the API (the EtcdCluster, three
	// secrets, three Services): bounded as a few probes.
	cctx, cancel := context.WithTimeout(ctx, 4*opts.ProbeTimeout)
	defer cancel()
	list, problems, err := opts.Escrow(cctx)
	if err != nil {
		problems = append(problems, fmt.Sprintf("reading it from Kubernetes: %v", err))
	}
	if list == nil {
		if rs.Len() == 0 {
			ref.State, ref.Problems = catalog.EscrowNone, append([]string{noRecipient}, problems...)
			return
		}
		if len(problems) == 0 {
			problems = []string{"nothing captured"}
		}
		missing(problems...)
		return
	}
	if err := escrow.SetVersions(list, r.escrowVersions(list, members)); err != nil {
		missing(err.Error())
		return
	}
	served, sproblems := r.served(ctx, members)
	certs, cproblems := escrow.Check(list, served, opts.Now())
	problems = append(append(problems, sproblems...), cproblems...)
	ref.Certs, ref.Problems = certs, problems
	if rs.Len() == 0 {
		ref.State, ref.Objects = catalog.EscrowNone, list.ObjectNames()
		ref.Problems = append([]string{noRecipient}, ref.Problems...)
		return
	}
	w, err := escrow.Write(ctx, opts.Store, opts.Layout, opts.ClusterID, list, rs, opts.putOpts.Retention)
	if err != nil {
		missing(fmt.Sprintf("storing it: %v", err))
		return
	}
	// Never removed by a failed run's cleanup, even when this run created
	// it: a concurrent backup may have reused the address and committed.
	// An escrow no backup names goes with prune's grace.
	problems = append(problems, w.Problems...) // a damaged reused escrow
	stored := w.Ref
	stored.Certs, stored.Problems, stored.BreakGlass = certs, problems, breakGlass
	stored.State = catalog.EscrowPresent
	if len(problems) > 0 {
		stored.State = catalog.EscrowMismatch
	}
	*ref = *stored
}

const noRecipient = "no recipient: the backup is not encrypted and no --escrow-recipient is given (an escrow is never stored in plaintext)"

// escrowVersions are the versions the escrow records: the EtcdCluster's
// API version (from the capture), each member's etcd version (from its
// status; the source's /version) and the snapshot's storage version.
func (r *run) escrowVersions(list *catalog.EscrowList, members []probe.Member) catalog.EscrowVersions {
	v, _ := escrow.Versions(list)
	v.Etcd = map[string]string{}
	for _, m := range members {
		if m.Status != nil && m.Status.Version != "" && m.Name != "" {
			v.Etcd[m.Name] = m.Status.Version
		}
	}
	if r.m.Source.Name != "" && r.m.ServerVersion != "" {
		v.Etcd[r.m.Source.Name] = r.m.ServerVersion
	}
	v.Storage = r.m.ClusterVersion
	return v
}

// served reads the server certificate of every member that answered its
// probe, by a TLS handshake with the etcd client TLS, bounded by
// ProbeTimeout.
func (r *run) served(ctx context.Context, members []probe.Member) (map[string][]*x509.Certificate, []string) {
	cfg, err := r.opts.Etcd.TLS()
	if err != nil {
		return nil, []string{fmt.Sprintf("the etcd client TLS: %v", err)}
	}
	if cfg == nil {
		return nil, nil // no TLS: nothing served to compare (Check says so)
	}
	var eps, skipped []string
	for _, m := range members {
		switch {
		case m.Status != nil && m.ClientURL != "":
			eps = append(eps, m.ClientURL)
		case m.ClientURL != "":
			skipped = append(skipped, m.ClientURL)
		}
	}
	if len(skipped) > 0 {
		// Not compared: the escrow's state rests on the members compared.
		r.log.Warn("escrow: server certificate not compared for the members whose probe failed", "step", StepEscrow, "members", strings.Join(skipped, ","))
	}
	sctx, cancel := context.WithTimeout(ctx, r.opts.ProbeTimeout)
	defer cancel()
	start := time.Now()
	served, problems := escrow.Served(sctx, eps, cfg)
	r.log.Debug("read the members' server certificates", "members", len(eps), "took", time.Since(start))
	return served, problems
}
