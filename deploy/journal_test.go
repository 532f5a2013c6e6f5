package deploy

import (
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/podrun"
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
	w, err := podrun.LoadWorkload(kubetest.DeployPath(t, "60-journal.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cron, err := podrun.LoadWorkload(kubetest.DeployPath(t, "30-cronjob.yaml"))
	if err != nil {
		t.Fatal(err)
	}
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
	need := journal.DefaultFinalFlush + kube.DefaultRenewDeadline
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < need {
		t.Errorf("terminationGracePeriodSeconds %v: want at least the final flush and the release, %s", g, need)
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
