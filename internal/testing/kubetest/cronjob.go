package kubetest

import (
	"context"
	"testing"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/podrun"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// EncryptedWorld is one namespace set up for deploy/'s pods with
// encryption turned on the way docs/encryption.md says: a World (a real
// kube-apiserver with the CRDs and deploy/10-rbac.yaml applied in
// Namespace), the COS secret and deploy/20-config.yaml's ConfigMap pointing
// at a new bucket and prefix on the shared MinIO, with a new age
// recipient (ETCD_RECOVERY_ENCRYPT_TO) and ETCD_RECOVERY_REQUIRE_ENCRYPTION
// true. The identity is the test's only: no pod holds it.
type EncryptedWorld struct {
	*World
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
	w := &EncryptedWorld{World: NewWorld(tb, ns)}

	id, err := age.GenerateX25519Identity()
	if err != nil {
		tb.Fatal(err)
	}
	w.Identity, w.Recipient = id, id.Recipient().String()
	w.MinIO = testenv.SharedMinIO(tb)
	w.Bucket, w.Prefix = w.MinIO.NewBucket(tb), testenv.Prefix(tb)
	w.Secret = CreateCOSSecret(tb, w.Admin, ns, w.MinIO)
	set := COSConfig(w.MinIO, w.Bucket, w.Prefix)
	set[seal.EnvEncryptTo], set[seal.EnvRequireEncryption] = w.Recipient, "true"
	w.ConfigMap = ShippedConfigMapWith(tb, "kubetest.NewEncryptedWorld (and docs/encryption.md)", set)
	if _, err := w.Admin.CoreV1().ConfigMaps(ns).Create(ctx, w.ConfigMap, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	return w
}

// PodCluster is the world as podrun.Translate needs it: the namespace,
// its ConfigMap and secret, service-account tokens and the API server.
func (w *EncryptedWorld) PodCluster(tb testing.TB) podrun.Cluster {
	return PodCluster(tb, w.K, w.Admin, w.Namespace, w.ConfigMap, w.Secret)
}
