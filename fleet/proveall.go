package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
	"github.com/armada/etcd-recovery/kube"
)

// ProveAllOptions configure `journal prove --all`: every cluster id with a
// journal under the store's prefix (one listing: clusters without an
// EtcdCluster, such as one being restored, included), each with every
// backup that has an unproven journal before it proven (drill.ProveJournal),
// newest first, Parallel clusters at a time. With Kube, only the cluster
// ids that are EtcdClusters of its namespace are proven.
type ProveAllOptions struct {
	// Template is each proof's options; ClusterID and Target are set per
	// proof. Its Timeout bounds each proof, not the run.
	Template drill.ProveOptions
	Parallel int
	Log      *slog.Logger
	// Kube, when set, proves only the cluster ids with a journal that are
	// EtcdClusters of its namespace (journal prove --all --namespace: the
	// CronJob of each kubx-etcd-NN namespace, whose shared prefix holds
	// every namespace's journals). A cluster being restored (its
	// EtcdCluster deleted until etcd-operator recreates it) is proven by
	// a later run. Without Kube, every cluster id with a journal.
	Kube *kube.Client
}

// Validate checks what the caller asked for, as usage errors (the CLI
// exits 4), before anything is contacted.
func (o ProveAllOptions) Validate() error {
	switch {
	case o.Template.ClusterID != "":
		return usage.Errorf("journal prove: --all and --cluster-id are exclusive")
	case o.Template.Target != "":
		return usage.Errorf("journal prove: --backup names one cluster's backup: use it with --cluster-id")
	case o.Parallel < 0:
		return usage.Errorf("journal prove: --prove-parallel %d: want at least 1", o.Parallel)
	case o.Template.Store == nil:
		return errors.New("journal prove --all: no object store")
	}
	return nil
}

// Results of one cluster's proofs (ProveResult.Result).
const (
	ProvePassed       = "Passed"       // every proof passed (or nothing was unproven)
	ProveFailed       = "Failed"       // at least one proof failed: a window withdrawn
	ProveInconclusive = "Inconclusive" // a proof (or the listing) could not judge
	ProveNotRun       = "NotRun"       // a cancel kept it from starting
)

