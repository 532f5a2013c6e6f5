package deploy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/podrun"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// TestPodSecurityBaseline: every pod spec under deploy/ (the CronJob, the
// Jobs, the toolkit and the journal Deployments) runs as a numeric
// non-root user with RuntimeDefault seccomp, and every container with a
// read-only root filesystem, no privilege escalation and no capabilities.
func TestPodSecurityBaseline(t *testing.T) {
	t.Parallel()
	specs := deployPodSpecs(t)
	if len(specs) < 4 {
		t.Fatalf("only %d pod specs under deploy/", len(specs))
	}
	for key, spec := range specs {
		sc := spec.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 ||
			sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod securityContext %+v: want runAsNonRoot, a non-zero runAsUser and RuntimeDefault seccomp", key, sc)
		}
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			cs := c.SecurityContext
			if cs == nil || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem || cs.AllowPrivilegeEscalation == nil ||
				*cs.AllowPrivilegeEscalation || cs.Capabilities == nil || !slices.Contains(cs.Capabilities.Drop, "ALL") || len(cs.Capabilities.Add) > 0 {
				t.Errorf("%s container %s: securityContext %+v: want a read-only root, no privilege escalation, capabilities dropped", key, c.Name, cs)
			}
		}
	}
}

// TestJournalDeployment: deploy/60-journal.yaml runs two replicas of
// journal --all --leader-elect with the CronJob's service account, COS
// credentials, ConfigMap (recipients) and client-TLS scratch, its pod's
// name for the election's identity, never the age identity, and a grace
// period that fits the final flush and the Lease's release.
func TestJournalDeployment(t *testing.T) {
	t.Parallel()
	w, cron := kubetest.Workload(t, "60-journal.yaml"), kubetest.Workload(t, "30-cronjob.yaml")
	var dep appsv1.Deployment
	decodeOne(t, "60-journal.yaml", "Deployment", &dep)
	if w.Kind != "Deployment" || dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Fatalf("60-journal.yaml: %s with replicas %v, want a Deployment of 2 replicas", w.Kind, dep.Spec.Replicas)
	}
	spec, cspec := w.Template.Spec, cron.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	args := strings.Join(c.Args, " ")
	if !strings.HasPrefix(args, "--log-format json journal ") || !slices.Contains(c.Args, "--all") || !slices.Contains(c.Args, "--leader-elect") {
		t.Errorf("args %q: want --log-format json journal --all --leader-elect", c.Args)
	}
	if spec.ServiceAccountName != cspec.ServiceAccountName {
		t.Errorf("service account %q, want the CronJob's %q", spec.ServiceAccountName, cspec.ServiceAccountName)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env[kube.EnvPodName]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("%s: %+v, want the pod's name (downward API)", kube.EnvPodName, e)
	}
	if e := env["POD_NAMESPACE"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("POD_NAMESPACE: %+v, want the pod's namespace (the Lease's)", e)
	}
	cc := cspec.Containers[0]
	for _, name := range []string{"COS_CREDENTIALS_DIR", "ETCD_RECOVERY_SECRETS_DIR"} {
		var want corev1.EnvVar
		for _, e := range cc.Env {
			if e.Name == name {
				want = e
			}
		}
		if env[name] != want {
			t.Errorf("%s: %+v, want the CronJob's %+v", name, env[name], want)
		}
	}
	if !equalYAML(t, c.EnvFrom, cc.EnvFrom) {
		t.Errorf("envFrom %+v, want the CronJob's %+v (its ConfigMap: the recipients)", c.EnvFrom, cc.EnvFrom)
	}
	vol := func(vs []corev1.Volume, name string) *corev1.Volume {
		for i := range vs {
			if vs[i].Name == name {
				return &vs[i]
			}
		}
		return nil
	}
	for _, name := range []string{"cos-credentials", "tmp"} {
		if v, want := vol(spec.Volumes, name), vol(cspec.Volumes, name); v == nil || want == nil || !equalYAML(t, v, want) {
			t.Errorf("volume %s: %+v, want the CronJob's %+v", name, v, want)
		}
	}
	if refs := identityRefs(t, &spec); len(refs) > 0 {
		t.Errorf("the journal reaches the age identity (%v): it holds recipients only", refs)
	}
	need := journal.DefaultStopCatchUp + journal.DefaultFinalFlush + kube.DefaultRenewDeadline
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < need {
		t.Errorf("terminationGracePeriodSeconds %v: want at least the catch-up, the final flush and the release, %s", g, need)
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resources %+v: want memory requests and limits", c.Resources)
	}
}

