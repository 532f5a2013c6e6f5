package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/escrow"
	"github.com/armada/etcd-recovery/internal/output"
)

// Rebuild: a cluster's namespace objects recreated from its escrow
// (catalog.EscrowList), for restore --via etcd-operator --rebuild.
//
// The secrets first, then the Services (the same nodePorts, the same
// clusterIP where the escrow has one; the headless Service with clusterIP
// None), then the EtcdCluster, created with spec.paused true AND
// status.phase Running, as etcd-operator's own restore operator creates
// its clusters (restore-operator/sync.go): etcd-operator's cluster
// controller seeds a new member for an EtcdCluster whose phase is empty
// (cluster.go setup() -> create() -> prepareSeedMember()) before it ever
// looks at spec.paused, so paused alone would start an empty cluster.
// With the real etcd-operator CRD (no status subresource) the status is
// stored with the create; with a status subresource the API server drops
// it on create, and it is set right after with UpdateStatus. Its restore
// operator creates the restored cluster from this reference (unpaused).
// So an empty cluster is never started, and never reachable through the
// old nodePort with the certificates the customer's masters trust.
//
// An object that exists is never replaced unless Replace is set: one
// equal to the escrowed one is "exists (same)"; one that differs is named
// with the fields that differ and refuses the whole rebuild, before
// anything is created. The namespace itself is not created.

// Rebuild actions, per object (RebuildObject.Action).
const (
	RebuildCreate   = "create"        // missing: created (in a dry run: would be)
	RebuildSame     = "exists (same)" // exists, equal to the escrowed one: left alone
	RebuildRefused  = "exists (differs, refused)"
	RebuildReplaced = "exists (differs, replaced)" // with Replace (in a dry run: would be)
)

// PhaseRunning is the EtcdCluster phase the rebuild creates it in.
const PhaseRunning = "Running"

// DefaultRebuildCallTimeout bounds each API call of a rebuild.
const DefaultRebuildCallTimeout = 30 * time.Second

// StepRebuild names the rebuild in errors.
const StepRebuild = "rebuild objects"

// RebuildOptions configure Rebuild.
type RebuildOptions struct {
	Kube *Client
	// Cluster is the EtcdCluster to rebuild (--cluster): the escrow's
	// must be that one (see rebuildItems).
	Cluster string
	// List is the escrow's plaintext (escrow.Open).
	List *catalog.EscrowList
	// Replace updates the objects that exist and differ (else they refuse
	// the rebuild).
	Replace bool
	// DryRun reads and compares only; nothing is created or changed.
	DryRun bool
	// CallTimeout bounds each call to the API server (default
	// DefaultRebuildCallTimeout): a server that stops answering fails the
	// rebuild, naming the call, instead of hanging it.
	CallTimeout time.Duration
	Log         *slog.Logger
}

// RebuildObject is one escrowed object and what Rebuild did with it.
type RebuildObject struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Action string `json:"action"`
	// Differs are the fields of the existing object that differ from the
	// escrowed one (exists, differs).
	Differs []string `json:"differs,omitempty"`
	// Done: created or replaced (false in a dry run, and for objects left
	// alone).
	Done bool `json:"done,omitempty"`
	// Rejected is why the API server refused its server-side dry run
	// (a nodePort or clusterIP already allocated, …): nothing is created.
	Rejected string `json:"rejected,omitempty"`
}

// RebuildReport is what Rebuild did (or, in a dry run, would do).
type RebuildReport struct {
	Namespace string          `json:"namespace"`
	Cluster   string          `json:"cluster"`
	DryRun    bool            `json:"dryRun"`
	Replace   bool            `json:"replace"`
	Objects   []RebuildObject `json:"objects"`
	Duration  time.Duration   `json:"duration,omitempty"`
}

// RebuildError is a refused or failed rebuild: the cluster, the step and
// the cause.
type RebuildError struct {
	Namespace, Cluster string
	Err                error
}

func (e *RebuildError) Error() string {
	return fmt.Sprintf("rebuild of etcdcluster %s/%s failed at step %q: %v", e.Namespace, e.Cluster, StepRebuild, e.Err)
}

