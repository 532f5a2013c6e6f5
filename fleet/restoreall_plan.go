package fleet

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/ctxerr"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/probe"
	"github.com/armada/etcd-recovery/internal/usage"
	"github.com/armada/etcd-recovery/kube"
)

// discoverParallel bounds the probes and manifest reads of the discovery.
const discoverParallel = 16

// Validate checks what was asked, before anything is contacted, as usage
// errors naming restore-all's flags (not the wiring: RestoreAll checks
// that each namespace has a client and a store).
func (o RestoreAllOptions) Validate() error {
	switch {
	case o.Parallel < 0:
		return usage.Errorf("restore-all: --parallel %d: want at least 1", o.Parallel)
	case o.ClusterTimeout < 0:
		return usage.Errorf("restore-all: --cluster-timeout %v: must be positive", o.ClusterTimeout)
	case o.HealthTimeout < 0:
		return usage.Errorf("restore-all: --probe-timeout %v: must be positive", o.HealthTimeout)
	case o.Replace && !o.Rebuild:
		return usage.Errorf("restore-all: --replace goes with --rebuild")
	case o.Template.Bucket == "":
		return usage.Errorf("restore-all: --bucket is required (etcd-operator is told <bucket>/<key>)")
	case o.Template.Endpoint == "":
		return usage.Errorf("restore-all: --cos-endpoint is required (etcd-operator is told it)")
	case o.Template.Backup != "" || o.Template.Cluster != "":
		return usage.Errorf("restore-all: the template names no cluster and no backup (each cluster's is its own)")
	}
	switch o.Order {
	case "", OrderSmallest, OrderLargest, OrderName:
	default:
		return usage.Errorf("restore-all: --order %q: want %s, %s or %s", o.Order, OrderSmallest, OrderLargest, OrderName)
	}
	if _, err := labels.Parse(o.Selector); err != nil {
		return usage.Errorf("restore-all: --selector %q: %w", o.Selector, err)
	}
	seen := map[string]bool{}
	for _, n := range o.Namespaces {
		if n.Kube != nil && seen[n.Kube.Namespace] {
			return usage.Errorf("restore-all: namespace %s given twice", n.Kube.Namespace)
		}
		if n.Kube != nil {
			seen[n.Kube.Namespace] = true
		}
	}
	for _, n := range o.Names {
		if err := catalog.ValidateClusterID(n); err != nil {
			return usage.Wrap(fmt.Errorf("restore-all: --cluster: %w", err))
		}
	}
	for _, f := range o.First {
		_, name, _ := cutNamespace(f)
		if err := catalog.ValidateClusterID(name); err != nil {
			return usage.Wrap(fmt.Errorf("restore-all: --first: %w", err))
		}
	}
	return nil
}

// cutNamespace splits "namespace/name" (ns "" for a bare name).
func cutNamespace(s string) (ns, name string, qualified bool) {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return ns, name, true
	}
	return "", s, false
}

// discover reads every namespace: its EtcdClusters (Names, Selector), each
// one's health, the cluster ids in the store, and each cluster's newest
// committed backup.
func (r *restoreAll) discover(ctx context.Context) error {
	for _, n := range r.opts.Namespaces {
		ns := &raNamespace{RestoreAllNamespace: n, name: n.Kube.Namespace}
		r.nss = append(r.nss, ns)
		if err := r.discoverNamespace(ctx, ns); err != nil {
			return &RestoreAllError{Err: fmt.Errorf("namespace %s: %w", ns.name, err)}
		}
	}
	// A cluster named and found in no namespace: a failure of its own
	// (in the first namespace).
	for _, n := range r.opts.Names {
		found := false
		for _, ns := range r.nss {
			found = found || slices.ContainsFunc(ns.clusters, func(c *raCluster) bool { return c.id == n })
		}
		if !found {
			ns := r.nss[0]
			c := &raCluster{ns: ns, id: n}
			c.fail(kube.OpStepCluster, fmt.Errorf("no EtcdCluster %s in namespace(s) %s%s", n, r.namespaceNames(), rebuildHint(r.opts.Rebuild, ns.folders[n])))
			ns.clusters = append(ns.clusters, c)
		}
	}
	return nil
}

