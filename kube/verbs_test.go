package kube_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// verbsNS holds the clusters of the RBAC-versus-code test.
const verbsNS = "kubx-etcd-04"

// rbacRule is one rule of a Role, for one service account.
type rbacRule struct {
	role, group, resource string
	verbs, names          []string
}

// apiCall is one request in the API server's audit log.
type apiCall struct {
	user, verb, group, resource, subresource, namespace, name string
	code                                                      int
}

func (c apiCall) String() string {
	r := c.resource
	if c.subresource != "" {
		r += "/" + c.subresource
	}
	if c.group != "" {
		r += "." + c.group
	}
	return fmt.Sprintf("%s %s %s/%s", c.verb, r, c.namespace, c.name)
}

// testVerbs runs every command of the tool that talks to the API, as each
// service account of deploy/10-rbac.yaml, and compares what the API
// server's audit log says they called with what the Roles grant: every
// call allowed (no 403), every granted verb called by some command of that
// service account. Then the denials the toolkit's account must get.
func testVerbs(t *testing.T, k *testenv.KubeAPIServer, a *kubetest.Applier, admin kubernetes.Interface) {
	ctx := testfix.Context(t, 6*time.Minute)
	dynAdmin := k.Dynamic(t, "")
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	prefix := testenv.Prefix(t)
	kubetest.CreateCOSSecret(t, admin, verbsNS, m)
	if _, err := admin.CoreV1().Secrets(verbsNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}, StringData: map[string]string{"x": "y"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	op := kubetest.StartRestoreOperator(t, kubetest.RestoreOperatorOptions{Namespace: verbsNS, Client: admin, Dynamic: dynAdmin, RunningDelay: time.Second})
	var clusters []string
	var etcds []kubetest.Cluster
	for i, ip := range []string{"127.0.5.30", "127.0.5.31"} {
		name := fmt.Sprintf("etcd-v%d", i+1)
		c := kubetest.AddEtcdCluster(t, admin, dynAdmin, verbsNS, name, testenv.EtcdOptions{IP: ip, Members: 1})
		kubetest.PerClusterAccess(t, a, verbsNS, name)
		testenv.PutKeys(t, c.Etcd.Client(t), "/registry/k", 50, 128)
		op.Register(c)
		clusters = append(clusters, name)
		etcds = append(etcds, c)
	}
	tool := testfix.Tool(t)
	run := func(sa, kc string, wantExit int, args ...string) string {
		t.Helper()
		stdout, stderr, code := testfix.RunTool(t, ctx, tool, []string{"KUBECONFIG=" + kc}, args...)
		if code != wantExit {
			t.Fatalf("as %s: etcd-recovery %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", sa, strings.Join(args, " "), code, wantExit, testfix.LastLines(stdout, 20), testfix.LastLines(stderr, 10))
		}
		return stdout
	}
	cosFlags := []string{"--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix}
	sas := []string{"etcd-recovery", "etcd-recovery-toolkit"}
	for _, sa := range sas {
		kc := k.Kubeconfig(t, kubetest.SAToken(t, admin, verbsNS, sa), verbsNS)
		// The CronJob's and the update Job's commands, inspect. (list and
		// prune read COS only, never the API.)
		run(sa, kc, 0, append([]string{"backup", "--all", "--prune", "--kind", "scheduled", "--dial-timeout", "2s"}, cosFlags...)...)
		run(sa, kc, 0, append([]string{"backup", "--cluster", clusters[0], "--kind", "update", "--prune", "--dial-timeout", "2s"}, cosFlags...)...)
		run(sa, kc, 0, append([]string{"inspect", "--all", "--dial-timeout", "2s"}, cosFlags...)...)
		run(sa, kc, 0, append([]string{"inspect", "--cluster", clusters[0], "--dial-timeout", "2s"}, cosFlags...)...)
		if sa == "etcd-recovery" {
			// The journal Deployment's pod (journal --all --leader-elect):
			// its Lease, the clusters above journaled from the backups
			// just taken, and a third one added now, without a backup: a
			// gap, its Event and the full backup that heals it. (The
			// toolkit's commands below see three clusters.)
			name := "etcd-v3"
			c := kubetest.AddEtcdCluster(t, admin, dynAdmin, verbsNS, name, testenv.EtcdOptions{IP: "127.0.5.32", Members: 1})
			kubetest.PerClusterAccess(t, a, verbsNS, name)
			testenv.PutKeys(t, c.Etcd.Client(t), "/registry/k", 20, 128)
			clusters = append(clusters, name)
			etcds = append(etcds, c)
			runJournalDeployment(t, ctx, k, admin, m, bucket, prefix, etcds, name)
		}
		if sa != "etcd-recovery-toolkit" {
			continue
		}
		// restore-all's plan: every cluster probed, each one's NodePort
		// read by name (the per-cluster grant), nothing changed.
		run(sa, kc, 0, append([]string{"restore-all", "--dry-run", "--dial-timeout", "2s", "--probe-timeout", "2s"}, cosFlags...)...)
		// The toolkit's restore, twice: the second finds the first one's
		// EtcdRestore (etcd-operator acts on one once) and deletes it itself
		// (delete etcdrestores: the image has no kubectl).
		restoreArgs := append([]string{"restore", "--via", "etcd-operator", "--cluster", clusters[1], "--wait-timeout", "3m",
			"--dial-timeout", "2s", "--probe-timeout", "2s"}, cosFlags...)
		run(sa, kc, 0, restoreArgs...)
		first, err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(verbsNS).Get(ctx, clusters[1], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec1 := op.WaitUID(t, first.GetUID(), time.Minute)
		if rec1.Err != nil {
			t.Fatalf("restore operator: %v", rec1.Err)
		}
		// A dry run says it would delete it (a server-side dry-run delete)
		// and changes nothing.
		out := run(sa, kc, 0, append(restoreArgs, "--dry-run")...)
		if want := "Would delete: EtcdRestore " + verbsNS + "/" + clusters[1] + " (uid " + string(first.GetUID()) + ","; !strings.Contains(out, want) ||
			!strings.Contains(out, kube.AnnotationClusterUID+": "+string(first.GetAnnotations()[kube.AnnotationClusterUID])) {
			t.Fatalf("dry run with a finished EtcdRestore left: want %q and its annotations in:\n%s", want, out)
		}
		if cur, err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(verbsNS).Get(ctx, clusters[1], metav1.GetOptions{}); err != nil || cur.GetUID() != first.GetUID() {
			t.Fatalf("the dry run deleted the EtcdRestore: %v", err)
		}
		out = run(sa, kc, 0, restoreArgs...)
		if want := "delete: EtcdRestore " + verbsNS + "/" + clusters[1] + " (uid " + string(first.GetUID()) + ","; !strings.Contains(out, want) {
			t.Fatalf("second restore: want %q in:\n%s", want, out)
		}
		second, err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(verbsNS).Get(ctx, clusters[1], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if second.GetUID() == first.GetUID() || second.GetAnnotations()[kube.AnnotationClusterUID] != string(rec1.NewUID) {
			t.Fatalf("second restore: EtcdRestore uid %s (first %s), references EtcdCluster uid %s, want the first restore's cluster %s",
				second.GetUID(), first.GetUID(), second.GetAnnotations()[kube.AnnotationClusterUID], rec1.NewUID)
		}
		if rec2 := op.WaitUID(t, second.GetUID(), time.Minute); rec2.Err != nil || rec2.OldUID != rec1.NewUID {
			t.Fatalf("restore operator, second restore: %v (reference uid %s, want %s)", rec2.Err, rec2.OldUID, rec1.NewUID)
		}
	}

	// What the Roles grant each service account (the per-cluster Role of
	// each cluster included), and what the audit log says they called.
	granted := grantedRules(t, clusters)
	calls := auditCalls(t, k, func(c apiCall) bool {
		return c.namespace == verbsNS || strings.HasPrefix(c.user, "system:serviceaccount:"+verbsNS+":")
	},
		func(calls []apiCall) bool {
			// The second restore's create, after the deletes of the dry run
			// and of that restore, is in the log.
			var dels []int
			for i, c := range calls {
				if c.verb == "delete" && c.resource == "etcdrestores" {
					dels = append(dels, i)
				}
			}
			return len(dels) >= 2 && slices.ContainsFunc(calls[dels[len(dels)-1]:], func(c apiCall) bool {
				return c.verb == "create" && c.resource == "etcdrestores" && c.code == 201
			})
		})
	table := map[string]map[string]int{} // call -> sa -> count
	used := map[string]bool{}            // sa|role|resource|verb|name
	escrowDenied := 0                    // the toolkit's backups refused the escrow's peer secrets
	for _, c := range calls {
		sa, ok := strings.CutPrefix(c.user, "system:serviceaccount:"+verbsNS+":")
		if !ok || !slices.Contains(sas, sa) {
			continue
		}
		if sa == "etcd-recovery-toolkit" && c.code == 403 && c.verb == "get" && c.resource == "secrets" && strings.HasSuffix(c.name, "-peer-tls") {
			// The escrow is the backup jobs' (per-cluster grant of the
			// server and peer secrets to etcd-recovery alone): a backup
			// the toolkit takes is refused the first of them and records
			// its escrow as missing.
			escrowDenied++
			continue
		}
		key := c.verb + " " + c.resource
		if c.subresource != "" {
			key += "/" + c.subresource
		}
		if c.group != "" {
			key += "." + c.group
		}
		var rule *rbacRule
		for i, r := range granted[sa] {
			if r.group == c.group && r.resource == c.resource && c.subresource == "" && slices.Contains(r.verbs, c.verb) &&
				(len(r.names) == 0 || slices.Contains(r.names, c.name)) {
				rule = &granted[sa][i]
				break
			}
		}
		if rule != nil && len(rule.names) > 0 {
			key += " " + c.name
		}
		if table[key] == nil {
			table[key] = map[string]int{}
		}
		table[key][sa]++
		if c.code == 403 {
			t.Errorf("%s was refused %s (403): the Roles lack what the code calls", sa, c)
		}
		if rule == nil {
			t.Errorf("%s called %s (status %d), which no rule of 10-rbac.yaml or per-cluster/ grants", sa, c, c.code)
			continue
		}
		used[strings.Join([]string{sa, rule.role, rule.resource, c.verb, c.name}, "|")] = true
		if len(rule.names) == 0 {
			used[strings.Join([]string{sa, rule.role, rule.resource, c.verb, ""}, "|")] = true
		}
	}
	for _, sa := range sas {
		for _, r := range granted[sa] {
			if r.role == "etcd-recovery-identity" {
				// The age identity: the one grant no command calls. The
				// toolkit reads it as a volume (the kubelet mounts it);
				// the Role states who may read it through the API, and
				// deploy/identity_test.go proves the toolkit's account is
				// the only one (the backup jobs' token is forbidden).
				continue
			}
			names := r.names
			if len(names) == 0 {
				names = []string{""}
			}
			for _, v := range r.verbs {
				for _, n := range names {
					if !used[strings.Join([]string{sa, r.role, r.resource, v, n}, "|")] {
						t.Errorf("Role %s grants %s %s %s to %s, but no command it runs calls it: grant only what the code calls", r.role, v, r.resource, n, sa)
					}
				}
			}
		}
	}
	if escrowDenied == 0 {
		t.Errorf("the toolkit's backups were never refused a peer-TLS secret: the escrow's secrets are the backup jobs' account's alone")
	}
	var keys []string
	for key := range table {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%-60s %14s %22s\n", "CALL (audit log)", "etcd-recovery", "etcd-recovery-toolkit")
	for _, key := range keys {
		fmt.Fprintf(&b, "%-60s %14d %22d\n", key, table[key]["etcd-recovery"], table[key]["etcd-recovery-toolkit"])
	}
	t.Logf("API calls of the tool's commands by service account:\n%s", b.String())

	// Denials for the toolkit's service account.
	tk := kubetest.SAToken(t, admin, verbsNS, "etcd-recovery-toolkit")
	cs := k.Clientset(t, tk)
	dyn := k.Dynamic(t, tk)
	dry := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	forbidden := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("toolkit: %s: got %v, want forbidden", what, err)
		}
	}
	_, err := cs.CoreV1().Secrets(verbsNS).Get(ctx, "unrelated", metav1.GetOptions{})
	forbidden("get a secret not in a Role", err)
	_, err = cs.CoreV1().Secrets(verbsNS).List(ctx, metav1.ListOptions{})
	forbidden("list secrets", err)
	_, err = cs.CoreV1().Secrets(verbsNS).Get(ctx, clusters[0]+"-server-tls", metav1.GetOptions{})
	forbidden("get a server-tls secret", err)
	_, err = cs.CoreV1().Secrets(otherNS).Get(ctx, kube.COSSecretName, metav1.GetOptions{})
	forbidden("get cos-credentials in another namespace", err)
	forbidden("delete an etcdcluster", dyn.Resource(kube.EtcdClusterGVR).Namespace(verbsNS).Delete(ctx, clusters[0], dry))
	_, err = dyn.Resource(kube.EtcdClusterGVR).Namespace(verbsNS).Update(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kube.APIVersion, "kind": kube.KindEtcdCluster, "metadata": map[string]any{"name": clusters[0]}}}, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	forbidden("update an etcdcluster", err)
	_, err = cs.CoreV1().Pods(verbsNS).Patch(ctx, clusters[0]+"-0000", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	forbidden("patch a pod", err)
	forbidden("delete a pod", cs.CoreV1().Pods(verbsNS).Delete(ctx, clusters[0]+"-0000", dry))
	_, err = cs.CoreV1().Pods(verbsNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	forbidden("create a pod (exec a shell elsewhere)", err)
	_, err = cs.CoreV1().Pods(verbsNS).Get(ctx, clusters[0]+"-0000", metav1.GetOptions{})
	forbidden("get a pod (only list is used)", err)
	_, err = dyn.Resource(kube.EtcdBackupGVR).Namespace(verbsNS).List(ctx, metav1.ListOptions{})
	forbidden("list etcdbackups", err)
	_, err = dyn.Resource(kube.EtcdRestoreGVR).Namespace(otherNS).List(ctx, metav1.ListOptions{})
	forbidden("list etcdrestores in another namespace", err)
	_, err = dyn.Resource(kube.EtcdRestoreGVR).Namespace(otherNS).Create(ctx, kubetest.EtcdRestoreObj(clusters[0]), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	forbidden("create an etcdrestore in another namespace", err)
	_, err = cs.CoreV1().Services(verbsNS).List(ctx, metav1.ListOptions{})
	forbidden("list services (never read)", err)
}

// grantedRules are the rules deploy/10-rbac.yaml and
// deploy/per-cluster/client-tls-access.yaml (for each cluster) give each
// service account, through their RoleBindings.
func grantedRules(t *testing.T, clusters []string) map[string][]rbacRule {
	t.Helper()
	objs := kubetest.DecodeManifests(t, kubetest.DeployPath(t, "10-rbac.yaml"))
	tmpl, err := os.ReadFile(kubetest.DeployPath(t, "per-cluster", "client-tls-access.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range clusters {
		more, err := kubetest.DecodeManifestBytes(bytes.ReplaceAll(tmpl, []byte("etcd-example"), []byte(c)))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, more...)
	}
	roles := map[string][]rbacRule{}
	for _, o := range objs {
		if o.GetKind() != "Role" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			rm := r.(map[string]any)
			strs := func(f string) []string {
				var out []string
				l, _ := rm[f].([]any)
				for _, v := range l {
					out = append(out, v.(string))
				}
				return out
			}
			for _, g := range strs("apiGroups") {
				for _, res := range strs("resources") {
					roles[o.GetName()] = append(roles[o.GetName()], rbacRule{role: o.GetName(), group: g, resource: res, verbs: strs("verbs"), names: strs("resourceNames")})
				}
			}
		}
	}
	out := map[string][]rbacRule{}
	for _, o := range objs {
		if o.GetKind() != "RoleBinding" {
			continue
		}
		role, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			sm := s.(map[string]any)
			if sm["kind"] == "ServiceAccount" {
				out[sm["name"].(string)] = append(out[sm["name"].(string)], roles[role]...)
			}
		}
	}
	return out
}

// auditCalls reads the API server's audit log until done(calls) holds (the
// log is written as requests complete), keeping the resource requests keep
// selects.
func auditCalls(t *testing.T, k *testenv.KubeAPIServer, keep func(apiCall) bool, done func([]apiCall) bool) []apiCall {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, err := os.Open(k.AuditLog)
		if err != nil {
			t.Fatalf("audit log: %v", err)
		}
		var calls []apiCall
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var ev struct {
				Stage string `json:"stage"`
				Verb  string `json:"verb"`
				User  struct {
					Username string `json:"username"`
				} `json:"user"`
				ObjectRef *struct {
					Resource, APIGroup, Namespace, Name, Subresource string
				} `json:"objectRef"`
				ResponseStatus struct {
					Code int `json:"code"`
				} `json:"responseStatus"`
			}
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("audit log line: %v", err)
			}
			if ev.Stage != "ResponseComplete" || ev.ObjectRef == nil || ev.ObjectRef.Resource == "" {
				continue // discovery and other non-resource requests
			}
			c := apiCall{user: ev.User.Username, verb: ev.Verb, group: ev.ObjectRef.APIGroup, resource: ev.ObjectRef.Resource,
				subresource: ev.ObjectRef.Subresource, namespace: ev.ObjectRef.Namespace, name: ev.ObjectRef.Name, code: ev.ResponseStatus.Code}
			if keep(c) {
				calls = append(calls, c)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatalf("audit log: %v", err)
		}
		if done(calls) {
			return calls
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit log %s: the calls waited for are not there (%d calls kept)", k.AuditLog, len(calls))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