func (e *RebuildError) Unwrap() error { return e.Err }

// ErrRebuildDiffers is wrapped by the error of a rebuild refused because
// an existing object differs from the escrowed one (without Replace).
var ErrRebuildDiffers = errors.New("existing objects differ from the escrow (--replace replaces them)")

// ErrRebuildRejected is wrapped by the error of a rebuild the API server
// would refuse (its server-side dry run of a create or replace failed):
// nothing is created.
var ErrRebuildRejected = errors.New("the API server refuses to create (dry run; nothing was created)")

var (
	secretGVR  = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	serviceGVR = schema.GroupVersionResource{Version: "v1", Resource: "services"}
)

// rebuildOrder is the order objects are created in: secrets, Services,
// the EtcdCluster last (it names the secrets).
var rebuildOrder = map[string]int{"Secret": 0, "Service": 1, KindEtcdCluster: 2}

type rebuildItem struct {
	obj  *unstructured.Unstructured
	gvr  schema.GroupVersionResource
	live *unstructured.Unstructured
	row  *RebuildObject
}

// Rebuild recreates, in the client's namespace, the escrowed objects that
// are missing (see the comment above).
func Rebuild(ctx context.Context, o RebuildOptions) (*RebuildReport, error) {
	if o.Kube == nil || o.List == nil || o.Cluster == "" {
		return nil, errors.New("rebuild: need the kubernetes client, the cluster and the escrow")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultRebuildCallTimeout
	}
	start := time.Now()
	k := o.Kube
	parent := ctx
	// call bounds one API call; timedOut says why one ended.
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(parent, o.CallTimeout) }
	timedOut := func(cctx context.Context, err error) error {
		if parent.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%w (no answer from the API server within %v)", err, o.CallTimeout)
		}
		return ctxErr(parent, err)
	}
	if err := o.List.Validate(); err != nil {
		return nil, &RebuildError{Namespace: k.Namespace, Err: err}
	}
	items, err := rebuildItems(o.List, k.Namespace, o.Cluster)
	cluster := o.Cluster
	rep := &RebuildReport{Namespace: k.Namespace, Cluster: cluster, DryRun: o.DryRun, Replace: o.Replace, Objects: []RebuildObject{}}
	fail := func(err error) error { return &RebuildError{Namespace: k.Namespace, Cluster: cluster, Err: err} }
	if err != nil {
		return rep, fail(err)
	}
	log := o.Log.With("namespace", k.Namespace, "etcdcluster", cluster)

	// 0. No restore of the cluster in flight: etcd-operator's restore
	// operator may be deleting and recreating the EtcdCluster (a rerun
	// after a failure mid-restore). The same check as OperatorRestore's.
	cctx, cancel := call()
	err = restoreInFlight(cctx, k, cluster)
	cancel()
	if err != nil {
		return rep, fail(timedOut(cctx, err))
	}

	// 1. Read and compare every object first: a refusal creates nothing.
	var refused []string
	for _, it := range items {
		ri := k.Dynamic.Resource(it.gvr).Namespace(k.Namespace)
		cctx, cancel := call()
		live, err := ri.Get(cctx, it.obj.GetName(), metav1.GetOptions{})
		cancel()
		switch {
		case apierrors.IsNotFound(err):
			it.row.Action = RebuildCreate
		case err != nil:
			return rep, fail(timedOut(cctx, fmt.Errorf("reading %s %s: %w", it.obj.GetKind(), it.obj.GetName(), err)))
		default:
			it.live = live
			it.row.Differs = differs(it.obj, live)
			switch {
			case len(it.row.Differs) == 0:
				it.row.Action = RebuildSame
			case o.Replace:
				it.row.Action = RebuildReplaced
			default:
				it.row.Action = RebuildRefused
				refused = append(refused, fmt.Sprintf("%s %s (%s)", it.obj.GetKind(), it.obj.GetName(), strings.Join(it.row.Differs, ", ")))
			}
		}
		rep.Objects = append(rep.Objects, *it.row)
	}
	if len(refused) > 0 {
		return rep, fail(fmt.Errorf("%w: %s", ErrRebuildDiffers, strings.Join(refused, "; ")))
	}

	// 1b. The API server's own checks, with a server-side dry run of
	// every create and replace (a nodePort or clusterIP already
	// allocated, a clusterIP outside the service CIDR, a field the API
	// server rejects, a verb not granted): a refusal creates nothing,
	// and a dry run names it too.
	var rejected []string
	for i, it := range items {
		ri := k.Dynamic.Resource(it.gvr).Namespace(k.Namespace)
		what := it.obj.GetKind() + " " + it.obj.GetName()
		cctx, cancel := call()
		var err error
		switch it.row.Action {
		case RebuildCreate:
			_, err = ri.Create(cctx, it.obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				err = fmt.Errorf("creating %s: %w", what, err)
			}
		case RebuildReplaced:
			up := it.obj.DeepCopy()
			unstructured.RemoveNestedField(up.Object, "status")
			up.SetResourceVersion(it.live.GetResourceVersion())
			_, err = ri.Update(cctx, up, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				err = fmt.Errorf("replacing %s (%s): %w", what, strings.Join(it.row.Differs, ", "), err)
			}
		}
		cancel()
		if err != nil {
			if parent.Err() != nil {
				return rep, fail(ctxErr(parent, err))
			}
			err = timedOut(cctx, err)
			rep.Objects[i].Rejected = err.Error()
			rejected = append(rejected, err.Error())
		}
	}
	if len(rejected) > 0 {
		return rep, fail(fmt.Errorf("%w: %s", ErrRebuildRejected, strings.Join(rejected, "; ")))
	}
	if o.DryRun {
		rep.Duration = time.Since(start)
		return rep, nil
	}

	// 2. Create (or replace) in order.
	for i, it := range items {
		ri := k.Dynamic.Resource(it.gvr).Namespace(k.Namespace)
		what := it.obj.GetKind() + " " + it.obj.GetName()
		switch it.row.Action {
		case RebuildCreate:
			cctx, cancel := call()
			created, err := ri.Create(cctx, it.obj, metav1.CreateOptions{})
			cancel()
			if err != nil {
				return rep, fail(timedOut(cctx, fmt.Errorf("creating %s: %w", what, err)))
			}
			if it.gvr == EtcdClusterGVR {
				cctx, cancel := call()
				err := setPhaseRunning(cctx, ri, created)
				cancel()
				if err != nil {
					return rep, fail(timedOut(cctx, fmt.Errorf("%s: %w", what, err)))
				}
			}
			log.Info("created from the escrow", "object", what)
		case RebuildReplaced:
			unstructured.RemoveNestedField(it.obj.Object, "status") // a replace never sets a status
			it.obj.SetResourceVersion(it.live.GetResourceVersion())
			cctx, cancel := call()
			_, err := ri.Update(cctx, it.obj, metav1.UpdateOptions{})
			cancel()
			if err != nil {
				return rep, fail(timedOut(cctx, fmt.Errorf("replacing %s (%s): %w", what, strings.Join(it.row.Differs, ", "), err)))
			}
			log.Warn("replaced from the escrow", "object", what, "differed", strings.Join(it.row.Differs, ", "))
		default:
			continue
		}
		rep.Objects[i].Done = true
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// rebuildItems are the escrow's objects to create, in order, as they are
// created (the namespace's; the EtcdCluster paused, phase Running). An
// escrow that is not this cluster's is refused before anything is read or
// created: an item captured in another namespace (the certificates' SANs
// name the old namespace's Service names), an EtcdCluster not named
// cluster, a Secret not one the EtcdCluster names (spec.TLS.static:
// operatorSecret, member.peerSecret, member.serverSecret), a Service not
// one of <cluster>, <cluster>-client, <cluster>-client-service-np, or an
// object twice. So a forged or misfiled escrow can neither create nor
// (--replace) overwrite any other object of the namespace, such as
// cos-credentials.
func rebuildItems(l *catalog.EscrowList, ns, cluster string) ([]*rebuildItem, error) {
	var items []*rebuildItem
	var ec map[string]any
	seen := map[string]bool{}
	for _, raw := range l.Items {
		b, err := json.Marshal(raw)
		if err != nil {
			return nil, err
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("escrowed object: %w", err)
		}
		what := obj.GetKind() + " " + obj.GetName()
		if seen[what] {
			return nil, fmt.Errorf("the escrow holds %s twice: refused", what)
		}
		seen[what] = true
		if got := obj.GetNamespace(); got != "" && got != ns {
			return nil, fmt.Errorf("the escrow's %s was captured in namespace %s, not %s: refused (its certificates name the old namespace; "+
				"rebuild it in %s)", what, got, ns, got)
		}
		var gvr schema.GroupVersionResource
		switch obj.GetKind() {
		case "Secret":
			gvr = secretGVR
		case "Service":
			gvr = serviceGVR
		case KindEtcdCluster:
			if obj.GetAPIVersion() != APIVersion {
				return nil, fmt.Errorf("escrowed EtcdCluster %s has apiVersion %s, want %s", obj.GetName(), obj.GetAPIVersion(), APIVersion)
			}
			if obj.GetName() != cluster {
				return nil, fmt.Errorf("the escrow is of EtcdCluster %s, not %s: refused", obj.GetName(), cluster)
			}
			gvr = EtcdClusterGVR
			ec = raw
			if err := unstructured.SetNestedField(obj.Object, true, "spec", "paused"); err != nil {
				return nil, fmt.Errorf("escrowed EtcdCluster %s: %w", obj.GetName(), err)
			}
			// Phase Running: etcd-operator seeds no member for it (see
			// the comment at the top).
			obj.Object["status"] = map[string]any{"phase": PhaseRunning}
		default:
			return nil, fmt.Errorf("escrowed %s: not a kind the rebuild creates (Secret, Service, EtcdCluster)", what)
		}
		if obj.GetAPIVersion() != "v1" && gvr != EtcdClusterGVR {
			return nil, fmt.Errorf("escrowed %s has apiVersion %s, want v1", what, obj.GetAPIVersion())
		}
		obj.SetNamespace(ns)
		items = append(items, &rebuildItem{obj: obj, gvr: gvr, row: &RebuildObject{Kind: obj.GetKind(), Name: obj.GetName()}})
	}
	if ec == nil {
		return nil, errors.New("the escrow holds no EtcdCluster")
	}
	names := escrow.SecretNamesOf(ec)
	secrets := []string{names.Client, names.Peer, names.Server}
	var services []string
	for _, s := range EscrowServices(cluster) {
		services = append(services, s.Name)
	}
	for _, it := range items {
		switch name := it.obj.GetName(); {
		case it.gvr == secretGVR && !slices.Contains(secrets, name):
			return nil, fmt.Errorf("the escrow holds Secret %s, which EtcdCluster %s does not name (its TLS secrets: %s): refused",
				name, cluster, strings.Join(secrets, ", "))
		case it.gvr == serviceGVR && !slices.Contains(services, name):
			return nil, fmt.Errorf("the escrow holds Service %s, not one of EtcdCluster %s's (%s): refused",
				name, cluster, strings.Join(services, ", "))
		}
	}
	sort.SliceStable(items, func(i, j int) bool {
		return rebuildOrder[items[i].obj.GetKind()] < rebuildOrder[items[j].obj.GetKind()]
	})
	return items, nil
}

// restoreInFlight refuses when an EtcdRestore of cluster is in the way
// (OperatorRestore's check: leftoverFinished), before anything is created.
func restoreInFlight(ctx context.Context, k *Client, cluster string) error {
	er, err := k.Dynamic.Resource(EtcdRestoreGVR).Namespace(k.Namespace).Get(ctx, cluster, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return ctxErr(ctx, fmt.Errorf("reading etcdrestore %s: %w", cluster, err))
	}
	ec, err := k.Dynamic.Resource(EtcdClusterGVR).Namespace(k.Namespace).Get(ctx, cluster, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ec = nil
	case err != nil:
		return ctxErr(ctx, fmt.Errorf("reading etcdcluster %s: %w", cluster, err))
	}
	if why, ok := leftoverFinished(er, ec, time.Now()); !ok {
		return fmt.Errorf("a restore may be in flight: %w", leftoverError(er, why))
	}
	return nil
}

// setPhaseRunning makes sure the created EtcdCluster's status.phase is
// Running: stored with the create when the CRD has no status subresource
// (etcd-operator's own CRD), else dropped by the API server and set here
// through the status subresource.
func setPhaseRunning(ctx context.Context, ri dynamic.ResourceInterface, created *unstructured.Unstructured) error {
	if phase, _, _ := unstructured.NestedString(created.Object, "status", "phase"); phase == PhaseRunning {
		return nil
	}
	if err := unstructured.SetNestedField(created.Object, PhaseRunning, "status", "phase"); err != nil {
		return err
	}
	if _, err := ri.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting status.phase %s (else etcd-operator seeds an empty member for it; the EtcdCluster is paused, "+
			"so set it before anything unpauses it: kubectl patch etcdcluster --subresource=status): %w", PhaseRunning, err)
	}
	return nil
}

