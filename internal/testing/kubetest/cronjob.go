package kubetest

import (
	"context"
	"os"
	"testing"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/podrun"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/kube"
)

// EncryptedWorld is one namespace set up for deploy/'s pods with
// encryption turned on the way docs/encryption.md says: a real
// kube-apiserver with the CRDs and deploy/10-rbac.yaml applied in
// Namespace, the COS secret and deploy/20-config.yaml's ConfigMap pointing
// at a new bucket and prefix on the shared MinIO, with a new age
// recipient (ETCD_RECOVERY_ENCRYPT_TO) and ETCD_RECOVERY_REQUIRE_ENCRYPTION
// true. The identity is the test's only: no pod holds it.
type EncryptedWorld struct {
	K         *testenv.KubeAPIServer
	Admin     kubernetes.Interface
	Dyn       dynamic.Interface
	Applier   *Applier
	Namespace string
	MinIO     *testenv.MinIO
	Bucket    string
	Prefix    string
	Secret    *corev1.Secret
	ConfigMap *corev1.ConfigMap
	Identity  *age.X25519Identity
	Recipient string
}

// NewEncryptedWorld sets up the namespace ns (see EncryptedWorld).
func NewEncryptedWorld(tb testing.TB, ctx context.Context, ns string) *EncryptedWorld {
	tb.Helper()
	w := &EncryptedWorld{K: testenv.StartKubeAPIServer(tb), Namespace: ns}
	w.Admin, w.Dyn = w.K.Clientset(tb, ""), w.K.Dynamic(tb, "")
	InstallCRDs(tb, w.K)
	CreateNamespaces(tb, w.Admin, ns)
	w.Applier = NewApplier(tb, w.K)
	w.Applier.ApplyFile(tb, DeployPath(tb, "10-rbac.yaml"), ns)

	id, err := age.GenerateX25519Identity()
	if err != nil {
		tb.Fatal(err)
	}
	w.Identity, w.Recipient = id, id.Recipient().String()
	w.MinIO = testenv.SharedMinIO(tb)
	w.Bucket, w.Prefix = w.MinIO.NewBucket(tb), testenv.Prefix(tb)
	w.Secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: kube.COSSecretName},
		Data: AWSSecretData(w.MinIO.AccessKey, w.MinIO.SecretKey, w.MinIO.Region)}
	if _, err := w.Admin.CoreV1().Secrets(ns).Create(ctx, w.Secret, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(DeployPath(tb, "20-config.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	if w.ConfigMap, err = podrun.ParseConfigMap(b); err != nil {
		tb.Fatal(err)
	}
	for key, v := range map[string]string{"COS_ENDPOINT": w.MinIO.Endpoint, "COS_REGION": w.MinIO.Region, "COS_BUCKET": w.Bucket,
		"COS_PREFIX": w.Prefix, seal.EnvEncryptTo: w.Recipient, seal.EnvRequireEncryption: "true"} {
		if _, ok := w.ConfigMap.Data[key]; !ok {
			tb.Fatalf("deploy/20-config.yaml has no %s any more: update kubetest.NewEncryptedWorld (and docs/encryption.md)", key)
		}
		w.ConfigMap.Data[key] = v
	}
	if _, err := w.Admin.CoreV1().ConfigMaps(ns).Create(ctx, w.ConfigMap, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	return w
}

// PodCluster is the world as podrun.Translate needs it: the namespace,
// its ConfigMap and secret, service-account tokens and the API server.
func (w *EncryptedWorld) PodCluster(tb testing.TB) podrun.Cluster {
	return podrun.Cluster{
		Namespace:    w.Namespace,
		ConfigMaps:   map[string]*corev1.ConfigMap{w.ConfigMap.Name: w.ConfigMap},
		Secrets:      map[string]*corev1.Secret{w.Secret.Name: w.Secret},
		Token:        func(sa string) (string, error) { return SAToken(tb, w.Admin, w.Namespace, sa), nil },
		APIServerURL: w.K.URL,
		APIServerCA:  w.K.CA,
	}
}
