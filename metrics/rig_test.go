package metrics_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/metrics"
)

func TestMain(m *testing.M) { testfix.Main(m) }

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newExporter is metrics.New(o); an error fails the test.
func newExporter(t testing.TB, o metrics.Options) *metrics.Exporter {
	t.Helper()
	e, err := metrics.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// refreshed is newExporter(o) after one Refresh, which must succeed.
func refreshed(t testing.TB, ctx context.Context, o metrics.Options) *metrics.Exporter {
	t.Helper()
	e := newExporter(t, o)
	if err := e.Refresh(ctx); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	return e
}

// scrape GETs /metrics of the exporter's handler over a real loopback
// HTTP server and parses it with Prometheus' own text parser.
func scrape(t testing.TB, e *metrics.Exporter) (map[string]*dto.MetricFamily, []byte) {
	t.Helper()
	srv := httptest.NewServer(e.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %v %s\n%s", err, resp.Status, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return mfs, body
}

// msSeconds is a time recorded with millisecond precision (a segment's
// or a gap record's receive time) as the exporter exports it, in
// seconds. Two float64 roads to the same millisecond (ms/1e3 and
// ns/1e9) can differ in their last bit, which failed a test in 1 of
// many runs depending on the clock: compare with sameSeconds.
func msSeconds(t time.Time) float64 { return float64(t.UnixMilli()) / 1e3 }

// sameSeconds: two exported times (or counts) equal to a microsecond,
// far below any precision a time is recorded with.
func sameSeconds(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

// value is the value of the series name{labels...} (pairs), ok false when
// absent.
func value(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		if len(have) != len(labels)/2 {
			continue
		}
		for i := 0; i < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// series counts the series of name for one cluster.
func series(mfs map[string]*dto.MetricFamily, name, cluster string) int {
	n := 0
	if mf := mfs[name]; mf != nil {
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "cluster" && l.GetValue() == cluster {
					n++
				}
			}
		}
	}
	return n
}

// sharedEtcdClusters describes n EtcdClusters to Kubernetes, each backed
// by one of the real etcd clusters etcds (round robin): the EtcdCluster,
// one member pod with the etcd's status IP and client port, and the
// operator secret (one per etcd, shared by its EtcdClusters). It is how
// 100 EtcdClusters cost a few etcd processes.
func sharedEtcdClusters(t testing.TB, cs kubernetes.Interface, dyn dynamic.Interface, namespace string, etcds []*testenv.EtcdCluster, names []string) {
	t.Helper()
	ctx := context.Background()
	for i, c := range etcds {
		data := map[string][]byte{}
		for key, f := range map[string]string{kube.ClientCertKey: c.PKI.ClientCertFile, kube.ClientKeyKey: c.PKI.ClientKeyFile, kube.ClientCAKey: c.PKI.CAFile} {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			data[key] = b
		}
		if _, err := cs.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("shared-%d-client-tls", i)}, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range names {
		c := etcds[i%len(etcds)]
		ep := c.Endpoints()[0]
		hostport := strings.TrimPrefix(ep, "https://")
		ip, port, _ := strings.Cut(hostport, ":")
		var p int32
		if _, err := fmt.Sscan(port, &p); err != nil {
			t.Fatalf("endpoint %s: %v", ep, err)
		}
		ec := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": kube.APIVersion, "kind": kube.KindEtcdCluster,
			"metadata": map[string]any{"name": name, "namespace": namespace},
			"spec": map[string]any{"size": int64(1), "version": "3.5.35",
				"TLS": map[string]any{"static": map[string]any{"operatorSecret": fmt.Sprintf("shared-%d-client-tls", i%len(etcds))}}},
		}}
		if _, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(namespace).Create(ctx, ec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-0000", Labels: map[string]string{kube.LabelApp: "etcd", kube.LabelCluster: name}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "etcd", Image: "quay.io/coreos/etcd:v3.5.35",
				Ports: []corev1.ContainerPort{{Name: "client", ContainerPort: p}}}}},
		}
		created, err := cs.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
		if _, err := cs.CoreV1().Pods(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// copyBackup writes a committed backup of cluster under the layout, as
// backup writes it, from a real backup's manifest (src): the started
// marker, a snapshot object of the recorded stored size (the exporter
// never reads it) and the manifest naming cluster and the new name.
func copyBackup(t testing.TB, st store.Store, layout catalog.Layout, src *catalog.Manifest, cluster string, at time.Time, kind catalog.Kind) *catalog.Manifest {
	t.Helper()
	ctx := context.Background()
	m := *src
	m.ClusterID, m.Name, m.Kind = cluster, catalog.NewBackupName(at, kind), kind
	m.V2 = nil
	m.RevisionBefore = src.RevisionBefore + int64(at.Unix()%1000)
	put := func(obj string, r io.Reader) {
		if _, err := st.Put(ctx, layout.Key(cluster, m.Name, obj), r); err != nil {
			t.Fatal(err)
		}
	}
	put(catalog.StartedObject, strings.NewReader("started"))
	put(m.Snapshot.Object, io.LimitReader(zeros{}, m.Snapshot.StoredSize))
	b, err := catalog.MarshalManifest(&m)
	if err != nil {
		t.Fatal(err)
	}
	put(catalog.ManifestObject, bytes.NewReader(b))
	return &m
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// toolEnv is the environment of the tool without the COS, etcd and
// Kubernetes settings of the test's own environment.
func toolEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COS_") && !strings.HasPrefix(kv, "ETCDCTL_") && !strings.HasPrefix(kv, "KUBECONFIG=") &&
			!strings.HasPrefix(kv, "POD_NAMESPACE=") && !strings.HasPrefix(kv, "ETCD_RECOVERY_") {
			env = append(env, kv)
		}
	}
	return env
}

// credsDir is a cos-credentials directory (HMAC key files) for m.
func credsDir(t testing.TB, m *testenv.MinIO) string {
	t.Helper()
	dir := t.TempDir()
	for name, v := range map[string]string{"access_key_id": m.AccessKey, "secret_access_key": m.SecretKey} {
		if err := os.WriteFile(dir+"/"+name, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
