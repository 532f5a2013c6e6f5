package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// restoreAllNS holds the clusters of the restore-all test.
const restoreAllNS = "kubx-etcd-71"

// TestRestoreAll runs restore-all against a real kube-apiserver with the
// deployment's RBAC (the toolkit's service account), MinIO, real etcd
// clusters with TLS and the stand-in of etcd-operator's restore operator:
// of three EtcdClusters, one is healthy (left alone, untouched), one lost
// two of its three members (restored from its survivor's snapshot) and one
// lost its only member (restored from its backup). Then a rerun resumes
// a run whose records say one cluster is done: that cluster is skipped
// and not touched although it lost quorum again, the other is restored.
func TestRestoreAll(t *testing.T) {
	t.Parallel()
	w := kubetest.StartRBACWorld(t, restoreAllNS)
	ctx := testfix.Context(t, 5*time.Minute)
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	prefix := testenv.Prefix(t)
	kubetest.CreateCOSSecret(t, w.Admin, restoreAllNS, m)
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}

	healthy := kubetest.AddEtcdCluster(t, w.Admin, w.Dyn, restoreAllNS, "etcd-ra0", testenv.EtcdOptions{IP: "127.0.19.10", Members: 1})
	minority := kubetest.AddEtcdCluster(t, w.Admin, w.Dyn, restoreAllNS, "etcd-ra1", testenv.EtcdOptions{IP: "127.0.19.11", Members: 3})
	allLost := kubetest.AddEtcdCluster(t, w.Admin, w.Dyn, restoreAllNS, "etcd-ra2", testenv.EtcdOptions{IP: "127.0.19.12", Members: 1})
	clusters := []kubetest.Cluster{healthy, minority, allLost}
	// etcd-ra3 lost its only member and has no backup: its restore fails
	// (at the selection), and the others are restored all the same.
	noBackup := kubetest.AddEtcdCluster(t, w.Admin, w.Dyn, restoreAllNS, "etcd-ra3", testenv.EtcdOptions{IP: "127.0.19.13", Members: 1})
	kubetest.PerClusterAccess(t, w.A, restoreAllNS, noBackup.Name)
	kubetest.MemberDown(t, ctx, w.Admin, restoreAllNS, noBackup.Name, noBackup.Etcd.Members[0])
	for i, fc := range clusters {
		kubetest.PerClusterAccess(t, w.A, restoreAllNS, fc.Name)
		testenv.PutKeys(t, fc.Etcd.Client(t), "/registry/k", 40+10*i, 256)
		if _, err := backup.Run(ctx, backup.Options{ClusterID: fc.Name, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(fc.Etcd), Store: st, Layout: layout}); err != nil {
			t.Fatal(err)
		}
	}
	// Quorum lost: two of etcd-ra1's three members, etcd-ra2's only one;
	// their pods are not Ready (the kubelet's probe fails).
	kubetest.MemberDown(t, ctx, w.Admin, restoreAllNS, minority.Name, minority.Etcd.Members[1])
	kubetest.MemberDown(t, ctx, w.Admin, restoreAllNS, minority.Name, minority.Etcd.Members[2])
	kubetest.MemberDown(t, ctx, w.Admin, restoreAllNS, allLost.Name, allLost.Etcd.Members[0])

	op := kubetest.StartRestoreOperator(t, kubetest.RestoreOperatorOptions{Namespace: restoreAllNS, Client: w.Admin, Dynamic: w.Dyn, RunningDelay: 500 * time.Millisecond})
	for _, fc := range clusters {
		op.Register(fc)
	}
	sa, err := kube.New(kube.Config{Rest: w.K.RestConfig(kubetest.SAToken(t, w.Admin, restoreAllNS, "etcd-recovery-toolkit")), Namespace: restoreAllNS})
	if err != nil {
		t.Fatal(err)
	}
	opts := fleet.RestoreAllOptions{
		Namespaces: []fleet.RestoreAllNamespace{{Kube: sa, Store: st, Layout: layout}},
		Parallel:   2, HealthTimeout: 2 * time.Second, ClusterTimeout: 2 * time.Minute,
		Template: kube.OperatorRestoreOptions{Bucket: bucket, Endpoint: m.Endpoint, ForcePathStyle: true, ProbeTimeout: 2 * time.Second,
			DialTimeout: 2 * time.Second, PollInterval: 200 * time.Millisecond, TempDir: t.TempDir()},
	}
	var (
		stepsMu sync.Mutex
		steps   []fleet.RestoreAllStep
	)
	opts.OnStep = func(s fleet.RestoreAllStep) {
		stepsMu.Lock()
		defer stepsMu.Unlock()
		steps = append(steps, s)
	}

	t.Run("DryRunCLI", func(t *testing.T) {
		// The command: the plan as -o json, nothing changed, no record.
		token := kubetest.SAToken(t, w.Admin, restoreAllNS, "etcd-recovery-toolkit")
		keysBefore := testfix.Keys(t, st, layout.RootPrefix())
		cmd := exec.CommandContext(ctx, testfix.Tool(t), "restore-all", "--dry-run", "-o", "json", "--kubeconfig", w.K.Kubeconfig(t, token, restoreAllNS),
			"--namespace", restoreAllNS, "--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix,
			"--probe-timeout", "2s", "--dial-timeout", "2s", "--parallel", "2")
		cmd.Env = testfix.ToolEnv() // COS credentials come from the secret, through the API
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("restore-all --dry-run: %v\n%s\n%s", err, stdout.String(), testfix.LastLines(stderr.String(), 10))
		}
		var plan fleet.RestoreAllReport
		if err := json.Unmarshal(stdout.Bytes(), &plan); err != nil {
			t.Fatalf("json: %v\n%s", err, stdout.String())
		}
		var outcomes []string
		for _, r := range plan.Clusters {
			outcomes = append(outcomes, r.Cluster+"="+r.Outcome)
			if r.NodePort == 0 {
				t.Errorf("%s: no NodePort in the plan (deploy/per-cluster grants the toolkit its Service): %s", r.Cluster, r.NodePortError)
			}
			if r.Outcome == fleet.OutcomePlanned && r.Cluster != noBackup.Name && (r.Backup == "" || r.Bytes == 0) {
				t.Errorf("planned %s without its backup and bytes: %+v", r.Cluster, r)
			}
		}
		// Smallest first: etcd-ra3 has nothing to fetch, etcd-ra1's backup
		// has fewer keys than etcd-ra2's.
		if got := strings.Join(outcomes, " "); !plan.DryRun || got != "etcd-ra3=planned etcd-ra1=planned etcd-ra2=planned etcd-ra0=healthy" {
			t.Errorf("dry run: %s (dry run %t)", got, plan.DryRun)
		}
		if plan.Expected <= 0 || plan.Model["storeStream"] == "" || plan.Model["storeStream"] == "unknown" || plan.Model["parallel"] != "2" {
			t.Errorf("dry run's model: expected %v, inputs %v", plan.Expected, plan.Model)
		}
		if keysAfter := testfix.Keys(t, st, layout.RootPrefix()); !slices.Equal(keysAfter, keysBefore) {
			t.Errorf("the dry run changed the bucket: %v -> %v", keysBefore, keysAfter)
		}
		if ers, err := w.Dyn.Resource(kube.EtcdRestoreGVR).Namespace(restoreAllNS).List(ctx, metav1.ListOptions{}); err != nil || len(ers.Items) != 0 {
			t.Errorf("the dry run created EtcdRestores: %v", err)
		}
		t.Logf("dry run: expected %v; model %v", plan.Expected, plan.Model)
		// The table: the same rows, and the model's inputs.
		cmd = exec.CommandContext(ctx, cmd.Args[0], slices.DeleteFunc(slices.Clone(cmd.Args[1:]), func(a string) bool { return a == "-o" || a == "json" })...)
		cmd.Env = testfix.ToolEnv()
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), "Dry run: nothing is changed") || !strings.Contains(string(out), "model storeStream:") ||
			strings.Count(string(out), fleet.OutcomePlanned) != 3 || !strings.Contains(string(out), "NODEPORT") {
			t.Errorf("dry run table: %v\n%s", err, out)
		}
		t.Logf("dry run table:\n%s", out)
	})

	start := time.Now()
	rep, err := fleet.RestoreAll(ctx, opts)
	var rae *fleet.RestoreAllError
	if !errors.As(err, &rae) || strings.Join(rae.Failed, ",") != restoreAllNS+"/"+noBackup.Name {
		t.Fatalf("restore-all: %v, want etcd-ra3 failed\nreport %+v", err, rep)
	}
	t.Logf("restore-all of 2 quorum-lost clusters (1 healthy) at --parallel 2: %v", time.Since(start).Round(time.Millisecond))
	byName := map[string]fleet.RestoreAllRow{}
	for _, row := range rep.Clusters {
		byName[row.Cluster] = row
	}
	if len(rep.Clusters) != 4 || len(rep.Failed) != 1 || len(rep.Runs) != 1 || rep.Runs[0].Resumed {
		t.Fatalf("report: %+v", rep)
	}
	run := rep.Runs[0].Run
	if r := byName[healthy.Name]; r.Outcome != fleet.OutcomeHealthy || r.Action != "" || r.Health != "1/1 members healthy" {
		t.Errorf("healthy cluster: %+v", r)
	}
	for _, fc := range []kubetest.Cluster{minority, allLost} {
		r := byName[fc.Name]
		if r.Outcome != fleet.OutcomeRestored || r.Action != fleet.ActionRestore || !strings.HasSuffix(r.Health, ": quorum lost") ||
			r.Backup == "" || r.Revision == 0 || r.Run != run || r.NodePort == 0 ||
			r.ClientURL != "https://"+fc.Name+"-client."+restoreAllNS+".svc:2379" {
			t.Errorf("%s: %+v", fc.Name, r)
		}
		var done catalog.FleetRestoreDone
		if err := catalog.ReadFleetRestoreRecord(ctx, st, layout.FleetRestoreDoneKey(run, fc.Name), &done); err != nil || done.Backup != r.Backup {
			t.Errorf("%s: done record %+v: %v", fc.Name, done, err)
		}
		rec := op.Wait(t, fc.Name, time.Second)
		if rec.Err != nil || rec.OldUID != fc.UID {
			t.Errorf("%s: the operator's restore: %+v", fc.Name, rec)
		}
	}
	if r := byName[noBackup.Name]; r.Outcome != fleet.OutcomeFailed || r.FailedStep != kube.OpStepSelect || !strings.Contains(r.Cause, noBackup.Name) ||
		r.NextStep != "runbooks/quorum-loss.md#restore-from-snapshot" || r.Run != run {
		t.Errorf("the cluster without a backup: %+v", r)
	}
	if byName[minority.Name].Health != "0/3 members healthy (1 answer): quorum lost" {
		t.Errorf("minority: health %q", byName[minority.Name].Health)
	}
	// The healthy cluster is untouched: same uid, no EtcdRestore.
	if ec, err := w.Dyn.Resource(kube.EtcdClusterGVR).Namespace(restoreAllNS).Get(ctx, healthy.Name, metav1.GetOptions{}); err != nil || ec.GetUID() != healthy.UID {
		t.Errorf("the healthy cluster was replaced: %v", err)
	}
	if _, err := w.Dyn.Resource(kube.EtcdRestoreGVR).Namespace(restoreAllNS).Get(ctx, healthy.Name, metav1.GetOptions{}); err == nil {
		t.Error("an EtcdRestore of the healthy cluster was created")
	}
	// The run's records: the plan (the two clusters), a start and an end.
	var plan catalog.FleetRestorePlan
	if err := catalog.ReadFleetRestoreRecord(ctx, st, layout.FleetRestorePlanKey(run), &plan); err != nil || len(plan.Clusters) != 3 ||
		plan.Fingerprint != catalog.FleetRestoreFingerprint(catalog.FleetRestoreRequest{}) {
		t.Errorf("plan %+v: %v", plan, err)
	}
	var end catalog.FleetRestoreAttempt
	if err := catalog.ReadFleetRestoreRecord(ctx, st, layout.FleetRestoreAttemptKey(run, rep.Runs[0].Attempt, true), &end); err != nil ||
		end.Verified != 2 || len(end.Failed) != 1 || !strings.HasPrefix(end.Failed[0], noBackup.Name+": "+kube.OpStepSelect+": ") || end.Ended.IsZero() {
		t.Errorf("end record %+v: %v", end, err)
	}
	// Steps were reported for each restored cluster, through verification.
	for _, fc := range []kubetest.Cluster{minority, allLost} {
		var seen []string
		for _, s := range steps {
			if s.Cluster == fc.Name {
				seen = append(seen, s.Step)
			}
		}
		if !slices.Contains(seen, kube.OpStepWait) || !slices.Contains(seen, kube.OpStepVerify) || seen[len(seen)-1] != fleet.StepDone {
			t.Errorf("%s: steps %v", fc.Name, seen)
		}
	}
	// Events: started and succeeded on each restored cluster (the second
	// on the restored EtcdCluster), none on the healthy one.
	for _, fc := range clusters {
		list, err := w.Admin.CoreV1().Events(restoreAllNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + fc.Name})
		if err != nil {
			t.Fatal(err)
		}
		var reasons []string
		for _, ev := range list.Items {
			reasons = append(reasons, ev.Reason)
		}
		slices.Sort(reasons)
		want := []string{kube.ReasonRestoreStarted, kube.ReasonRestoreSucceeded}
		if fc.Name == healthy.Name {
			want = nil
		}
		if !slices.Equal(reasons, want) {
			t.Errorf("%s: events %v, want %v", fc.Name, reasons, want)
		}
	}

	t.Run("Resume", func(t *testing.T) {
		// Both restored clusters lose quorum again. A run of the same
		// request was killed: its records say etcd-ra1 is done (the
		// EtcdCluster it restored: its uid), that etcd-ra0 is done too
		// (a record of another EtcdCluster: a stale or forged one), and
		// it had created etcd-ra2's EtcdRestore, which etcd-operator then
		// carried out. The rerun resumes that run: it does not skip
		// etcd-ra1, down again since, nor etcd-ra0, which is not the
		// EtcdCluster recorded: each a failed row naming why, untouched,
		// next a new run for it; it finishes etcd-ra2's restore (waits
		// for it, verifies it) rather than failing it or restoring it
		// again, and records it with its uid: a third attempt skips it
		// as done-earlier.
		for _, fc := range []kubetest.Cluster{minority, allLost} {
			for _, mem := range op.Wait(t, fc.Name, time.Second).Members {
				kubetest.MemberDown(t, ctx, w.Admin, restoreAllNS, fc.Name, mem)
			}
		}
		now := time.Now().UTC()
		old := catalog.NewFleetRestoreRunID(now)
		killedRestore(t, ctx, op, w, kube.OperatorRestoreOptions{Kube: sa, Cluster: allLost.Name, Store: st, Layout: layout, Bucket: bucket,
			Endpoint: m.Endpoint, ForcePathStyle: true, NoLive: true, ProbeTimeout: 2 * time.Second, DialTimeout: 2 * time.Second,
			PollInterval: 200 * time.Millisecond, TempDir: t.TempDir(), Annotations: map[string]string{fleet.AnnotationRun: old}})
		erKilled, err := w.Dyn.Resource(kube.EtcdRestoreGVR).Namespace(restoreAllNS).Get(ctx, allLost.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Cancelled after its EtcdRestore was created: the staged copy is
		// kept for etcd-operator unless the attempt saw the restored
		// cluster ready first; the rerun's adoption removes a kept one
		// (checked below).
		t.Logf("staged copies after the killed attempt: %v", testfix.Keys(t, st, layout.StagedPrefix(allLost.Name)))
		ecKilledUID := kubeUID(t, ctx, w, allLost.Name)
		restoresBefore := len(op.Records())
		req := catalog.FleetRestoreRequest{}
		writeRecord := func(key string, v any) {
			t.Helper()
			if err := catalog.WriteFleetRestoreRecord(ctx, st, key, v); err != nil {
				t.Fatal(err)
			}
		}
		writeRecord(layout.FleetRestorePlanKey(old), &catalog.FleetRestorePlan{Version: catalog.FleetRestorePlanVersion, Run: old, Namespace: restoreAllNS,
			Created: now, Request: req, Fingerprint: catalog.FleetRestoreFingerprint(req),
			Clusters: []catalog.FleetRestorePlanned{{Cluster: minority.Name, Action: fleet.ActionRestore}, {Cluster: allLost.Name, Action: fleet.ActionRestore}}})
		started := now.Add(-10 * time.Minute)
		// Killed (SIGKILL): a start record, no end record, its deadline
		// hours ahead, but its newest beat older than the grace: the
		// rerun resumes it without --take-over.
		killedAttempt := catalog.FleetRestoreAttempt{Run: old, Started: started, Deadline: now.Add(3 * time.Hour), Host: "killed", Parallel: 2}
		writeRecord(layout.FleetRestoreAttemptKey(old, started, false), &killedAttempt)
		for _, at := range []time.Time{started.Add(time.Minute), now.Add(-catalog.FleetRestoreHeartbeatGrace - time.Second)} {
			writeRecord(layout.FleetRestoreBeatKey(old, started, at), &catalog.FleetRestoreBeat{Run: old, Started: started, Beat: at, Host: "killed"})
		}
		ecBefore, err := w.Dyn.Resource(kube.EtcdClusterGVR).Namespace(restoreAllNS).Get(ctx, minority.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		writeRecord(layout.FleetRestoreDoneKey(old, minority.Name), &catalog.FleetRestoreDone{Run: old, Cluster: minority.Name, Action: fleet.ActionRestore,
			Backup: "b-earlier", Revision: 7, Verified: now, UID: string(ecBefore.GetUID())})
		writeRecord(layout.FleetRestoreDoneKey(old, healthy.Name), &catalog.FleetRestoreDone{Run: old, Cluster: healthy.Name, Action: fleet.ActionRestore,
			Backup: "b-forged", Revision: 7, Verified: now, UID: "not-its-uid"})
		erBefore, err := w.Dyn.Resource(kube.EtcdRestoreGVR).Namespace(restoreAllNS).Get(ctx, minority.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}

		rep, err := fleet.RestoreAll(ctx, opts)
		if !errors.As(err, &rae) || strings.Join(slices.Sorted(slices.Values(rae.Failed)), ",") != restoreAllNS+"/"+healthy.Name+","+restoreAllNS+"/"+minority.Name+","+restoreAllNS+"/"+noBackup.Name {
			t.Fatalf("rerun: %v, want etcd-ra3 failed again, etcd-ra1 and etcd-ra0 failed at the done check\n%+v", err, rep)
		}
		if len(rep.Runs) != 1 || rep.Runs[0].Run != old || !rep.Runs[0].Resumed {
			t.Fatalf("runs %+v, want run %s resumed", rep.Runs, old)
		}
		rows := map[string]fleet.RestoreAllRow{}
		for _, r := range rep.Clusters {
			rows[r.Cluster] = r
		}
		if r := rows[minority.Name]; r.Outcome != fleet.OutcomeFailed || r.FailedStep != fleet.StepDoneCheck || r.Run != old ||
			!strings.Contains(r.Cause, "restored by run "+old) || !strings.Contains(r.Cause, "quorum lost again since") ||
			!strings.Contains(r.NextStep, "--new-run --cluster "+minority.Name) {
			t.Errorf("the done cluster down again: %+v", r)
		}
		if r := rows[healthy.Name]; r.Outcome != fleet.OutcomeFailed || r.FailedStep != fleet.StepDoneCheck ||
			!strings.Contains(r.Cause, "not the EtcdCluster run "+old+" restored") || !strings.Contains(r.NextStep, "--new-run --cluster "+healthy.Name) {
			t.Errorf("the cluster with another EtcdCluster's done record: %+v", r)
		}
		if r := rows[allLost.Name]; r.Outcome != fleet.OutcomeRestored || r.Run != old || r.Revision < 1_000_000_000 {
			t.Errorf("the killed attempt's cluster: %+v", r)
		}
		// Finished, not restored again: the same EtcdRestore, no new
		// restore by the operator.
		if er, err := w.Dyn.Resource(kube.EtcdRestoreGVR).Namespace(restoreAllNS).Get(ctx, allLost.Name, metav1.GetOptions{}); err != nil || er.GetUID() != erKilled.GetUID() {
			t.Errorf("the killed attempt's EtcdRestore was replaced: %v", err)
		}
		if n := len(op.Records()); n != restoresBefore {
			t.Errorf("the operator restored %d more times, want none", n-restoresBefore)
		}
		ecAfter, err := w.Dyn.Resource(kube.EtcdClusterGVR).Namespace(restoreAllNS).Get(ctx, minority.Name, metav1.GetOptions{})
		if err != nil || ecAfter.GetUID() != ecBefore.GetUID() || ecAfter.GetResourceVersion() != ecBefore.GetResourceVersion() {
			t.Errorf("the done cluster's EtcdCluster changed: %v", err)
		}
		erAfter, err := w.Dyn.Resource(kube.EtcdRestoreGVR).Namespace(restoreAllNS).Get(ctx, minority.Name, metav1.GetOptions{})
		if err != nil || erAfter.GetUID() != erBefore.GetUID() {
			t.Errorf("the done cluster's EtcdRestore changed: %v", err)
		}
		var doneLost catalog.FleetRestoreDone
		lostUID := kubeUID(t, ctx, w, allLost.Name)
		if err := catalog.ReadFleetRestoreRecord(ctx, st, layout.FleetRestoreDoneKey(old, allLost.Name), &doneLost); err != nil ||
			doneLost.UID == "" || types.UID(doneLost.UID) != lostUID {
			t.Errorf("the restored cluster's done record in the resumed run: %+v (the EtcdCluster's uid %s, the killed attempt's %s): %v", doneLost, lostUID, ecKilledUID, err)
		}
		// A third attempt: run old is complete (a done record for each
		// cluster it planned), so it resumes the first run, unfinished
		// (etcd-ra3 failed): its done record of etcd-ra2 speaks for the
		// EtcdCluster that run restored, which the killed attempt's
		// restore has since replaced: a stale record, a failed row;
		// etcd-ra1, that run's EtcdCluster, lost quorum again: a failed
		// row. Nothing is restored.
		rep, _ = fleet.RestoreAll(ctx, opts)
		for _, r := range rep.Clusters {
			rows[r.Cluster] = r
		}
		if len(rep.Runs) != 1 || rep.Runs[0].Run != run || !rep.Runs[0].Resumed {
			t.Errorf("third attempt: runs %+v, want %s resumed", rep.Runs, run)
		}
		if r := rows[allLost.Name]; r.Outcome != fleet.OutcomeFailed || r.FailedStep != fleet.StepDoneCheck ||
			!strings.Contains(r.Cause, "not the EtcdCluster run "+run+" restored") || !strings.Contains(r.Cause, string(lostUID)) {
			t.Errorf("third attempt, %s (a stale done record): %+v", allLost.Name, r)
		}
		if r := rows[minority.Name]; r.Outcome != fleet.OutcomeFailed || !strings.Contains(r.Cause, "quorum lost again since") {
			t.Errorf("third attempt, %s: %+v", minority.Name, r)
		}
		if n := len(op.Records()); n != restoresBefore {
			t.Errorf("the operator restored %d more times, want none", n-restoresBefore)
		}
		if keys := testfix.Keys(t, st, layout.StagedPrefix(allLost.Name)); len(keys) != 0 {
			t.Errorf("the adopted restore is verified but its staged copy is still there: %v", keys)
		}
		// A second process on the same request while another attempt is
		// in progress (it started after the rerun above and beat since) is
		// refused, naming the host and its last beat; once its beats are
		// older than the grace, it is not (the rerun above).
		started2 := time.Now().UTC()
		writeRecord(layout.FleetRestoreAttemptKey(old, started2, false), &catalog.FleetRestoreAttempt{Run: old, Started: started2,
			Deadline: started2.Add(time.Hour), Host: "other-pod", Parallel: 2})
		beat2 := started2.Add(time.Second).Truncate(time.Second)
		writeRecord(layout.FleetRestoreBeatKey(old, started2, beat2), &catalog.FleetRestoreBeat{Run: old, Started: started2, Beat: beat2, Host: "other-pod"})
		_, err = fleet.RestoreAll(ctx, opts)
		var ip *fleet.InProgressError
		if !errors.As(err, &ip) || ip.Host != "other-pod" || ip.Run != old || !ip.LastBeat.Equal(beat2) || !strings.Contains(err.Error(), "other-pod") ||
			!strings.Contains(err.Error(), "--take-over") {
			t.Errorf("overlapping run: %v, want refused", err)
		}
		// A dry run changes nothing: it is not refused.
		dry := opts
		dry.DryRun, dry.OnStep = true, nil
		if _, err := fleet.RestoreAll(ctx, dry); errors.As(err, &ip) {
			t.Errorf("a dry run while an attempt is in progress: %v", err)
		}
		// A run of another request (one cluster) is refused as well: two
		// at once would restore the same clusters.
		one := opts
		one.Names = []string{minority.Name}
		if _, err := fleet.RestoreAll(ctx, one); !errors.As(err, &ip) || ip.Host != "other-pod" {
			t.Errorf("a run of another request while an attempt is in progress: %v, want refused", err)
		}
		// That attempt ends: the next subtests' runs are not refused.
		ended := catalog.FleetRestoreAttempt{Run: old, Started: started2, Deadline: started2.Add(time.Hour), Host: "other-pod", Parallel: 2, Ended: time.Now().UTC()}
		writeRecord(layout.FleetRestoreAttemptKey(old, started2, true), &ended)
	})

	t.Run("Selection", func(t *testing.T) {
		// --cluster and --selector narrow the selection (dry runs: the
		// plan only, no record).
		ec, err := w.Dyn.Resource(kube.EtcdClusterGVR).Namespace(restoreAllNS).Get(ctx, noBackup.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ec.SetLabels(map[string]string{"tier": "gold"})
		if _, err := w.Dyn.Resource(kube.EtcdClusterGVR).Namespace(restoreAllNS).Update(ctx, ec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		keysBefore := testfix.Keys(t, st, layout.RestoresPrefix())
		for _, tc := range []struct {
			names    []string
			selector string
			want     string
		}{
			{[]string{healthy.Name, minority.Name}, "", "etcd-ra1=planned etcd-ra0=healthy"},
			{nil, "tier=gold", "etcd-ra3=planned"},
			{nil, "tier!=gold", "etcd-ra1=planned etcd-ra0=healthy etcd-ra2=healthy"},
			{[]string{"etcd-nope"}, "", "etcd-nope=failed"},
		} {
			o := opts
			o.DryRun, o.Names, o.Selector, o.OnStep = true, tc.names, tc.selector, nil
			rep, err := fleet.RestoreAll(ctx, o)
			if err != nil && !strings.Contains(tc.want, "failed") {
				t.Errorf("%v %q: %v", tc.names, tc.selector, err)
				continue
			}
			var got []string
			for _, r := range rep.Clusters {
				got = append(got, r.Cluster+"="+r.Outcome)
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("--cluster %v --selector %q: %v, want %s", tc.names, tc.selector, got, tc.want)
			}
		}
		if keysAfter := testfix.Keys(t, st, layout.RestoresPrefix()); !slices.Equal(keysAfter, keysBefore) {
			t.Errorf("dry runs wrote records: %v -> %v", keysBefore, keysAfter)
		}
	})

	t.Run("BadNamespace", func(t *testing.T) {
		// Two namespaces, one of which the toolkit's account cannot read
		// (no RBAC there: its EtcdClusters cannot be listed): that one is
		// a namespace error in the report and the error, and the other is
		// planned all the same (a dry run: nothing changes).
		other, err := kube.New(kube.Config{Rest: w.K.RestConfig(kubetest.SAToken(t, w.Admin, restoreAllNS, "etcd-recovery-toolkit")), Namespace: "kubx-etcd-79"})
		if err != nil {
			t.Fatal(err)
		}
		o := opts
		o.DryRun, o.OnStep = true, nil
		o.Namespaces = []fleet.RestoreAllNamespace{{Kube: other, Store: st, Layout: catalog.Layout{Prefix: prefix + "-79"}}, opts.Namespaces[0]}
		rep, err := fleet.RestoreAll(ctx, o)
		var rae *fleet.RestoreAllError
		if !errors.As(err, &rae) || !strings.Contains(err.Error(), "kubx-etcd-79") {
			t.Fatalf("restore-all with an unreadable namespace: %v, want a RestoreAllError naming it", err)
		}
		if rep == nil || len(rep.NamespaceErrors) != 1 || rep.NamespaceErrors[0].Namespace != "kubx-etcd-79" || rep.NamespaceErrors[0].Step != fleet.StepNamespace ||
			!strings.Contains(rep.NamespaceErrors[0].Error, "etcdclusters") {
			t.Fatalf("namespace errors: %+v", rep)
		}
		planned := 0
		for _, r := range rep.Clusters {
			if r.Namespace != restoreAllNS {
				t.Errorf("a row of the unreadable namespace: %+v", r)
			}
			if r.Outcome == fleet.OutcomePlanned {
				planned++
			}
		}
		if planned == 0 || len(rep.Runs) != 1 || rep.Runs[0].Namespace != restoreAllNS {
			t.Errorf("the readable namespace was not planned: runs %+v, rows %+v", rep.Runs, rep.Clusters)
		}
	})

	t.Run("Unreachable", func(t *testing.T) {
		// No member answers, and only Kubernetes can tell down from
		// unreachable. etcd-ru0's member is gone but its pod says Ready
		// (the pod's IP and port: nothing listens there); etcd-ru1's
		// member is frozen (SIGSTOP) with its pod Ready: both are what a
		// broken network on the toolkit's node looks like, and neither
		// is restored (a failed row, next the unreachable runbook, no
		// EtcdRestore). etcd-ru2's member is down and its pod not Ready:
		// restored. etcd-ru3 was down at discovery (pod not Ready), and
		// its member comes back while etcd-ru2 is restored (--parallel
		// 1, etcd-ru2 first): when its turn comes its health is judged
		// again and it is left alone, recovered while queued.
		var ru []kubetest.Cluster
		for i := range 4 {
			fc := kubetest.AddEtcdCluster(t, w.Admin, w.Dyn, restoreAllNS, fmt.Sprintf("etcd-ru%d", i), testenv.EtcdOptions{IP: fmt.Sprintf("127.0.19.%d", 14+i), Members: 1})
			kubetest.PerClusterAccess(t, w.A, restoreAllNS, fc.Name)
			testenv.PutKeys(t, fc.Etcd.Client(t), "/registry/k", 20, 256)
			if _, err := backup.Run(ctx, backup.Options{ClusterID: fc.Name, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(fc.Etcd), Store: st, Layout: layout}); err != nil {
				t.Fatal(err)
			}
			op.Register(fc)
			ru = append(ru, fc)
		}
		gone, frozen, down, back := ru[0], ru[1], ru[2], ru[3]
		gone.Etcd.Members[0].Kill() // its pod stays Ready
		frozen.Etcd.Members[0].Freeze()
		t.Cleanup(frozen.Etcd.Members[0].Thaw)
		kubetest.MemberDown(t, ctx, w.Admin, restoreAllNS, down.Name, down.Etcd.Members[0])
		kubetest.MemberDown(t, ctx, w.Admin, restoreAllNS, back.Name, back.Etcd.Members[0])
		restoresOf := func() map[string]int {
			n := map[string]int{}
			for _, rec := range op.Records() {
				n[rec.Cluster]++
			}
			return n
		}
		before := restoresOf()

		o := opts
		o.Names, o.Parallel, o.First = []string{gone.Name, frozen.Name, down.Name, back.Name}, 1, []string{down.Name}
		atWait, revived := make(chan struct{}), make(chan struct{})
		var once sync.Once
		o.OnStep = func(s fleet.RestoreAllStep) {
			if s.Cluster == down.Name && s.Step == kube.OpStepWait {
				once.Do(func() {
					close(atWait)
					<-revived
				})
			}
		}
		type result struct {
			rep *fleet.RestoreAllReport
			err error
		}
		res := make(chan result, 1)
		go func() {
			rep, err := fleet.RestoreAll(ctx, o)
			res <- result{rep, err}
		}()
		var got result
		select {
		case <-atWait:
			// etcd-ru3's member is back, and its pod Ready, while
			// etcd-ru2 is restored.
			back.Etcd.Members[0].Start(t)
			kubetest.SetMemberReady(t, ctx, w.Admin, restoreAllNS, back.Name, back.Etcd.Members[0].ClientURL, true)
			close(revived)
			got = <-res
		case got = <-res:
			t.Errorf("the run ended before etcd-ru2's restore waited for etcd-operator: %v", got.err)
		}
		rows := map[string]fleet.RestoreAllRow{}
		for _, r := range got.rep.Clusters {
			rows[r.Cluster] = r
		}
		var rae *fleet.RestoreAllError
		if !errors.As(got.err, &rae) || strings.Join(slices.Sorted(slices.Values(rae.Failed)), ",") != restoreAllNS+"/"+gone.Name+","+restoreAllNS+"/"+frozen.Name {
			t.Errorf("restore-all: %v, want etcd-ru0 and etcd-ru1 failed\n%+v", got.err, rows)
		}
		for _, fc := range []kubetest.Cluster{gone, frozen} {
			r := rows[fc.Name]
			if r.Outcome != fleet.OutcomeFailed || r.FailedStep != fleet.StepProbe || r.NextStep != inspect.RunbookUnreachable ||
				!strings.Contains(r.Cause, "1/1 member pods Running and Ready") || !strings.Contains(r.Cause, "cannot reach") ||
				!strings.Contains(r.Cause, fc.Name) || !strings.HasSuffix(r.Health, ": unreachable") {
				t.Errorf("%s (pod Ready, no member answers): %+v", fc.Name, r)
			}
			if _, err := w.Dyn.Resource(kube.EtcdRestoreGVR).Namespace(restoreAllNS).Get(ctx, fc.Name, metav1.GetOptions{}); err == nil {
				t.Errorf("%s: an EtcdRestore was created for a cluster the toolkit cannot reach", fc.Name)
			}
			if uid := kubeUID(t, ctx, w, fc.Name); uid != fc.UID {
				t.Errorf("%s: EtcdCluster replaced", fc.Name)
			}
		}
		if len(got.rep.Warnings) != 1 || !strings.Contains(got.rep.Warnings[0], "toolkit's own network") {
			t.Errorf("warnings %q, want one naming the toolkit's network (no member of any cluster answered)", got.rep.Warnings)
		}
		if r := rows[down.Name]; r.Outcome != fleet.OutcomeRestored || !strings.Contains(r.Health, "0/1 member pods Running and Ready: quorum lost") {
			t.Errorf("%s (pod not Ready): %+v", down.Name, r)
		}
		if r := rows[back.Name]; r.Outcome != fleet.OutcomeHealthy || r.Action != "" || !strings.Contains(r.Cause, "recovered while queued") {
			t.Errorf("%s (back while queued): %+v", back.Name, r)
		}
		if uid := kubeUID(t, ctx, w, back.Name); uid != back.UID {
			t.Errorf("%s: EtcdCluster replaced although it recovered", back.Name)
		}
		after := restoresOf()
		for _, fc := range ru {
			if want := map[bool]int{true: 1}[fc.Name == down.Name]; after[fc.Name]-before[fc.Name] != want {
				t.Errorf("the operator restored %s %d times, want %d", fc.Name, after[fc.Name]-before[fc.Name], want)
			}
		}
	})
}

// kubeUID is the uid of the EtcdCluster name of the test's namespace ("":
// none).
func kubeUID(t *testing.T, ctx context.Context, w *kubetest.RBACWorld, name string) types.UID {
	t.Helper()
	ec, err := w.Dyn.Resource(kube.EtcdClusterGVR).Namespace(restoreAllNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return ec.GetUID()
}

// killedRestore plays a restore-all attempt killed while etcd-operator
// carried out the EtcdRestore it created: kube.OperatorRestore with o
// (its run's annotation) is cancelled as soon as the operator has acted on
// the new EtcdRestore, before the tool verified anything.
func killedRestore(t *testing.T, ctx context.Context, op *kubetest.RestoreOperator, w *kubetest.RBACWorld, o kube.OperatorRestoreOptions) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	finished := func() int {
		n := 0
		for _, r := range op.Records() {
			if r.NewUID != "" || r.Err != nil {
				n++
			}
		}
		return n
	}
	before := finished()
	go func() {
		_, err := kube.OperatorRestore(rctx, o)
		done <- err
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for finished() == before {
		if time.Now().After(deadline) {
			t.Fatal("the operator did not act on the killed attempt's EtcdRestore")
		}
		select {
		case err := <-done:
			t.Fatalf("the restore returned before the operator acted: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the killed restore: %v, want cancelled", err)
	}
	ec, err := w.Dyn.Resource(kube.EtcdClusterGVR).Namespace(o.Kube.Namespace).Get(ctx, o.Cluster, metav1.GetOptions{})
	if err != nil {
		t.Logf("after the kill: etcdcluster %s: %v (etcd-operator recreates it)", o.Cluster, err)
	} else {
		t.Logf("after the kill: etcdcluster %s uid %s", o.Cluster, ec.GetUID())
	}
}
