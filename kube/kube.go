// Package kube is the Kubernetes client of etcd-recovery: what it knows
// about the EtcdClusters (etcd-operator, etcd.database.coreos.com/v1beta2)
// of one namespace. It finds them and how to reach them (Clusters,
// Connect, EtcdConfig: client endpoints, the operator secret's client
// TLS), reads the secrets (COSCredentials, as backend-neutral
// Credentials; CheckAWSSecret), lists EtcdClusters and EtcdRestores
// (ClusterNames, RestoringClusters, RestoresOf), records Events on them,
// and runs etcd-operator's restore (OperatorRestore, restore --via
// etcd-operator, whose plaintext staged copy it deletes on every exit).
// RunAsLeader (leader.go) elects one writer on a coordination.k8s.io Lease
// of the namespace (client-go's leaderelection) and fences it: the
// journal's replicas.
// Options are checked first (Validate, internal/usage errors), all through
// the dynamic client (no generated code). The work over many clusters
// (backup --all, inspect --all, drill, orphans) is package fleet's, which
// imports this one; kube imports restore (the snapshot's selection and the
// restored cluster's verification) and internal/ plumbing, never fleet or
// backup; nothing in internal/ imports it except the test fixture
// internal/testing/kubetest.
package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/armada/etcd-recovery/internal/ctxerr"
)

// etcd-operator's API.
const (
	Group           = "etcd.database.coreos.com"
	Version         = "v1beta2"
	APIVersion      = Group + "/" + Version
	KindEtcdCluster = "EtcdCluster"
)

// GVRs of etcd-operator's resources.
var (
	EtcdClusterGVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "etcdclusters"}
	EtcdBackupGVR  = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "etcdbackups"}
	EtcdRestoreGVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "etcdrestores"}
)

// Conventions of etcd-operator and of the carrier.
const (
	// Keys of the operator (client) TLS secret, spec.TLS.static.operatorSecret.
	ClientCertKey = "etcd-client.crt"
	ClientKeyKey  = "etcd-client.key"
	ClientCAKey   = "etcd-client-ca.crt"
	// COSSecretName is the carrier's COS credentials secret in every
	// kubx-etcd-NN namespace.
	COSSecretName = "cos-credentials"
	// Labels etcd-operator puts on member pods.
	LabelApp     = "app"
	LabelCluster = "etcd_cluster"
	// ClientPort is etcd's client port in etcd-operator's pods and services.
	ClientPort = 2379
	// serviceAccountNamespace is the pod's own namespace, mounted by Kubernetes.
	serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)

// Config selects the Kubernetes API server and the namespace.
type Config struct {
	// Kubeconfig is a kubeconfig file; else $KUBECONFIG, else
	// ~/.kube/config, else the in-cluster service account.
	Kubeconfig string
	// Namespace; default the kubeconfig context's namespace, in a pod the
	// pod's own namespace.
	Namespace string
	// Rest, when set, is used instead of loading a kubeconfig (tests,
	// embedding). Namespace is then required.
	Rest *rest.Config
}

// Client talks to one namespace.
type Client struct {
	Namespace string
	// Core is the core/v1 client only (not the whole clientset: a much
	// smaller binary).
	Core    corev1client.CoreV1Interface
	Dynamic dynamic.Interface
	// Coordination is the Leases' client (RunAsLeader).
	Coordination coordinationv1client.CoordinationV1Interface
}

// New builds the clients and resolves the namespace.
func New(cfg Config) (*Client, error) {
	rc := cfg.Rest
	ns := cfg.Namespace
	if rc == nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if cfg.Kubeconfig != "" {
			rules.ExplicitPath = cfg.Kubeconfig
		}
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
		var err error
		if rc, err = cc.ClientConfig(); err != nil {
			return nil, fmt.Errorf("kubernetes: no configuration (--kubeconfig, KUBECONFIG, ~/.kube/config or in a pod): %w", err)
		}
		if ns == "" {
			if ns, _, err = cc.Namespace(); err != nil {
				return nil, fmt.Errorf("kubernetes: namespace: %w", err)
			}
		}
	}
	if ns == "" {
		ns = podNamespace()
	}
	if ns == "" {
		return nil, errors.New("kubernetes: no namespace (--namespace)")
	}
	rc = rest.CopyConfig(rc)
	if rc.UserAgent == "" {
		rc.UserAgent = "etcd-recovery"
	}
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 20, 40
	}
	core, err := corev1client.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	coord, err := coordinationv1client.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	return &Client{Namespace: ns, Core: core, Dynamic: dyn, Coordination: coord}, nil
}

// podNamespace is the namespace of the pod we run in, or "".
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	b, err := os.ReadFile(serviceAccountNamespace)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ctxErr is ctxerr.Wrap: err, or the context's end with err as its cause
// (both kept for errors.Is and errors.As).
func ctxErr(ctx context.Context, err error) error { return ctxerr.Wrap(ctx, err) }

func hostname() string {
	h, _ := os.Hostname()
	if len(h) > 128 {
		h = h[:128]
	}
	return h
}
