package deploy

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

const serviceMonitorFile = "monitoring/servicemonitor.yaml"

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// the manifest sets.
type serviceMonitor struct {
	Spec struct {
		JobLabel          string                `json:"jobLabel"`
		Selector          metav1.LabelSelector  `json:"selector"`
		NamespaceSelector *struct{ Any bool }   `json:"namespaceSelector"`
		Endpoints         []serviceMonitorScrap `json:"endpoints"`
	} `json:"spec"`
}

type serviceMonitorScrap struct {
	Port          string `json:"port"`
	Path          string `json:"path"`
	Scheme        string `json:"scheme"`
	Interval      string `json:"interval"`
	ScrapeTimeout string `json:"scrapeTimeout"`
}

// decodeOne decodes the one object of deploy/<file> into out.
func decodeOne(tb testing.TB, file, kind string, out any) {
	tb.Helper()
	objs := kubetest.DecodeManifests(tb, kubetest.DeployPath(tb, file))
	if len(objs) != 1 || objs[0].GetKind() != kind {
		tb.Fatalf("deploy/%s: want one %s", file, kind)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, out); err != nil {
		tb.Fatalf("deploy/%s: %v", file, err)
	}
}

// TestServiceMonitorScrapesTheExporter: deploy/monitoring/servicemonitor.yaml
// selects the Service of 55-metrics-service.yaml by its labels, names its
// port, which leads to the exporter container's port that serve --listen
// binds; the scrape job it makes (the Service's name) is one the exporter
// alerts' job matchers select; the scrape timeout fits in the interval.
func TestServiceMonitorScrapesTheExporter(t *testing.T) {
	t.Parallel()
	var sm serviceMonitor
	decodeOne(t, serviceMonitorFile, "ServiceMonitor", &sm)
	var svc corev1.Service
	decodeOne(t, "55-metrics-service.yaml", "Service", &svc)
	var dep appsv1.Deployment
	decodeOne(t, "52-exporter.yaml", "Deployment", &dep)

	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || sel.Empty() {
		t.Fatalf("ServiceMonitor selector %v: %v (an empty one selects every Service)", sm.Spec.Selector, err)
	}
	if !sel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %s does not select Service %s (labels %v)", sel, svc.Name, svc.Labels)
	}
	if sm.Spec.NamespaceSelector != nil {
		t.Errorf("ServiceMonitor namespaceSelector set: it must scrape its own namespace's exporter only")
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("Service %s selector %v does not select the exporter pods (labels %v)", svc.Name, svc.Spec.Selector, dep.Spec.Template.Labels)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	listen := ""
	for i, a := range c.Args {
		if a == "--listen" && i+1 < len(c.Args) {
			listen = c.Args[i+1]
		}
	}
	if len(sm.Spec.Endpoints) == 0 {
		t.Fatal("ServiceMonitor has no endpoints")
	}
	for _, ep := range sm.Spec.Endpoints {
		i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port })
		if i < 0 {
			t.Errorf("endpoint port %q: Service %s has no port of that name", ep.Port, svc.Name)
			continue
		}
		target := svc.Spec.Ports[i].TargetPort.String()
		j := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool {
			return p.Name == target || strconv.Itoa(int(p.ContainerPort)) == target
		})
		if j < 0 {
			t.Errorf("Service port %s targets %q: container %s has no such port", ep.Port, target, c.Name)
			continue
		}
		if want := ":" + strconv.Itoa(int(c.Ports[j].ContainerPort)); !strings.HasSuffix(listen, want) {
			t.Errorf("container port %d, but serve --listen %q", c.Ports[j].ContainerPort, listen)
		}
		if ep.Path != "/metrics" || ep.Scheme != "http" {
			t.Errorf("endpoint %s://…%s, want http and /metrics (serve's)", ep.Scheme, ep.Path)
		}
		iv, err1 := parsePromDuration(ep.Interval)
		to, err2 := parsePromDuration(ep.ScrapeTimeout)
		if err1 != nil || err2 != nil || to > iv || iv > 5*time.Minute {
			t.Errorf("endpoint interval %q, scrapeTimeout %q: want the timeout within the interval and the interval at most the exporter's 5 min (%v %v)", ep.Interval, ep.ScrapeTimeout, err1, err2)
		}
	}

	// The job label: the Service's name (no jobLabel), which every
	// up{job=~"..."} of the alert rules must select.
	job := svc.Name
	if sm.Spec.JobLabel != "" {
		job = svc.Labels[sm.Spec.JobLabel]
	}
	// The journal's job: its Service's name (its ServiceMonitor has no
	// jobLabel either). Every selector picks exactly one of the two jobs,
	// the journal's in the journal process's group, the exporter's
	// elsewhere: an exporter alert that also counted the journal's
	// targets (or the reverse) would hide one behind the other.
	var jsvc corev1.Service
	decodeOne(t, "56-journal-metrics-service.yaml", "Service", &jsvc)
	var jsm serviceMonitor
	decodeOne(t, "monitoring/journal-servicemonitor.yaml", "ServiceMonitor", &jsm)
	journalJob := jsvc.Name
	if jsm.Spec.JobLabel != "" {
		journalJob = jsvc.Labels[jsm.Spec.JobLabel]
	}
	_, groups := alertRules(t)
	re := regexp.MustCompile(`job=~?"([^"]*)"`)
	n, nj := 0, 0
	for _, g := range groups {
		want, other := job, journalJob
		if strings.Contains(g.Name, "journal-process") {
			want, other = journalJob, job
		}
		for _, r := range g.Rules {
			for _, m := range re.FindAllStringSubmatch(r.Expr, -1) {
				sel := regexp.MustCompile("^(?:" + m[1] + ")$")
				if want == journalJob {
					nj++
				} else {
					n++
				}
				if !sel.MatchString(want) || sel.MatchString(other) {
					t.Errorf("alert %s (group %s) selects job %q: want the job %q only, not %q", r.Alert, g.Name, m[1], want, other)
				}
			}
		}
	}
	if n == 0 {
		t.Errorf("no alert selects the exporter's job: EtcdRecoveryExporterDown went missing?")
	}
	if nj == 0 {
		t.Errorf("no alert selects the journal's job %q: EtcdJournalLeadersNotOne went missing?", journalJob)
	}
}

