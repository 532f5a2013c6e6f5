package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/kube"
)

// The age identity: the secret that decrypts encrypted
// backups, its key, and where the toolkit mounts it.
const (
	identitySecret = "etcd-recovery-age-identity"
	identityKey    = "identity.txt"
	toolkitFile    = "50-toolkit.yaml"
	toolkitKind    = "Deployment/etcd-recovery-toolkit"
	// The journal's proofs (70-prove.yaml) decrypt backups and segments,
	// and the exporter (52-exporter.yaml) opens the newest encrypted
	// backup's header: the only other pods with the identity, as the
	// toolkit's account.
	proveFile    = "70-prove.yaml"
	proveKind    = "CronJob/etcd-recovery-prove"
	exporterFile = "52-exporter.yaml"
	exporterKind = "Deployment/etcd-recovery-exporter"
)

// identityPods are the pod specs allowed to reach the identity.
var identityPods = []string{toolkitFile + ": " + toolkitKind, proveFile + ": " + proveKind, exporterFile + ": " + exporterKind}

// identityNS is the namespace of the RBAC test.
const identityNS = "kubx-etcd-15"

// deployPodSpecs are the pod specs of every manifest under deploy/
// (templates and per-cluster included), keyed "file: Kind/name".
func deployPodSpecs(t *testing.T) map[string]*corev1.PodSpec {
	t.Helper()
	out := map[string]*corev1.PodSpec{}
	for _, f := range kubetest.DeployFiles(t) {
		for key, raw := range kubetest.PodSpecs(kubetest.DecodeManifests(t, f)) {
			var spec corev1.PodSpec
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(raw, &spec, true); err != nil {
				t.Fatalf("%s %s: pod spec: %v", filepath.Base(f), key, err)
			}
			out[filepath.Base(f)+": "+key] = &spec
		}
	}
	return out
}

// identityRefs lists every way spec reaches the identity: a secret volume
// (plain or projected), env from the secret, or the identity file's
// variable; and any other mention of the secret's name (an annotation, an
// argument, an init container's script).
func identityRefs(t *testing.T, spec *corev1.PodSpec) []string {
	t.Helper()
	var refs []string
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == identitySecret {
			refs = append(refs, "volume "+v.Name)
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.Secret != nil && s.Secret.Name == identitySecret {
					refs = append(refs, "projected volume "+v.Name)
				}
			}
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, ef := range c.EnvFrom {
			if ef.SecretRef != nil && ef.SecretRef.Name == identitySecret {
				refs = append(refs, "container "+c.Name+" envFrom")
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == identitySecret {
				refs = append(refs, "container "+c.Name+" env "+e.Name)
			}
			if e.Name == seal.EnvIdentityFile {
				refs = append(refs, "container "+c.Name+" env "+e.Name)
			}
		}
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) == 0 && strings.Contains(string(b), identitySecret) {
		refs = append(refs, "names "+identitySecret)
	}
	return refs
}

