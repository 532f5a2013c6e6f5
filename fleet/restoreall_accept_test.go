package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// TestRestoreAllAtScale is the namespace-wide restore's acceptance test, on one
// world shared by its steps (kubetest.StartFleetWorld: a kube-apiserver,
// MinIO, two namespaces of five EtcdClusters each on real etcd with TLS,
// one of three members, one holding a real customer kube-apiserver's data,
// the others testenv.PutKeys'; one encrypted, escrowed backup of each).
// Every cluster of both namespaces loses quorum; then, in order:
//
//   - DryRun: the plan of the first namespace lists each cluster with its
//     backup and bytes, and changes nothing (no EtcdRestore, no record);
//   - Namespace: the first namespace is restored as a whole; every cluster
//     comes back verified by HashKV against its backup, with its done
//     record, client URL and NodePort; the customer master, started again,
//     serves its objects unchanged; the second namespace is untouched;
//   - Isolated: the first namespace loses quorum again; one cluster has
//     only damaged backups, one a frozen store prefix: both fail, named
//     with their step and the runbook's next step, untouched, and the
//     others are restored and verified;
//   - SIGTERM: the CLI restores the second namespace one cluster at a
//     time and is stopped by SIGTERM after the first is done: exit 130;
//     the rerun finishes the rest and changes nothing that was done;
//   - Rebuild: the second namespace is deleted with its members; restore
//     --rebuild brings every cluster back from the store alone, verified;
//   - Namespaces: every cluster of both namespaces is backed up and loses
//     quorum again; one run of both at --parallel 2 restores all ten,
//     each verified by HashKV, never more than two at once across both
//     namespaces, and each namespace's run recorded under its own prefix.
func TestRestoreAllAtScale(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 10*time.Minute)
	w := kubetest.StartFleetWorld(t, kubetest.FleetWorldOptions{Subnet: 44})
	a, b := w.Namespaces[0], w.Namespaces[1]
	for _, n := range w.Namespaces {
		n.LoseQuorum(t)
	}
	// Each step leaves the world as the next expects it (the restored
	// clusters adopted) even when one of its checks failed.
	t.Run("DryRun", func(t *testing.T) { testRestoreAllDryRun(t, ctx, w, a) })
	t.Run("Namespace", func(t *testing.T) { testRestoreAllNamespace(t, ctx, w, a, b) })
	a.Adopt(t)
	t.Run("Isolated", func(t *testing.T) { testRestoreAllIsolated(t, ctx, w, a) })
	a.Adopt(t)
	t.Run("SIGTERM", func(t *testing.T) { testRestoreAllSIGTERM(t, ctx, w, b) })
	b.Adopt(t)
	t.Run("Rebuild", func(t *testing.T) { testRestoreAllRebuild(t, ctx, w, b) })
	t.Run("Namespaces", func(t *testing.T) { testRestoreAllNamespaces(t, ctx, w, a, b) })
}

// restoreAllOptions are RestoreAll's options for namespaces of w as the
// toolkit's service account, on st (nil: the world's store).
func restoreAllOptions(t *testing.T, w *kubetest.FleetWorld, st store.Store, namespaces ...*kubetest.FleetNamespace) fleet.RestoreAllOptions {
	t.Helper()
	o := fleet.RestoreAllOptions{Parallel: 4, HealthTimeout: time.Second, ClusterTimeout: 2 * time.Minute, Log: testfix.Logger(t),
		Template: kube.OperatorRestoreOptions{Bucket: w.Bucket, Endpoint: w.MinIO.Endpoint, ForcePathStyle: true, Identities: w.Key.IDs,
			TempDir: t.TempDir(), PollInterval: 100 * time.Millisecond, Timeout: 2 * time.Minute, DialTimeout: 2 * time.Second,
			ProbeTimeout: 2 * time.Second}}
	if st == nil {
		st = w.Store
	}
	for _, n := range namespaces {
		o.Namespaces = append(o.Namespaces, fleet.RestoreAllNamespace{Kube: w.Toolkit(t, n.Name), Store: st, Layout: n.Layout})
	}
	return o
}