// namespaceNames are the namespaces, comma-separated.
func (r *restoreAll) namespaceNames() string {
	var out []string
	for _, ns := range r.nss {
		out = append(out, ns.name)
	}
	return strings.Join(out, ",")
}

func (r *restoreAll) discoverNamespace(ctx context.Context, ns *raNamespace) error {
	o := r.opts
	k := ns.Kube
	selected, err := selectedNames(ctx, k, o.Selector)
	if err != nil {
		return err
	}
	all, err := k.Clusters(ctx)
	if err != nil {
		return err
	}
	folders, err := clusterFolders(ctx, ns.Store, ns.Layout)
	if err != nil {
		return fmt.Errorf("listing the clusters under %q: %w", ns.Layout.RootPrefix(), ctxErr(ctx, err))
	}
	byName := map[string]*kube.Cluster{}
	for i := range all {
		byName[all[i].Name] = &all[i]
	}
	want := func(name string) bool { return len(o.Names) == 0 || slices.Contains(o.Names, name) }
	for i := range all {
		c := &all[i]
		if !want(c.Name) || (selected != nil && !selected[c.Name]) {
			continue
		}
		ns.clusters = append(ns.clusters, &raCluster{ns: ns, id: c.Name, cluster: c, newest: folders[c.Name].newest})
	}
	if o.Rebuild && o.Selector == "" {
		// Cluster ids with a committed backup and no EtcdCluster.
		for _, id := range sortedKeys(folders) {
			if byName[id] == nil && folders[id].committed > 0 && want(id) {
				ns.clusters = append(ns.clusters, &raCluster{ns: ns, id: id, newest: folders[id].newest})
			}
		}
	}
	ns.folders = folders
	if err := nothingSelected(ns); err != nil {
		return err
	}
	fanout.ForEach(ctx, len(ns.clusters), discoverParallel, func(ctx context.Context, i int) {
		c := ns.clusters[i]
		if c.cluster != nil && c.row.Outcome == "" {
			r.judge(ctx, c)
		}
	})
	return ctxErr(ctx, nil)
}

// rebuildHint says why a named cluster without an EtcdCluster is not
// rebuilt.
func rebuildHint(rebuild bool, f folderCount) string {
	switch {
	case !rebuild && f.committed > 0:
		return fmt.Sprintf(" (it has %d backup(s): --rebuild rebuilds it from its escrow)", f.committed)
	case f.committed == 0:
		return " and no committed backup under its prefix"
	}
	return ""
}

// selectedNames are the EtcdClusters matching selector (nil: no selector).
func selectedNames(ctx context.Context, k *kube.Client, selector string) (map[string]bool, error) {
	if selector == "" {
		return nil, nil
	}
	list, err := k.Dynamic.Resource(kube.EtcdClusterGVR).Namespace(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing etcdclusters in %s with selector %q: %w", k.Namespace, selector, ctxErr(ctx, err))
	}
	out := map[string]bool{}
	for _, o := range list.Items {
		out[o.GetName()] = true
	}
	return out, nil
}

