package kube

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/escrow"
)

// GVRs of the core objects an escrow holds.
var (
	SecretGVR  = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	ServiceGVR = schema.GroupVersionResource{Version: "v1", Resource: "services"}
)

// LastAppliedAnnotation is kubectl's copy of the applied object: never
// escrowed (it may hold a secret's data a second time).
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// EscrowServices are the names of a cluster's Services, in escrow order:
// the headless one (<name>: the members' DNS names), the client one
// (<name>-client: the ClusterIP the customer's apiserver uses) and the
// NodePort one (<name>-client-service-np: the workers' route, whose
// nodePort the customer's workers point at).
func EscrowServices(cluster string) []EscrowService {
	return []EscrowService{{cluster, false}, {cluster + "-client", true}, {cluster + "-client-service-np", true}}
}

// EscrowService is a Service an escrow holds; Required: a missing one is
// a problem.
type EscrowService struct {
	Name     string
	Required bool
}

// CaptureEscrow reads what a restore needs besides the data of cluster c
// from the API: its EtcdCluster, its three TLS secrets (the names in
// spec.TLS.static, else the carrier's <name>-{client,peer,server}-tls)
// and its Services (<name>, <name>-client, <name>-client-service-np),
// each read by name (get, never list), stripped of what the API server
// sets (status, uid, resourceVersion, managedFields, creationTimestamp,
// generation, ownerReferences) and of kubectl's last-applied annotation,
// as a v1 List (catalog.EscrowList) whose EtcdCluster carries the
// versions annotation with its apiVersion (the backup adds the etcd
// versions). problems name what is missing: a missing EtcdCluster or
// secret returns no list (there is no escrow to store); a missing client
// or NodePort Service is a problem but the list is returned without it.
// err is a failure to read (the API unreachable, access denied).
func (k *Client) CaptureEscrow(ctx context.Context, c Cluster) (*catalog.EscrowList, []string, error) {
	ns := c.Namespace
	if ns == "" {
		ns = k.Namespace
	}
	ec, err := k.Dynamic.Resource(EtcdClusterGVR).Namespace(ns).Get(ctx, c.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, []string{fmt.Sprintf("etcdcluster %s/%s not found", ns, c.Name)}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("escrow of etcdcluster %s/%s: reading it: %w", ns, c.Name, ctxErr(ctx, err))
	}
	names := escrow.SecretNamesOf(ec.Object)
	list := &catalog.EscrowList{APIVersion: "v1", Kind: "List", Metadata: map[string]any{}, Items: []map[string]any{stripped(ec)}}
	var problems []string
	for _, s := range []struct{ name, role string }{{names.Client, "client"}, {names.Peer, "peer"}, {names.Server, "server"}} {
		o, err := k.Dynamic.Resource(SecretGVR).Namespace(ns).Get(ctx, s.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			problems = append(problems, fmt.Sprintf("secret %s not found (the %s TLS of etcdcluster %s/%s)", s.name, s.role, ns, c.Name))
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("escrow of etcdcluster %s/%s: reading secret %s: %w", ns, c.Name, s.name, ctxErr(ctx, err))
		}
		list.Items = append(list.Items, stripped(o))
	}
	for _, s := range EscrowServices(c.Name) {
		o, err := k.Dynamic.Resource(ServiceGVR).Namespace(ns).Get(ctx, s.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if s.Required {
				problems = append(problems, fmt.Sprintf("service %s not found (etcdcluster %s/%s): the escrow holds no record of it", s.Name, ns, c.Name))
			}
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("escrow of etcdcluster %s/%s: reading service %s: %w", ns, c.Name, s.Name, ctxErr(ctx, err))
		}
		list.Items = append(list.Items, stripped(o))
	}
	if countKind(list, "Secret") < 3 {
		return nil, problems, nil // a missing secret: no escrow
	}
	if err := escrow.SetVersions(list, catalog.EscrowVersions{EtcdClusterAPI: ec.GetAPIVersion()}); err != nil {
		return nil, nil, fmt.Errorf("escrow of etcdcluster %s/%s: %w", ns, c.Name, err)
	}
	if err := list.Validate(); err != nil {
		return nil, nil, fmt.Errorf("escrow of etcdcluster %s/%s: %w", ns, c.Name, err)
	}
	return list, problems, nil
}

func countKind(l *catalog.EscrowList, kind string) int {
	n := 0
	for _, it := range l.Items {
		if it["kind"] == kind {
			n++
		}
	}
	return n
}

// stripped is o as `kubectl create -f` recreates it: without status and
// the fields the API server sets, and without kubectl's last-applied
// annotation.
func stripped(o *unstructured.Unstructured) map[string]any {
	obj := o.DeepCopy().Object
	delete(obj, "status")
	md, _ := obj["metadata"].(map[string]any)
	for _, f := range []string{"uid", "resourceVersion", "managedFields", "creationTimestamp", "generation", "ownerReferences",
		"selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"} {
		delete(md, f)
	}
	if ann, ok := md["annotations"].(map[string]any); ok {
		delete(ann, LastAppliedAnnotation)
		if len(ann) == 0 {
			delete(md, "annotations")
		}
	}
	return obj
}