// rows are a report's rows by cluster name.
func rows(t *testing.T, clusters []fleet.RestoreAllRow) map[string]fleet.RestoreAllRow {
	t.Helper()
	out := map[string]fleet.RestoreAllRow{}
	for _, r := range clusters {
		if _, dup := out[r.Cluster]; dup {
			t.Errorf("cluster %s twice in the report", r.Cluster)
		}
		out[r.Cluster] = r
	}
	return out
}

// restoreRecords are the keys under the namespace's _restores/.
func restoreRecords(t *testing.T, ctx context.Context, w *kubetest.FleetWorld, n *kubetest.FleetNamespace) []string {
	t.Helper()
	objs, err := w.Store.List(ctx, n.Layout.RestoresPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}

// doneRecords are the clusters with a done record in run.
func doneRecords(t *testing.T, ctx context.Context, w *kubetest.FleetWorld, n *kubetest.FleetNamespace, run string) map[string]catalog.FleetRestoreDone {
	t.Helper()
	out := map[string]catalog.FleetRestoreDone{}
	for _, key := range restoreRecords(t, ctx, w, n) {
		k, ok := n.Layout.ParseFleetRestoreKey(key)
		if !ok || k.Run != run || k.Record != "done" {
			continue
		}
		var d catalog.FleetRestoreDone
		if err := catalog.ReadFleetRestoreRecord(ctx, w.Store, key, &d); err != nil {
			t.Fatal(err)
		}
		out[k.Cluster] = d
	}
	return out
}

// eventReasons are the reasons of the namespace's Events on each
// EtcdCluster, by its name.
func eventReasons(t *testing.T, ctx context.Context, w *kubetest.FleetWorld, ns string) map[string][]string {
	t.Helper()
	evs, err := w.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string][]string{}
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == kube.KindEtcdCluster {
			reasons[e.InvolvedObject.Name] = append(reasons[e.InvolvedObject.Name], e.Reason)
		}
	}
	return reasons
}

// nodePort is the nodePort of the cluster's <name>-client-service-np.
func nodePort(t *testing.T, ctx context.Context, w *kubetest.FleetWorld, ns, name string) int32 {
	t.Helper()
	svc, err := w.Admin.CoreV1().Services(ns).Get(ctx, name+"-client-service-np", metav1.GetOptions{})
	if err != nil || len(svc.Spec.Ports) == 0 {
		t.Fatalf("%s/%s: NodePort Service: %v", ns, name, err)
	}
	return svc.Spec.Ports[0].NodePort
}

func testRestoreAllDryRun(t *testing.T, ctx context.Context, w *kubetest.FleetWorld, a *kubetest.FleetNamespace) {
	o := restoreAllOptions(t, w, nil, a)
	o.DryRun = true
	rep, err := fleet.RestoreAll(ctx, o)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	got := rows(t, rep.Clusters)
	if !rep.DryRun || len(got) != len(a.Clusters) {
		t.Fatalf("dry run: %d rows: %+v", len(got), rep)
	}
	for _, c := range a.Clusters {
		r := got[c.Name]
		if r.Outcome != fleet.OutcomePlanned || r.Action != fleet.ActionRestore || r.Bytes <= 0 || r.Backup == "" {
			t.Errorf("dry run: %s: %+v", c.Name, r)
		}
		if len(c.Etcd.Members) == 1 && r.Backup != c.Backup.Name {
			t.Errorf("dry run: %s: backup %s, want the newest, %s", c.Name, r.Backup, c.Backup.Name)
		}
	}
	if keys := restoreRecords(t, ctx, w, a); len(keys) != 0 {
		t.Errorf("the dry run wrote %v", keys)
	}
	a.StillDown(t, ctx, w)
}