// TestIdentityMountedOnlyInToolkit: no CronJob or Job pod in deploy/ (the
// scheduled backups, the pre-update backup template) mounts the age
// identity, reads it into its environment or names it: the backup jobs hold
// recipients only. Exactly three pods do: the toolkit's, the exporter's
// and the journal proofs' CronJob (as the toolkit's account); each mounts it
// read-only, 0400 (the kubelet adds the fsGroup's read bit: 0440, which the
// tool accepts), optional, and points ETCD_RECOVERY_IDENTITY_FILE at the
// file in it.
func TestIdentityMountedOnlyInToolkit(t *testing.T) {
	t.Parallel()
	specs := deployPodSpecs(t)
	holders := map[string]*corev1.PodSpec{}
	var jobs int
	for key, spec := range specs {
		refs := identityRefs(t, spec)
		switch {
		case slices.Contains(identityPods, key):
			holders[key] = spec
			// The detector sees the pod's mount and variable: it would
			// see them in a backup job's spec too.
			if len(refs) != 2 {
				t.Errorf("%s: identity references %v, want its volume and %s", key, refs, seal.EnvIdentityFile)
			}
		case strings.Contains(key, ": CronJob/") || strings.Contains(key, ": Job/"):
			jobs++
			if len(refs) > 0 {
				t.Errorf("%s reaches the age identity (%s): backup jobs hold recipients only, never the identity", key, strings.Join(refs, ", "))
			}
		default:
			if len(refs) > 0 {
				t.Errorf("%s reaches the age identity (%s): only %v may", key, strings.Join(refs, ", "), identityPods)
			}
		}
	}
	if jobs < 2 {
		t.Fatalf("found %d CronJob/Job pod specs under deploy/ (%v), want the CronJob and the update Job at least", jobs, slices.Sorted(mapsKeysPS(specs)))
	}
	for _, key := range identityPods {
		spec := holders[key]
		if spec == nil {
			t.Errorf("no %s under deploy/ (have %v)", key, slices.Sorted(mapsKeysPS(specs)))
			continue
		}
		checkIdentityMount(t, key, spec)
	}
	// The proofs run as the toolkit's account, the only one the identity's
	// Role is bound to; the exporter as its own, which reads the mounted
	// file only (TestIdentitySecretRBAC: it may not get the secret).
	tk, pr, ex := holders[identityPods[0]], holders[identityPods[1]], holders[identityPods[2]]
	if tk != nil && pr != nil && tk.ServiceAccountName != pr.ServiceAccountName {
		t.Errorf("%s runs as %q, the toolkit as %q: the proofs share the toolkit's account", identityPods[1], pr.ServiceAccountName, tk.ServiceAccountName)
	}
	if tk != nil && ex != nil && (ex.ServiceAccountName == tk.ServiceAccountName || ex.ServiceAccountName == "") {
		t.Errorf("%s runs as %q: the exporter, reachable from the network, has an account of its own without restore rights", identityPods[2], ex.ServiceAccountName)
	}
}

// checkIdentityMount: spec (the toolkit's, the proofs') mounts the whole
// identity secret once, read-only, 0400, optional, with a fsGroup, and
// points ETCD_RECOVERY_IDENTITY_FILE at the file in it.
func checkIdentityMount(t *testing.T, key string, toolkit *corev1.PodSpec) {
	t.Helper()
	// One read-only mount of the whole secret, 0400, optional.
	var vol *corev1.Volume
	for i, v := range toolkit.Volumes {
		if v.Secret != nil && v.Secret.SecretName == identitySecret {
			vol = &toolkit.Volumes[i]
		}
	}
	if vol == nil {
		t.Errorf("%s does not mount the secret %s", key, identitySecret)
		return
	}
	if m := vol.Secret.DefaultMode; m == nil || *m != 0o400 {
		t.Errorf("%s: identity volume defaultMode %v, want 0400 (0440 with the fsGroup; never readable by others)", key, vol.Secret.DefaultMode)
	}
	if len(vol.Secret.Items) != 0 {
		t.Errorf("%s: identity volume items %+v: mount the secret's %s key as it is", key, vol.Secret.Items, identityKey)
	}
	if o := vol.Secret.Optional; o == nil || !*o {
		t.Errorf("%s: identity volume not optional: a namespace without encrypted backups would not get the pod at all", key)
	}
	if toolkit.SecurityContext == nil || toolkit.SecurityContext.FSGroup == nil {
		t.Errorf("%s has no fsGroup: a 0400 root-owned file is unreadable for a non-root user", key)
	}
	for _, c := range toolkit.Containers {
		var mount *corev1.VolumeMount
		for i, vm := range c.VolumeMounts {
			if vm.Name == vol.Name {
				mount = &c.VolumeMounts[i]
			}
		}
		var file string
		for _, e := range c.Env {
			if e.Name == seal.EnvIdentityFile {
				file = e.Value
			}
		}
		if mount == nil {
			t.Errorf("%s container %s does not mount volume %s", key, c.Name, vol.Name)
			continue
		}
		if !mount.ReadOnly {
			t.Errorf("%s container %s mounts %s writable", key, c.Name, mount.MountPath)
		}
		if want := path.Join(mount.MountPath, identityKey); file != want {
			t.Errorf("%s container %s: %s=%q, want %q", key, c.Name, seal.EnvIdentityFile, file, want)
		}
	}
}

// podContainer is a container of a pod spec under deploy/: where names
// it ("<file>: <kind>/<name> container <c>"), env is its variables.
type podContainer struct {
	spec  *corev1.PodSpec
	c     corev1.Container
	where string
	env   map[string]string
}

