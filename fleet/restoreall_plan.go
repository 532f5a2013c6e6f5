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

	"github.com/armada/etcd-recovery/inspect"
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
			if ctx.Err() != nil {
				return ctxErr(ctx, err)
			}
			r.dropNamespace(ns, StepNamespace, fmt.Errorf("namespace %s: %w", ns.name, err))
			continue
		}
		r.warnUnreachable(ns)
	}
	if err := r.allFailed(ctx); err != nil {
		return err
	}
	// A cluster named and found in no namespace: a failure of its own
	// (in the first namespace that could be read).
	live := r.live()
	for _, n := range r.opts.Names {
		found := false
		for _, ns := range live {
			found = found || slices.ContainsFunc(ns.clusters, func(c *raCluster) bool { return c.id == n })
		}
		if !found {
			ns := live[0]
			c := &raCluster{ns: ns, id: n}
			unread := ""
			if len(live) < len(r.nss) {
				unread = " (and namespace(s) that could not be read)"
			}
			c.fail(kube.OpStepCluster, fmt.Errorf("no EtcdCluster %s in namespace(s) %s%s%s", n, r.namespaceNames(), unread, rebuildHint(r.opts.Rebuild, ns.folders[n])))
			ns.clusters = append(ns.clusters, c)
		}
	}
	return nil
}

