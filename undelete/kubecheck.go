package undelete

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/armada/etcd-recovery/internal/etcdinternals"
)

// checkKube is what undelete checks of the Kubernetes objects it is about
// to write, before anything is written, so that what comes back stays:
//
//   - a namespace or custom resource definition that was already being
//     deleted at the point refuses the run, naming the revision before it
//     was marked (its controller would delete everything again); another
//     object being deleted then (a pod in its grace period) is skipped
//     (ActionTerminating);
//   - a namespace or definition that is being deleted NOW (a namespace
//     stuck Terminating on a finalizer) refuses the run: its controller
//     would delete what comes back within seconds;
//   - a Service whose cluster IP or node port another live Service holds
//     is left alone (ActionConflict);
//   - objects whose owners this run does not write are named (a warning:
//     if an owner is gone, the garbage collector deletes them again, which
//     the settle check then sees).
//
// AcceptTerminating skips the first two. Values undelete cannot read as
// Kubernetes objects (encrypted at rest, another encoding) are counted in
// a warning: neither their deletion nor their owners were checked.
func (u *run) checkKube(ctx context.Context, path string) error {
	o := u.o
	nsPrefix := o.KubePrefix + "/namespaces/"
	crdPrefix := o.KubePrefix + "/apiextensions.k8s.io/customresourcedefinitions/"
	undecoded := 0
	var refuse []*item
	keep := u.items[:0:0]
	for _, it := range u.items {
		it.meta = decodeMeta(it.kv.Value)
		key := string(it.kv.Key)
		if !it.meta.Decoded && strings.HasPrefix(key, o.KubePrefix+"/") {
			undecoded++
		}
		switch {
		case it.meta.Deleting == "" || o.AcceptTerminating:
			keep = append(keep, it)
		case strings.HasPrefix(key, nsPrefix) || strings.HasPrefix(key, crdPrefix):
			refuse = append(refuse, it)
			keep = append(keep, it)
		default:
			it.res.Action = ActionTerminating
			it.res.Reason = fmt.Sprintf("already being deleted at the point (deletionTimestamp %s): skipped, it would be deleted again "+
				"(--accept-terminating writes it)", it.meta.Deleting)
		}
	}
	u.items = keep
	if o.AcceptTerminating {
		for _, it := range u.items {
			if it.meta.Deleting != "" {
				u.accept("--accept-terminating")
				u.warn("--accept-terminating: %s was already being deleted at the point and is written all the same", it.kv.Key)
			}
		}
	}
	if undecoded > 0 {
		u.warn("%d value(s) under %s/ are not Kubernetes objects undelete can read (encrypted at rest, or another encoding): "+
			"whether they were being deleted, and their owners, were not checked", undecoded, o.KubePrefix)
	}
	if len(refuse) > 0 {
		return u.refuseTerminating(path, refuse)
	}
	if err := u.checkLiveParents(ctx); err != nil {
		return err
	}
	if err := u.checkServices(ctx); err != nil {
		return err
	}
	u.checkOwners()
	return nil
}

// refuseTerminating refuses a point at which namespaces or definitions
// to write were already being deleted, naming the revision before the
// first was marked (read from the database at the point, path).
func (u *run) refuseTerminating(path string, deleting []*item) error {
	keys := map[string]bool{}
	for _, it := range deleting {
		keys[string(it.kv.Key)] = true
	}
	hist, err := etcdinternals.KeyHistories(path, u.res.Revision, keys)
	if err != nil {
		return u.fail(StepCheck, err)
	}
	first, known := int64(0), true
	var names []string
	for _, it := range deleting {
		m, ok := markedAt(hist[string(it.kv.Key)])
		known = known && ok
		if first == 0 || m < first {
			first = m
		}
		if len(names) < 5 {
			at := fmt.Sprintf("marked at revision %d", m)
			if !ok {
				at = fmt.Sprintf("marked at or before revision %d, the oldest the backup holds", m)
			}
			names = append(names, fmt.Sprintf("%s (deletionTimestamp %s, %s)", it.kv.Key, it.meta.Deleting, at))
		}
	}
	next := fmt.Sprintf("run again with --to-revision %d, just before the first was marked", first-1)
	if !known {
		next = fmt.Sprintf("choose a point before revision %d (journal find KEY shows when each got its deletionTimestamp; "+
			"the backup the point was built from already holds it marked)", first)
	}
	return u.fail(StepCheck, fmt.Errorf("%d namespace(s) or definition(s) were already being deleted at revision %d, and what they hold "+
		"would be deleted again at once: %s%s. %s; --accept-terminating writes them anyway", len(deleting), u.res.Revision,
		strings.Join(names, ", "), more(len(deleting)-len(names)), next))
}