// ProveResult is one cluster's proofs.
type ProveResult struct {
	Cluster string `json:"cluster"`
	Result  string `json:"result"`
	// Proofs are the proofs made (and recorded unless NoRecord), passed
	// or failed, newest target first.
	Proofs []*catalog.JournalProof `json:"proofs"`
	// Inconclusive are the proofs that could not judge, each with why.
	Inconclusive []ProveNotJudged `json:"inconclusive,omitempty"`
	// Error is why the cluster's unproven backups could not be listed, or
	// the first failure, for the table.
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"-"`
	Seconds  float64       `json:"durationSeconds"`
}

// ProveNotJudged is a proof that could not judge: its target and the
// error (which names the cluster, the step and the cause).
type ProveNotJudged struct {
	Target string `json:"target,omitempty"`
	Reason string `json:"reason"`
}

// ProveAllReport is every cluster's proofs, in cluster order.
type ProveAllReport struct {
	Prefix string `json:"prefix,omitempty"`
	// Namespace is the EtcdClusters' namespace (Kube), and NoJournal the
	// number of its EtcdClusters without a journal segment (nothing to
	// prove). With a namespace only its clusters' journals are listed,
	// never the shared prefix (NamespaceJournals).
	Namespace string        `json:"namespace,omitempty"`
	NoJournal int           `json:"noJournal,omitempty"`
	Parallel  int           `json:"parallel"`
	Clusters  []ProveResult `json:"clusters"`
	// Failed names the clusters with a failed proof; Inconclusive those
	// with a proof that could not judge (or not run).
	Failed       []string `json:"failed"`
	Inconclusive []string `json:"inconclusive"`
}

// ProveAllError is a journal prove --all that did not pass: the clusters
// with a failed or inconclusive proof, or the listing.
type ProveAllError struct {
	Failed, Inconclusive []string
	Err                  error
}

func (e *ProveAllError) Error() string {
	if len(e.Failed)+len(e.Inconclusive) == 0 {
		return "journal prove --all: " + e.Err.Error()
	}
	var parts []string
	if len(e.Failed) > 0 {
		parts = append(parts, fmt.Sprintf("journal proof failed for %s (the window before each failed proof is withdrawn from point-in-time restore)", strings.Join(e.Failed, ", ")))
	}
	if len(e.Inconclusive) > 0 {
		parts = append(parts, fmt.Sprintf("journal proof inconclusive for %s", strings.Join(e.Inconclusive, ", ")))
	}
	return "journal prove --all: " + strings.Join(parts, "; ") + ": " + e.Err.Error()
}

func (e *ProveAllError) Unwrap() error { return e.Err }

// JournalClusters are the cluster ids with at least one journal segment
// under the layout's prefix, sorted: one listing of the prefix.
func JournalClusters(ctx context.Context, opts drill.ProveOptions) ([]string, error) {
	objs, err := opts.Store.List(ctx, opts.Layout.JournalPrefix(""))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, o := range objs {
		if ki := opts.Layout.Classify(o.Key); ki.Kind == catalog.KeyJournal && ki.ClusterID != "" {
			seen[ki.ClusterID] = true
		}
	}
	out := make([]string, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// NamespaceJournals are the EtcdClusters of a namespace (names) with at
// least one journal segment, sorted, and how many have none: one listing
// of each cluster's own journal folder (at most listParallel at once),
// never of the shared journal prefix, which holds every namespace's
// journals (1,800 clusters' segments in one bucket: millions of keys, more
// than a CronJob's deadline can list). A cluster whose folder cannot be
// listed is kept: its proof then names the failure, and the others go on.
func NamespaceJournals(ctx context.Context, opts drill.ProveOptions, names []string) (in []string, none int, err error) {
	has := make([]bool, len(names))
	notStarted := fanout.ForEach(ctx, len(names), listParallel, func(ctx context.Context, i int) {
		objs, err := opts.Store.List(ctx, opts.Layout.JournalPrefix(names[i]))
		if err != nil {
			// Proven anyway: its own proof names the store's failure,
			// and one cluster's listing never stops the others.
			has[i] = true
			return
		}
		for _, o := range objs {
			if ki := opts.Layout.Classify(o.Key); ki.Kind == catalog.KeyJournal && ki.ClusterID == names[i] {
				has[i] = true
				return
			}
		}
	})
	if len(notStarted) > 0 {
		return nil, 0, ctx.Err()
	}
	in = []string{}
	for i, n := range names {
		if has[i] {
			in = append(in, n)
		} else {
			none++
		}
	}
	slices.Sort(in)
	return in, none, nil
}

// listParallel bounds NamespaceJournals' listings at once.
const listParallel = 8

// ProveAll proves the journal before every unproven backup of every
// cluster with a journal (see ProveAllOptions). One cluster's failure (a
// failed proof, a store error) never stops the others. The error is a
// *ProveAllError naming every cluster with a failed or inconclusive proof;
// a cancel returns the context's error (proofs not started are NotRun).
func ProveAll(ctx context.Context, opts ProveAllOptions) (*ProveAllReport, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Parallel == 0 {
		opts.Parallel = 1
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rep := &ProveAllReport{Prefix: opts.Template.Layout.RootPrefix(), Parallel: opts.Parallel,
		Clusters: []ProveResult{}, Failed: []string{}, Inconclusive: []string{}}
	// The listings have their own deadline: a frozen store is named, not waited on.
	var ids []string
	if k := opts.Kube; k != nil {
		rep.Namespace = k.Namespace
		kctx, cancel := context.WithTimeout(ctx, listTimeout(opts.Template.Timeout))
		names, err := k.ClusterNames(kctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			return rep, &ProveAllError{Err: fmt.Errorf("step %q: %w", "list EtcdClusters", err)}
		}
		lctx, cancel := context.WithTimeout(ctx, listTimeout(opts.Template.Timeout))
		ids, rep.NoJournal, err = NamespaceJournals(lctx, opts.Template, names)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			return rep, &ProveAllError{Err: fmt.Errorf("step %q: list the journals of the namespace's EtcdClusters: %w", "list clusters", err)}
		}
		log.Info("proving the EtcdClusters of the namespace only", "namespace", k.Namespace, "clusters", len(ids), "withoutJournal", rep.NoJournal)
	} else {
		lctx, cancel := context.WithTimeout(ctx, listTimeout(opts.Template.Timeout))
		var err error
		ids, err = JournalClusters(lctx, opts.Template)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			return rep, &ProveAllError{Err: fmt.Errorf("step %q: list the journals under %q: %w", "list clusters", opts.Template.Layout.JournalPrefix(""), err)}
		}
	}
	log.Info("proving the journal before every unproven backup", "clusters", len(ids), "parallel", opts.Parallel)
	rep.Clusters = make([]ProveResult, len(ids))
	notStarted := fanout.ForEach(ctx, len(ids), opts.Parallel, func(ctx context.Context, i int) {
		rep.Clusters[i] = proveCluster(ctx, opts.Template, ids[i], log)
	})
	for _, i := range notStarted {
		rep.Clusters[i] = ProveResult{Cluster: ids[i], Result: ProveNotRun, Proofs: []*catalog.JournalProof{}, Error: ctx.Err().Error()}
	}
	var errs []error
	for _, c := range rep.Clusters {
		switch c.Result {
		case ProveFailed:
			rep.Failed = append(rep.Failed, c.Cluster)
		case ProveInconclusive, ProveNotRun:
			rep.Inconclusive = append(rep.Inconclusive, c.Cluster)
		default:
			continue
		}
		errs = append(errs, errors.New(c.Error))
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if len(errs) > 0 {
		return rep, &ProveAllError{Failed: rep.Failed, Inconclusive: rep.Inconclusive, Err: errors.Join(errs...)}
	}
	return rep, nil
}

// listTimeout bounds one listing of the store: a minute, or the proof's
// timeout when shorter.
func listTimeout(proof time.Duration) time.Duration {
	if proof > 0 && proof < time.Minute {
		return proof
	}
	return time.Minute
}

// proveCluster proves every unproven backup of one cluster, newest first.
func proveCluster(ctx context.Context, tmpl drill.ProveOptions, id string, log *slog.Logger) ProveResult {
	start := time.Now()
	res := ProveResult{Cluster: id, Result: ProvePassed, Proofs: []*catalog.JournalProof{}}
	done := func() ProveResult {
		res.Duration = time.Since(start)
		res.Seconds = res.Duration.Seconds()
		return res
	}
	lctx, cancel := context.WithTimeout(ctx, listTimeout(tmpl.Timeout))
	pairs, err := drill.UnprovenTargets(lctx, tmpl.Store, tmpl.Layout, id, tmpl.Identities)
	cancel()
	if err != nil {
		res.Result = ProveInconclusive
		res.Error = fmt.Sprintf("journal proof of cluster %s: step %q: %v", id, drill.ProveStepSelect, err)
		log.Warn("could not list the backups to prove", "cluster", id, "err", err)
		return done()
	}
	o := tmpl
	o.ClusterID, o.Log = id, log
	for _, p := range pairs {
		o.Target = p.Target.Name
		proof, err := drill.ProveJournal(ctx, o)
		var pe *drill.ProveError
		switch {
		case err == nil:
			res.Proofs = append(res.Proofs, proof)
			if proof.Failed() {
				res.Result = ProveFailed
				if res.Error == "" {
					res.Error = fmt.Sprintf("journal proof of cluster %s before backup %s failed: %s", id, proof.Target, proof.Detail)
				}
			}
		case errors.As(err, &pe) && pe.NoJournal:
			// Nothing to prove (the journal does not reach): not a failure.
			log.Info("no journal to prove", "cluster", id, "target", p.Target.Name, "err", err)
		case errors.As(err, &pe) && pe.At == drill.ProveStepRecord && errors.Is(err, store.ErrExists):
			// Another run (another namespace's CronJob on a shared
			// prefix, an SRE) recorded its proof first: create-only, the
			// first verdict stands and is read back by restore.
			log.Info("journal proof already recorded by another run", "cluster", id, "target", p.Target.Name)
		default:
			res.Inconclusive = append(res.Inconclusive, ProveNotJudged{Target: p.Target.Name, Reason: err.Error()})
			if res.Result == ProvePassed {
				res.Result = ProveInconclusive
			}
			if res.Error == "" {
				res.Error = err.Error()
			}
			log.Warn("journal proof inconclusive", "cluster", id, "target", p.Target.Name, "err", err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return done()
}

// Table is one row per cluster: cluster, result, proofs passed, failed
// and inconclusive, the newest target proven, the duration; the error
// below the table.
func (r *ProveAllReport) Table() output.Table {
	t := output.Table{
		Header: []string{"CLUSTER", "RESULT", "PASSED", "FAILED", "INCONCLUSIVE", "NEWEST TARGET", "DURATION", "ERROR"},
		Long:   []string{"ERROR"},
	}
	for _, c := range r.Clusters {
		passed, failed := 0, 0
		newest := ""
		for _, p := range c.Proofs {
			if p.Failed() {
				failed++
			} else {
				passed++
			}
			if newest == "" || p.Target > newest {
				newest = p.Target
			}
		}
		res := c.Result
		if res == ProveFailed {
			res = "FAILED"
		}
		t.Rows = append(t.Rows, []string{c.Cluster, res, strconv.Itoa(passed), strconv.Itoa(failed), strconv.Itoa(len(c.Inconclusive)),
			dash(newest), c.Duration.Round(time.Millisecond).String(), dash(c.Error)})
	}
	t.Footer = fmt.Sprintf("%s with a journal under %s: %d failed, %d inconclusive.\n",
		output.Count(len(r.Clusters), "cluster"), r.Prefix, len(r.Failed), len(r.Inconclusive))
	if r.Namespace != "" {
		t.Footer = fmt.Sprintf("%s (EtcdClusters of namespace %s) with a journal under %s: %d failed, %d inconclusive; %d EtcdCluster(s) of the namespace without a journal.\n",
			output.Count(len(r.Clusters), "cluster"), r.Namespace, r.Prefix, len(r.Failed), len(r.Inconclusive), r.NoJournal)
	}
	return t
}