// TestServiceMonitorApply: the ServiceMonitor applies to a real
// kube-apiserver with the operator's CRD (deploy/testdata/crds/
// servicemonitor.yaml), reads back unchanged, and the CRD's schema is
// enforced (a scheme other than http/https is refused).
func TestServiceMonitorApply(t *testing.T) {
	t.Parallel()
	k := testenv.StartKubeAPIServer(t)
	kubetest.InstallCRDs(t, k)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "kubx-etcd-02"
	kubetest.CreateNamespaces(t, k.Clientset(t, ""), ns)
	a := kubetest.NewApplier(t, k)
	obj := kubetest.DecodeManifests(t, kubetest.DeployPath(t, serviceMonitorFile))[0]
	if err := a.Apply(ctx, obj, ns, false); err != nil {
		t.Fatalf("apply deploy/%s: %v", serviceMonitorFile, err)
	}
	gvr := schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}
	got, err := k.Dynamic(t, "").Resource(gvr).Namespace(ns).Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := yaml.Marshal(obj.Object["spec"])
	have, _ := yaml.Marshal(got.Object["spec"])
	if !bytes.Equal(want, have) {
		t.Errorf("ServiceMonitor read back differs from deploy/%s:\n--- want\n%s\n--- got\n%s", serviceMonitorFile, want, have)
	}
	bad := obj.DeepCopy()
	bad.SetName("etcd-recovery-bad")
	bad.Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["scheme"] = "ftp"
	if err := a.Apply(ctx, bad, ns, true); err == nil || !strings.Contains(err.Error(), "scheme") {
		t.Errorf("scheme ftp: apply error %v, want one naming scheme (the CRD's schema not enforced?)", err)
	}
}