// kubeParents are the live objects whose deletion would take the objects
// to write with them: the namespace of each namespaced object (and of
// each --kube-namespace), and the definition of each custom resource.
func (u *run) kubeParents() []string {
	o := u.o
	seen := map[string]bool{}
	var out []string
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, ns := range o.Namespaces {
		add(o.KubePrefix + "/namespaces/" + ns)
	}
	for _, it := range u.items {
		rest, ok := strings.CutPrefix(string(it.kv.Key), o.KubePrefix+"/")
		if !ok || !it.meta.Decoded {
			continue
		}
		parts := strings.Split(rest, "/")
		if ns, ok := kubeNamespaceOf(parts); ok {
			add(o.KubePrefix + "/namespaces/" + ns)
		}
		if (len(parts) == 3 || len(parts) == 4) && strings.Contains(parts[0], ".") && parts[0] != "apiextensions.k8s.io" {
			add(o.KubePrefix + "/apiextensions.k8s.io/customresourcedefinitions/" + parts[1] + "." + parts[0])
		}
	}
	return out
}

// checkLiveParents refuses the run when a parent of the objects to write
// (kubeParents) is being deleted now.
func (u *run) checkLiveParents(ctx context.Context) error {
	o := u.o
	parents := u.kubeParents()
	if len(parents) == 0 {
		return nil
	}
	var deleting []string
	err := u.getAll(ctx, len(parents), func(i int) string { return parents[i] }, func(int) int { return 256 },
		func(i int, kv *mvccpb.KeyValue) error {
			if kv != nil {
				if m := decodeMeta(kv.Value); m.Deleting != "" {
					deleting = append(deleting, fmt.Sprintf("%s (deletionTimestamp %s, revision %d)", parents[i], m.Deleting, kv.ModRevision))
				}
			}
			return nil
		})
	if err != nil {
		return u.fail(StepLive, fmt.Errorf("read the live namespaces and definitions of the objects: %w", err))
	}
	if len(deleting) == 0 {
		return nil
	}
	if o.AcceptTerminating {
		u.accept("--accept-terminating")
		u.warn("--accept-terminating: being deleted now, what comes back into them may be deleted again: %s", strings.Join(deleting, ", "))
		return nil
	}
	return u.fail(StepCheck, fmt.Errorf("being deleted now: %s: their controllers would delete again what comes back. "+
		"Wait until they are gone (kubectl get says NotFound; a finalizer may hold them: see the runbook), then run again; "+
		"--accept-terminating writes anyway", strings.Join(deleting, ", ")))
}

// serviceClaims are the cluster IPs and node ports a Service holds.
func serviceClaims(v []byte) (uid string, claims []string, ok bool) {
	var svc corev1.Service
	switch {
	case bytes.HasPrefix(v, protoMagic):
		var u runtime.Unknown
		if err := u.Unmarshal(v[len(protoMagic):]); err != nil || svc.Unmarshal(u.Raw) != nil {
			return "", nil, false
		}
	case len(v) > 0 && v[0] == '{':
		if err := json.Unmarshal(v, &svc); err != nil {
			return "", nil, false
		}
	default:
		return "", nil, false
	}
	ips := slices.Clone(svc.Spec.ClusterIPs)
	if svc.Spec.ClusterIP != "" && !slices.Contains(ips, svc.Spec.ClusterIP) {
		ips = append(ips, svc.Spec.ClusterIP)
	}
	for _, ip := range ips {
		if ip != "" && ip != corev1.ClusterIPNone {
			claims = append(claims, "cluster IP "+ip)
		}
	}
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			claims = append(claims, fmt.Sprintf("node port %d/%s", p.NodePort, p.Protocol))
		}
	}
	return string(svc.UID), claims, true
}