func equalYAML(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(x) == string(y)
}

// journalPodSpec translates deploy/60-journal.yaml's pod as a kubelet
// would start it in namespace, for cl (podrun.Translate of
// kubetest.JournalWorkload).
func journalPodSpec(t *testing.T, podName string, cl podrun.Cluster) *podrun.Spec {
	t.Helper()
	spec, err := podrun.Translate(kubetest.JournalWorkload(t), "", podName, cl)
	if err != nil {
		t.Fatalf("60-journal.yaml: a kubelet could not start the pod: %v", err)
	}
	return spec
}

// selfSignedCA is a PEM certificate (ca.crt of the token volume; nothing
// is ever served with it).
func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestJournalPodStarts: what a kubelet needs to start the journal's pod
// is there, and the binary accepts what the pod runs. The pod spec is
// translated as a kubelet would (podrun.Translate, against the shipped
// ConfigMap and the namespace's cos-credentials secret): the ConfigMap's
// COS settings in its environment, the secret's files at
// COS_CREDENTIALS_DIR, the pod's name and namespace from the downward
// API, the client-TLS scratch an in-memory emptyDir, the service
// account's token. Then the tool runs with exactly those args and that
// environment (podrun.Spec.HostCommand) against an API server that is
// not there: it must get past its flags (a usage error is exit 4 at
// once), campaign for the Lease etcd-recovery-journal of its namespace
// and log, in JSON, the refused connection by name; SIGTERM then stops it
// cleanly (exit 0) while it still campaigns.
func TestJournalPodStarts(t *testing.T) {
	t.Parallel()
	const podNS, podName = "kubx-etcd-05", "etcd-recovery-journal-6b7c9d5f4-x2k9q"
	ctx := testfix.Context(t, time.Minute)
	cm := kubetest.ShippedConfigMap(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: kube.COSSecretName},
		Data: kubetest.AWSSecretData("test-access-key", "test-secret-key", "us-standard")}
	// A port nothing listens on: the API server that is not there.
	apiPort := testenv.FreePort(t)
	var tokenFor []string
	cl := podrun.Cluster{
		Namespace:  podNS,
		ConfigMaps: map[string]*corev1.ConfigMap{cm.Name: cm},
		Secrets:    map[string]*corev1.Secret{secret.Name: secret},
		Token: func(sa string) (string, error) {
			tokenFor = append(tokenFor, sa)
			return "test-token-of-" + sa, nil
		},
		APIServerURL: fmt.Sprintf("https://127.0.0.1:%d", apiPort),
		APIServerCA:  selfSignedCA(t),
	}
	spec := journalPodSpec(t, podName, cl)

	// What the kubelet gave the container.
	if !slices.Equal(tokenFor, []string{"etcd-recovery"}) {
		t.Errorf("service-account tokens asked for %v, want the CronJob's etcd-recovery's only", tokenFor)
	}
	for key, want := range cm.Data {
		if got, ok := spec.EnvValue(key); !ok || got != want {
			t.Errorf("env %s = %q (set %v), want the ConfigMap's %q", key, got, ok, want)
		}
	}
	if v, _ := spec.EnvValue(kube.EnvPodName); v != podName {
		t.Errorf("%s = %q, want the pod's name %q", kube.EnvPodName, v, podName)
	}
	if v, _ := spec.EnvValue("POD_NAMESPACE"); v != podNS {
		t.Errorf("POD_NAMESPACE = %q, want %q", v, podNS)
	}
	credDir, _ := spec.EnvValue("COS_CREDENTIALS_DIR")
	if m := spec.Mount(credDir); credDir == "" || m == nil || m.Kind != podrun.MountSecret || !m.ReadOnly || len(m.Files) != len(secret.Data) {
		t.Errorf("COS_CREDENTIALS_DIR %q: mount %+v, want the secret %s's %d files, read-only", credDir, m, secret.Name, len(secret.Data))
	} else {
		for name, data := range secret.Data {
			if !bytes.Equal(m.Files[name], data) {
				t.Errorf("%s/%s: not the secret's %s", credDir, name, name)
			}
		}
	}
	scratch, _ := spec.EnvValue("ETCD_RECOVERY_SECRETS_DIR")
	if m := spec.Mount(scratch); scratch == "" || m == nil || m.Kind != podrun.MountEmptyDirMemory || m.SizeLimit == 0 {
		t.Errorf("ETCD_RECOVERY_SECRETS_DIR %q: mount %+v, want an in-memory emptyDir with a size limit", scratch, m)
	}
	if m := spec.Mount(podrun.ServiceAccountDir); m == nil || string(m.Files["token"]) != "test-token-of-etcd-recovery" {
		t.Errorf("the service-account token volume: %+v", m)
	}
	if spec.GracePeriod < journal.DefaultStopCatchUp+journal.DefaultFinalFlush+kube.DefaultRenewDeadline {
		t.Errorf("grace period %s", spec.GracePeriod)
	}

	// The binary with those args and that environment; its --listen (the
	// pod's own :9091) on a free port of this shared host.
	if i := slices.Index(spec.Args, "--listen"); i < 0 || i+1 >= len(spec.Args) {
		t.Errorf("args %q: no --listen (the probes' and /metrics' port)", spec.Args)
	} else {
		spec.Args[i+1] = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	}
	cmd, err := spec.HostCommand(ctx, testfix.Tool(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	done := testfix.StartExit(t, cmd)
	wantErr := fmt.Sprintf("127.0.0.1:%d", apiPort)
	campaigned := func() (string, bool) {
		for _, line := range strings.Split(stderr.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			// client-go's leaderelection, through the tool's JSON log:
			// the Lease it failed to get, and why.
			e, _ := rec["err"].(string)
			if lock, _ := rec["lock"].(string); rec["level"] == "ERROR" && lock == podNS+"/"+kube.DefaultLeaseName {
				return line, strings.Contains(e, wantErr) && strings.Contains(e, "connection refused")
			}
		}
		return "", false
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, ok := campaigned(); ok {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("the journal pod's command exited %d before campaigning for its Lease (4: its args are a usage error):\n%s", code, testfix.LastLines(stderr.String(), 20))
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			line, _ := campaigned()
			t.Fatalf("no JSON log of the refused Lease %s/%s at %s within 20 s (last: %s):\n%s", podNS, kube.DefaultLeaseName, wantErr, line,
				testfix.LastLines(stderr.String(), 20))
		}
	}
	if strings.Contains(stderr.String(), "test-secret-key") || strings.Contains(stderr.String(), "test-token-of-") {
		t.Errorf("a credential in the log:\n%s", stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("SIGTERM while campaigning: exit %d, want 0:\n%s", code, testfix.LastLines(stderr.String(), 10))
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("SIGTERM while campaigning: still running after 15 s:\n%s", testfix.LastLines(stderr.String(), 10))
	}
}

// lockedBuffer is a process's stderr, read while it writes (deploy's
// tests name testfix.SyncBuffer so).
type lockedBuffer = testfix.SyncBuffer

// TestJournalAvailability: the journal Deployment is a first-class
// citizen. Its container serves /metrics, /healthz and /livez on port
// 9091 named metrics (journal --listen :9091), readiness asks /metrics
// (the process serves; never /healthz, the store's health, which during
// a COS outage would block drains through the PDB and drop the pods from
// the metrics Service) and liveness /livez there; its two replicas never
// share a node (required anti-affinity on the hostname, selecting its own
// pods) and a rollout replaces one at a time without a surge pod (which
// that anti-affinity would leave Pending on two nodes); a
// PodDisruptionBudget lets at most one of them go at a time; a Service
// selects them on that port, and a ServiceMonitor selects the Service.
func TestJournalAvailability(t *testing.T) {
	t.Parallel()
	var dep appsv1.Deployment
	decodeFirst(t, "60-journal.yaml", "Deployment", &dep)
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	if i := slices.Index(c.Args, "--listen"); i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != ":9091" {
		t.Errorf("args %q: want --listen :9091", c.Args)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9091 {
		t.Errorf("ports %+v: want one, metrics 9091", c.Ports)
	}
	for what, p := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{"readiness": {c.ReadinessProbe, "/metrics"}, "liveness": {c.LivenessProbe, "/livez"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe %+v: want httpGet %s on port metrics", what, p.probe, p.path)
		}
	}
	// A rollout never surges: the required anti-affinity leaves a surge
	// pod no node when there are as many schedulable nodes as replicas.
	if ru := dep.Spec.Strategy.RollingUpdate; dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil ||
		ru.MaxSurge == nil || ru.MaxSurge.String() != "0" || ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "1" {
		t.Errorf("strategy %+v: want RollingUpdate maxSurge 0, maxUnavailable 1 (a surge pod cannot schedule beside the required anti-affinity)", dep.Spec.Strategy)
	}
	podLabels := labels.Set(dep.Spec.Template.Labels)
	a := spec.Affinity
	if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("affinity %+v: want one required podAntiAffinity term", a)
	}
	term := a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
	sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
	if err != nil || term.TopologyKey != "kubernetes.io/hostname" || !sel.Matches(podLabels) {
		t.Errorf("anti-affinity %+v: want the hostname, selecting the journal's own pods (%v)", term, err)
	}

	var pdb policyv1.PodDisruptionBudget
	decodeOne(t, "61-journal-pdb.yaml", "PodDisruptionBudget", &pdb)
	psel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || psel.Empty() || !psel.Matches(podLabels) || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.String() != "1" || pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget %+v: want maxUnavailable 1 selecting the journal's pods (%v)", pdb.Spec, err)
	}

	var svc corev1.Service
	decodeOne(t, "56-journal-metrics-service.yaml", "Service", &svc)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("Service %s: selector %v ports %+v: want the journal's pods, target port metrics", svc.Name, svc.Spec.Selector, svc.Spec.Ports)
	}
	if strings.Contains(svc.Name, "etcd-recovery") {
		t.Errorf("Service %s: its scrape job would match the exporter alerts' job=~\".*etcd-recovery.*\"", svc.Name)
	}
	var sm serviceMonitor
	decodeOne(t, "monitoring/journal-servicemonitor.yaml", "ServiceMonitor", &sm)
	smsel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || smsel.Empty() || !smsel.Matches(labels.Set(svc.Labels)) || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" {
		t.Errorf("journal ServiceMonitor %+v: want it to select Service %s (labels %v) on port metrics (%v)", sm.Spec, svc.Name, svc.Labels, err)
	}
	// The exporter's ServiceMonitor does not scrape the journals.
	var esm serviceMonitor
	decodeOne(t, serviceMonitorFile, "ServiceMonitor", &esm)
	if esel, _ := metav1.LabelSelectorAsSelector(&esm.Spec.Selector); esel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("the exporter's ServiceMonitor also selects %s", svc.Name)
	}
}
