package deploy

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/podrun"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/restore"
)

// cronMinutes is the minute field of a cron schedule as the minutes it
// fires at (a number, a comma list, or "*": every minute).
func cronMinutes(tb testing.TB, schedule string) []int {
	tb.Helper()
	f := strings.Fields(schedule)
	if len(f) != 5 {
		tb.Fatalf("schedule %q: want 5 fields", schedule)
	}
	if f[0] == "*" {
		out := make([]int, 60)
		for i := range out {
			out[i] = i
		}
		return out
	}
	var out []int
	for _, s := range strings.Split(f[0], ",") {
		m, err := strconv.Atoi(s)
		if err != nil || m < 0 || m > 59 {
			tb.Fatalf("schedule %q: minute %q: want numbers 0-59 (a step or range is not read here)", schedule, s)
		}
		out = append(out, m)
	}
	return out
}

// TestProveCronJob: deploy/70-prove.yaml is a CronJob etcd-recovery-prove
// that runs `journal prove --all` hourly, at a minute the backup CronJob
// never starts at, one run at a time (Forbid), each ending before the next
// starts (activeDeadlineSeconds under an hour); as the toolkit's service
// account (the identity's mount is checked by
// TestIdentityMountedOnlyInToolkit), with the toolkit's memory and CPU
// limits, the COS ConfigMap and credentials, and TMPDIR on a disk
// emptyDir (its limit: TestScratchLimitMatchesSizeLimit) that holds the
// two databases of one proof of the largest quota; proving only its own
// namespace's EtcdClusters (--namespace $(POD_NAMESPACE), the downward
// API's namespace, with the service account's token to list them); and
// the chart renders it in each namespace.
func TestProveCronJob(t *testing.T) {
	t.Parallel()
	var prove, backupCron batchv1.CronJob
	decodeOne(t, proveFile, "CronJob", &prove)
	decodeOne(t, "30-cronjob.yaml", "CronJob", &backupCron)
	var toolkit struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	decodeOne(t, toolkitFile, "Deployment", &toolkit)
	if prove.Name != "etcd-recovery-prove" {
		t.Errorf("%s: CronJob %q, want etcd-recovery-prove", proveFile, prove.Name)
	}
	s := prove.Spec
	f := strings.Fields(s.Schedule)
	if len(f) != 5 || f[1] != "*" || f[2] != "*" || f[3] != "*" || f[4] != "*" {
		t.Errorf("schedule %q: want hourly (M * * * *)", s.Schedule)
	}
	pm, bm := cronMinutes(t, s.Schedule), cronMinutes(t, backupCron.Spec.Schedule)
	if len(pm) != 1 {
		t.Errorf("schedule %q: want one minute of the hour", s.Schedule)
	}
	for _, m := range pm {
		if slices.Contains(bm, m) {
			t.Errorf("schedule %q starts at minute %d, as the backup CronJob's %q", s.Schedule, m, backupCron.Spec.Schedule)
		}
	}
	if s.TimeZone == nil || *s.TimeZone != "Etc/UTC" {
		t.Errorf("timeZone %v, want Etc/UTC as the backup CronJob's", s.TimeZone)
	}
	if s.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("concurrencyPolicy %q, want Forbid", s.ConcurrencyPolicy)
	}
	if d := s.JobTemplate.Spec.ActiveDeadlineSeconds; d == nil || *d <= 0 || *d >= 3600 {
		t.Errorf("activeDeadlineSeconds %v: want a bound under the hour between runs", d)
	}
	ps := s.JobTemplate.Spec.Template.Spec
	tk := toolkit.Spec.Template.Spec
	if ps.ServiceAccountName == "" || ps.ServiceAccountName != tk.ServiceAccountName {
		t.Errorf("service account %q, want the toolkit's %q", ps.ServiceAccountName, tk.ServiceAccountName)
	}
	if ps.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never", ps.RestartPolicy)
	}
	if len(ps.Containers) != 1 || len(tk.Containers) != 1 {
		t.Fatalf("containers: %d (toolkit %d), want 1", len(ps.Containers), len(tk.Containers))
	}
	c := ps.Containers[0]
	if args := strings.Join(c.Args, " "); !strings.HasPrefix(args, "--log-format json journal prove --all") {
		t.Errorf("args %q: want --log-format json journal prove --all ...", args)
	}
	if i := slices.Index(c.Args, "--prove-parallel"); i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != "1" {
		t.Errorf("args %q: want --prove-parallel 1 (each proof holds two databases in /scratch)", c.Args)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		got, want := c.Resources.Limits[r], tk.Containers[0].Resources.Limits[r]
		if got.Cmp(want) != 0 {
			t.Errorf("limit %s %s, want the toolkit's %s", r, got.String(), want.String())
		}
	}
	if i := slices.Index(c.Args, "--namespace"); i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != "$(POD_NAMESPACE)" {
		t.Errorf("args %q: want --namespace $(POD_NAMESPACE): the shared prefix holds every namespace's journals", c.Args)
	}
	if a := ps.AutomountServiceAccountToken; a == nil || !*a {
		t.Errorf("automountServiceAccountToken %v: want true (the EtcdClusters are listed)", a)
	}
	nsFromAPI := false
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			nsFromAPI = true
		}
	}
	if !nsFromAPI {
		t.Errorf("env %v: want POD_NAMESPACE from the downward API (metadata.namespace)", env)
	}
	if env["COS_CREDENTIALS_DIR"] == "" || len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != "etcd-recovery-config" {
		t.Errorf("env %v, envFrom %+v: want COS_CREDENTIALS_DIR and the ConfigMap etcd-recovery-config", env, c.EnvFrom)
	}
	vol := scratchVolume(&ps, c, env["TMPDIR"])
	if vol == nil || vol.EmptyDir.SizeLimit == nil {
		t.Fatalf("TMPDIR %q: want a disk emptyDir with a sizeLimit", env["TMPDIR"])
	}
	if need := int64(2*maxQuotaBytes) + restore.DrillScratchBytes(maxQuotaBytes); vol.EmptyDir.SizeLimit.Value() < need {
		t.Errorf("scratch sizeLimit %s: a proof of an 8 GiB database holds two of them (%d bytes)", vol.EmptyDir.SizeLimit, need)
	}
	if !slices.Contains(kubetest.AppliedFiles(t), kubetest.DeployPath(t, proveFile)) {
		t.Errorf("the chart does not render %s in each namespace (not a deploy/NN-*.yaml)", proveFile)
	}
}