func testRestoreAllNamespace(t *testing.T, ctx context.Context, w *kubetest.FleetWorld, a, b *kubetest.FleetNamespace) {
	var customer *kubetest.FleetCluster
	for _, c := range a.Clusters {
		if c.Customer != nil {
			customer = c
		}
	}
	if customer == nil {
		t.Fatal("no cluster holds a customer master's data")
	}
	// What the customer saw before: its master is stopped (the world
	// filled it and stopped it), its data is in the backup.
	o := restoreAllOptions(t, w, nil, a)
	var steps []fleet.RestoreAllStep
	o.OnStep = func(s fleet.RestoreAllStep) { steps = append(steps, s) }
	start := time.Now()
	rep, err := fleet.RestoreAll(ctx, o)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("restore-all of %s: %v", a.Name, err)
	}
	t.Logf("restore-all of %s (%d clusters, parallel %d): %v", a.Name, len(a.Clusters), o.Parallel, took.Round(time.Millisecond))
	got := rows(t, rep.Clusters)
	if len(rep.Runs) != 1 || rep.Runs[0].Resumed || len(rep.Failed) != 0 {
		t.Fatalf("runs %+v, failed %v", rep.Runs, rep.Failed)
	}
	run := rep.Runs[0].Run
	done := doneRecords(t, ctx, w, a, run)
	for _, c := range a.Clusters {
		r := got[c.Name]
		if r.Outcome != fleet.OutcomeRestored || r.Namespace != a.Name || r.Backup == "" || r.Revision <= 0 || r.Elapsed <= 0 || r.Run != run {
			t.Errorf("%s: %+v", c.Name, r)
		}
		if r.ClientURL != c.ClientURL() {
			t.Errorf("%s: client URL %q, want %q", c.Name, r.ClientURL, c.ClientURL())
		}
		if np := nodePort(t, ctx, w, a.Name, c.Name); r.NodePort != np || np == 0 {
			t.Errorf("%s: NodePort %d (%s), the Service's %d", c.Name, r.NodePort, r.NodePortError, np)
		}
		if d, ok := done[c.Name]; !ok || d.Revision != r.Revision || d.Backup != r.Backup {
			t.Errorf("%s: done record %+v (there: %v), row %+v", c.Name, d, ok, r)
		}
		if n := a.Restores(c.Name); n != 1 {
			t.Errorf("%s: %d EtcdRestores acted on, want 1", c.Name, n)
		}
		chk := w.CheckRestored(t, ctx, c)
		t.Logf("%s: %d member(s), HashKV %d at %d equals the backup's %s (revision %d, bumped)", c.Name, len(c.Etcd.Members), chk.Hash, chk.Revision, c.Backup.Name, chk.Base)
	}
	// An Event on each EtcdCluster at its start and its end.
	reasons := eventReasons(t, ctx, w, a.Name)
	for _, c := range a.Clusters {
		if r := reasons[c.Name]; !slices.Contains(r, kube.ReasonRestoreStarted) || !slices.Contains(r, kube.ReasonRestoreSucceeded) {
			t.Errorf("%s: Events %v, want %s and %s", c.Name, r, kube.ReasonRestoreStarted, kube.ReasonRestoreSucceeded)
		}
	}
	// The check can fail: a restored cluster does not hash as another
	// cluster's backup (of the same revision, other keys).
	if c0, c1 := a.Clusters[2], a.Clusters[3]; c0.Backup.Snapshot.RawSHA256 != c1.Backup.Snapshot.RawSHA256 {
		rec, _ := a.Restored(c0.Name)
		if chk, other := w.HashAgainst(t, ctx, c0, rec.Members, c1.Backup); chk.Hash == other {
			t.Errorf("%s hashes as %s's backup %s: the HashKV check proves nothing", c0.Name, c1.Name, c1.Backup.Name)
		}
	}
	if len(done) != len(a.Clusters) {
		t.Errorf("%d done records, want %d: %v", len(done), len(a.Clusters), slices.Collect(maps.Keys(done)))
	}
	var finished int
	for _, s := range steps {
		if s.Step == fleet.StepDone {
			finished++
		}
	}
	if finished != len(a.Clusters) || len(steps) < 3*len(a.Clusters) {
		t.Errorf("OnStep: %d steps, %d clusters finished", len(steps), finished)
	}
	a.Adopt(t)
	// The other namespace is untouched: still down.
	b.StillDown(t, ctx, w)

	// The customer's master, started again with its files and URL,
	// serves its objects as they were backed up.
	customer.Customer.Start(t)
	objs := customer.Customer.Objects(t, ctx)
	customer.Customer.Stop()
	if len(objs) < 40 || !maps.Equal(objs, customer.Customer.Want) {
		t.Errorf("the customer master serves %d objects after the restore, %d before; they differ:\n%v\n%v", len(objs), len(customer.Customer.Want), objs, customer.Customer.Want)
	}
}

