package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/armada/etcd-recovery/internal/etcdconn"
)

// Where a cluster's endpoints came from.
const (
	SourcePods    = "pods"    // member pods' IPs (app=etcd,etcd_cluster=NAME)
	SourceService = "service" // the NAME-client service's DNS name
)

// Cluster is one EtcdCluster and how to reach it.
type Cluster struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	Size      int64     `json:"size"`
	Version   string    `json:"version,omitempty"`
	Phase     string    `json:"phase,omitempty"`
	// OperatorSecret holds the client TLS (spec.TLS.static.operatorSecret);
	// empty when the cluster has no TLS.
	OperatorSecret string `json:"operatorSecret,omitempty"`
	// Endpoints: one per member pod with an IP, else the client service.
	Endpoints      []string `json:"endpoints"`
	EndpointSource string   `json:"endpointSource"`
}

// Ref identifies the EtcdCluster, for events and messages.
func (c Cluster) String() string { return c.Namespace + "/" + c.Name }

// TLS reports whether the cluster is reached with (mutual) TLS.
func (c Cluster) TLS() bool { return c.OperatorSecret != "" }

// NotFoundError is a requested EtcdCluster that does not exist.
type NotFoundError struct{ Namespace, Name string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("etcdcluster %s not found in namespace %s", e.Name, e.Namespace)
}

// Clusters returns the named EtcdClusters of the namespace, or every one
// when names is empty, sorted by name, each with its endpoints resolved.
// Member pods are listed once for the whole namespace.
func (k *Client) Clusters(ctx context.Context, names ...string) ([]Cluster, error) {
	var objs []unstructured.Unstructured
	ri := k.Dynamic.Resource(EtcdClusterGVR).Namespace(k.Namespace)
	if len(names) == 0 {
		list, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing etcdclusters in %s: %w", k.Namespace, ctxErr(ctx, err))
		}
		objs = list.Items
	} else {
		for _, n := range names {
			o, err := ri.Get(ctx, n, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil, &NotFoundError{Namespace: k.Namespace, Name: n}
			}
			if err != nil {
				return nil, fmt.Errorf("reading etcdcluster %s/%s: %w", k.Namespace, n, ctxErr(ctx, err))
			}
			objs = append(objs, *o)
		}
	}
	if len(objs) == 0 {
		return nil, nil
	}
	sel := labels.SelectorFromSet(labels.Set{LabelApp: "etcd"}).String()
	if len(names) == 1 {
		sel = labels.SelectorFromSet(labels.Set{LabelApp: "etcd", LabelCluster: names[0]}).String()
	}
	pods, err := k.Core.Pods(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("listing etcd member pods in %s: %w", k.Namespace, ctxErr(ctx, err))
	}
	byCluster := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		byCluster[p.Labels[LabelCluster]] = append(byCluster[p.Labels[LabelCluster]], p)
	}
	out := make([]Cluster, 0, len(objs))
	for i := range objs {
		c, err := fromObject(&objs[i])
		if err != nil {
			return nil, err
		}
		c.resolve(byCluster[c.Name])
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Cluster) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// fromObject reads the fields used here from an EtcdCluster.
func fromObject(o *unstructured.Unstructured) (Cluster, error) {
	c := Cluster{Namespace: o.GetNamespace(), Name: o.GetName(), UID: o.GetUID()}
	var err error
	field := func(path ...string) string {
		if err != nil {
			return ""
		}
		v, _, e := unstructured.NestedString(o.Object, path...)
		if e != nil {
			err = fmt.Errorf("etcdcluster %s/%s: .%s: %w", c.Namespace, c.Name, strings.Join(path, "."), e)
		}
		return v
	}
	c.Version = field("spec", "version")
	c.Phase = field("status", "phase")
	c.OperatorSecret = field("spec", "TLS", "static", "operatorSecret")
	if err != nil {
		return c, err
	}
	if n, ok, e := unstructured.NestedFieldNoCopy(o.Object, "spec", "size"); e == nil && ok {
		switch v := n.(type) {
		case int64:
			c.Size = v
		case float64:
			c.Size = int64(v)
		}
	}
	return c, nil
}

// resolve sets the endpoints: every member pod that has an IP and is not
// finished or being deleted, at its container port named "client" (else
// 2379); without such pods, the NAME-client service (in-cluster DNS).
func (c *Cluster) resolve(pods []corev1.Pod) {
	scheme := "http"
	if c.TLS() {
		scheme = "https"
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range pods {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		port := ClientPort
		for _, ct := range p.Spec.Containers {
			for _, cp := range ct.Ports {
				if cp.Name == "client" && cp.ContainerPort > 0 {
					port = int(cp.ContainerPort)
				}
			}
		}
		c.Endpoints = append(c.Endpoints, scheme+"://"+net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)))
	}
	if len(c.Endpoints) > 0 {
		c.EndpointSource = SourcePods
		return
	}
	c.EndpointSource = SourceService
	c.Endpoints = []string{fmt.Sprintf("%s://%s-client.%s.svc:%d", scheme, c.Name, c.Namespace, ClientPort)}
}