// warnUnreachable says so, loudly, when no member of any of the
// namespace's clusters answered while Kubernetes says their pods are
// Ready: the toolkit's own network (its node, a NetworkPolicy, DNS) is
// the likely cause, not ns's clusters.
func (r *restoreAll) warnUnreachable(ns *raNamespace) {
	probed, unreachable := 0, 0
	for _, c := range ns.clusters {
		if c.cluster == nil || (c.row.Outcome == OutcomeFailed && !c.unreachable) {
			continue
		}
		probed++
		if c.answered > 0 {
			return
		}
		if c.unreachable {
			unreachable++
		}
	}
	if unreachable == 0 {
		return
	}
	msg := fmt.Sprintf("namespace %s: no member of any of its %d cluster(s) answered, yet %d of them have a majority of member pods Running and Ready: "+
		"the toolkit's own network (its node, a NetworkPolicy, DNS) is the likely cause; those clusters were not restored: see %s",
		ns.name, probed, unreachable, inspect.RunbookUnreachable)
	r.rep.Warnings = append(r.rep.Warnings, msg)
	r.log.Error("restore-all: "+msg, "namespace", ns.name)
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
	return ctx.Err()
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

// probeBound bounds one cluster's judgement (its secret, the probe of
// every member, its member pods) beyond the probe's own timeouts, and
// manifestTimeout each manifest read of the plan: one frozen cluster
// delays only itself.
const (
	probeSlack      = 10 * time.Second
	manifestTimeout = 30 * time.Second
)

// health is what a judgement of a cluster found.
type health struct {
	healthy, answered, size int
	quorum                  bool
	// revision is the newest revision a member's linearizable read saw
	// (0: none answered one).
	revision int64
	// pods: Kubernetes' view of the member pods (read only when no
	// member answered); podsErr why it could not be read.
	pods    kube.MemberPods
	podsErr error
	// judged is OutcomeHealthy, OutcomeDegraded, "" (quorum lost: to
	// restore) or judgedUnreachable; text is what the report shows.
	judged, text string
}

// judgedUnreachable: no member answered while Kubernetes says a majority
// of the member pods are Running and Ready (or could not be asked): the
// toolkit cannot reach a cluster that may well be serving. Never restored
// unless Force.
const judgedUnreachable = "unreachable"

// judge probes every member of c with a short deadline and judges its
// health (judgeHealth); with no member answering, the member pods are the
// evidence (judgeHealth). A cluster whose members cannot be reached at
// all (no client TLS secret) or that is unreachable fails at StepProbe,
// unless Force.
func (r *restoreAll) judge(ctx context.Context, c *raCluster) {
	h, err := r.probeHealth(ctx, c.ns.Kube, *c.cluster)
	if err != nil {
		c.fail(StepProbe, fmt.Errorf("cluster %s/%s: %w", c.ns.name, c.id, err))
		return
	}
	r.apply(c, h)
}

// apply records a judgement on c: an unreachable cluster fails (unless
// Force: then it is restored as asked).
func (r *restoreAll) apply(c *raCluster, h health) {
	c.size, c.healthy, c.answered = h.size, h.healthy, h.answered
	c.revision = max(c.revision, h.revision)
	c.judged, c.row.Health = h.judged, h.text
	if h.judged == judgedUnreachable {
		if r.opts.Force {
			c.judged = OutcomeDegraded // restored from the store, not its present state
			return
		}
		c.failUnreachable(h)
	}
}

// failUnreachable records c as unreachable: failed at StepProbe, next the
// unreachable runbook.
func (c *raCluster) failUnreachable(h health) {
	cause := fmt.Sprintf("cluster %s/%s: no member answered the probe, yet %s: the toolkit cannot reach it "+
		"(its node's network, a NetworkPolicy, DNS); not restored (--force restores it all the same)", c.ns.name, c.id, h.pods)
	if h.podsErr != nil {
		cause = fmt.Sprintf("cluster %s/%s: no member answered the probe, and its member pods could not be read (%v): "+
			"down and unreachable cannot be told apart; not restored (--force restores it all the same)", c.ns.name, c.id, h.podsErr)
	}
	c.row.Outcome, c.row.FailedStep, c.row.Cause = OutcomeFailed, StepProbe, cause
	c.row.NextStep = inspect.RunbookUnreachable
	c.unreachable = true
}

// probeHealth probes the members of kc, bounded by the health timeout,
// and, when none answers, reads its member pods.
func (r *restoreAll) probeHealth(ctx context.Context, k *kube.Client, kc kube.Cluster) (health, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Template.DialTimeout+2*r.opts.HealthTimeout+probeSlack)
	defer cancel()
	h := health{size: int(kc.Size)}
	if h.size == 0 {
		h.size = len(kc.Endpoints)
	}
	cfg, release, err := k.Connect(ctx, kc, r.opts.Template.DialTimeout)
	defer release()
	if err != nil {
		return h, ctxErr(ctx, err)
	}
	members := make([]probe.Member, len(kc.Endpoints))
	for i, ep := range kc.Endpoints {
		members[i].ClientURL = cfg.URL(ep)
	}
	probed := probe.Members(ctx, cfg, members, r.opts.HealthTimeout)
	for _, m := range probed {
		if m.Healthy() {
			h.healthy++
		}
		h.revision = max(h.revision, m.Revision)
		if m.Answered() {
			h.answered++
		}
	}
	h.quorum = probe.Quorum(probed)
	if h.answered == 0 && !h.quorum {
		h.pods, h.podsErr = k.MemberPodsOf(ctx, kc.Name)
	}
	h.judged, h.text = judgeHealth(h.size, h.healthy, h.answered, h.quorum, h.pods, h.podsErr)
	r.log.Info("restore-all: health", "namespace", k.Namespace, "cluster", kc.Name, "health", h.text)
	return h, nil
}

// judgeHealth judges a cluster of size members of which healthy answered
// healthy and answered answered at all; quorum is whether a voting member
// served a linearizable read (probe.Quorum: the cluster committed a
// ReadIndex with a quorum just now, whatever the toolkit can reach).
// Quorum lost ("", to restore) is no such read and evidence that the
// members are down: a member that answered without quorum, or, when none
// answered, Kubernetes saying fewer than a majority of the member pods are
// Running and Ready (pods). No member answering while a majority of the
// pods are Ready (or the pods unreadable: podsErr) is judgedUnreachable:
// the toolkit's network, not the cluster, may be what failed. With
// quorum: OutcomeHealthy (every member healthy) or OutcomeDegraded
// (etcd-operator heals it), never restored unless asked, even when the
// toolkit reaches fewer than a majority. The text is what the report
// shows (members that answer without being healthy: a survivor without
// quorum).
func judgeHealth(size, healthy, answered int, quorum bool, pods kube.MemberPods, podsErr error) (outcome, text string) {
	text = fmt.Sprintf("%d/%d members healthy", healthy, size)
	if answered > healthy {
		text += fmt.Sprintf(" (%d answer)", answered)
	}
	switch {
	case quorum && size > 0 && healthy >= size:
		return OutcomeHealthy, text
	case quorum:
		return OutcomeDegraded, text + ": quorum holds"
	case answered == 0 && podsErr != nil:
		return judgedUnreachable, text + ": unreachable (member pods unreadable)"
	case answered == 0 && pods.Ready >= size/2+1:
		return judgedUnreachable, text + ", " + pods.String() + ": unreachable"
	case answered == 0:
		return "", text + ", " + pods.String() + ": quorum lost"
	}
	return "", text + ": quorum lost"
}

