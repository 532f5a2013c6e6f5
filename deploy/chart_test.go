package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// monitoringNS is deploy/values.yaml's monitoring.namespace.
const monitoringNS = "monitoring"

// fleetRender is the chart rendered for namespaces, split into what is
// installed once (in the monitoring namespace) and each namespace's
// objects.
type fleetRender struct {
	once  []*unstructured.Unstructured
	perNS map[string][]*unstructured.Unstructured
}

// kindNames are the kind/name of each object rendered in ns, sorted.
func (r fleetRender) kindNames(ns string) []string {
	var out []string
	for _, o := range r.perNS[ns] {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(out)
	return out
}

func renderFleet(t *testing.T, values map[string]any, namespaces []string) fleetRender {
	t.Helper()
	r := fleetRender{perNS: map[string][]*unstructured.Unstructured{}}
	for _, o := range kubetest.RenderChart(t, values) {
		switch ns := o.GetNamespace(); {
		case ns == monitoringNS:
			r.once = append(r.once, o)
		case slices.Contains(namespaces, ns):
			r.perNS[ns] = append(r.perNS[ns], o)
		default:
			t.Errorf("%s %s rendered in namespace %q, neither %s nor one of %v", o.GetKind(), o.GetName(), ns, monitoringNS, namespaces)
		}
	}
	return r
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// scheduleMinute is the minute field of a CronJob's schedule, and the rest.
func scheduleMinute(t *testing.T, o *unstructured.Unstructured) (int, string) {
	t.Helper()
	s, _, _ := unstructured.NestedString(o.Object, "spec", "schedule")
	min, rest, _ := strings.Cut(s, " ")
	m, err := strconv.Atoi(min)
	if err != nil {
		t.Fatalf("CronJob %s/%s: schedule %q: minute not a number", o.GetNamespace(), o.GetName(), s)
	}
	return m, rest
}

// plainObjects are the (kind, name) the chart renders into each namespace:
// every object of the plain manifests (deploy/NN-*.yaml and the
// ServiceMonitors of deploy/monitoring/) but the alerts and the
// per-cluster pieces, and the NetworkPolicy that only the chart holds.
func plainObjects(t *testing.T) []string {
	t.Helper()
	var want []string
	for _, f := range kubetest.DeployFiles(t) {
		if f == kubetest.DeployPath(t, alertsFile) || strings.HasPrefix(f, kubetest.DeployPath(t, "per-cluster")+"/") {
			continue
		}
		for _, o := range kubetest.DecodeManifests(t, f) {
			want = append(want, o.GetKind()+"/"+o.GetName())
		}
	}
	want = append(want, "NetworkPolicy/etcd-recovery")
	slices.Sort(want)
	return want
}

// checkFleet: what one values file renders for namespaces. Once, in the
// monitoring namespace: the PrometheusRule of 40-alerts.yaml (its rules
// unchanged but the absent() ones, once per namespace) and the dashboard ConfigMap (grafana_dashboard: "1", the JSON
// file as it is). In each namespace: exactly the plain manifests' objects,
// its own COS prefix "<namespace>/", the image by digest; the backup
// CronJobs' start minutes all distinct, the proofs' too, and no proof
// starting in any backup's minute; the rest of each schedule as shipped.
func checkFleet(t *testing.T, values map[string]any, namespaces []string) fleetRender {
	t.Helper()
	r := renderFleet(t, values, namespaces)
	var onceKinds []string
	for _, o := range r.once {
		onceKinds = append(onceKinds, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(onceKinds)
	if want := []string{"ConfigMap/etcd-recovery-dashboard", "PrometheusRule/etcd-recovery-alerts"}; !slices.Equal(onceKinds, want) {
		t.Errorf("installed once in %s: %v, want %v", monitoringNS, onceKinds, want)
	}
	if rule := find(r.once, "PrometheusRule", "etcd-recovery-alerts"); rule != nil {
		shipped := kubetest.DecodeManifests(t, kubetest.DeployPath(t, alertsFile))[0]
		want, _ := json.Marshal(perNamespaceAbsent(t, shipped.Object["spec"].(map[string]any), namespaces))
		got, _ := json.Marshal(rule.Object["spec"])
		if !bytes.Equal(want, got) {
			t.Errorf("the rendered PrometheusRule's spec is not deploy/%s with its absent() rules once per namespace:\n%s\nwant\n%s", alertsFile, got, want)
		}
	}
	if cm := find(r.once, "ConfigMap", "etcd-recovery-dashboard"); cm != nil {
		if cm.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("dashboard ConfigMap labels %v: want grafana_dashboard: \"1\"", cm.GetLabels())
		}
		file, err := os.ReadFile(kubetest.DeployPath(t, dashboardFile))
		if err != nil {
			t.Fatal(err)
		}
		got, _, _ := unstructured.NestedString(cm.Object, "data", "etcd-recovery-fleet.json")
		if got != string(file) {
			t.Errorf("dashboard ConfigMap data is not deploy/%s as it is", dashboardFile)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("deploy/%s is not valid JSON", dashboardFile)
		}
	}

	want := plainObjects(t)
	shippedBackup := kubetest.DecodeManifests(t, kubetest.DeployPath(t, "30-cronjob.yaml"))[0]
	shippedProve := kubetest.DecodeManifests(t, kubetest.DeployPath(t, "70-prove.yaml"))[0]
	_, backupRest := scheduleMinute(t, shippedBackup)
	_, proveRest := scheduleMinute(t, shippedProve)
	prefixes := map[string]string{}
	backupMinutes, proveMinutes := map[int]string{}, map[int]string{}
	for _, ns := range namespaces {
		objs := r.perNS[ns]
		if got := r.kindNames(ns); !slices.Equal(got, want) {
			t.Errorf("%s: rendered %v, want the plain manifests' %v", ns, got, want)
			continue
		}
		cm := find(objs, "ConfigMap", "etcd-recovery-config")
		prefix, _, _ := unstructured.NestedString(cm.Object, "data", "COS_PREFIX")
		if prefix != ns+"/" {
			t.Errorf("%s: COS_PREFIX %q, want %q", ns, prefix, ns+"/")
		}
		if other, dup := prefixes[prefix]; dup {
			t.Errorf("%s and %s share COS_PREFIX %q", other, ns, prefix)
		}
		prefixes[prefix] = ns
		b, p := find(objs, "CronJob", "etcd-recovery-backup"), find(objs, "CronJob", "etcd-recovery-prove")
		bm, brest := scheduleMinute(t, b)
		pm, prest := scheduleMinute(t, p)
		if brest != backupRest || prest != proveRest {
			t.Errorf("%s: schedules %q and %q: only the minute may change (shipped ... %s, ... %s)", ns, b.Object["spec"].(map[string]any)["schedule"], p.Object["spec"].(map[string]any)["schedule"], backupRest, proveRest)
		}
		if other, dup := backupMinutes[bm]; dup {
			t.Errorf("%s and %s start their backups in the same minute %d", other, ns, bm)
		}
		backupMinutes[bm] = ns
		if other, dup := proveMinutes[pm]; dup {
			t.Errorf("%s and %s start their proofs in the same minute %d", other, ns, pm)
		}
		proveMinutes[pm] = ns
	}
	for m, ns := range proveMinutes {
		if other, ok := backupMinutes[m]; ok {
			t.Errorf("%s's proof starts in minute %d, with %s's backup", ns, m, other)
		}
	}
	return r
}

// absentSelectorRE is the start of an absent() rule's expression: the
// selector the chart gives a namespace matcher.
var absentSelectorRE = regexp.MustCompile(`^absent\(([a-zA-Z_:][a-zA-Z0-9_:]*)`)

// perNamespaceAbsent is spec (40-alerts.yaml's) as the chart renders it
// for namespaces: every absent() rule replaced, in place, by one per
// namespace, its selector matching namespace="<ns>", the label namespace:
// <ns>, and $labels.namespace in its annotations the quoted name; every
// other rule as it is.
func perNamespaceAbsent(t *testing.T, spec map[string]any, namespaces []string) map[string]any {
	t.Helper()
	spec = runtime.DeepCopyJSON(spec)
	absents := 0
	for _, g := range spec["groups"].([]any) {
		g := g.(map[string]any)
		var rules []any
		for _, r := range g["rules"].([]any) {
			r := r.(map[string]any)
			expr := strings.TrimSpace(r["expr"].(string))
			if !strings.HasPrefix(expr, "absent(") {
				rules = append(rules, r)
				continue
			}
			absents++
			for _, ns := range namespaces {
				c := runtime.DeepCopyJSON(r)
				c["expr"] = absentSelectorRE.ReplaceAllString(expr, `absent($1{namespace="`+ns+`"}`)
				c["labels"].(map[string]any)["namespace"] = ns
				for k, v := range c["annotations"].(map[string]any) {
					c["annotations"].(map[string]any)[k] = strings.ReplaceAll(v.(string), "$labels.namespace", strconv.Quote(ns))
				}
				rules = append(rules, c)
			}
		}
		g["rules"] = rules
	}
	if absents < 2 {
		t.Errorf("deploy/%s: %d absent() rules, want the exporter's and the journal's", alertsFile, absents)
	}
	return spec
}

// applyDryRun server-side applies every object with dry-run (the server
// validates, defaults and admits it, and persists nothing).
func applyDryRun(t *testing.T, a *kubetest.Applier, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, o := range objs {
		if err := a.Apply(ctx, o, o.GetNamespace(), true); err != nil {
			t.Errorf("server-side dry-run apply in %s: %v", o.GetNamespace(), err)
		}
	}
}

// TestChartFleet: one values file listing two namespaces, then the
// carrier's 18 kubx-etcd-01..18, renders as checkFleet says, and every
// rendered object (and the per-cluster pieces) is accepted by a real
// kube-apiserver with server-side dry-run, with the third-party CRDs
// installed first from deploy/testdata/crds/ (the chart brings none).
func TestChartFleet(t *testing.T) {
	t.Parallel()
	k := testenv.StartKubeAPIServer(t)
	kubetest.InstallCRDs(t, k)
	all := kubetest.KubxNamespaces(18)
	kubetest.CreateNamespaces(t, k.Clientset(t, ""), append([]string{monitoringNS}, all...)...)
	a := kubetest.NewApplier(t, k)
	// The carrier's values file (make render's default): these 18.
	b, err := os.ReadFile(kubetest.DeployPath(t, "testdata", "fleet-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var fleet map[string]any
	if err := yaml.Unmarshal(b, &fleet); err != nil {
		t.Fatalf("deploy/testdata/fleet-values.yaml: %v", err)
	}
	for _, c := range []struct {
		name       string
		values     map[string]any
		namespaces []string
		dryRun     bool
	}{
		{"2 namespaces", kubetest.FleetValues("kubx-etcd-01", "kubx-etcd-02"), []string{"kubx-etcd-01", "kubx-etcd-02"}, true},
		{"18 namespaces", kubetest.FleetValues(all...), all, true},
		// The same 18 with the file's bucket: rendered and checked, the
		// dry run of those objects is the case above.
		{"testdata/fleet-values.yaml", fleet, all, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			namespaces := c.namespaces
			r := checkFleet(t, c.values, namespaces)
			if !c.dryRun {
				return
			}
			applyDryRun(t, a, r.once)
			for _, ns := range namespaces {
				applyDryRun(t, a, r.perNS[ns])
			}
		})
	}
	vals := kubetest.FleetValues(all...)
	for _, set := range [][]string{
		{"cluster.namespace=kubx-etcd-18", "cluster.name=etcd-abc"},
		{"cluster.namespace=kubx-etcd-18", "cluster.name=etcd-abc", "cluster.update=u1"},
	} {
		applyDryRun(t, a, kubetest.RenderChart(t, vals, set...))
	}
}

// TestChartRefuses: values that would put namespaces' backups together or
// run an unpinned image fail the render, naming what is wrong: an empty
// prefix (values.schema.json), a namespace listed twice (uniqueItems lets
// two different entries through; the second would replace the first's
// objects), two namespaces sharing a prefix or one prefix inside another,
// a prefix the tool refuses (catalog.ValidatePrefix: every pod would fail
// at start), two namespaces'
// backups in one minute, a tag instead of a digest, a ConfigMap key the
// manifests do not ship, COS_PREFIX as a fleet-wide key, and a per-cluster
// render for a namespace the fleet does not list.
func TestChartRefuses(t *testing.T) {
	t.Parallel()
	ns := func(entries ...map[string]any) map[string]any {
		var l []any
		for _, e := range entries {
			l = append(l, e)
		}
		return map[string]any{"namespaces": l}
	}
	with := func(v map[string]any, key string, val any) map[string]any { v[key] = val; return v }
	for _, c := range []struct {
		name   string
		values map[string]any
		set    []string
		want   string
	}{
		{"empty prefix", ns(map[string]any{"name": "kubx-etcd-01", "prefix": ""}), nil, "prefix"},
		{"shared prefix", ns(map[string]any{"name": "kubx-etcd-01", "prefix": "fleet/"}, map[string]any{"name": "kubx-etcd-02", "prefix": "fleet"}), nil, "share the COS prefix"},
		{"namespace listed twice", ns(map[string]any{"name": "kubx-etcd-01"}, map[string]any{"name": "kubx-etcd-01", "prefix": "other/"}), nil, "kubx-etcd-01 is listed twice"},
		{"nested prefixes", ns(map[string]any{"name": "kubx-etcd-01", "prefix": "fleet/"}, map[string]any{"name": "kubx-etcd-02", "prefix": "fleet/kubx-etcd-02/"}), nil, "are nested"},
		{"nested prefixes, inner first", ns(map[string]any{"name": "kubx-etcd-01", "prefix": "fleet/a"}, map[string]any{"name": "kubx-etcd-02", "prefix": "/fleet/"}), nil, "are nested"},
		{"prefix the tool refuses", ns(map[string]any{"name": "kubx-etcd-01", "prefix": "a b//c"}), nil, "prefix"},
		{"same minute", ns(map[string]any{"name": "kubx-etcd-01", "scheduleOffset": 4}, map[string]any{"name": "kubx-etcd-02", "scheduleOffset": 4}), nil, "same minute"},
		{"offset past the hour", ns(map[string]any{"name": "kubx-etcd-01", "scheduleOffset": 27}), nil, "scheduleOffset"},
		{"tag", with(kubetest.FleetValues("kubx-etcd-01"), "image", map[string]any{"repository": "icr.io/armada/etcd-recovery", "digest": "latest"}), nil, "digest"},
		{"unknown config key", with(kubetest.FleetValues("kubx-etcd-01"), "config", map[string]any{"COS_BUCKT": "b"}), nil, "COS_BUCKT is not a key of etcd-recovery-config"},
		{"fleet-wide prefix", with(kubetest.FleetValues("kubx-etcd-01"), "config", map[string]any{"COS_PREFIX": "x/"}), nil, "COS_PREFIX"},
		{"cluster in an unknown namespace", kubetest.FleetValues("kubx-etcd-01"), []string{"cluster.namespace=kubx-etcd-09", "cluster.name=etcd-abc"}, "kubx-etcd-09 is not one of namespaces"},
		{"cluster without namespace", kubetest.FleetValues("kubx-etcd-01"), []string{"cluster.name=etcd-abc"}, "cluster.namespace is required"},
	} {
		objs, err := kubetest.RenderChartErr(t, c.values, c.set...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: rendered %d objects, error %v; want an error naming %q", c.name, len(objs), err, c.want)
		}
	}
}

// TestChartPrefixAsTheToolChecks: values.schema.json takes a namespace's
// prefix exactly when catalog.ValidatePrefix (what every pod checks at
// start) does, for prefixes either could get wrong.
func TestChartPrefixAsTheToolChecks(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		"kubx-etcd-01/", "fleet/kubx-etcd-01", "/a/b/", "a.b_c-d/e", "...", "a/.../b", ".hidden/x",
		"a b//c", "a//b", "a b", "..", "a/../b", "./a", "a/./", "/", "//", "a:b", "a/b\\c", strings.Repeat("a", 513),
	} {
		_, want := catalog.ValidatePrefix(p)
		if strings.Trim(p, "/") == "" && want == nil {
			want = errors.New("no prefix: the bucket root")
		}
		_, err := kubetest.RenderChartErr(t, map[string]any{"namespaces": []any{map[string]any{"name": "kubx-etcd-01", "prefix": p}}})
		if (err == nil) != (want == nil) {
			t.Errorf("prefix %q: the chart renders with error %v; the tool says %v", p, err, want)
		}
	}
}

// TestChartPerCluster: the per-cluster render of cluster etcd-abc is the
// plain template with every etcd-example set to etcd-abc (what the tests'
// kubetest.PerClusterAccess applies), in the namespace asked for; the
// pre-update Job is named for the cluster and the update, and backs up
// that cluster; neither carries the release's instance or managed-by
// label (Argo CD tracking the release would prune them).
func TestChartPerCluster(t *testing.T) {
	t.Parallel()
	vals := kubetest.FleetValues("kubx-etcd-01", "kubx-etcd-02")
	strip := func(o *unstructured.Unstructured) map[string]any {
		c := o.DeepCopy()
		labels := c.GetLabels()
		for k := range labels {
			if strings.HasPrefix(k, "helm.sh/") || k == "app.kubernetes.io/managed-by" || k == "app.kubernetes.io/instance" {
				delete(labels, k)
			}
		}
		c.SetLabels(labels)
		c.SetNamespace("")
		return c.Object
	}
	for file, set := range map[string][]string{
		"per-cluster/client-tls-access.yaml": {"cluster.namespace=kubx-etcd-02", "cluster.name=etcd-abc"},
		"per-cluster/update-job.yaml":        {"cluster.namespace=kubx-etcd-02", "cluster.name=etcd-abc", "cluster.update=u1"},
	} {
		plain, err := os.ReadFile(kubetest.DeployPath(t, file))
		if err != nil {
			t.Fatal(err)
		}
		want, err := kubetest.DecodeManifestBytes(bytes.ReplaceAll(plain, []byte("etcd-example"), []byte("etcd-abc")))
		if err != nil {
			t.Fatal(err)
		}
		got := kubetest.RenderChart(t, vals, set...)
		if len(got) != len(want) {
			t.Fatalf("%s: rendered %d objects, want %d", file, len(got), len(want))
		}
		for i, o := range got {
			// Applied by the automation, not the release: no label by
			// which Argo CD (instance) or Helm (managed-by) would take
			// them for the release's and prune them.
			for _, k := range []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by"} {
				if v, ok := o.GetLabels()[k]; ok {
					t.Errorf("%s: %s %s carries %s=%s: the release does not hold it", file, o.GetKind(), o.GetName(), k, v)
				}
			}
			if o.GetNamespace() != "kubx-etcd-02" {
				t.Errorf("%s: %s %s in namespace %q, want kubx-etcd-02", file, o.GetKind(), o.GetName(), o.GetNamespace())
			}
			w := want[i].Object
			if o.GetKind() == "Job" {
				if o.GetName() != "etcd-recovery-update-etcd-abc-u1" {
					t.Errorf("%s: Job %s, want etcd-recovery-update-etcd-abc-u1", file, o.GetName())
				}
				w = want[i].DeepCopy().Object
				unstructured.SetNestedField(w, o.GetName(), "metadata", "name")
				cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				wcs, _, _ := unstructured.NestedSlice(w, "spec", "template", "spec", "containers")
				wcs[0].(map[string]any)["image"] = cs[0].(map[string]any)["image"]
				_ = unstructured.SetNestedSlice(w, wcs, "spec", "template", "spec", "containers")
			}
			g, _ := json.Marshal(strip(o))
			ww, _ := json.Marshal(w)
			if !bytes.Equal(g, ww) {
				t.Errorf("%s: rendered %s %s\n%s\nwant the plain file for etcd-abc\n%s", file, o.GetKind(), o.GetName(), g, ww)
			}
		}
	}
}

// egressAllows: whether np lets its pods open TCP port to the ipBlock
// cidr (cidr "") or, with ns set, to pods of namespace ns.
func egressAllows(np *networkingv1.NetworkPolicy, port int32, cidr, ns string) bool {
	for _, r := range np.Spec.Egress {
		portOK := false
		for _, p := range r.Ports {
			if p.Port != nil && p.Port.IntValue() == int(port) && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
				portOK = true
			}
		}
		if !portOK {
			continue
		}
		for _, to := range r.To {
			if cidr != "" && to.IPBlock != nil && to.IPBlock.CIDR == cidr {
				return true
			}
			if ns != "" && to.NamespaceSelector != nil && to.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == ns {
				return true
			}
		}
	}
	return false
}

// TestChartNetworkPolicyPorts: each namespace's NetworkPolicy lets its pods
// reach every port the tool is configured to use there, over IPv4 and
// IPv6 by default: COS at its COS_ENDPOINT's port (explicit, https 443,
// http 80; per namespace or fleet-wide) and IAM's 443, the API server at
// networkPolicy.apiServerPorts (the endpoint port, not the Service's), the
// Pushgateway at ETCD_RECOVERY_PUSHGATEWAY's port in the monitoring
// namespace, and nothing to the monitoring namespace when no Pushgateway
// is set (a namespace's "" overriding the fleet's, in its ConfigMap too).
func TestChartNetworkPolicyPorts(t *testing.T) {
	t.Parallel()
	values := map[string]any{
		"namespaces": []any{
			map[string]any{"name": "kubx-etcd-01", "config": map[string]any{"COS_ENDPOINT": "http://minio.local:9000"}},
			map[string]any{"name": "kubx-etcd-02", "config": map[string]any{"COS_ENDPOINT": "s3.example"}},
			map[string]any{"name": "kubx-etcd-03", "config": map[string]any{"COS_ENDPOINT": "http://minio.local", "ETCD_RECOVERY_PUSHGATEWAY": ""}},
		},
		"config":        map[string]any{"ETCD_RECOVERY_PUSHGATEWAY": "http://pushgateway.monitoring.svc:9092"},
		"networkPolicy": map[string]any{"apiServerPorts": []any{2040}},
	}
	want := map[string]struct {
		cos int32
		pgw int32 // 0: none
	}{"kubx-etcd-01": {9000, 9092}, "kubx-etcd-02": {443, 9092}, "kubx-etcd-03": {80, 0}}
	seen := 0
	for _, o := range kubetest.RenderChart(t, values) {
		if o.GetKind() == "ConfigMap" && o.GetName() == "etcd-recovery-config" && o.GetNamespace() == "kubx-etcd-03" {
			// A namespace's "" overrides the fleet's value (as the
			// NetworkPolicy reads it).
			if v, _, _ := unstructured.NestedString(o.Object, "data", "ETCD_RECOVERY_PUSHGATEWAY"); v != "" {
				t.Errorf("kubx-etcd-03: ETCD_RECOVERY_PUSHGATEWAY %q, want the namespace's \"\"", v)
			}
		}
		if o.GetKind() != "NetworkPolicy" {
			continue
		}
		seen++
		var np networkingv1.NetworkPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &np, true); err != nil {
			t.Fatalf("NetworkPolicy in %s: %v", o.GetNamespace(), err)
		}
		w, ok := want[np.Namespace]
		if !ok {
			t.Errorf("a NetworkPolicy in %s", np.Namespace)
			continue
		}
		for _, cidr := range []string{"0.0.0.0/0", "::/0"} {
			for what, port := range map[string]int32{"COS": w.cos, "IAM": 443, "the API server": 2040} {
				if !egressAllows(&np, port, cidr, "") {
					t.Errorf("%s: NetworkPolicy does not let the pods reach %s at %s port %d", np.Namespace, what, cidr, port)
				}
			}
		}
		if egressAllows(&np, 6443, "0.0.0.0/0", "") {
			t.Errorf("%s: NetworkPolicy opens 6443, not among apiServerPorts [2040]", np.Namespace)
		}
		if w.pgw != 0 && !egressAllows(&np, w.pgw, "", monitoringNS) {
			t.Errorf("%s: NetworkPolicy does not let the pods reach the Pushgateway at port %d in %s", np.Namespace, w.pgw, monitoringNS)
		}
		if w.pgw == 0 {
			for _, p := range []int32{9091, 9092} {
				if egressAllows(&np, p, "", monitoringNS) {
					t.Errorf("%s: no Pushgateway configured, yet egress to %s port %d", np.Namespace, monitoringNS, p)
				}
			}
		}
	}
	if seen != len(want) {
		t.Errorf("%d NetworkPolicies rendered, want %d", seen, len(want))
	}
}