// TestProvePodProves runs deploy/70-prove.yaml's container as a kubelet
// would build it (podrun.Translate: the ConfigMap's COS settings pointed
// at MinIO, the cos-credentials secret's files, the age identity's secret
// mounted read-only) as a host process with exactly its args
// (Spec.HostCommand: the service account's token becomes a kubeconfig for
// a real kube-apiserver with deploy/'s CRDs and RBAC), against real
// journals of three encrypted clusters on one etcd 3.5: for each, a full
// backup, the journal (puts, overwrites, deletes), a second full backup;
// one segment of the second cluster is then re-encoded with a changed
// value (a valid chain, a wrong event). The first two are EtcdClusters of
// the pod's namespace; the third is not (another namespace's, on the
// shared prefix). `journal prove --all --namespace` must find the first
// two (the store's listing intersected with the API's), record a passed
// proof for the first (decrypted with the mounted identity) and a failed
// one for the second, and exit 1 naming the second only; a second run has
// nothing left to prove and exits 0; the third is never proven by the pod
// (no proof record), though it had a window to prove (the store form,
// run after, proves it); no credential reaches the output.
func TestProvePodProves(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 4*time.Minute)
	const good, bad, other, podNS = "prove-pod", "prove-bad", "prove-other-ns", "kubx-etcd-07"

	// The API: deploy/'s CRDs and RBAC, and the namespace's EtcdClusters
	// (good and bad, not other). The proofs are offline: only the
	// EtcdClusters' names are read, so the objects need no etcd behind them.
	world := kubetest.NewWorld(t, podNS)
	k, admin, dyn := world.K, world.Admin, world.Dyn
	for _, name := range []string{good, bad} {
		ec := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": kube.APIVersion, "kind": kube.KindEtcdCluster,
			"metadata": map[string]any{"name": name, "namespace": podNS},
			"spec":     map[string]any{"size": int64(1), "version": "3.5.35"},
		}}
		if _, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(podNS).Create(ctx, ec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	ageID, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	rcpt, err := seal.ParseRecipients([]string{ageID.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := seal.ParseIdentities(strings.NewReader(ageID.String()+"\n"), "test identity")
	if err != nil {
		t.Fatal(err)
	}
	enc := objectio.Encoding{Compression: objectio.CompressZstd, Recipients: rcpt}
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/registry/a/", 40, 64)
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}
	full := func(id string) *catalog.Manifest {
		t.Helper()
		r, err := backup.Run(ctx, backup.Options{ClusterID: id, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(c), Store: st,
			Layout: layout, V2: backup.V2Off, Recipients: rcpt})
		if err != nil {
			t.Fatalf("backup of %s: %v", id, err)
		}
		return r.Manifest
	}
	reach := func(id string) int64 {
		t.Helper()
		segs, err := journal.ListSegments(ctx, st, layout, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		var r int64
		for _, s := range segs.All {
			r = max(r, s.LastRev)
		}
		return r
	}
	all := []string{good, bad, other}
	base := map[string]*catalog.Manifest{good: full(good), bad: full(bad), other: full(other)}
	jctx, stop := context.WithCancel(ctx)
	done := make(chan error, len(all))
	var jlog lockedBuffer
	for _, id := range all {
		go func() {
			done <- fleet.JournalAll(jctx, fleet.JournalAllOptions{ClusterID: id, Etcd: testfix.EtcdConfig(c), Store: st, Layout: layout,
				Capture: journal.CaptureOptions{SegmentInterval: 300 * time.Millisecond, Encoding: enc},
				Backup:  backup.Options{V2: backup.V2Off, Recipients: rcpt}, Log: slog.New(slog.NewTextHandler(&jlog, nil))})
		}()
	}
	// Each journal watches from its base's revision + 1: what is written
	// before it connects is captured too.
	var last int64
	for i := range 3 {
		testenv.PutKeys(t, cli, fmt.Sprintf("/registry/w%d-", i), 10, 32)
		if _, err := cli.Put(ctx, "/registry/a/key000001", fmt.Sprint("over-", i)); err != nil {
			t.Fatal(err)
		}
		r, err := cli.Delete(ctx, fmt.Sprintf("/registry/a/key%06d", 10+i))
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
		time.Sleep(200 * time.Millisecond)
	}
	target := map[string]*catalog.Manifest{good: full(good), bad: full(bad), other: full(other)}
	for _, id := range all {
		want := max(last, target[id].Revision())
		for deadline := time.Now().Add(30 * time.Second); reach(id) < want; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the journal of %s reaches %d, not %d:\n%s", id, reach(id), want, testfix.LastLines(jlog.String(), 20))
			}
		}
	}
	stop()
	for range all {
		if err := <-done; err != nil {
			t.Fatalf("journal: %v", err)
		}
	}
	// The bad cluster's journal: one put between its backups gets another
	// value, re-encoded and encrypted as the journal writes it.
	segs, err := journal.ListSegments(ctx, st, layout, bad, 0)
	if err != nil {
		t.Fatal(err)
	}
	tampered := ""
	for _, sg := range segs.All {
		if sg.FirstRev <= base[bad].Revision() || tampered != "" {
			continue
		}
		h, evs, err := journal.ReadSegment(ctx, st, layout, sg.Key, ids, journal.Want{ClusterID: bad})
		if err != nil {
			t.Fatal(err)
		}
		for i, ev := range evs {
			if ev.Type == journal.Put && ev.Rev <= target[bad].Revision() {
				evs[i].Value = []byte("not what etcd holds")
				tampered = sg.Key
				break
			}
		}
		if tampered == "" {
			continue
		}
		if err := st.Delete(ctx, []string{sg.Key}); err != nil {
			t.Fatal(err)
		}
		if _, err := journal.WriteSegment(ctx, st, layout, enc, h, evs); err != nil {
			t.Fatal(err)
		}
	}
	if tampered == "" {
		t.Fatalf("no segment of %s between its backups holds a put", bad)
	}

	// The pod, as the kubelet builds it.
	w := kubetest.Workload(t, proveFile)
	cm := kubetest.ShippedConfigMapWith(t, "this test", kubetest.COSConfig(m, bucket, prefix))
	cos := kubetest.COSSecret(m)
	idSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: identitySecret}, Data: map[string][]byte{identityKey: []byte(ageID.String() + "\n")}}
	spec, err := podrun.Translate(w, "", "etcd-recovery-prove-29391233-x7k2p", kubetest.PodCluster(t, k, admin, podNS, cm, cos, idSecret))
	if err != nil {
		t.Fatalf("%s: a kubelet could not start the pod: %v", proveFile, err)
	}
	if f, _ := spec.EnvValue(seal.EnvIdentityFile); spec.Mount(strings.TrimSuffix(f, "/"+identityKey)) == nil {
		t.Fatalf("%s=%q is not in a mounted volume", seal.EnvIdentityFile, f)
	}
	run := func() (int, string, string) {
		t.Helper()
		cmd, err := spec.HostCommand(ctx, testfix.Tool(t), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		code := cmd.ProcessState.ExitCode()
		for _, secret := range []string{m.SecretKey, ageID.String()} {
			if strings.Contains(stdout.String()+stderr.String(), secret) {
				t.Errorf("a credential in the output:\n%s\n%s", stdout.String(), stderr.String())
			}
		}
		return code, stdout.String(), stderr.String()
	}
	code, out, errOut := run()
	if code != 1 {
		t.Fatalf("journal prove --all with a tampered journal: exit %d, want 1\n%s\n%s", code, out, testfix.LastLines(errOut, 20))
	}
	if !strings.Contains(errOut, "journal proof failed for "+bad+" ") || strings.Contains(errOut, "for "+good) {
		t.Errorf("the error does not name %s (and only it):\n%s", bad, testfix.LastLines(errOut, 10))
	}
	for _, want := range []string{good, bad, fleet.ProvePassed, "FAILED", "namespace " + podNS, "0 EtcdCluster(s) of the namespace without a journal"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table does not show %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, other) {
		t.Errorf("the table shows %s, not an EtcdCluster of %s:\n%s", other, podNS, out)
	}
	for id, verdict := range map[string]string{good: catalog.ProofPassed, bad: catalog.ProofFailed} {
		p, err := catalog.ReadJournalProof(ctx, st, layout, id, target[id].Name)
		if err != nil {
			t.Fatalf("no proof of %s recorded before %s: %v\n%s", id, target[id].Name, err, testfix.LastLines(errOut, 20))
		}
		// A tampered segment fails the proof either way: by its hash
		// (the newest segment of the window: nothing after it names it)
		// or by the chain (the next segment names another sha256), which
		// is found before any hash is taken.
		hashed := p.Got.Hash != 0 && p.Events > 0 && (verdict == catalog.ProofPassed) == (p.Got == p.Want)
		chained := verdict == catalog.ProofFailed && strings.Contains(p.Detail, "chain is broken") && strings.Contains(p.Detail, tampered)
		if p.Verdict != verdict || p.Base != base[id].Name || len(p.Segments) == 0 || !(hashed || chained) {
			t.Errorf("proof of %s: %+v: want %s, from %s, with the journal's events", id, p, verdict, base[id].Name)
		}
	}
	// Nothing left to prove: exit 0, nothing new.
	code, out, errOut = run()
	if code != 0 {
		t.Fatalf("journal prove --all again: exit %d\n%s\n%s", code, out, testfix.LastLines(errOut, 20))
	}
	for _, id := range []string{good, bad} {
		if proofs, err := catalog.ListJournalProofs(ctx, st, layout, id); err != nil || len(proofs) != 1 {
			t.Fatalf("proofs of %s after the second run: %d, %v; want the one", id, len(proofs), err)
		}
	}
	// The other namespace's cluster: never proven by this namespace's pod,
	// though its window was there to prove: the store form (no namespace)
	// proves it, and only it is left.
	if proofs, err := catalog.ListJournalProofs(ctx, st, layout, other); err != nil || len(proofs) != 0 {
		t.Fatalf("proofs of %s, not an EtcdCluster of %s: %d, %v; want none", other, podNS, len(proofs), err)
	}
	rep, err := fleet.ProveAll(ctx, fleet.ProveAllOptions{Template: drill.ProveOptions{Store: st, Layout: layout, Identities: ids,
		ScratchDir: t.TempDir(), Timeout: time.Minute}})
	if err != nil {
		t.Fatalf("journal prove --all, store form: %v", err)
	}
	p, err := catalog.ReadJournalProof(ctx, st, layout, other, target[other].Name)
	if err != nil || p.Verdict != catalog.ProofPassed || len(rep.Clusters) != len(all) {
		t.Fatalf("the store form: %+v; proof of %s: %+v, %v; want it proven (passed)", rep, other, p, err)
	}
}
