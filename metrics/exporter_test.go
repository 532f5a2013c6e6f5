package metrics_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/metrics"
)

const exporterNS = "kubx-etcd-20"

// TestExporter runs the exporter against a real kube-apiserver (the
// toolkit's service account and RBAC), real etcd clusters described as
// EtcdClusters and a MinIO bucket holding their backups: its numbers are
// compared with `list -o json` and `inspect --all -o json` of the tool
// for the same state.
func TestExporter(t *testing.T) {
	ctx := ctxT(t, 10*time.Minute)
	w := kubetest.NewWorld(t, exporterNS)
	k, admin, dyn, a := w.K, w.Admin, w.Dyn, w.Applier
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	prefix := testenv.Prefix(t)
	kubetest.CreateCOSSecret(t, admin, exporterNS, m)
	good := kubetest.AddEtcdCluster(t, admin, dyn, exporterNS, "etcd-good", testenv.EtcdOptions{IP: "127.0.20.10", Members: 3})
	degraded := kubetest.AddEtcdCluster(t, admin, dyn, exporterNS, "etcd-degraded", testenv.EtcdOptions{IP: "127.0.20.11", Members: 3})
	never := kubetest.AddEtcdCluster(t, admin, dyn, exporterNS, "etcd-never", testenv.EtcdOptions{IP: "127.0.20.12", Members: 1})
	for _, c := range []kubetest.Cluster{good, degraded, never} {
		kubetest.PerClusterAccess(t, a, exporterNS, c.Name)
		testenv.PutKeys(t, c.Etcd.Client(t), "/registry/k", 200, 256)
	}
	token := w.Token(t, "etcd-recovery-exporter")
	sa := w.Kube(t, token)
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}

	// The state: scheduled backups of etcd-good and etcd-degraded (two of
	// etcd-degraded's, the newer one damaged: its snapshot deleted), a
	// manual one of etcd-good, an incomplete folder, drills (etcd-good's
	// passed, etcd-degraded's failed), an orphan prefix (backups, no
	// EtcdCluster), and nothing at all for etcd-never (its CronJob never
	// ran). Then one member of etcd-degraded is killed.
	backupAll := func(kind catalog.Kind, names ...string) *fleet.BackupAllReport {
		t.Helper()
		rep, err := fleet.BackupAll(ctx, fleet.BackupAllOptions{Kube: sa, Names: names, NoEvents: true,
			Template:    backup.Options{Kind: kind, Store: st, Layout: layout, ProbeTimeout: 5 * time.Second},
			DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("backups of %v: %v", names, err)
		}
		return rep
	}
	backupAll(catalog.KindScheduled, good.Name, degraded.Name)
	backupAll(catalog.KindManual, good.Name)
	dmg := backupAll(catalog.KindScheduled, degraded.Name).Clusters[0].Manifest
	if err := st.Delete(ctx, []string{layout.Key(degraded.Name, dmg.Name, dmg.Snapshot.Object)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, layout.Key(good.Name, catalog.NewBackupName(time.Now(), catalog.KindScheduled), catalog.StartedObject), strings.NewReader("started")); err != nil {
		t.Fatal(err)
	}
	putDrill := func(cluster string, passed bool, failed string) {
		t.Helper()
		entries, err := catalog.Inventory(ctx, st, layout, cluster)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Committed && e.Kind == catalog.KindScheduled && e.Name != dmg.Name {
				r := &catalog.DrillRecord{ClusterID: cluster, Backup: e.Name, Passed: passed, Failed: failed,
					StartedAt: time.Now().Add(-10 * time.Second).UTC(), FinishedAt: time.Now().UTC(), ToolVersion: "test",
					Comparison: catalog.DrillComparison{Mode: catalog.CompareSource}}
				if err := catalog.PutDrill(ctx, st, layout, r); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
		t.Fatalf("no scheduled backup of %s", cluster)
	}
	putDrill(good.Name, true, "")
	putDrill(degraded.Name, false, "compare with source: HashKV differs")
	src, err := catalog.LoadManifest(ctx, st, layout, good.Name, firstCommitted(t, st, layout, good.Name))
	if err != nil {
		t.Fatal(err)
	}
	copyBackup(t, st, layout, src, "etcd-orphan", time.Now().Add(-48*time.Hour), catalog.KindScheduled)
	for _, mem := range degraded.Etcd.Members {
		if mem != degraded.Etcd.Leader(t) {
			mem.Kill()
			break
		}
	}

	var clockMu sync.Mutex
	clock := time.Now()
	now := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	exp := newExporter(t, metrics.Options{Kube: sa, Store: st, Layout: layout, Interval: time.Hour, Deadline: 30 * time.Second,
		ProbeTimeout: 5 * time.Second, DialTimeout: 5 * time.Second, Now: now})
	start := time.Now()
	if err := exp.Refresh(ctx); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	t.Logf("one refresh of 4 clusters (3 EtcdClusters, 1 orphan): %v", time.Since(start))
	mfs, body := scrape(t, exp)

	tool := testfix.Tool(t)
	kc := k.Kubeconfig(t, token, exporterNS)
	runTool := func(args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, tool, args...)
		cmd.Env = toolEnv()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return stdout.Bytes()
	}
	cosArgs := []string{"--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix}

	t.Run("MatchesList", func(t *testing.T) {
		for _, cluster := range []string{good.Name, degraded.Name, never.Name, "etcd-orphan"} {
			// list reads COS credentials from the environment or a
			// directory: give it MinIO's through a directory.
			var rows prune.ListRows
			out := runTool(append([]string{"list", "--cluster-id", cluster, "-o", "json", "--cos-credentials-dir", credsDir(t, m)}, cosArgs...)...)
			if err := json.Unmarshal(out, &rows); err != nil {
				t.Fatalf("list %s: %v\n%s", cluster, err, out)
			}
			if cluster == "etcd-orphan" {
				// Backups and no EtcdCluster: an orphan, never a
				// cluster, and none of a cluster's series.
				if n := series(mfs, metrics.NameClusterInfo, cluster) + series(mfs, metrics.NameBackupLastSuccess, cluster) +
					series(mfs, metrics.NameBackupsDamaged, cluster); n != 0 {
					t.Errorf("etcd-orphan (no EtcdCluster): %d series of a cluster, want none", n)
				}
				if v, ok := value(mfs, metrics.NameOrphanInfo, "cluster", cluster, "state", "report_only"); !ok || v != 1 || len(rows) == 0 {
					t.Errorf("etcd-orphan: orphan_info{state=report_only} %v %v (list shows %d backups)", v, ok, len(rows))
				}
				continue
			}
			if v, ok := value(mfs, metrics.NameClusterInfo, "cluster", cluster); !ok || v != 1 {
				t.Errorf("%s: cluster_info %v %v, want 1", cluster, v, ok)
			}
			var incomplete, damaged int
			newest := map[catalog.Kind]prune.ListRow{}
			var drillLast, drillPass time.Time
			drillPassed := false
			for _, r := range rows {
				switch {
				case r.Status == "incomplete":
					incomplete++
				case strings.HasPrefix(r.Status, "damaged"):
					damaged++
				case r.Status == "committed":
					if _, ok := newest[r.Kind]; !ok {
						newest[r.Kind] = r
					}
				}
				if d := r.Drill; d != nil && d.At != nil && d.Error == "" {
					if d.At.After(drillLast) {
						drillLast, drillPassed = *d.At, d.Passed
					}
					if d.Passed && d.At.After(drillPass) {
						drillPass = *d.At
					}
				}
			}
			check := func(name string, want float64, labels ...string) {
				t.Helper()
				got, ok := value(mfs, name, labels...)
				if !ok || got != want {
					t.Errorf("%s%v = %v (present %v), list says %v", name, labels, got, ok, want)
				}
			}
			check(metrics.NameBackupsIncomplete, float64(incomplete), "cluster", cluster)
			check(metrics.NameBackupsDamaged, float64(damaged), "cluster", cluster)
			for _, kind := range catalog.Kinds {
				r, ok := newest[kind]
				if !ok {
					if _, present := value(mfs, metrics.NameBackupLastSuccess, "cluster", cluster, "kind", string(kind)); present {
						t.Errorf("%s: a %s backup time exported, list has none", cluster, kind)
					}
					continue
				}
				check(metrics.NameBackupLastSuccess, float64(r.Time.UnixNano())/1e9, "cluster", cluster, "kind", string(kind))
				check(metrics.NameBackupLastRevision, float64(r.Revision), "cluster", cluster, "kind", string(kind))
				check(metrics.NameBackupStoredBytes, float64(r.StoredSize), "cluster", cluster, "kind", string(kind))
			}
			if drillLast.IsZero() {
				if _, present := value(mfs, metrics.NameDrillLastResult, "cluster", cluster); present {
					t.Errorf("%s: a drill result exported, list shows no drill", cluster)
				}
			} else {
				check(metrics.NameDrillLastTimestamp, float64(drillLast.UnixNano())/1e9, "cluster", cluster)
				check(metrics.NameDrillLastResult, map[bool]float64{true: 1, false: 0}[drillPassed], "cluster", cluster)
			}
			if !drillPass.IsZero() {
				check(metrics.NameDrillLastPass, float64(drillPass.UnixNano())/1e9, "cluster", cluster)
			}
		}
		// The state is what was built (so the comparison above compared
		// something): etcd-degraded has one damaged backup, etcd-good an
		// incomplete one, a passed drill, scheduled and manual backups.
		for _, c := range []struct {
			name  string
			want  float64
			label []string
		}{
			{metrics.NameBackupsDamaged, 1, []string{"cluster", degraded.Name}},
			{metrics.NameBackupsIncomplete, 1, []string{"cluster", good.Name}},
			{metrics.NameDrillLastResult, 1, []string{"cluster", good.Name}},
			{metrics.NameDrillLastResult, 0, []string{"cluster", degraded.Name}},
		} {
			if v, ok := value(mfs, c.name, c.label...); !ok || v != c.want {
				t.Errorf("%s%v = %v (present %v), want %v", c.name, c.label, v, ok, c.want)
			}
		}
		if n := series(mfs, metrics.NameBackupLastSuccess, good.Name); n != 2 {
			t.Errorf("etcd-good: %d backup kinds exported, want 2 (scheduled, manual)", n)
		}
		if n := series(mfs, metrics.NameBackupLastSuccess, never.Name); n != 0 {
			t.Errorf("etcd-never: %d backup series, want none (never backed up)", n)
		}
		if n := series(mfs, metrics.NameInspectVerdict, "etcd-orphan"); n != 0 {
			t.Errorf("etcd-orphan (no EtcdCluster): %d verdict series, want none", n)
		}
	})

	t.Run("MatchesInspectAll", func(t *testing.T) {
		var rep fleet.InspectAllReport
		out := runTool("inspect", "--all", "-o", "json", "--kubeconfig", kc, "--namespace", exporterNS, "--probe-timeout", "2s", "--dial-timeout", "2s")
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("inspect --all: %v\n%s", err, out)
		}
		if len(rep.Clusters) != 3 {
			t.Fatalf("inspect --all: %d clusters, want 3\n%s", len(rep.Clusters), out)
		}
		verdicts := map[string]inspect.VerdictKind{}
		for _, r := range rep.Clusters {
			verdicts[r.Cluster] = r.Verdict
			want := strings.ReplaceAll(strings.ToLower(string(r.Verdict)), " ", "_")
			for _, v := range metrics.Verdicts {
				got, ok := value(mfs, metrics.NameInspectVerdict, "cluster", r.Cluster, "verdict", v)
				if !ok || got != map[bool]float64{true: 1, false: 0}[v == want] {
					t.Errorf("%s: verdict %s = %v (present %v); inspect --all says %s", r.Cluster, v, got, ok, r.Verdict)
				}
			}
			for name, want := range map[string]float64{metrics.NameMembers: float64(r.Voting), metrics.NameMembersUp: float64(r.Up), metrics.NameDBSize: float64(r.DBSize)} {
				if got, ok := value(mfs, name, "cluster", r.Cluster); !ok || got != want {
					t.Errorf("%s: %s = %v (present %v); inspect --all says %v", r.Cluster, name, got, ok, want)
				}
			}
		}
		if verdicts[good.Name] != inspect.VerdictHealthy || verdicts[degraded.Name] != inspect.VerdictDegraded {
			t.Errorf("verdicts %v: want etcd-good HEALTHY, etcd-degraded DEGRADED", verdicts)
		}
	})

	t.Run("PromtoolCheckMetrics", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, testenv.Promtool(t), "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool check metrics: %v\n%s\nscrape:\n%s", err, out, body)
		}
	})

	t.Run("BackupAgeGrows", func(t *testing.T) {
		// No backup runs; the clock moves 10h between two refreshes: the
		// newest backup's time stays, the refresh time moves, so its age
		// (time() - etcd_recovery_backup_last_success_timestamp_seconds,
		// what EtcdBackupMissing computes) grew by 10h; etcd-never stays
		// known (cluster_info) with no backup series at all.
		mfs1, _ := scrape(t, exp)
		ts1, _ := value(mfs1, metrics.NameBackupLastSuccess, "cluster", good.Name, "kind", "scheduled")
		at1, _ := value(mfs1, metrics.NameRefreshLastSuccess)
		clockMu.Lock()
		clock = clock.Add(10 * time.Hour)
		clockMu.Unlock()
		if err := exp.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		mfs2, _ := scrape(t, exp)
		ts2, ok := value(mfs2, metrics.NameBackupLastSuccess, "cluster", good.Name, "kind", "scheduled")
		at2, _ := value(mfs2, metrics.NameRefreshLastSuccess)
		if !ok || ts1 == 0 || ts2 != ts1 {
			t.Fatalf("backup time %v then %v: want the same", ts1, ts2)
		}
		if age1, age2 := at1-ts1, at2-ts2; age2-age1 < 10*3600-60 {
			t.Fatalf("backup age %vs then %vs: want it 10h older", age1, age2)
		}
		if v, ok := value(mfs2, metrics.NameClusterInfo, "cluster", never.Name); !ok || v != 1 || series(mfs2, metrics.NameBackupLastSuccess, never.Name) != 0 {
			t.Fatalf("etcd-never: cluster_info %v %v, backups %d", v, ok, series(mfs2, metrics.NameBackupLastSuccess, never.Name))
		}
		// /healthz: 200 now; 503 once the last success is older than 3
		// intervals (+ the deadline).
		srv := httptest.NewServer(exp.Handler())
		defer srv.Close()
		code := func() int {
			resp, err := srv.Client().Get(srv.URL + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if c := code(); c != http.StatusOK {
			t.Fatalf("/healthz %d after a refresh, want 200", c)
		}
		clockMu.Lock()
		clock = clock.Add(3*time.Hour + 31*time.Second)
		clockMu.Unlock()
		if c := code(); c != http.StatusServiceUnavailable {
			t.Fatalf("/healthz %d 3h31s after the last refresh (interval 1h, deadline 30s), want 503", c)
		}
	})

	t.Run("FrozenMember", func(t *testing.T) {
		// A member that accepts connections and never answers (SIGSTOP):
		// the refresh still ends, inspect's own bound (3 × the probe
		// timeout per cluster) inside the refresh's deadline.
		frozen := good.Etcd.Members[0]
		frozen.Freeze()
		defer frozen.Thaw()
		// If the frozen member led, the other two elect a leader first
		// (slow on a loaded machine): the state under test is "two serve,
		// one is frozen", so wait for it.
		for _, m := range good.Etcd.Members[1:] {
			m.WaitReady(t)
		}
		// Probes of 3 s (a loaded machine answers within it), a deadline
		// of 15 s (inspect's own bound, 3 × the probe, fits in it).
		e := newExporter(t, metrics.Options{Kube: sa, Store: st, Layout: layout, Interval: time.Hour, Deadline: 15 * time.Second,
			ProbeTimeout: 3 * time.Second, DialTimeout: 3 * time.Second})
		start := time.Now()
		err := e.Refresh(ctx)
		took := time.Since(start)
		if took > 15*time.Second+2*time.Second {
			t.Fatalf("refresh took %v with a frozen member, deadline 15s", took)
		}
		t.Logf("refresh with a frozen member: %v (err %v)", took, err)
		if c := e.Snapshot().Cluster(good.Name); c == nil || c.Verdict == inspect.VerdictHealthy || c.Up != 2 {
			t.Fatalf("etcd-good with a frozen member: %+v, want 2 up and not HEALTHY", c)
		}
		// A deadline shorter than the probe of the frozen member: the
		// inspect step fails at the deadline, counted.
		e2 := newExporter(t, metrics.Options{Kube: sa, Interval: time.Hour, Deadline: 700 * time.Millisecond,
			ProbeTimeout: 3 * time.Second, DialTimeout: 3 * time.Second})
		start = time.Now()
		err = e2.Refresh(ctx)
		took = time.Since(start)
		if err == nil || !strings.Contains(err.Error(), metrics.StepInspect) || took > 700*time.Millisecond+2*time.Second {
			t.Fatalf("refresh with a frozen member and a 0.7s deadline: %v after %v; want the inspect step failed within 2.7s", err, took)
		}
		if n := e2.Errors()[metrics.StepInspect]; n != 1 {
			t.Fatalf("inspect errors %d, want 1", n)
		}
		mfs, _ := scrape(t, e2)
		if v, _ := value(mfs, metrics.NameRefreshErrors, "step", metrics.StepInspect); v != 1 {
			t.Fatalf("%s{step=inspect} = %v, want 1", metrics.NameRefreshErrors, v)
		}
		if _, ok := value(mfs, metrics.NameRefreshLastSuccess); ok {
			t.Fatal("last success exported without a successful refresh")
		}
	})

	t.Run("ServeCommand", func(t *testing.T) {
		// etcd-recovery serve as the toolkit runs it: /metrics after the
		// first refresh, /healthz 200, then SIGTERM: exit 0 at once.
		addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		cmd := exec.CommandContext(ctx, tool, "--log-format", "json", "serve", "--listen", addr, "--kubeconfig", kc, "--namespace", exporterNS,
			"--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix, "--cos-credentials-dir", credsDir(t, m),
			"--probe-timeout", "2s", "--refresh-timeout", "30s")
		cmd.Env = toolEnv()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("serve: /healthz not 200 within 30s (%v)\n%s", err, stderr.String())
			}
			time.Sleep(100 * time.Millisecond) // polling a server's readiness
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		mfs, err := p.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{good.Name, degraded.Name} {
			if v, ok := value(mfs, metrics.NameClusterInfo, "cluster", c); !ok || v != 1 {
				t.Errorf("serve: no cluster_info for %s", c)
			}
		}
		if n := series(mfs, metrics.NameClusterInfo, "etcd-orphan"); n != 0 || series(mfs, metrics.NameOrphanInfo, "etcd-orphan") != 1 {
			t.Errorf("serve: etcd-orphan (no EtcdCluster) has %d cluster_info series and %d orphan series, want 0 and 1",
				n, series(mfs, metrics.NameOrphanInfo, "etcd-orphan"))
		}
		if _, ok := value(mfs, metrics.NameRefreshLastSuccess); !ok {
			t.Errorf("serve: no %s", metrics.NameRefreshLastSuccess)
		}
		start := time.Now()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		if err != nil || time.Since(start) > 5*time.Second {
			t.Fatalf("serve after SIGTERM: %v after %v, want exit 0 at once\n%s", err, time.Since(start), stderr.String())
		}
	})

	t.Run("StaleClusterDisappears", func(t *testing.T) {
		if err := dyn.Resource(kube.EtcdClusterGVR).Namespace(exporterNS).Delete(ctx, never.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := exp.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		mfs, _ := scrape(t, exp)
		for _, name := range []string{metrics.NameClusterInfo, metrics.NameInspectVerdict, metrics.NameMembers, metrics.NameBackupsIncomplete} {
			if n := series(mfs, name, never.Name); n != 0 {
				t.Errorf("%s: %d series of the deleted etcd-never", name, n)
			}
		}
		if n := series(mfs, metrics.NameClusterInfo, good.Name); n != 1 {
			t.Errorf("etcd-good: %d cluster_info series, want 1", n)
		}
	})

	t.Run("BackupPushes", func(t *testing.T) {
		// backup --all --pushgateway: each cluster's outcome reaches the
		// receiver on the exporter's names; against a Pushgateway that
		// refuses, the backup still succeeds (exit 0) and the failure is
		// logged.
		rcv, url := startReceiver(t, http.StatusOK)
		args := []string{"backup", "--all", "--kind", "scheduled", "--no-events", "--kubeconfig", kc, "--namespace", exporterNS,
			"--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix, "--probe-timeout", "2s"}
		run := func(pgw string) (int, string, string) {
			t.Helper()
			cmd := exec.CommandContext(ctx, tool, append(args, "--pushgateway", pgw, "-o", "json")...)
			cmd.Env = toolEnv()
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			return code, stdout.String(), stderr.String()
		}
		code, stdout, stderr := run(url)
		if code != 0 {
			t.Fatalf("backup --all --pushgateway: exit %d\n%s\n%s", code, stdout, stderr)
		}
		var rep fleet.BackupAllReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("%v\n%s", err, stdout)
		}
		for _, c := range rep.Clusters {
			mfs, _ := rcv.group("/metrics/job/etcd-recovery-backup/namespace/" + exporterNS + "/cluster/" + c.Cluster + "/kind/scheduled")
			at, _, _ := catalog.ParseBackupName(c.Backup)
			if v, ok := value(mfs, metrics.NameBackupLastSuccess); !ok || v != float64(at.UnixNano())/1e9 {
				t.Errorf("%s: pushed backup time %v (present %v), the run says %s; pushed groups %v\n%s", c.Cluster, v, ok, c.Backup, rcv.paths(), stderr)
			}
			if v, ok := value(mfs, metrics.NameBackupLastRevision); !ok || v != float64(c.Revision) {
				t.Errorf("%s: pushed revision %v (present %v), the run says %d", c.Cluster, v, ok, c.Revision)
			}
		}
		if len(rep.Clusters) < 2 {
			t.Fatalf("backup --all: %d clusters", len(rep.Clusters))
		}
		_, refusing := startReceiver(t, http.StatusInternalServerError)
		code, stdout, stderr = run(refusing)
		if code != 0 || !strings.Contains(stderr, "push to the Pushgateway failed") {
			t.Fatalf("backup --all with a refusing Pushgateway: exit %d, want 0 and the failure logged\n%s\n%s", code, stdout, stderr)
		}
		if code, _, stderr := run("ftp://pgw"); code != 4 {
			t.Fatalf("--pushgateway ftp://pgw: exit %d, want 4\n%s", code, stderr)
		}
	})
}

// TestExporterFrozenStore: a store that accepts connections and never
// answers (MinIO stopped with SIGSTOP) never stalls a refresh past its
// deadline; the step is counted and the previous refresh's backups stay.
func TestExporterFrozenStore(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	m := testenv.StartMinIO(t)
	bucket := m.NewBucket(t)
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	st := testfix.Store(t, m, bucket, func(c *cos.Config) { c.StallTimeout = time.Minute })
	src := &catalog.Manifest{Format: catalog.ManifestFormat, RevisionBefore: 100,
		Snapshot: catalog.SnapshotInfo{Object: catalog.SnapshotObjectZstd, Compression: objectio.CompressZstd, StoredSize: 1000, RawSHA256: strings.Repeat("ab", 32)}}
	at := time.Now().Add(-time.Hour).UTC()
	cm := copyBackup(t, st, layout, src, "c1", at, catalog.KindScheduled)
	backupAt, _, err := catalog.ParseBackupName(cm.Name)
	if err != nil {
		t.Fatal(err)
	}
	e := refreshed(t, ctx, metrics.Options{Store: st, Layout: layout, Interval: time.Hour, Deadline: 3 * time.Second})
	want := float64(backupAt.UnixNano()) / 1e9
	if mfs, _ := scrape(t, e); series(mfs, metrics.NameBackupLastSuccess, "c1") != 1 {
		t.Fatalf("c1's backup not exported before the store froze")
	}
	m.Freeze()
	defer m.Thaw()
	start := time.Now()
	err = e.Refresh(ctx)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), metrics.StepListStore) {
		t.Fatalf("refresh against a frozen store: %v, want step %s failed", err, metrics.StepListStore)
	}
	if took > 3*time.Second+2*time.Second {
		t.Fatalf("refresh against a frozen store took %v, deadline 3s", took)
	}
	t.Logf("refresh against a frozen store: %v: %v", took, err)
	mfs, _ := scrape(t, e)
	if v, _ := value(mfs, metrics.NameRefreshErrors, "step", metrics.StepListStore); v != 1 {
		t.Fatalf("errors{step=list_store} = %v, want 1", v)
	}
	if v, ok := value(mfs, metrics.NameBackupLastSuccess, "cluster", "c1", "kind", "scheduled"); !ok || v != want {
		t.Fatalf("c1's backup time after a failed listing: %v %v, want the previous refresh's", v, ok)
	}
}

func firstCommitted(t testing.TB, st *cos.Store, layout catalog.Layout, cluster string) string {
	t.Helper()
	entries, err := catalog.Inventory(t.Context(), st, layout, cluster)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Committed {
			return e.Name
		}
	}
	t.Fatalf("no committed backup of %s", cluster)
	return ""
}
