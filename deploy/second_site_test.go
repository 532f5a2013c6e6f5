package deploy

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/kube"
)

// The second site's pieces of the chart (deploy/second-site/).
const (
	secondSiteSecret = "etcd-recovery-second-credentials"
	copierKind       = "Deployment/etcd-recovery-replicate"
	copierSA         = "etcd-recovery-replicate"
	drExporterKind   = "Deployment/etcd-recovery-dr-exporter"
	secondSiteStore  = "s3://etcd-backups-dr?endpoint=https://s3.eu-de.example:9443&region=eu-de"
	secondSiteNS     = "kubx-etcd-16"
)

// secondSiteValues are values for namespaces with the copier on.
func secondSiteValues(namespaces ...string) map[string]any {
	v := kubetest.FleetValues(namespaces...)
	v["secondSite"] = map[string]any{"enabled": true, "store": secondSiteStore, "lockMode": "compliance"}
	return v
}

// podSpecsOf are the pod specs of objs (one namespace's), by Kind/name.
func podSpecsOf(t *testing.T, objs []*unstructured.Unstructured) map[string]*corev1.PodSpec {
	t.Helper()
	out := map[string]*corev1.PodSpec{}
	for key, raw := range kubetest.PodSpecs(objs) {
		var spec corev1.PodSpec
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(raw, &spec, true); err != nil {
			t.Fatalf("%s: pod spec: %v", key, err)
		}
		out[key] = &spec
	}
	return out
}

// secondSiteRefs lists every way spec reaches the second site's Secret: a
// volume, env from it, or any mention of its name.
func secondSiteRefs(t *testing.T, spec *corev1.PodSpec) []string {
	t.Helper()
	var refs []string
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secondSiteSecret {
			refs = append(refs, "volume "+v.Name)
		}
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) == 0 && strings.Contains(string(b), secondSiteSecret) {
		refs = append(refs, "names "+secondSiteSecret)
	}
	return refs
}