// judge probes every member of c with a short deadline and judges its
// health (judgeHealth). A cluster whose members cannot be reached at all
// (no client TLS secret) fails at StepProbe.
func (r *restoreAll) judge(ctx context.Context, c *raCluster) {
	k := c.ns.Kube
	c.size = int(c.cluster.Size)
	if c.size == 0 {
		c.size = len(c.cluster.Endpoints)
	}
	cfg, release, err := k.Connect(ctx, *c.cluster, r.opts.Template.DialTimeout)
	defer release()
	if err != nil {
		c.fail(StepProbe, err)
		return
	}
	members := make([]probe.Member, len(c.cluster.Endpoints))
	for i, ep := range c.cluster.Endpoints {
		members[i].ClientURL = cfg.URL(ep)
	}
	answered := 0
	probed := probe.Members(ctx, cfg, members, r.opts.HealthTimeout)
	for _, m := range probed {
		if m.Healthy() {
			c.healthy++
		}
		c.revision = max(c.revision, m.Revision)
		if m.Answered() {
			answered++
		}
	}
	c.judged, c.row.Health = judgeHealth(c.size, c.healthy, answered, probe.Quorum(probed))
	r.log.Info("restore-all: health", "namespace", c.ns.name, "cluster", c.id, "health", c.row.Health)
}

// judgeHealth judges a cluster of size members of which healthy answered
// healthy and answered answered at all; quorum is whether a voting member
// served a linearizable read (probe.Quorum: the cluster committed a
// ReadIndex with a quorum just now, whatever the toolkit can reach).
// Quorum lost ("", to restore) is no such read: then fewer than a
// majority of the members are healthy. With quorum: OutcomeHealthy (every
// member healthy) or OutcomeDegraded (etcd-operator heals it), never
// restored unless asked, even when the toolkit reaches fewer than a
// majority. The text is what the report shows (members that answer
// without being healthy: a survivor without quorum).
func judgeHealth(size, healthy, answered int, quorum bool) (outcome, text string) {
	text = fmt.Sprintf("%d/%d members healthy", healthy, size)
	if answered > healthy {
		text += fmt.Sprintf(" (%d answer)", answered)
	}
	switch {
	case quorum && size > 0 && healthy >= size:
		return OutcomeHealthy, text
	case quorum:
		return OutcomeDegraded, text + ": quorum holds"
	}
	return "", text + ": quorum lost"
}