func testRestoreAllIsolated(t *testing.T, ctx context.Context, w *kubetest.FleetWorld, a *kubetest.FleetNamespace) {
	a.LoseQuorum(t)
	var damaged, frozen *kubetest.FleetCluster
	for _, c := range a.Clusters {
		if len(c.Etcd.Members) != 1 || c.Customer != nil {
			continue
		}
		switch {
		case damaged == nil:
			damaged = c
		case frozen == nil:
			frozen = c
		}
	}
	keys := w.DamageBackups(t, ctx, damaged)
	t.Logf("%s: damaged %d backup(s); %s: its prefix frozen", damaged.Name, len(keys), frozen.Name)
	fs := w.FrozenStore(frozen, 3*time.Second)
	restoresBefore := map[string]int{}
	for _, c := range a.Clusters {
		restoresBefore[c.Name] = a.Restores(c.Name)
	}
	o := restoreAllOptions(t, w, fs, a)
	start := time.Now()
	rep, err := fleet.RestoreAll(ctx, o)
	took := time.Since(start)
	var rae *fleet.RestoreAllError
	if !errors.As(err, &rae) || rep == nil {
		t.Fatalf("restore-all with a damaged and a frozen cluster: %v, want a RestoreAllError", err)
	}
	t.Logf("restore-all of %s with two failing: %v: %v", a.Name, took.Round(time.Millisecond), err)
	wantFailed := []string{a.Name + "/" + damaged.Name, a.Name + "/" + frozen.Name}
	slices.Sort(wantFailed)
	gotFailed := slices.Sorted(slices.Values(rep.Failed))
	if !slices.Equal(gotFailed, wantFailed) {
		t.Errorf("failed %v, want %v", gotFailed, wantFailed)
	}
	got := rows(t, rep.Clusters)
	for _, c := range []*kubetest.FleetCluster{damaged, frozen} {
		r := got[c.Name]
		if r.Outcome != fleet.OutcomeFailed || r.FailedStep != kube.OpStepSelect || r.NextStep == "" || !strings.Contains(r.Cause, c.Name) {
			t.Errorf("%s: %+v, want failed at %q naming the cluster, with a next step", c.Name, r, kube.OpStepSelect)
		}
		if uid := w.EtcdClusterUID(t, ctx, a.Name, c.Name); uid != c.UID || a.Restores(c.Name) != restoresBefore[c.Name] {
			t.Errorf("%s: touched: uid %s (was %s), %d EtcdRestores (were %d)", c.Name, uid, c.UID, a.Restores(c.Name), restoresBefore[c.Name])
		}
	}
	reasons := eventReasons(t, ctx, w, a.Name)
	for _, c := range []*kubetest.FleetCluster{damaged, frozen} {
		if !slices.Contains(reasons[c.Name], kube.ReasonRestoreFailed) {
			t.Errorf("%s: Events %v, want %s", c.Name, reasons[c.Name], kube.ReasonRestoreFailed)
		}
	}
	if r := got[frozen.Name]; !strings.Contains(r.Cause, "stalled") {
		t.Errorf("%s: cause %q does not say the store stalled", frozen.Name, r.Cause)
	}
	if kubetest.Stalled(fs) == 0 {
		t.Error("the frozen prefix was never read")
	}
	for _, c := range a.Clusters {
		if c == damaged || c == frozen {
			continue
		}
		if r := got[c.Name]; r.Outcome != fleet.OutcomeRestored {
			t.Errorf("%s: %+v, want restored", c.Name, r)
			continue
		}
		w.CheckRestored(t, ctx, c)
	}
	a.Adopt(t)
}

// restoreAllCLI is the restore-all command line for namespace n of w, as
// the toolkit's service account, reading the backups' escrow with w's
// identity; the store's credentials come from the environment
// (w.StoreEnv).
func restoreAllCLI(t *testing.T, w *kubetest.FleetWorld, n *kubetest.FleetNamespace, args ...string) []string {
	t.Helper()
	return append(append([]string{"restore-all", "--namespace", n.Name, "--kubeconfig", w.ToolkitKubeconfig(t, n.Name),
		"--identity-file", w.IdentityFile, "--dial-timeout", "2s", "--probe-timeout", "2s", "--wait-timeout", "2m", "-o", "json", "--prefix", n.Layout.RootPrefix()},
		w.StoreArgs()...), args...)
}