// deployContainers are the init and other containers of every pod spec
// under deploy/, the specs in key order.
func deployContainers(t *testing.T) []podContainer {
	t.Helper()
	specs := deployPodSpecs(t)
	var out []podContainer
	for _, key := range slices.Sorted(mapsKeysPS(specs)) {
		spec := specs[key]
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			out = append(out, podContainer{spec: spec, c: c, where: key + " container " + c.Name, env: env})
		}
	}
	return out
}

func mapsKeysPS(m map[string]*corev1.PodSpec) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestIdentitySecretRBAC applies deploy/10-rbac.yaml to a real
// kube-apiserver, creates the identity secret, and asks with each service
// account's own token (the ones the pod specs of deploy/ name): the backup
// jobs' account may neither get the identity nor list or watch secrets;
// the toolkit's may get exactly that secret, and list no secret either.
// Static companions: no Role in deploy/ grants secrets without
// resourceNames, and only the toolkit's account is bound to the identity.
func TestIdentitySecretRBAC(t *testing.T) {
	t.Parallel()
	// The service accounts the workloads run as, from their pod specs.
	var backupSAs []string
	toolkitSA, exporterSA := "", ""
	for key, spec := range deployPodSpecs(t) {
		switch {
		case key == toolkitFile+": "+toolkitKind:
			toolkitSA = spec.ServiceAccountName
		case key == exporterFile+": "+exporterKind:
			exporterSA = spec.ServiceAccountName
		case slices.Contains(identityPods, key):
			// The proofs' CronJob and the exporter: the toolkit's
			// account (checked in TestIdentityMountedOnlyInToolkit).
		case strings.Contains(key, ": CronJob/") || strings.Contains(key, ": Job/"):
			if !slices.Contains(backupSAs, spec.ServiceAccountName) {
				backupSAs = append(backupSAs, spec.ServiceAccountName)
			}
		}
	}
	slices.Sort(backupSAs)
	if toolkitSA == "" || len(backupSAs) == 0 || slices.Contains(backupSAs, toolkitSA) || slices.Contains(backupSAs, "") {
		t.Fatalf("service accounts: toolkit %q, backup jobs %q: want distinct, named accounts", toolkitSA, backupSAs)
	}

	// Static: secrets by name only; who is bound to the identity.
	roles := map[string]bool{} // Roles granting the identity secret
	for _, o := range kubetest.DecodeManifests(t, kubetest.DeployPath(t, "10-rbac.yaml")) {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			rm, _ := r.(map[string]any)
			res, _, _ := unstructured.NestedStringSlice(rm, "resources")
			names, _, _ := unstructured.NestedStringSlice(rm, "resourceNames")
			verbs, _, _ := unstructured.NestedStringSlice(rm, "verbs")
			if !slices.Contains(res, "secrets") && !slices.Contains(res, "*") {
				continue
			}
			if len(names) == 0 || slices.Contains(verbs, "list") || slices.Contains(verbs, "watch") || slices.Contains(verbs, "*") {
				t.Errorf("%s %s grants %v on secrets with resourceNames %v: secrets by name and get only", o.GetKind(), o.GetName(), verbs, names)
			}
			if slices.Contains(names, identitySecret) {
				roles[o.GetName()] = true
			}
		}
	}
	if o := kubetest.DecodeManifests(t, kubetest.DeployPath(t, "per-cluster", "client-tls-access.yaml")); len(o) == 0 {
		t.Fatal("deploy/per-cluster/client-tls-access.yaml is empty")
	} else {
		for _, obj := range o {
			if strings.Contains(fmt.Sprint(obj.Object), identitySecret) {
				t.Errorf("deploy/per-cluster/client-tls-access.yaml %s %s names %s", obj.GetKind(), obj.GetName(), identitySecret)
			}
		}
	}
	for _, o := range kubetest.DecodeManifests(t, kubetest.DeployPath(t, "10-rbac.yaml")) {
		if o.GetKind() != "RoleBinding" {
			continue
		}
		role, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
		if !roles[role] {
			continue
		}
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			sm, _ := s.(map[string]any)
			if sm["kind"] != "ServiceAccount" || sm["name"] != toolkitSA {
				t.Errorf("RoleBinding %s gives Role %s (the age identity) to %v %v: only the toolkit's account %s may read it", o.GetName(), role, sm["kind"], sm["name"], toolkitSA)
			}
		}
	}

	// For real.
	k := testenv.StartKubeAPIServer(t)
	admin := k.Clientset(t, "")
	kubetest.CreateNamespaces(t, admin, identityNS)
	applier := kubetest.NewApplier(t, k)
	applier.ApplyFile(t, kubetest.DeployPath(t, "10-rbac.yaml"), identityNS)
	// A cluster's grants, and its server and peer keys (the escrow).
	kubetest.PerClusterAccess(t, applier, identityNS, "etcd-x")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	secretText := "# test key, created by TestIdentitySecretRBAC\n" + id.String() + "\n"
	for name, data := range map[string]map[string][]byte{
		identitySecret:      {identityKey: []byte(secretText)},
		kube.COSSecretName:  {"credentials": []byte("[default]\n")},
		"unrelated":         {"x": []byte("y")},
		"etcd-x-server-tls": {"server.key": []byte("server key")},
		"etcd-x-peer-tls":   {"peer.key": []byte("peer key")},
	} {
		if _, err := admin.CoreV1().Secrets(identityNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	forbidden := func(who, what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %s: got %v, want forbidden", who, what, err)
		}
	}
	for _, sa := range backupSAs {
		who := "backup jobs' account " + sa
		cs := k.Clientset(t, kubetest.SAToken(t, admin, identityNS, sa))
		_, err := cs.CoreV1().Secrets(identityNS).Get(ctx, identitySecret, metav1.GetOptions{})
		forbidden(who, "get "+identitySecret, err)
		_, err = cs.CoreV1().Secrets(identityNS).List(ctx, metav1.ListOptions{})
		forbidden(who, "list secrets", err)
		_, err = cs.CoreV1().Secrets(identityNS).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + identitySecret})
		forbidden(who, "list secrets by name", err)
		w, err := cs.CoreV1().Secrets(identityNS).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + identitySecret})
		if w != nil {
			w.Stop()
		}
		forbidden(who, "watch "+identitySecret, err)
		// It still reads what a backup needs: the control that the token
		// works and the denials are RBAC's, not a broken client. The
		// escrow: the cluster's server and peer secrets, its Services by
		// name (never listed).
		for _, s := range []string{kube.COSSecretName, "etcd-x-server-tls", "etcd-x-peer-tls"} {
			if _, err := cs.CoreV1().Secrets(identityNS).Get(ctx, s, metav1.GetOptions{}); err != nil {
				t.Errorf("%s: get %s: %v", who, s, err)
			}
		}
		if _, err := cs.CoreV1().Services(identityNS).Get(ctx, "etcd-x-client-service-np", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: get a Service (the escrow): %v, want not found (allowed)", who, err)
		}
		_, err = cs.CoreV1().Services(identityNS).List(ctx, metav1.ListOptions{})
		forbidden(who, "list services", err)
		// Only its granted clusters' Services: by name, per cluster.
		_, err = cs.CoreV1().Services(identityNS).Get(ctx, "etcd-y-client-service-np", metav1.GetOptions{})
		forbidden(who, "get another cluster's Service", err)
	}
	// The server and peer keys: the backup jobs' account alone.
	for _, sa := range []string{toolkitSA, exporterSA} {
		cs := k.Clientset(t, kubetest.SAToken(t, admin, identityNS, sa))
		for _, s := range []string{"etcd-x-server-tls", "etcd-x-peer-tls"} {
			_, err := cs.CoreV1().Secrets(identityNS).Get(ctx, s, metav1.GetOptions{})
			forbidden(sa, "get "+s+" (the escrow is the backup jobs')", err)
		}
		_, err := cs.CoreV1().Services(identityNS).Get(ctx, "etcd-x-client", metav1.GetOptions{})
		forbidden(sa, "get a Service of the escrow", err)
		// The NodePort Service: the toolkit's account reads it by name
		// (restore-all's report), the exporter's does not.
		_, err = cs.CoreV1().Services(identityNS).Get(ctx, "etcd-x-client-service-np", metav1.GetOptions{})
		if sa == toolkitSA {
			if !apierrors.IsNotFound(err) {
				t.Errorf("%s: get the NodePort Service: %v, want not found (allowed)", sa, err)
			}
		} else {
			forbidden(sa, "get the NodePort Service", err)
		}
	}
	tk := k.Clientset(t, kubetest.SAToken(t, admin, identityNS, toolkitSA))
	got, err := tk.CoreV1().Secrets(identityNS).Get(ctx, identitySecret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("toolkit's account %s: get %s: %v", toolkitSA, identitySecret, err)
	}
	if string(got.Data[identityKey]) != secretText {
		t.Errorf("toolkit's account %s: %s holds something else", toolkitSA, identitySecret)
	}
	ids, err := seal.ParseIdentities(strings.NewReader(string(got.Data[identityKey])), identitySecret+"/"+identityKey)
	if err != nil || ids.Len() != 1 || ids.Recipients()[0] != id.Recipient().String() {
		t.Errorf("the identity read back does not parse as the key written: %v", err)
	}
	_, err = tk.CoreV1().Secrets(identityNS).List(ctx, metav1.ListOptions{})
	forbidden("toolkit's account "+toolkitSA, "list secrets", err)
	_, err = tk.CoreV1().Secrets(identityNS).Get(ctx, "unrelated", metav1.GetOptions{})
	forbidden("toolkit's account "+toolkitSA, "get a secret not granted", err)
	// The exporter's account reads what a refresh reads and nothing it
	// could write, restore or lead with, nor the identity through the API
	// (its pod reads the mounted file), asked with its own token.
	if exporterSA == "" || exporterSA == toolkitSA {
		t.Fatalf("the exporter's account %q: want its own", exporterSA)
	}
	ex := k.Clientset(t, kubetest.SAToken(t, admin, identityNS, exporterSA))
	_, err = ex.CoreV1().Secrets(identityNS).Get(ctx, identitySecret, metav1.GetOptions{})
	forbidden("exporter's account "+exporterSA, "get "+identitySecret, err)
	_, err = ex.CoreV1().Secrets(identityNS).List(ctx, metav1.ListOptions{})
	forbidden("exporter's account "+exporterSA, "list secrets", err)
	if _, err := ex.CoreV1().Secrets(identityNS).Get(ctx, kube.COSSecretName, metav1.GetOptions{}); err != nil {
		t.Errorf("exporter's account %s: get %s: %v", exporterSA, kube.COSSecretName, err)
	}
	can := func(group, resource, verb, name string) bool {
		t.Helper()
		r, err := ex.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: identityNS, Group: group, Resource: resource, Verb: verb, Name: name}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("exporter's account: access review %s %s: %v", verb, resource, err)
		}
		return r.Status.Allowed
	}
	const etcdGroup = "etcd.database.coreos.com"
	for _, c := range []struct {
		group, resource, verb, name string
		want                        bool
	}{
		{etcdGroup, "etcdclusters", "list", "", true},
		{etcdGroup, "etcdclusters", "get", "etcd-x", true},
		{"", "pods", "list", "", true},
		{etcdGroup, "etcdrestores", "list", "", true},
		{etcdGroup, "etcdrestores", "create", "", false},
		{etcdGroup, "etcdrestores", "delete", "etcd-x", false},
		{etcdGroup, "etcdclusters", "delete", "etcd-x", false},
		{"", "events", "create", "", false},
		{"coordination.k8s.io", "leases", "update", "etcd-recovery-journal", false},
		{"coordination.k8s.io", "leases", "create", "", false},
		{"", "pods", "delete", "x", false},
		{"", "pods", "create", "", false},
	} {
		if got := can(c.group, c.resource, c.verb, c.name); got != c.want {
			t.Errorf("exporter's account %s: %s %s.%s %s allowed %v, want %v", exporterSA, c.verb, c.resource, c.group, c.name, got, c.want)
		}
	}
	// Another namespace's identity is out of reach of both.
	kubetest.CreateNamespaces(t, admin, identityNS+"-other")
	if _, err := admin.CoreV1().Secrets(identityNS+"-other").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: identitySecret}, Data: map[string][]byte{identityKey: []byte(secretText)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = tk.CoreV1().Secrets(identityNS+"-other").Get(ctx, identitySecret, metav1.GetOptions{})
	forbidden("toolkit's account "+toolkitSA, "get another namespace's identity", err)
}
