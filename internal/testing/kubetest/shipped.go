package kubetest

import (
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/internal/testing/podrun"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// Workload is the single workload (CronJob, Job or Deployment) of the
// manifest deploy/elem... (podrun.LoadWorkload).
func Workload(tb testing.TB, elem ...string) *podrun.Workload {
	tb.Helper()
	w, err := podrun.LoadWorkload(DeployPath(tb, elem...))
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// JournalWorkload is deploy/60-journal.yaml's Deployment as a kubelet
// gets its pod: the template's affinity is dropped, after checking it is
// the only scheduling field and only keeps the replicas on different
// nodes (a required anti-affinity on the hostname). It is the
// scheduler's, never the kubelet's, and podrun.Translate refuses what it
// does not translate.
func JournalWorkload(tb testing.TB) *podrun.Workload {
	tb.Helper()
	w := Workload(tb, "60-journal.yaml")
	if a := w.Template.Spec.Affinity; a != nil {
		if a.NodeAffinity != nil || a.PodAffinity != nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 ||
			len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
			a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "kubernetes.io/hostname" {
			tb.Fatalf("60-journal.yaml: affinity %+v: want only a required podAntiAffinity on the hostname (the replicas on different nodes)", a)
		}
		w.Template.Spec.Affinity = nil
	}
	return w
}

// ShippedConfigMap is deploy/20-config.yaml's ConfigMap, read afresh: the
// caller may change it.
func ShippedConfigMap(tb testing.TB) *corev1.ConfigMap {
	tb.Helper()
	b, err := os.ReadFile(DeployPath(tb, "20-config.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	cm, err := podrun.ParseConfigMap(b)
	if err != nil {
		tb.Fatal(err)
	}
	return cm
}

// ShippedConfig is the data of deploy/20-config.yaml's ConfigMap.
func ShippedConfig(tb testing.TB) map[string]string {
	tb.Helper()
	return ShippedConfigMap(tb).Data
}

// ShippedConfigMapWith is ShippedConfigMap with the values of set put
// into its data. Each key of set must be shipped: a test sets what the
// pods read, and a key renamed in deploy/ fails the test, telling to
// update the code named by update.
func ShippedConfigMapWith(tb testing.TB, update string, set map[string]string) *corev1.ConfigMap {
	tb.Helper()
	cm := ShippedConfigMap(tb)
	for key, v := range set {
		if _, ok := cm.Data[key]; !ok {
			tb.Fatalf("deploy/20-config.yaml has no %s any more: update %s", key, update)
		}
		cm.Data[key] = v
	}
	return cm
}

// COSConfig is the ConfigMap's COS settings pointing at bucket and prefix
// on m (for ShippedConfigMapWith).
func COSConfig(m *testenv.MinIO, bucket, prefix string) map[string]string {
	return map[string]string{"COS_ENDPOINT": m.Endpoint, "COS_REGION": m.Region, "COS_BUCKET": bucket, "COS_PREFIX": prefix}
}

// PodCluster is namespace ns of k as podrun.Translate needs it: the
// ConfigMap cm, the secrets, the service accounts' tokens (TokenRequests
// by admin, as the kubelet asks) and the API server.
func PodCluster(tb testing.TB, k *testenv.KubeAPIServer, admin kubernetes.Interface, ns string, cm *corev1.ConfigMap, secrets ...*corev1.Secret) podrun.Cluster {
	cl := podrun.Cluster{
		Namespace:    ns,
		ConfigMaps:   map[string]*corev1.ConfigMap{cm.Name: cm},
		Secrets:      map[string]*corev1.Secret{},
		Token:        func(sa string) (string, error) { return SAToken(tb, admin, ns, sa), nil },
		APIServerURL: k.URL,
		APIServerCA:  k.CA,
	}
	for _, s := range secrets {
		cl.Secrets[s.Name] = s
	}
	return cl
}