func testRestoreAllSIGTERM(t *testing.T, ctx context.Context, w *kubetest.FleetWorld, b *kubetest.FleetNamespace) {
	tool := testfix.Tool(t)
	args := restoreAllCLI(t, w, b, "--parallel", "1", "--order", "name")
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = append(testfix.ToolEnv(), w.StoreEnv()...)
	var stdout, stderr testfix.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// SIGTERM once the first cluster is done (verified, its done record
	// written) and the next one is under way.
	var run string
	for {
		select {
		case err := <-exited:
			t.Fatalf("restore-all ended before the SIGTERM: %v\n%s\n%s", err, stdout.String(), testfix.LastLines(stderr.String(), 30))
		default:
		}
		if time.Since(start) > 2*time.Minute {
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("no cluster done after 2m\n%s", testfix.LastLines(stderr.String(), 30))
		}
		for _, key := range restoreRecords(t, ctx, w, b) {
			if k, ok := b.Layout.ParseFleetRestoreKey(key); ok && k.Record == "done" {
				run = k.Run
			}
		}
		if run != "" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := <-exited
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("restore-all stopped by SIGTERM: %v, want exit 130\n%s", err, testfix.LastLines(stderr.String(), 30))
	}
	t.Logf("SIGTERM after %v: exit 130", time.Since(start).Round(time.Millisecond))

	// What was done before the SIGTERM, as it is now.
	done := doneRecords(t, ctx, w, b, run)
	if len(done) == 0 || len(done) == len(b.Clusters) {
		t.Fatalf("%d of %d clusters done before the SIGTERM: the test wants some, not all", len(done), len(b.Clusters))
	}
	type state struct {
		uid      types.UID
		restores int
		member   *testenv.EtcdMember
		check    kubetest.FleetCheck
	}
	before := map[string]state{}
	inFlight := map[string]bool{}
	for _, c := range b.Clusters {
		if _, ok := done[c.Name]; !ok {
			// Not done: in flight at the signal when an EtcdRestore of it
			// was already made.
			inFlight[c.Name] = b.Restores(c.Name) > 0
			continue
		}
		rec, _ := b.Restored(c.Name)
		before[c.Name] = state{w.EtcdClusterUID(t, ctx, b.Name, c.Name), b.Restores(c.Name), rec.Members[0], w.CheckRestored(t, ctx, c)}
	}

	// The rerun: the same request resumes the run, finishes the rest and
	// leaves the done ones alone.
	out, errOut, code := testfix.RunTool(t, ctx, tool, w.StoreEnv(), args...)
	var rep fleet.RestoreAllReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("rerun: exit %d\n%s\n%s", code, out, testfix.LastLines(errOut, 30))
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Run != run || !rep.Runs[0].Resumed {
		t.Errorf("rerun: runs %+v, want run %s resumed", rep.Runs, run)
	}
	got := rows(t, rep.Clusters)
	for _, c := range b.Clusters {
		r := got[c.Name]
		if st, ok := before[c.Name]; ok {
			if r.Outcome != fleet.OutcomeDoneEarlier {
				t.Errorf("%s: %+v, want %s", c.Name, r, fleet.OutcomeDoneEarlier)
			}
			rec, _ := b.Restored(c.Name)
			if uid := w.EtcdClusterUID(t, ctx, b.Name, c.Name); uid != st.uid || b.Restores(c.Name) != st.restores || rec.Members[0] != st.member {
				t.Errorf("%s: done before the SIGTERM, but changed by the rerun: uid %s (was %s), %d EtcdRestores (were %d)", c.Name, uid, st.uid, b.Restores(c.Name), st.restores)
			}
			if chk := w.CheckRestored(t, ctx, c); chk != st.check {
				t.Errorf("%s: HashKV %+v after the rerun, %+v before", c.Name, chk, st.check)
			}
			continue
		}
		if r.Outcome != fleet.OutcomeRestored {
			t.Errorf("%s: %+v, want restored by the rerun", c.Name, r)
			continue
		}
		// Restored exactly once in all: the one in flight at the signal
		// by its EtcdRestore, which the rerun adopted, not by a second.
		if n := b.Restores(c.Name); n != 1 {
			t.Errorf("%s: %d EtcdRestores acted on in all (in flight at the SIGTERM: %t), want 1", c.Name, n, inFlight[c.Name])
		}
		w.CheckRestored(t, ctx, c)
	}
	if len(doneRecords(t, ctx, w, b, run)) != len(b.Clusters) {
		t.Errorf("after the rerun, %d done records, want %d", len(doneRecords(t, ctx, w, b, run)), len(b.Clusters))
	}
	b.Adopt(t)
}