// Connect is EtcdConfig with its own private directory for the client TLS
// files; call release (always non-nil) when done with the connection.
func (k *Client) Connect(ctx context.Context, c Cluster, dialTimeout time.Duration) (cfg etcdconn.Config, release func(), err error) {
	release = func() {}
	dir, err := PrivateDir("etcd-recovery-tls-")
	if err != nil {
		return cfg, release, err
	}
	release = func() { os.RemoveAll(dir) }
	cfg, err = k.EtcdConfig(ctx, c, dir, dialTimeout)
	return cfg, release, err
}

// EtcdConfig returns the etcd connection of the cluster. With TLS, the
// operator secret's client certificate, key and CA are written into dir
// (which the caller creates private and removes), files mode 0600.
func (k *Client) EtcdConfig(ctx context.Context, c Cluster, dir string, dialTimeout time.Duration) (etcdconn.Config, error) {
	cfg := etcdconn.Config{Endpoints: c.Endpoints, DialTimeout: dialTimeout}
	if !c.TLS() {
		return cfg, cfg.Validate()
	}
	sec, err := k.Core.Secrets(k.Namespace).Get(ctx, c.OperatorSecret, metav1.GetOptions{})
	if err != nil {
		return cfg, fmt.Errorf("reading client TLS secret %s of etcdcluster %s: %w", c.OperatorSecret, c.Name, ctxErr(ctx, err))
	}
	files := map[string]*string{ClientCertKey: &cfg.Cert, ClientKeyKey: &cfg.Key, ClientCAKey: &cfg.CACert}
	for _, key := range []string{ClientCertKey, ClientKeyKey, ClientCAKey} {
		b := sec.Data[key]
		if len(b) == 0 {
			return cfg, fmt.Errorf("client TLS secret %s of etcdcluster %s has no %q", c.OperatorSecret, c.Name, key)
		}
		p := filepath.Join(dir, key)
		if err := writePrivate(p, b); err != nil {
			return cfg, err
		}
		*files[key] = p
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("client TLS secret %s of etcdcluster %s: %w", c.OperatorSecret, c.Name, err)
	}
	return cfg, nil
}

// Credentials are a credentials secret of the namespace as read through
// the API: its keys and values, for a store backend to parse exactly as it
// parses the same secret mounted as a directory (store.SecretFiles), and where
// they came from (Source). Backend-neutral: kube does not parse them.
type Credentials struct {
	Namespace, Name string
	Data            map[string][]byte
}

// Source is where the credentials came from, for logs: "secret NS/NAME".
func (c Credentials) Source() string { return "secret " + c.Namespace + "/" + c.Name }

// COSCredentials reads the COS credentials secret (COSSecretName when
// name is empty) through the API. The CLI turns it into the COS backend's
// credentials (store.Config.FallbackCredentials: the backend parses the
// files as it parses a mounted secret).
func (k *Client) COSCredentials(ctx context.Context, name string) (Credentials, error) {
	if name == "" {
		name = COSSecretName
	}
	sec, err := k.Core.Secrets(k.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Credentials{}, fmt.Errorf("reading COS credentials secret %s/%s: %w", k.Namespace, name, ctxErr(ctx, err))
	}
	return Credentials{Namespace: k.Namespace, Name: name, Data: sec.Data}, nil
}

// SecretsDirEnv names the directory for small secret files (client TLS
// keys): the pods set it to their memory-backed /tmp, so private keys never
// reach node disk even where TMPDIR points at a disk-backed scratch volume
// for staged snapshots. Unset, the system's temp dir is used.
const SecretsDirEnv = "ETCD_RECOVERY_SECRETS_DIR"

// PrivateDir makes a temp directory only we can read, for small secret
// files (client TLS), in $ETCD_RECOVERY_SECRETS_DIR, else the system's temp
// dir ($TMPDIR, else /tmp).
func PrivateDir(pattern string) (string, error) {
	return PrivateDirIn(os.Getenv(SecretsDirEnv), pattern)
}

// PrivateDirIn makes a temp directory only we can read under root (the
// system's temp dir when empty).
func PrivateDirIn(root, pattern string) (string, error) {
	d, err := os.MkdirTemp(root, pattern)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(d, 0o700); err != nil {
		os.RemoveAll(d)
		return "", err
	}
	return d, nil
}

func writePrivate(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Close())
}
