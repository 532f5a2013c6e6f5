package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"filippo.io/age"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/dashtest"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/metrics"
)

const alertsNS = "kubx-etcd-22"

// TestExporterAlerts takes the exporter's real scrape, from a real
// kube-apiserver and MinIO, through `promtool test rules` against
// deploy/40-alerts.yaml, 11 h after the last backup (the exporter's clock
// is set there; the scrape's timestamps are moved so that promtool's
// time() is that clock). The world: etcd-live, a live EtcdCluster (a real
// etcd) whose newest backup is encrypted to a recipient whose identity is
// not mounted, with a future-dated backup and a staged plaintext copy left
// behind; etcd-gone, whose EtcdCluster was deleted and whose backups remain
// under a prefix the namespace does not own. Both were last drilled 30 h
// before. Alerts: EtcdBackupMissing and EtcdDrillOverdue for etcd-live
// only, nothing for etcd-gone but the info-level orphan alert, and the
// future-dated, undecryptable and staged-copy alerts for etcd-live.
func TestExporterAlerts(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 5*time.Minute)
	w := kubetest.NewWorld(t, alertsNS)
	k, admin, dyn, a := w.K, w.Admin, w.Dyn, w.Applier
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	st := testfix.Store(t, m, bucket)
	kubetest.CreateCOSSecret(t, admin, alertsNS, m)
	live := kubetest.AddEtcdCluster(t, admin, dyn, alertsNS, "etcd-live", testenv.EtcdOptions{IP: "127.0.20.20", Members: 1})
	kubetest.PerClusterAccess(t, a, alertsNS, live.Name)
	testenv.PutKeys(t, live.Etcd.Client(t), "/registry/k", 20, 64)
	gone := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kube.APIVersion, "kind": kube.KindEtcdCluster,
		"metadata": map[string]any{"name": "etcd-gone", "namespace": alertsNS},
		"spec":     map[string]any{"size": int64(1), "version": "3.5.35"},
	}}
	if _, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(alertsNS).Create(ctx, gone, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := w.Token(t, "etcd-recovery-exporter")
	sa := w.Kube(t, token)

	// Two age keys: backups are encrypted to "locked", the toolkit mounts
	// "mounted" only.
	mounted, locked := ageIdentity(t), ageIdentity(t)
	lockedTo, err := seal.ParseRecipients([]string{locked.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	backupOf := func(kind catalog.Kind, rs seal.Recipients) *catalog.Manifest {
		t.Helper()
		rep, err := fleet.BackupAll(ctx, fleet.BackupAllOptions{Kube: sa, Names: []string{live.Name}, NoEvents: true,
			Template:    backup.Options{Kind: kind, Store: st, Layout: layout, ProbeTimeout: 5 * time.Second, Recipients: rs},
			DialTimeout: 5 * time.Second})
		if err != nil || len(rep.Clusters) != 1 || rep.Clusters[0].Manifest == nil {
			t.Fatalf("backup of %s: %v %+v", live.Name, err, rep)
		}
		return rep.Clusters[0].Manifest
	}
	plain := backupOf(catalog.KindManual, seal.Recipients{})
	newest := backupOf(catalog.KindScheduled, lockedTo)
	last, _, err := catalog.ParseBackupName(newest.Name)
	if err != nil {
		t.Fatal(err)
	}
	// Older backups drilled 30 h ago, of both clusters; etcd-gone's newest
	// an hour before etcd-live's; a backup of etcd-live dated two days
	// ahead (a node's clock); a staged copy a killed restore left.
	var oldestAt time.Time
	for _, id := range []string{live.Name, "etcd-gone"} {
		old := copyBackup(t, st, layout, plain, id, last.Add(-31*time.Hour), catalog.KindScheduled)
		if id == live.Name {
			oldestAt, _, _ = catalog.ParseBackupName(old.Name)
		}
		r := &catalog.DrillRecord{ClusterID: id, Backup: old.Name, Passed: true, StartedAt: last.Add(-30*time.Hour - time.Minute).UTC(),
			FinishedAt: last.Add(-30 * time.Hour).UTC(), ToolVersion: "test", Comparison: catalog.DrillComparison{Mode: catalog.CompareSource}}
		if err := catalog.PutDrill(ctx, st, layout, r); err != nil {
			t.Fatal(err)
		}
	}
	copyBackup(t, st, layout, plain, "etcd-gone", last.Add(-time.Hour), catalog.KindScheduled)
	future := copyBackup(t, st, layout, plain, live.Name, time.Now().Add(48*time.Hour), catalog.KindScheduled)
	if _, err := st.Put(ctx, layout.StagedKey(live.Name, plain.Name), strings.NewReader("plaintext snapshot")); err != nil {
		t.Fatal(err)
	}
	if err := dyn.Resource(kube.EtcdClusterGVR).Namespace(alertsNS).Delete(ctx, "etcd-gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	now := last.Add(11 * time.Hour)
	// A journal of etcd-live whose newest stored revision was received
	// 20 min before the exporter's clock (lagging), and one of the deleted
	// cluster (no series, no page).
	journalAt := now.Add(-20 * time.Minute)
	for _, id := range []string{live.Name, "etcd-gone"} {
		h := journal.Header{Format: journal.FormatVersion, ClusterID: id, BaseBackup: newest.Name, BaseRev: newest.Revision(),
			FirstRev: newest.Revision() + 1, LastRev: newest.Revision() + 2,
			Received: map[int64]int64{newest.Revision() + 1: journalAt.Add(-time.Second).UnixMilli(), newest.Revision() + 2: journalAt.UnixMilli()}}
		evs := []journal.Event{{Rev: newest.Revision() + 1, Type: journal.Put, Key: []byte("/registry/j1"), Value: []byte("v"), CreateRev: newest.Revision() + 1, Version: 1},
			{Rev: newest.Revision() + 2, Type: journal.Delete, Key: []byte("/registry/j1")}}
		if _, err := journal.WriteSegment(ctx, st, layout, objectio.Encoding{Compression: objectio.CompressZstd}, h, evs); err != nil {
			t.Fatal(err)
		}
	}
	// Two gap records of etcd-live's journal, the newest found 2 h before
	// the exporter's clock (EtcdJournalGap fires), and one of the deleted
	// cluster (no series).
	gapAt := now.Add(-2 * time.Hour)
	putGap := func(id string, from int64, at time.Time) {
		t.Helper()
		b, err := json.Marshal(catalog.JournalGap{ClusterID: id, From: from, Reason: "watch compacted past", Time: at})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Put(ctx, layout.JournalGapKey(id, from), bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	putGap(live.Name, 3, last.Add(-40*time.Hour))
	putGap(live.Name, 5, gapAt)
	putGap("etcd-gone", 5, gapAt)
	mountedIDs := parseIdentities(t, mounted)
	opts := metrics.Options{Kube: sa, Store: st, Layout: layout, Interval: time.Hour, Deadline: 30 * time.Second,
		ProbeTimeout: 5 * time.Second, DialTimeout: 5 * time.Second, Now: func() time.Time { return now },
		Identities: func() (*seal.Identities, error) { return mountedIDs, nil }}
	exp := newExporter(t, opts)
	start := time.Now()
	if err := exp.Refresh(ctx); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	t.Logf("one refresh (1 EtcdCluster, 1 orphan, 1 decryption check): %v", time.Since(start))
	mfs, body := scrape(t, exp)

	t.Run("Series", func(t *testing.T) {
		want := []struct {
			name   string
			labels []string
			v      float64
		}{
			{metrics.NameClusterInfo, []string{"cluster", live.Name}, 1},
			{metrics.NameOrphanInfo, []string{"cluster", "etcd-gone", "state", "report_only"}, 1},
			{metrics.NameBackupLastSuccess, []string{"cluster", live.Name, "kind", "scheduled"}, float64(last.UnixNano()) / 1e9},
			{metrics.NameBackupsFutureDated, []string{"cluster", live.Name}, 1},
			{metrics.NameBackupUndecryptable, []string{"cluster", live.Name}, 1},
			{metrics.NameStagedCopies, []string{"cluster", live.Name}, 1},
			{metrics.NameJournalLastRevision, []string{"cluster", live.Name}, float64(newest.Revision() + 2)},
			{metrics.NameJournalLastReceived, []string{"cluster", live.Name}, msSeconds(journalAt)},
			{metrics.NameJournalGaps, []string{"cluster", live.Name}, 2},
			{metrics.NameJournalGapTimestamp, []string{"cluster", live.Name}, msSeconds(gapAt)},
		}
		for _, w := range want {
			if v, ok := value(mfs, w.name, w.labels...); !ok || !sameSeconds(v, w.v) {
				t.Errorf("%s%v = %v (present %v), want %v", w.name, w.labels, v, ok, w.v)
			}
		}
		// The newest backup of each kind's run, from its manifest (real
		// backups through fleet.BackupAll), and the restorable window's
		// start: the oldest backup that checks out (the copy dated 31 h
		// before the newest), not the future-dated one.
		for _, b := range []*catalog.Manifest{plain, newest} {
			d := b.FinishedAt.Sub(b.StartedAt)
			if d <= 0 || b.Snapshot.RawSize <= 0 {
				t.Fatalf("backup %s: startedAt %v finishedAt %v rawSize %d", b.Name, b.StartedAt, b.FinishedAt, b.Snapshot.RawSize)
			}
			if v, ok := value(mfs, metrics.NameBackupDuration, "cluster", live.Name, "kind", string(b.Kind)); !ok || math.Abs(v-d.Seconds()) > 1e-6 {
				t.Errorf("%s{%s} = %v (present %v), want %v (manifest %s)", metrics.NameBackupDuration, b.Kind, v, ok, d.Seconds(), b.Name)
			}
			want := float64(b.Snapshot.RawSize) / d.Seconds()
			if v, ok := value(mfs, metrics.NameBackupThroughput, "cluster", live.Name, "kind", string(b.Kind)); !ok || math.Abs(v-want) > want*1e-9 {
				t.Errorf("%s{%s} = %v (present %v), want %v", metrics.NameBackupThroughput, b.Kind, v, ok, want)
			}
		}
		if v, ok := value(mfs, metrics.NameRestorableFrom, "cluster", live.Name); !ok || v != float64(oldestAt.UnixNano())/1e9 {
			t.Errorf("%s = %v (present %v), want the oldest backup's time %v", metrics.NameRestorableFrom, v, ok, oldestAt)
		}
		futureAt, _, _ := catalog.ParseBackupName(future.Name)
		if v, ok := value(mfs, metrics.NameBackupFutureDatedLatest, "cluster", live.Name); !ok || v != float64(futureAt.UnixNano())/1e9 {
			t.Errorf("%s = %v (present %v), want the future-dated backup's time %v", metrics.NameBackupFutureDatedLatest, v, ok, futureAt)
		}
		// The deleted cluster is an orphan only: no series of a cluster.
		for name, mf := range mfs {
			if name == metrics.NameOrphanInfo {
				continue
			}
			for _, mm := range mf.Metric {
				for _, l := range mm.Label {
					if l.GetName() == "cluster" && l.GetValue() == "etcd-gone" {
						t.Errorf("a series %s of etcd-gone (no EtcdCluster): %v", name, mm.Label)
					}
				}
			}
		}
		// Never deleted (prefix not owned): no deletion time.
		if _, ok := value(mfs, metrics.NameOrphanDeleteAfter, "cluster", "etcd-gone"); ok {
			t.Errorf("%s of etcd-gone exported; the prefix is not owned: never deleted", metrics.NameOrphanDeleteAfter)
		}
	})

	t.Run("PromtoolTestRules", func(t *testing.T) {
		// The CronJob's Pushgateway group of etcd-gone stays after the
		// cluster is gone: it must not page either.
		extra := []promSeries{{Series: fmt.Sprintf(`etcd_recovery_backup_last_success_timestamp_seconds{job="etcd-recovery-backup",namespace=%q,cluster="etcd-gone",kind="scheduled"}`, alertsNS),
			ts: float64(last.Add(-time.Hour).Unix())}}
		firing := map[string][]string{
			"EtcdBackupMissing":            {live.Name},
			"EtcdDrillOverdue":             {live.Name},
			"EtcdBackupFutureDated":        {live.Name},
			"EtcdBackupUndecryptable":      {live.Name},
			"EtcdStagedCopyStale":          {live.Name},
			"EtcdBackupOrphanNeverDeleted": {"etcd-gone"},
			"EtcdJournalLagging":           {live.Name},
			"EtcdJournalGap":               {live.Name},
		}
		promtoolScrape(t, body, extra, now, firing, []string{"etcd-gone"})
	})

	t.Run("DashboardQueries", func(t *testing.T) {
		dashboardOnScrape(t, body, now, map[string]string{
			"Clusters not healthy/A":               "etcd-live is healthy",
			"Clusters without a journal/A":         "etcd-live has a journal",
			"Clusters without a journal (count)/A": "etcd-live has a journal",
			"Clusters without any backup/A":        "etcd-live has backups",
			"Failed drills and proofs/A":           "etcd-live's drill passed",
		}, 20)
	})

	t.Run("PromtoolCheckMetrics", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, testenv.Promtool(t), "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool check metrics: %v\n%s\nscrape:\n%s", err, out, body)
		}
	})

	t.Run("JournalGapReadOnce", func(t *testing.T) {
		// The newest gap record is read when it is new, not on every
		// refresh: rewritten in place (the journal never does; here it
		// tells a read from none) it keeps its time; a newer record is
		// read and counted.
		o := opts
		o.Kube = nil
		e := refreshed(t, ctx, o)
		putGap(live.Name, 5, gapAt.Add(time.Minute))
		if err := e.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		mfs, _ := scrape(t, e)
		if v, ok := value(mfs, metrics.NameJournalGapTimestamp, "cluster", live.Name); !ok || !sameSeconds(v, msSeconds(gapAt)) {
			t.Errorf("%s after an unchanged key = %v (present %v), want the time read before %v", metrics.NameJournalGapTimestamp, v, ok, gapAt)
		}
		newer := gapAt.Add(30 * time.Minute)
		putGap(live.Name, 9, newer)
		if err := e.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		mfs, _ = scrape(t, e)
		if v, ok := value(mfs, metrics.NameJournalGapTimestamp, "cluster", live.Name); !ok || !sameSeconds(v, msSeconds(newer)) {
			t.Errorf("%s after a new record = %v (present %v), want %v", metrics.NameJournalGapTimestamp, v, ok, newer)
		}
		if v, ok := value(mfs, metrics.NameJournalGaps, "cluster", live.Name); !ok || v != 3 {
			t.Errorf("%s = %v (present %v), want 3", metrics.NameJournalGaps, v, ok)
		}
	})

	t.Run("IdentityMounted", func(t *testing.T) {
		// The identity of the backup's recipient mounted beside another
		// one: 0.
		both := parseIdentities(t, mounted, locked)
		o := opts
		o.Kube, o.Identities = nil, func() (*seal.Identities, error) { return both, nil }
		e := refreshed(t, ctx, o)
		mfs, _ := scrape(t, e)
		if v, ok := value(mfs, metrics.NameBackupUndecryptable, "cluster", live.Name); !ok || v != 0 {
			t.Fatalf("%s with the recipient's identity mounted = %v (present %v), want 0", metrics.NameBackupUndecryptable, v, ok)
		}
	})

	t.Run("StoreErrorIsNotUndecryptable", func(t *testing.T) {
		// The snapshot object cannot be read (a store failure): the check
		// says nothing. A fresh exporter exports no value (never 1); one
		// that knew the backup's result keeps it; the step is counted.
		fs := &failingSnapshots{Store: st}
		fs.fail.Store(true)
		o := opts
		o.Kube, o.Store = nil, fs
		e := newExporter(t, o)
		if err := e.Refresh(ctx); err == nil || !strings.Contains(err.Error(), metrics.StepCheckDecrypt) {
			t.Fatalf("refresh with unreadable snapshot objects: %v, want step %s failed", err, metrics.StepCheckDecrypt)
		}
		mfs, _ := scrape(t, e)
		if v, ok := value(mfs, metrics.NameBackupUndecryptable, "cluster", live.Name); ok {
			t.Fatalf("%s = %v after a store failure, want absent", metrics.NameBackupUndecryptable, v)
		}
		if v, _ := value(mfs, metrics.NameRefreshErrors, "step", metrics.StepCheckDecrypt); v != 1 {
			t.Fatalf("errors{step=%s} = %v, want 1", metrics.StepCheckDecrypt, v)
		}
		fs.fail.Store(false)
		o.Identities = func() (*seal.Identities, error) { return parseIdentities(t, locked), nil }
		e = refreshed(t, ctx, o)
		fs.fail.Store(true)
		if err := e.Refresh(ctx); err == nil {
			t.Fatal("refresh with unreadable snapshot objects succeeded")
		}
		mfs, _ = scrape(t, e)
		if v, ok := value(mfs, metrics.NameBackupUndecryptable, "cluster", live.Name); !ok || v != 0 {
			t.Fatalf("%s = %v (present %v) after a store failure, want the previous 0", metrics.NameBackupUndecryptable, v, ok)
		}
	})

	t.Run("ServeIdentityFile", func(t *testing.T) {
		// etcd-recovery serve --identity-file: the file is read again on
		// every refresh, so an identity added to the mounted secret is
		// seen without a restart (1, then 0).
		idFile := filepath.Join(t.TempDir(), "identity.txt")
		writeID := func(ids ...*age.X25519Identity) {
			t.Helper()
			var b strings.Builder
			for _, id := range ids {
				b.WriteString(id.String() + "\n")
			}
			tmp := idFile + ".new"
			if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, idFile); err != nil { // atomic, as the kubelet swaps a secret's files
				t.Fatal(err)
			}
		}
		writeID(mounted)
		addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		cmd := exec.CommandContext(ctx, testfix.Tool(t), "serve", "--listen", addr, "--kubeconfig", k.Kubeconfig(t, token, alertsNS),
			"--namespace", alertsNS, "--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", layout.Prefix,
			"--cos-credentials-dir", credsDir(t, m), "--probe-timeout", "2s", "--refresh-timeout", "20s", "--interval", "1s",
			"--identity-file", idFile)
		cmd.Env = toolEnv()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		waitFor := func(want float64) {
			t.Helper()
			var last string
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				resp, err := http.Get("http://" + addr + "/metrics")
				if err != nil {
					last = err.Error()
					continue
				}
				p := expfmt.NewTextParser(model.LegacyValidation)
				mfs, err := p.TextToMetricFamilies(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				v, ok := value(mfs, metrics.NameBackupUndecryptable, "cluster", live.Name)
				if ok && v == want {
					return
				}
				last = fmt.Sprintf("%v (present %v)", v, ok)
			}
			t.Fatalf("serve --identity-file: %s never %v within 30s; last %s\n%s", metrics.NameBackupUndecryptable, want, last, stderr.String())
		}
		waitFor(1)
		writeID(mounted, locked)
		waitFor(0)
		if strings.Contains(stderr.String(), "AGE-SECRET-KEY") {
			t.Errorf("serve logged a secret key:\n%s", stderr.String())
		}
	})

	t.Run("OrphanClaimed", func(t *testing.T) {
		// Once the namespace owns the prefix, the orphan waits for its
		// deletion: the later of its newest backup and its first sighting
		// + the grace. No pass has recorded it (the exporter only reads),
		// so the grace runs from the exporter's clock, at the earliest.
		if _, _, err := prune.ClaimPrefix(ctx, st, layout, alertsNS, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := exp.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		mfs, _ := scrape(t, exp)
		if v, ok := value(mfs, metrics.NameOrphanInfo, "cluster", "etcd-gone", "state", "waiting"); !ok || v != 1 {
			t.Fatalf("etcd-gone under an owned prefix: orphan_info{state=waiting} %v %v\n%s", v, ok, orphanSeries(mfs))
		}
		want := now.Add(prune.DefaultOrphanGrace)
		if v, ok := value(mfs, metrics.NameOrphanDeleteAfter, "cluster", "etcd-gone"); !ok || v != float64(want.UnixNano())/1e9 {
			t.Fatalf("%s = %v (present %v), want %v (first seen now + %v)", metrics.NameOrphanDeleteAfter, v, ok, want, prune.DefaultOrphanGrace)
		}
	})

	t.Run("SharedRootNoOrphans", func(t *testing.T) {
		// An empty prefix (the bucket root, shared by every namespace):
		// the other namespaces' cluster ids are not this one's orphans.
		copyBackup(t, st, catalog.Layout{}, plain, "etcd-other-namespace", last, catalog.KindScheduled)
		o := opts
		o.Layout = catalog.Layout{}
		e := refreshed(t, ctx, o)
		mfs, _ := scrape(t, e)
		if mf := mfs[metrics.NameOrphanInfo]; mf != nil && len(mf.Metric) > 0 {
			t.Fatalf("orphans reported on the shared bucket root:\n%s", orphanSeries(mfs))
		}
		if v, ok := value(mfs, metrics.NameClusterInfo, "cluster", live.Name); !ok || v != 1 {
			t.Fatalf("etcd-live on the shared bucket root: cluster_info %v %v", v, ok)
		}
	})

	t.Run("ListingFailsKeepsClusters", func(t *testing.T) {
		// The exporter may no longer list EtcdClusters: the refresh keeps
		// the clusters it knew (etcd-live stays, etcd-gone stays an orphan).
		if err := admin.RbacV1().RoleBindings(alertsNS).Delete(ctx, "etcd-recovery-exporter", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var err error
		for deadline := time.Now().Add(20 * time.Second); ; {
			err = exp.Refresh(ctx)
			if err != nil && strings.Contains(err.Error(), metrics.StepListClusters) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("refresh after the RoleBinding's deletion: %v, want step %s failed", err, metrics.StepListClusters)
			}
			time.Sleep(200 * time.Millisecond) // RBAC's authorizer cache catching up
		}
		mfs, _ := scrape(t, exp)
		if v, ok := value(mfs, metrics.NameClusterInfo, "cluster", live.Name); !ok || v != 1 {
			t.Errorf("etcd-live after a failed listing: cluster_info %v %v, want kept", v, ok)
		}
		if n := series(mfs, metrics.NameClusterInfo, "etcd-gone"); n != 0 {
			t.Errorf("etcd-gone after a failed listing: %d cluster_info series", n)
		}
		if n := series(mfs, metrics.NameOrphanInfo, "etcd-gone"); n != 1 {
			t.Errorf("etcd-gone after a failed listing: %d orphan series, want the previous one\n%s", n, orphanSeries(mfs))
		}
	})
}

func ageIdentity(t testing.TB) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func parseIdentities(t testing.TB, ids ...*age.X25519Identity) *seal.Identities {
	t.Helper()
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(id.String() + "\n")
	}
	out, err := seal.ParseIdentities(strings.NewReader(b.String()), "test identities")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// failingSnapshots fails every read of an encrypted object (".age") while
// fail is set: a store failure, not a property of the backup.
type failingSnapshots struct {
	store.Store
	fail atomic.Bool
}

func (f *failingSnapshots) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if f.fail.Load() && seal.IsSealedKey(key) {
		return nil, errors.New("injected store failure")
	}
	return f.Store.Get(ctx, key)
}

func orphanSeries(mfs map[string]*dto.MetricFamily) string {
	var b strings.Builder
	for _, name := range []string{metrics.NameOrphanInfo, metrics.NameOrphanDeleteAfter} {
		if mf := mfs[name]; mf != nil {
			for _, m := range mf.Metric {
				fmt.Fprintf(&b, "%s %v\n", name, m.Label)
			}
		}
	}
	return b.String()
}

// promSeries is one input series of a promtool test: ts is its value,
// moved like every *_timestamp_seconds value when it is one.
type promSeries struct {
	Series string `json:"series"`
	Values string `json:"values"`
	ts     float64
}

// The promtool test's window: every series is constant over
// [0, scrapeWindow] at 1 min steps and evaluated at scrapeEval, when
// promtool's time() is the exporter's clock.
const (
	scrapeWindow = 180 // minutes
	scrapeEval   = 2 * time.Hour
)

// promtoolScrape turns a scrape of the exporter (its etcd_recovery_ series,
// with the job, namespace and instance labels Prometheus adds) and extra
// series into promtool input, every *_timestamp_seconds value moved by
// (now - scrapeEval), and runs `promtool test rules` against
// deploy/40-alerts.yaml: at scrapeEval, the alerts firing for each alert
// name of firing are exactly those clusters, and for each cluster of only
// the alerts firing are exactly those firing lists name for it.
func promtoolScrape(t *testing.T, body []byte, extra []promSeries, now time.Time, firing map[string][]string, only []string) {
	t.Helper()
	promtoolScrapeAt(t, body, extra, now, scrapeEval, firing, only)
}

// promtoolScrapeAt is promtoolScrape evaluated at eval (the series last
// an hour beyond it): an alert with a long `for` needs a later eval.
func promtoolScrapeAt(t *testing.T, body []byte, extra []promSeries, now time.Time, eval time.Duration, firing map[string][]string, only []string) {
	t.Helper()
	in := scrapeInputAt(t, body, extra, now, eval)
	testYAML := promtoolExprTests(t, in, eval, firing, only)
	if out, err := runPromtoolTest(t, alertRules(t), testYAML); err != nil {
		t.Fatalf("promtool test rules on the exporter's scrape (%d series): %v\n%s\ninput:\n%s", len(in), err, out, testYAML)
	}
}

// alertRules is the rule file of deploy/40-alerts.yaml: its one
// PrometheusRule's spec.
func alertRules(t *testing.T) []byte {
	t.Helper()
	objs := kubetest.DecodeManifests(t, kubetest.DeployPath(t, "40-alerts.yaml"))
	if len(objs) != 1 {
		t.Fatalf("deploy/40-alerts.yaml: %d objects, want one PrometheusRule", len(objs))
	}
	rules, err := yaml.Marshal(objs[0].Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// runPromtoolTest runs `promtool test rules` on a test file whose
// rule_files is alerts.rules.yaml, with rules as that file.
func runPromtoolTest(t *testing.T, rules, testYAML []byte) (string, error) {
	t.Helper()
	dir := t.TempDir()
	for name, b := range map[string][]byte{"alerts.rules.yaml": rules, "scrape_test.yml": testYAML} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Promtool(t), "test", "rules", "scrape_test.yml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// scrapeInput is the scrape's etcd_recovery_ series and extra as
// promtool input series (see promtoolScrape).
func scrapeInput(t *testing.T, body []byte, extra []promSeries, now time.Time) []promSeries {
	t.Helper()
	return scrapeInputAt(t, body, extra, now, scrapeEval)
}

// scrapeInputAt is scrapeInput for an evaluation at eval: promtool's time()
// is now there, and the series last an hour beyond it.
func scrapeInputAt(t *testing.T, body []byte, extra []promSeries, now time.Time, eval time.Duration) []promSeries {
	t.Helper()
	shift := float64(now.Unix()) - eval.Seconds()
	window := scrapeWindow + int((eval - scrapeEval).Minutes())
	var in []promSeries
	mfs, err := parseText(body)
	if err != nil {
		t.Fatal(err)
	}
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "etcd_recovery_") {
			continue
		}
		for _, m := range mf.Metric {
			labels := []string{fmt.Sprintf("job=%q", "etcd-recovery-metrics"), fmt.Sprintf("namespace=%q", alertsNS), fmt.Sprintf("instance=%q", "10.0.0.22:9090")}
			for _, l := range m.Label {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.Counter.GetValue()
			}
			in = append(in, promSeries{Series: name + "{" + strings.Join(labels, ",") + "}", ts: v})
		}
	}
	in = append(in, extra...)
	for i := range in {
		v := in[i].ts
		if name, _, _ := strings.Cut(in[i].Series, "{"); strings.HasSuffix(name, "_timestamp_seconds") {
			v -= shift
		}
		in[i].Values = strconv.FormatFloat(v, 'f', -1, 64) + "x" + strconv.Itoa(window)
	}
	sort.Slice(in, func(i, j int) bool { return in[i].Series < in[j].Series })
	return in
}

// promtoolExprTests is the promtool test file of promtoolScrape: the
// alerts firing at scrapeEval, by alert name and by cluster.
func promtoolExprTests(t *testing.T, in []promSeries, eval time.Duration, firing map[string][]string, only []string) []byte {
	t.Helper()
	var tests []dashtest.ExprTest
	names := make([]string, 0, len(firing))
	for n := range firing {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		et := dashtest.ExprTest{Expr: fmt.Sprintf(`count by (alertname, cluster) (ALERTS{alertstate="firing",alertname=%q})`, n), EvalTime: eval.String(), ExpSamples: []dashtest.Sample{}}
		for _, c := range firing[n] {
			et.ExpSamples = append(et.ExpSamples, dashtest.Sample{Labels: fmt.Sprintf(`{alertname=%q,cluster=%q}`, n, c), Value: 1})
		}
		tests = append(tests, et)
	}
	for _, c := range only {
		et := dashtest.ExprTest{Expr: fmt.Sprintf(`count by (alertname, cluster) (ALERTS{alertstate="firing",cluster=%q})`, c), EvalTime: eval.String(), ExpSamples: []dashtest.Sample{}}
		for _, n := range names {
			for _, fc := range firing[n] {
				if fc == c {
					et.ExpSamples = append(et.ExpSamples, dashtest.Sample{Labels: fmt.Sprintf(`{alertname=%q,cluster=%q}`, n, c), Value: 1})
				}
			}
		}
		tests = append(tests, et)
	}
	return dashtest.TestFile(t, []string{"alerts.rules.yaml"}, "1m", "the exporter's real scrape", in, tests)
}

func parseText(body []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(bytes.NewReader(body))
}