// checkServices leaves alone each Service to write whose cluster IP or
// node port a live Service (another uid) holds now: both would claim it.
func (u *run) checkServices(ctx context.Context) error {
	o := u.o
	prefix := o.KubePrefix + "/services/specs/"
	var svcs []*item
	for _, it := range u.items {
		if strings.HasPrefix(string(it.kv.Key), prefix) {
			svcs = append(svcs, it)
		}
	}
	if len(svcs) == 0 {
		return nil
	}
	held := map[string]string{} // claim -> "ns/name (uid)"
	heldUID := map[string]string{}
	end := clientv3.GetPrefixRangeEnd(prefix)
	for from := prefix; ; {
		rctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
		resp, err := u.cli.Get(rctx, from, clientv3.WithRange(end), clientv3.WithLimit(500))
		cancel()
		if err != nil {
			return u.fail(StepLive, fmt.Errorf("read the live Services: %w", err))
		}
		for _, kv := range resp.Kvs {
			uid, claims, ok := serviceClaims(kv.Value)
			if !ok {
				continue
			}
			for _, c := range claims {
				held[c] = strings.TrimPrefix(string(kv.Key), prefix)
				heldUID[c] = uid
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	keep := u.items[:0:0]
	for _, it := range u.items {
		if !strings.HasPrefix(string(it.kv.Key), prefix) {
			keep = append(keep, it)
			continue
		}
		uid, claims, _ := serviceClaims(it.kv.Value)
		var taken []string
		for _, c := range claims {
			if who, ok := held[c]; ok && heldUID[c] != uid {
				taken = append(taken, fmt.Sprintf("%s (held by Service %s)", c, who))
			}
		}
		if len(taken) == 0 {
			keep = append(keep, it)
			continue
		}
		it.res.Action = ActionConflict
		it.res.Reason = "left alone: " + strings.Join(taken, ", ") + " now; two Services would claim it"
	}
	u.items = keep
	return nil
}

// checkOwners names the objects whose owners this run does not write: if
// an owner is gone, the garbage collector deletes them again.
func (u *run) checkOwners() {
	uids := map[string]bool{}
	for _, it := range u.items {
		if it.meta.UID != "" {
			uids[it.meta.UID] = true
		}
	}
	var named []string
	n := 0
	for _, it := range u.items {
		for _, owner := range it.meta.Owners {
			if !uids[owner] {
				n++
				if len(named) < 5 {
					named = append(named, fmt.Sprintf("%s (owner uid %s)", it.kv.Key, owner))
				}
				break
			}
		}
	}
	if n > 0 {
		u.warn("%d object(s) to write name owners this run does not write: %s%s. An owner that is gone makes the garbage collector "+
			"delete them again (the settle check then fails the run): bring the owners back too", n, strings.Join(named, ", "), more(n-len(named)))
	}
}

// kubeNamespaceOf is the namespace of a namespaced object's key split
// after the kube prefix (<resource>/<ns>/<name>,
// services/specs|endpoints/<ns>/<name> or <group>/<resource>/<ns>/<name>).
func kubeNamespaceOf(parts []string) (string, bool) {
	if len(parts) != 3 && len(parts) != 4 || parts[0] == "namespaces" || parts[len(parts)-1] == "" {
		return "", false
	}
	// <group>/<resource>/<name>: a cluster-scoped custom resource (or an
	// APIService); a group has a '.', a built-in resource's key none.
	if len(parts) == 3 && strings.Contains(parts[0], ".") {
		return "", false
	}
	return parts[len(parts)-2], true
}