func testRestoreAllRebuild(t *testing.T, ctx context.Context, w *kubetest.FleetWorld, b *kubetest.FleetNamespace) {
	// The NodePorts the customers' kube-apiservers were given.
	ports := map[string]int32{}
	for _, c := range b.Clusters {
		ports[c.Name] = nodePort(t, ctx, w, b.Name, c.Name)
	}
	// The namespace is gone: every object, every member and its data.
	kubetest.WipeNamespace(t, ctx, w.Admin, w.Dyn, b.Name)
	for _, c := range b.Clusters {
		for _, m := range c.Etcd.Members {
			m.Kill()
			if err := os.RemoveAll(m.DataDir); err != nil {
				t.Fatal(err)
			}
		}
	}
	// An SRE recreates it with cos-credentials, the toolkit's RBAC and
	// the break-glass grant of each cluster to rebuild.
	kubetest.CreateCOSSecret(t, w.Admin, b.Name, w.MinIO)
	w.A.ApplyFile(t, kubetest.DeployPath(t, "10-rbac.yaml"), b.Name)
	for _, c := range b.Clusters {
		kubetest.RebuildAccess(t, w.A, b.Name, c.Name)
	}
	o := restoreAllOptions(t, w, nil, b)
	o.Rebuild = true
	start := time.Now()
	rep, err := fleet.RestoreAll(ctx, o)
	if err != nil {
		t.Fatalf("restore-all --rebuild of %s: %v", b.Name, err)
	}
	t.Logf("restore-all --rebuild of %s (%d clusters): %v", b.Name, len(b.Clusters), time.Since(start).Round(time.Millisecond))
	got := rows(t, rep.Clusters)
	if len(got) != len(b.Clusters) || len(rep.Failed) != 0 {
		t.Fatalf("rebuild: %d rows, failed %v", len(got), rep.Failed)
	}
	for _, c := range b.Clusters {
		r := got[c.Name]
		if r.Outcome != fleet.OutcomeRebuilt || r.Action != fleet.ActionRebuild || r.Backup != c.Backup.Name {
			t.Errorf("%s: %+v, want rebuilt from %s", c.Name, r, c.Backup.Name)
		}
		if uid := w.EtcdClusterUID(t, ctx, b.Name, c.Name); uid == "" || uid == c.UID {
			t.Errorf("%s: EtcdCluster uid %q after the rebuild (was %s)", c.Name, uid, c.UID)
		}
		// The rebuilt NodePort Service keeps its port, and the report
		// names it.
		if np := nodePort(t, ctx, w, b.Name, c.Name); np != ports[c.Name] || r.NodePort != np {
			t.Errorf("%s: NodePort %d after the rebuild (report %d, %s), was %d", c.Name, np, r.NodePort, r.NodePortError, ports[c.Name])
		}
		w.CheckRestored(t, ctx, c)
	}
	b.Adopt(t)
}