// plan decides each cluster's action (decideAction), reads the backups
// of those to restore, orders them, and computes the expected time;
// ctx's end (SIGTERM) stops it.
func (r *restoreAll) plan(ctx context.Context) error {
	o := r.opts
	for _, ns := range r.live() {
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
				c.row.Run, c.row.Action = d.Run, d.Action
				c.row.Backup, c.row.Revision, c.row.Elapsed = d.Backup, d.Revision, d.Duration
				if err := doneStill(d, c); err != nil {
					// Down again, or another EtcdCluster: the done
					// record does not speak for it now.
					c.row.Outcome, c.row.FailedStep, c.row.Cause = OutcomeFailed, StepDoneCheck, oneLine(err)
					c.row.NextStep = fmt.Sprintf("a new run for it: etcd-recovery restore-all -n %s --new-run --cluster %s", ns.name, c.id)
					c.row.Elapsed = 0
					r.todo = append(r.todo, c)
					continue
				}
				c.row.Outcome = OutcomeDoneEarlier
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
	r.readBackups(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
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
		m := r.measureModel(ctx)
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
	fanout.ForEach(ctx, len(all), discoverParallel, func(ctx context.Context, i int) {
		c := all[i]
		if c.cluster == nil {
			return
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c.row.NodePort, c.row.NodePortError = nodePort(ctx, c.ns.Kube, c.id)
	})
	return ctx.Err()
}

// doneStill checks that a done record still speaks for c: the
// EtcdCluster is the one the recorded restore left (its uid) and it has
// quorum now. Otherwise the error says which is not so.
func doneStill(d catalog.FleetRestoreDone, c *raCluster) error {
	at := d.Verified.UTC().Format(time.RFC3339)
	switch {
	case c.cluster == nil:
		return fmt.Errorf("cluster %s/%s: restored by run %s at %s, but it has no EtcdCluster now", c.ns.name, c.id, d.Run, at)
	case d.UID == "" || d.UID != string(c.cluster.UID):
		return fmt.Errorf("cluster %s/%s: not the EtcdCluster run %s restored at %s (that one's uid %q, this one's %q): its done record does not speak for it",
			c.ns.name, c.id, d.Run, at, d.UID, c.cluster.UID)
	case c.row.Outcome == OutcomeFailed:
		return fmt.Errorf("cluster %s/%s: restored by run %s at %s, and now: %s", c.ns.name, c.id, d.Run, at, c.row.Cause)
	case c.judged != OutcomeHealthy && c.judged != OutcomeDegraded:
		return fmt.Errorf("cluster %s/%s: restored by run %s at %s, quorum lost again since (%s)", c.ns.name, c.id, d.Run, at, c.row.Health)
	}
	return nil
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
func (r *restoreAll) readBackups(ctx context.Context) {
	if !r.opts.ToTime.IsZero() {
		// First the journal's reach at T (restoreall_pitr.go: a journal
		// that stopped before T while the cluster changed after is refused
		// with its window), then restore's own selection of the base
		// backup and the revision at T (restoreall_pitr_plan.go).
		r.checkPointInTime(ctx)
		r.readPointInTime(ctx)
		return
	}
	fanout.ForEach(ctx, len(r.todo), discoverParallel, func(ctx context.Context, i int) {
		c := r.todo[i]
		if c.action == "" || c.newest == "" {
			return
		}
		// Each read has its own deadline: a frozen prefix delays only its
		// cluster's plan (its restore then says more).
		ctx, cancel := context.WithTimeout(ctx, manifestTimeout)
		defer cancel()
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
func (r *restoreAll) measureModel(ctx context.Context) RestoreModel {
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
		ctx, cancel := context.WithTimeout(ctx, measureTimeout)
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