// differs names the fields of live that differ from the escrowed object:
// every field the escrow holds outside metadata (spec, data, type, …) and
// its labels must be in live with the same value (live may have more: the
// API server's defaults). An EtcdCluster's spec.paused is not compared
// (the rebuild sets it; etcd-operator clears it).
func differs(escrowed, live *unstructured.Unstructured) []string {
	want, got := normalize(escrowed.Object), normalize(live.Object)
	if escrowed.GetKind() == KindEtcdCluster {
		for _, m := range []map[string]any{want, got} {
			if spec, ok := m["spec"].(map[string]any); ok {
				delete(spec, "paused")
			}
		}
	}
	var out []string
	for _, key := range sortedKeys(want) {
		switch key {
		case "apiVersion", "kind", "status":
			continue
		case "metadata":
			wl, _ := want["metadata"].(map[string]any)
			gl, _ := got["metadata"].(map[string]any)
			subset("metadata.labels", wl["labels"], gl["labels"], &out)
			continue
		}
		subset(key, want[key], got[key], &out)
	}
	return out
}

// subset appends to out the paths under which want is not in got.
func subset(path string, want, got any, out *[]string) {
	if want == nil {
		return
	}
	wm, ok := want.(map[string]any)
	if !ok {
		if !reflect.DeepEqual(want, got) {
			*out = append(*out, path)
		}
		return
	}
	gm, ok := got.(map[string]any)
	if !ok {
		*out = append(*out, path)
		return
	}
	for _, k := range sortedKeys(wm) {
		subset(path+"."+k, wm[k], gm[k], out)
	}
}