// plan decides each cluster's action (decideAction), reads the backups
// of those to restore, orders them, and computes the expected time.
func (r *restoreAll) plan() {
	o := r.opts
	for _, ns := range r.nss {
		if ns.plan != nil && ns.resumed {
			// A cluster the resumed run planned and that has no
			// EtcdCluster now: a killed attempt's restore may be in
			// flight (etcd-operator deleted it and has not recreated it
			// yet), or its rebuild is to be done again.
			for _, p := range ns.plan.Clusters {
				if !slices.ContainsFunc(ns.clusters, func(c *raCluster) bool { return c.id == p.Cluster }) {
					c := &raCluster{ns: ns, id: p.Cluster, newest: ns.folders[p.Cluster].newest}
					c.row.Health = "no EtcdCluster"
					ns.clusters = append(ns.clusters, c)
				}
			}
		}
		for _, c := range ns.clusters {
			c.row.Namespace, c.row.Cluster = ns.name, c.id
			if c.row.Outcome == OutcomeFailed {
				r.todo = append(r.todo, c)
				continue
			}
			if d, ok := ns.done[c.id]; ok {
				c.row.Outcome, c.row.Run, c.row.Action = OutcomeDoneEarlier, d.Run, d.Action
				c.row.Backup, c.row.Revision, c.row.Elapsed = d.Backup, d.Revision, d.Duration
				r.left = append(r.left, c)
				continue
			}
			c.action, c.adoptOnly = decideAction(c.cluster != nil, c.judged, o.Force, !o.ToTime.IsZero(), ns.plannedAction(c.id))
			if c.action == "" {
				c.row.Outcome = c.judged
				r.left = append(r.left, c)
				continue
			}
			c.row.Action, c.row.Run = c.action, ns.run
			r.todo = append(r.todo, c)
		}
	}
	r.readBackups()
	r.capParallel()
	order(r.todo, o.Order, o.First)
	var bytes []int64
	for _, c := range r.todo {
		if c.action != "" {
			bytes = append(bytes, c.row.Bytes)
		}
		if o.DryRun && c.row.Outcome == "" {
			c.row.Outcome = OutcomePlanned
		}
	}
	model := o.Model
	if model == nil {
		m := r.measureModel()
		model = m
	}
	r.rep.Expected = model.Expect(bytes)
	all := append(append([]*raCluster{}, r.todo...), r.left...)
	for _, c := range all {
		c.row.ClientURL = clientURL(c)
	}
	// Every cluster's NodePort (a restored one's is read again after
	// its restore): the plan shows which kube-apiservers will need a
	// restart.
	fanout.ForEach(context.Background(), len(all), discoverParallel, func(ctx context.Context, i int) {
		c := all[i]
		if c.cluster == nil {
			return
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c.row.NodePort, c.row.NodePortError = nodePort(ctx, c.ns.Kube, c.id)
	})
}

// decideAction is what to do with a cluster: the action a resumed run
// planned for it (planned), only finishing what a killed attempt began
// (adoptOnly) when the cluster is healthy or degraded now and neither
// force nor a point in time asks for more; ActionRebuild when it has no
// EtcdCluster; ActionRestore when it lost quorum (judged ""), or with
// force or a point in time; "" to leave it alone.
func decideAction(hasEtcdCluster bool, judged string, force, pointInTime bool, planned string) (action string, adoptOnly bool) {
	switch {
	case planned != "" && hasEtcdCluster && judged != "" && !force && !pointInTime:
		return planned, true
	case planned != "":
		return planned, false
	case !hasEtcdCluster:
		return ActionRebuild, false
	case judged == "" || force || pointInTime:
		return ActionRestore, false
	}
	return "", false
}

// readBackups reads the manifest of each cluster's newest committed backup
// to do: the backup the plan shows, its revision and its bytes.
func (r *restoreAll) readBackups() {
	if !r.opts.ToTime.IsZero() {
		// First the journal's reach at T (restoreall_pitr.go: a journal
		// that stopped before T while the cluster changed after is refused
		// with its window), then restore's own selection of the base
		// backup and the revision at T (restoreall_pitr_plan.go).
		r.checkPointInTime()
		r.readPointInTime()
		return
	}
	ctx := context.Background()
	fanout.ForEach(ctx, len(r.todo), discoverParallel, func(_ context.Context, i int) {
		c := r.todo[i]
		if c.action == "" || c.newest == "" {
			return
		}
		m, err := catalog.LoadManifest(ctx, c.ns.Store, c.ns.Layout, c.id, c.newest)
		if err != nil {
			r.log.Warn("restore-all: the newest backup's manifest cannot be read for the plan", "namespace", c.ns.name, "cluster", c.id, "backup", c.newest, "err", err)
			return
		}
		c.row.Backup, c.row.Revision, c.row.Bytes, c.rawBytes = m.Name, m.Revision(), m.Snapshot.StoredSize, m.Snapshot.RawSize
		c.snapshotKey = c.ns.Layout.Key(c.id, m.Name, m.Snapshot.Object)
	})
}

// measureLimit and measureTimeout bound the plan's measurement of the
// store's throughput.
const (
	measureLimit   = 16 << 20
	measureTimeout = 15 * time.Second
)

// measureModel is the plan's model (RestoreModel): the store's
// throughput measured on the largest backup to restore (up to
// measureLimit of it), DefaultRestoreFixedCost (or FixedCost) and
// Parallel. Its inputs go in the report (and the plan record).
func (r *restoreAll) measureModel() RestoreModel {
	m := RestoreModel{Fixed: r.opts.FixedCost, Parallel: r.opts.Parallel}
	if m.Fixed <= 0 {
		m.Fixed = DefaultRestoreFixedCost
	}
	var largest *raCluster
	for _, c := range r.todo {
		if c.snapshotKey != "" && (largest == nil || c.row.Bytes > largest.row.Bytes) {
			largest = c
		}
	}
	note := "no backup to measure"
	if largest != nil {
		ctx, cancel := context.WithTimeout(context.Background(), measureTimeout)
		rate, err := MeasureStoreThroughput(ctx, largest.ns.Store, largest.snapshotKey, measureLimit)
		cancel()
		if err != nil {
			note = err.Error()
			r.log.Warn("restore-all: the store's throughput could not be measured: the plan's time counts the fixed cost only", "err", err)
		} else {
			m.Stream = rate
			note = fmt.Sprintf("%s of %s", output.Bytes(min(int64(measureLimit), largest.row.Bytes)), largest.snapshotKey)
		}
	}
	in := m.Inputs()
	in["measuredOn"] = note
	r.rep.Model = in
	return m
}

// order sorts the clusters to restore: those named in first (in that
// order; "name" or "namespace/name"), then by ord (OrderSmallest: fewest
// bytes first; OrderLargest; OrderName), ties by namespace and name.
// Clusters that already failed (nothing to do) go last.
func order(cs []*raCluster, ord string, first []string) {
	rank := func(c *raCluster) int {
		for i, f := range first {
			ns, name, q := cutNamespace(f)
			if name == c.id && (!q || ns == c.ns.name) {
				return i
			}
		}
		return len(first)
	}
	slices.SortStableFunc(cs, func(a, b *raCluster) int {
		if fa, fb := a.action == "", b.action == ""; fa != fb {
			if fa {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		var c int
		switch ord {
		case OrderSmallest, "":
			c = cmp.Compare(a.row.Bytes, b.row.Bytes)
		case OrderLargest:
			c = cmp.Compare(b.row.Bytes, a.row.Bytes)
		}
		if c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.ns.name, b.ns.name), strings.Compare(a.id, b.id))
	})
}

// clientURL is the cluster's client Service URL, as the customer's
// kube-apiserver is configured with it.
func clientURL(c *raCluster) string {
	scheme := "https"
	if c.cluster != nil && !c.cluster.TLS() {
		scheme = "http"
	}
	return fmt.Sprintf("%s://%s-client.%s.svc:%d", scheme, c.id, c.ns.name, kube.ClientPort)
}

// nodePort reads the nodePort of the cluster's <id>-client-service-np:
// 0 and why when there is none or it cannot be read (the toolkit's
// account needs get on that Service).
func nodePort(ctx context.Context, k *kube.Client, id string) (int32, string) {
	name := id + "-client-service-np"
	svc, err := k.Core.Services(k.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Sprintf("service %s/%s: %v", k.Namespace, name, err)
	}
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			return p.NodePort, ""
		}
	}
	return 0, fmt.Sprintf("service %s/%s has no nodePort", k.Namespace, name)
}

// fail records c's failure at step.
func (c *raCluster) fail(step string, err error) {
	c.row.Outcome, c.row.FailedStep, c.row.Cause = OutcomeFailed, step, oneLine(err)
	c.row.NextStep = NextStep(step)
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// NextStep is the runbook section to follow when a cluster's restore
// failed at step.
func NextStep(step string) string {
	switch step {
	case StepProbe:
		return "runbooks/unreachable.md#find-why-no-member-answers"
	case kube.RRStepChoose, kube.RRStepEscrow, kube.StepRebuild:
		return "runbooks/namespace-gone.md#rebuild-and-restore"
	case kube.OpStepSelect:
		return "runbooks/quorum-loss.md#restore-from-snapshot"
	case StepJournalReach:
		return "runbooks/quorum-loss.md#every-member-lost-restore-from-the-journal"
	}
	return "runbooks/quorum-loss.md#restore-through-etcd-operator"
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ctxErr is the context's end, named, when it ended (ctxerr.Wrap).
func ctxErr(ctx context.Context, err error) error {
	if err == nil {
		return ctx.Err()
	}
	return ctxerr.Wrap(ctx, err)
}