func envOf(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// TestChartSecondSite: the copier and the DR profile as the chart renders
// them for the carrier's 18 namespaces, and the RBAC around the second
// site's credential on a real kube-apiserver.
//
// With secondSite.enabled, each namespace gets exactly the plain
// manifests' objects plus the copier's ServiceAccount and Deployment; the
// copier writes to secondSite.store under the namespace's own prefix, is
// the only pod that mounts (or names) etcd-recovery-second-site, mounts no
// token and no age identity, and the NetworkPolicy lets the namespace's
// pods reach the second site's port. Without it, nothing names the second
// site. With deploy/dr/values-dr.yaml, each namespace gets only the
// store-only exporter (serve --store-only --second-site against the
// second site under its prefix, the second site's credential and nothing
// else), its Service and ServiceMonitor and the NetworkPolicy; the alerts
// are installed once without the journal's absent() rule (no journal runs
// there). Values that would copy nowhere fail the render.
//
// Then, for real: 10-rbac.yaml and the copier's objects applied, the
// second site's Secret created: the backup jobs', toolkit's, exporter's
// and copier's accounts can neither get it nor list secrets (it is
// mounted, never read through the API), and the copier's account may do
// nothing at all through the API.
func TestChartSecondSite(t *testing.T) {
	t.Parallel()
	all := kubetest.KubxNamespaces(18)
	want := append(plainObjects(t), "ConfigMap/etcd-recovery-second-site", "ServiceAccount/"+copierSA, copierKind)
	slices.Sort(want)

	t.Run("Copier", func(t *testing.T) {
		r := renderFleet(t, secondSiteValues(all...), all)
		for _, ns := range all {
			objs := r.perNS[ns]
			if got := r.kindNames(ns); !slices.Equal(got, want) {
				t.Errorf("%s: rendered %v, want %v", ns, got, want)
				continue
			}
			specs := podSpecsOf(t, objs)
			for key, spec := range specs {
				refs := secondSiteRefs(t, spec)
				if key != copierKind && len(refs) > 0 {
					t.Errorf("%s: %s reaches the second site's credential (%s): only the copier may", ns, key, strings.Join(refs, ", "))
				}
			}
			cp := specs[copierKind]
			if cp == nil {
				t.Fatalf("%s: no %s", ns, copierKind)
			}
			if refs := secondSiteRefs(t, cp); len(refs) != 1 {
				t.Errorf("%s: the copier's references to %s: %v, want its volume", ns, secondSiteSecret, refs)
			}
			if cp.ServiceAccountName != copierSA || cp.AutomountServiceAccountToken == nil || *cp.AutomountServiceAccountToken {
				t.Errorf("%s: the copier runs as %q, token mounted %v: want %s and no token (it calls no Kubernetes API)", ns, cp.ServiceAccountName, cp.AutomountServiceAccountToken, copierSA)
			}
			if refs := identityRefs(t, cp); len(refs) > 0 {
				t.Errorf("%s: the copier reaches the age identity (%v): it copies sealed bytes, never opens them", ns, refs)
			}
			c := cp.Containers[0]
			cm := find(objs, "ConfigMap", "etcd-recovery-second-site")
			u, _, _ := unstructured.NestedString(cm.Object, "data", "ETCD_RECOVERY_SECOND_STORE")
			if u != "s3://etcd-backups-dr/"+ns+"?endpoint=https://s3.eu-de.example:9443&region=eu-de" {
				t.Errorf("%s: ETCD_RECOVERY_SECOND_STORE %q: want the second site under the namespace's prefix %s/", ns, u, ns)
			}
			if m, _, _ := unstructured.NestedString(cm.Object, "data", "ETCD_RECOVERY_SECOND_LOCK_MODE"); m != "compliance" {
				t.Errorf("%s: ETCD_RECOVERY_SECOND_LOCK_MODE %q, want secondSite.lockMode's compliance", ns, m)
			}
			if !slices.ContainsFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool {
				return e.ConfigMapRef != nil && e.ConfigMapRef.Name == "etcd-recovery-second-site"
			}) {
				t.Errorf("%s: the copier does not read the ConfigMap etcd-recovery-second-site", ns)
			}
			if d, _ := envOf(c, "SECOND_COS_CREDENTIALS_DIR"); d == "" || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == d && m.ReadOnly }) {
				t.Errorf("%s: SECOND_COS_CREDENTIALS_DIR %q is not a read-only mount of the copier", ns, d)
			}
			if img := chartImage(t); c.Image != img {
				t.Errorf("%s: the copier runs %s, want the chart's %s", ns, c.Image, img)
			}
			if !slices.Contains(c.Args, "replicate") {
				t.Errorf("%s: the copier's args %v do not run replicate", ns, c.Args)
			}
			np := find(objs, "NetworkPolicy", "etcd-recovery")
			if b, _ := json.Marshal(np.Object); !strings.Contains(string(b), `"port":9443`) {
				t.Errorf("%s: the NetworkPolicy does not let the copier reach the second site's port 9443", ns)
			}
		}
		for _, ns := range []string{"kubx-etcd-01"} {
			for _, o := range renderFleet(t, kubetest.FleetValues(ns), []string{ns}).perNS[ns] {
				if b, _ := json.Marshal(o.Object); strings.Contains(string(b), secondSiteSecret) || strings.Contains(string(b), "second-site") || strings.Contains(string(b), "replicate") {
					t.Errorf("secondSite off: %s %s names the second site", o.GetKind(), o.GetName())
				}
			}
		}
	})

	t.Run("DRProfile", func(t *testing.T) {
		b, err := os.ReadFile(kubetest.DeployPath(t, "dr", "values-dr.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var dr map[string]any
		if err := yaml.Unmarshal(b, &dr); err != nil {
			t.Fatal(err)
		}
		v := kubetest.FleetValues(all...)
		for k, x := range dr {
			v[k] = x
		}
		store := dr["secondSite"].(map[string]any)["store"].(string)
		base, query, _ := strings.Cut(store, "?")
		r := renderFleet(t, v, all)
		wantDR := []string{"Deployment/etcd-recovery-dr-exporter", "NetworkPolicy/etcd-recovery", "Service/etcd-recovery-metrics",
			"ServiceAccount/etcd-recovery-dr-exporter", "ServiceMonitor/etcd-recovery"}
		for _, ns := range all {
			if got := r.kindNames(ns); !slices.Equal(got, wantDR) {
				t.Errorf("DR %s: rendered %v, want %v", ns, got, wantDR)
				continue
			}
			spec := podSpecsOf(t, r.perNS[ns])[drExporterKind]
			c := spec.Containers[0]
			if !slices.Contains(c.Args, "--store-only") || !slices.Contains(c.Args, "--second-site") || !slices.Contains(c.Args, "serve") {
				t.Errorf("DR %s: the exporter's args %v: want serve --store-only --second-site", ns, c.Args)
			}
			if u, _ := envOf(c, "ETCD_RECOVERY_STORE"); u != base+"/"+ns+"?"+query {
				t.Errorf("DR %s: ETCD_RECOVERY_STORE %q, want the second site under %s/", ns, u, ns)
			}
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Errorf("DR %s: the store-only exporter mounts a service-account token", ns)
			}
			if len(secondSiteRefs(t, spec)) != 1 || len(identityRefs(t, spec)) != 0 {
				t.Errorf("DR %s: the exporter's secrets: second site %v, identity %v; want the second site's only", ns, secondSiteRefs(t, spec), identityRefs(t, spec))
			}
			svc := find(r.perNS[ns], "Service", "etcd-recovery-metrics")
			sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
			labels, _, _ := unstructured.NestedStringMap(find(r.perNS[ns], "Deployment", "etcd-recovery-dr-exporter").Object, "spec", "template", "metadata", "labels")
			for k, x := range sel {
				if labels[k] != x {
					t.Errorf("DR %s: the metrics Service selects %v, the exporter's pods are %v", ns, sel, labels)
				}
			}
		}
		rule := find(r.once, "PrometheusRule", "etcd-recovery-alerts")
		if rule == nil {
			t.Fatal("DR: no PrometheusRule")
		}
		rb, _ := json.Marshal(rule.Object)
		if strings.Contains(string(rb), "EtcdJournalAbsent") || !strings.Contains(string(rb), "EtcdRecoverySecondSiteLagging") ||
			strings.Count(string(rb), `"alert":"EtcdRecoveryExporterAbsent"`) != len(all) {
			t.Errorf("DR: the alert rules: want the second site's, the exporter's absent() once per namespace, no EtcdJournalAbsent")
		}
		if find(r.once, "ConfigMap", "etcd-recovery-dashboard") == nil {
			t.Error("DR: no dashboard")
		}
	})

	t.Run("Refuses", func(t *testing.T) {
		for _, c := range []struct {
			name, store, want string
			dr                bool
		}{
			{"no store", "", "secondSite.store is required", false},
			{"DR without a store", "", "secondSite.store is required", true},
			{"credentials in the URL", "s3://key:secret@bucket", "store", false},
			{"not a store URL", "https://bucket", "store", false},
			{"unknown lock mode", "s3://bucket", "lockMode", false},
		} {
			v := secondSiteValues("kubx-etcd-01")
			v["secondSite"].(map[string]any)["store"] = c.store
			if c.want == "lockMode" {
				v["secondSite"].(map[string]any)["lockMode"] = "governence"
			}
			if c.dr {
				v["dr"] = map[string]any{"enabled": true}
			}
			objs, err := kubetest.RenderChartErr(t, v)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: rendered %d objects, error %v; want an error naming %q", c.name, len(objs), err, c.want)
			}
		}
	})

	t.Run("RBAC", func(t *testing.T) {
		k := testenv.StartKubeAPIServer(t)
		admin := k.Clientset(t, "")
		kubetest.CreateNamespaces(t, admin, secondSiteNS)
		a := kubetest.NewApplier(t, k)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		a.ApplyFile(t, kubetest.DeployPath(t, "10-rbac.yaml"), secondSiteNS)
		kubetest.PerClusterAccess(t, a, secondSiteNS, "etcd-x")
		for _, o := range renderFleet(t, secondSiteValues(secondSiteNS), []string{secondSiteNS}).perNS[secondSiteNS] {
			if o.GetKind() == "ServiceAccount" {
				if err := a.Apply(ctx, o, secondSiteNS, false); err != nil {
					t.Fatal(err)
				}
			}
		}
		for name, data := range map[string]map[string][]byte{
			secondSiteSecret:   {"access_key_id": []byte("dr-key"), "secret_access_key": []byte("dr-secret")},
			kube.COSSecretName: {"credentials": []byte("[default]\n")},
		} {
			if _, err := admin.CoreV1().Secrets(secondSiteNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// Every account the namespace's pods run as.
		accounts := map[string]bool{}
		for _, spec := range podSpecsOf(t, renderFleet(t, secondSiteValues(secondSiteNS), []string{secondSiteNS}).perNS[secondSiteNS]) {
			accounts[spec.ServiceAccountName] = true
		}
		for _, sa := range []string{"etcd-recovery", "etcd-recovery-toolkit", "etcd-recovery-exporter", copierSA} {
			if !accounts[sa] {
				t.Errorf("no pod runs as %s (accounts %v)", sa, accounts)
			}
		}
		for sa := range accounts {
			cs := k.Clientset(t, kubetest.SAToken(t, admin, secondSiteNS, sa))
			_, err := cs.CoreV1().Secrets(secondSiteNS).Get(ctx, secondSiteSecret, metav1.GetOptions{})
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s: get %s: %v, want forbidden", sa, secondSiteSecret, err)
			}
			_, err = cs.CoreV1().Secrets(secondSiteNS).List(ctx, metav1.ListOptions{})
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s: list secrets: %v, want forbidden", sa, err)
			}
			// The control: the primary's accounts still read what they
			// need (the token works; the denial above is RBAC's).
			if sa == "etcd-recovery" || sa == "etcd-recovery-exporter" {
				if _, err := cs.CoreV1().Secrets(secondSiteNS).Get(ctx, kube.COSSecretName, metav1.GetOptions{}); err != nil {
					t.Errorf("%s: get %s: %v", sa, kube.COSSecretName, err)
				}
			}
		}
		// The copier's account: nothing through the API.
		cp := k.Clientset(t, kubetest.SAToken(t, admin, secondSiteNS, copierSA))
		const etcdGroup = "etcd.database.coreos.com"
		for _, c := range []struct{ group, resource, verb, name string }{
			{"", "secrets", "get", kube.COSSecretName},
			{"", "secrets", "get", secondSiteSecret},
			{"", "secrets", "get", "etcd-x-client-tls"},
			{"", "pods", "list", ""},
			{"", "events", "create", ""},
			{"", "services", "get", "etcd-x-client-service-np"},
			{etcdGroup, "etcdclusters", "list", ""},
			{etcdGroup, "etcdclusters", "get", "etcd-x"},
			{etcdGroup, "etcdrestores", "create", ""},
			{"coordination.k8s.io", "leases", "create", ""},
			{"coordination.k8s.io", "leases", "update", "etcd-recovery-journal"},
		} {
			r, err := cp.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: secondSiteNS, Group: c.group, Resource: c.resource, Verb: c.verb, Name: c.name}}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("the copier's account: access review %s %s: %v", c.verb, c.resource, err)
			}
			if r.Status.Allowed {
				t.Errorf("the copier's account %s may %s %s.%s %s: it needs nothing from the API", copierSA, c.verb, c.resource, c.group, c.name)
			}
		}
	})
}

// chartImage is deploy/values.yaml's image.repository@image.digest.
func chartImage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(kubetest.DeployPath(t, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Image struct{ Repository, Digest string }
	}
	if err := yaml.Unmarshal(b, &v); err != nil || v.Image.Digest == "" {
		t.Fatalf("deploy/values.yaml: image %+v: %v", v.Image, err)
	}
	return v.Image.Repository + "@" + v.Image.Digest
}