// normalize is v through JSON with numbers kept as written, so that an
// escrowed 30001 and a served 30001 compare equal whatever their Go types.
func normalize(v map[string]any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		return map[string]any{}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		return map[string]any{}
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Table is the rebuild's objects, one row each.
func (r *RebuildReport) Table() output.Table {
	t := output.Table{Header: []string{"KIND", "NAME", "ACTION", "DIFFERS"}, Long: []string{"DIFFERS"}, Key: "NAME"}
	switch {
	case r.DryRun:
		t.Title = fmt.Sprintf("Rebuild of etcdcluster %s/%s from its escrow (dry run: nothing was created)\n", r.Namespace, r.Cluster)
	default:
		t.Title = fmt.Sprintf("Rebuild of etcdcluster %s/%s from its escrow\n", r.Namespace, r.Cluster)
	}
	for _, ob := range r.Objects {
		action := ob.Action
		if r.DryRun && (action == RebuildCreate || action == RebuildReplaced) {
			action = "would " + action
		}
		d := strings.Join(ob.Differs, ", ")
		if ob.Rejected != "" {
			d = strings.TrimPrefix(d+"; ", "; ") + "refused by the API server: " + ob.Rejected
		}
		t.Rows = append(t.Rows, []string{ob.Kind, ob.Name, action, d})
	}
	t.Notes = append(t.Notes, "The EtcdCluster is created paused (spec.paused true) with status.phase Running, so etcd-operator starts no member for it: its restore operator creates the restored cluster from it.")
	return t
}