func testRestoreAllNamespaces(t *testing.T, ctx context.Context, w *kubetest.FleetWorld, a, b *kubetest.FleetNamespace) {
	// Isolated's two failed clusters start again (their members kept
	// their data), a backup of each cluster as it is now (Isolated
	// damaged one's, the others were restored since), then every one
	// loses quorum.
	for _, c := range w.Clusters() {
		if len(c.Killed) == 0 {
			continue
		}
		for _, m := range c.Killed {
			m.Start(t)
		}
		c.Etcd.WaitHealthy(t)
		c.Killed = nil
	}
	w.BackupAll(t, ctx)
	for _, n := range []*kubetest.FleetNamespace{a, b} {
		n.LoseQuorum(t)
	}
	o := restoreAllOptions(t, w, nil, a, b)
	// A new run: Isolated's, of the same request, ended with failures
	// and would be resumed (its done clusters skipped).
	o.Parallel, o.NewRun = 2, true
	// A cluster's restore runs from its first step after StepQueued to its
	// StepDone (each sent from its goroutine, in order, while it holds
	// its place under the limit): how many run at once, across both
	// namespaces.
	var (
		mu              sync.Mutex
		running         = map[string]bool{}
		peak, transfers int
		peakAt          []string
	)
	o.OnStep = func(s fleet.RestoreAllStep) {
		mu.Lock()
		defer mu.Unlock()
		key := s.Namespace + "/" + s.Cluster
		switch s.Step {
		case fleet.StepQueued:
			return
		case fleet.StepDone:
			delete(running, key)
			return
		}
		if !running[key] {
			running[key] = true
			transfers++
		}
		if len(running) > peak {
			peak, peakAt = len(running), slices.Sorted(maps.Keys(running))
		}
	}
	start := time.Now()
	rep, err := fleet.RestoreAll(ctx, o)
	t.Logf("restore-all of %s and %s (parallel 2): %v", a.Name, b.Name, time.Since(start).Round(time.Millisecond))
	mu.Lock()
	t.Logf("at most %d restores at once (%v)", peak, peakAt)
	if peak != 2 {
		t.Errorf("at most %d restores at once (%v), want 2: --parallel 2 is one limit across both namespaces", peak, peakAt)
	}
	if n := len(a.Clusters) + len(b.Clusters); transfers != n {
		t.Errorf("%d clusters were seen restoring, want %d", transfers, n)
	}
	mu.Unlock()
	if err != nil {
		t.Fatalf("restore-all of %s and %s: %v", a.Name, b.Name, err)
	}
	if len(rep.Runs) != 2 || len(rep.Failed) != 0 || len(rep.Clusters) != len(a.Clusters)+len(b.Clusters) {
		t.Fatalf("runs %+v, failed %v, %d rows", rep.Runs, rep.Failed, len(rep.Clusters))
	}
	runs := map[string]fleet.RestoreAllRun{}
	for _, r := range rep.Runs {
		runs[r.Namespace] = r
	}
	byNS := map[string]map[string]fleet.RestoreAllRow{}
	for _, r := range rep.Clusters {
		if byNS[r.Namespace] == nil {
			byNS[r.Namespace] = map[string]fleet.RestoreAllRow{}
		}
		byNS[r.Namespace][r.Cluster] = r
	}
	for _, n := range []*kubetest.FleetNamespace{a, b} {
		run, ok := runs[n.Name]
		if !ok || run.Prefix != n.Name+"/" || run.Resumed {
			t.Errorf("%s: run %+v, want a new run under %s/", n.Name, run, n.Name)
			continue
		}
		// Its own records, under its own prefix: the plan names its
		// clusters only, a done record for each, the other namespace's
		// run absent.
		var plan catalog.FleetRestorePlan
		if err := catalog.ReadFleetRestoreRecord(ctx, w.Store, n.Layout.FleetRestorePlanKey(run.Run), &plan); err != nil {
			t.Errorf("%s: plan of run %s: %v", n.Name, run.Run, err)
		} else if plan.Namespace != n.Name || len(plan.Clusters) != len(n.Clusters) {
			t.Errorf("%s: plan of run %s: namespace %s, %d clusters, want %d", n.Name, run.Run, plan.Namespace, len(plan.Clusters), len(n.Clusters))
		}
		done := doneRecords(t, ctx, w, n, run.Run)
		for _, c := range n.Clusters {
			r := byNS[n.Name][c.Name]
			if r.Outcome != fleet.OutcomeRestored || r.Run != run.Run {
				t.Errorf("%s/%s: %+v, want restored in run %s", n.Name, c.Name, r, run.Run)
			}
			if d, ok := done[c.Name]; !ok || d.Revision != r.Revision {
				t.Errorf("%s/%s: done record %+v (there: %t) under %s", n.Name, c.Name, d, ok, n.Layout.RestoresPrefix())
			}
			w.CheckRestored(t, ctx, c)
		}
		if len(done) != len(n.Clusters) {
			t.Errorf("%s: %d done records of run %s, want %d", n.Name, len(done), run.Run, len(n.Clusters))
		}
		for _, other := range rep.Runs {
			if other.Namespace == n.Name {
				continue
			}
			for _, key := range restoreRecords(t, ctx, w, n) {
				if k, ok := n.Layout.ParseFleetRestoreKey(key); ok && k.Run == other.Run {
					t.Errorf("%s holds a record of %s's run: %s", n.Layout.RestoresPrefix(), other.Namespace, key)
				}
			}
		}
	}
	a.Adopt(t)
	b.Adopt(t)
}
