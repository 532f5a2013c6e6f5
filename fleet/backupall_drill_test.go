package fleet_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// drillNS holds the clusters of the backup --all --drill test.
const drillNS = "kubx-etcd-13"

// The drill share: over share consecutive 8-hour slots every cluster is
// chosen exactly once, each slot chooses about 1/share of them, share 1
// chooses all, and the CronJob's three runs a day (03:03, 11:03, 19:03
// UTC, each possibly an hour late) fall in three consecutive slots.
func TestDrillChosen(t *testing.T) {
	t.Parallel()
	var ids []string
	for i := range 100 {
		ids = append(ids, fmt.Sprintf("etcd-c%02d", i))
	}
	ids = append(ids, "etcd-a", "x", "etcd-"+strings.Repeat("z", 60))
	day := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	runs := []time.Time{day.Add(3*time.Hour + 3*time.Minute), day.Add(11*time.Hour + 3*time.Minute), day.Add(19*time.Hour + 3*time.Minute)}
	for _, tc := range []struct {
		name  string
		share int
		times []time.Time
	}{
		{"share 3, the CronJob's runs", 3, runs},
		{"share 3, each run an hour late (startingDeadlineSeconds)", 3, []time.Time{runs[0].Add(59 * time.Minute), runs[1].Add(59 * time.Minute), runs[2].Add(59 * time.Minute)}},
		{"share 3, the next day's runs", 3, []time.Time{runs[0].Add(24 * time.Hour), runs[1].Add(24 * time.Hour), runs[2].Add(24 * time.Hour)}},
		{"share 3, slot edges", 3, []time.Time{day.Add(8*time.Hour - time.Second), day.Add(8 * time.Hour), day.Add(16 * time.Hour)}},
		{"share 2", 2, runs[:2]},
		{"share 5, a year later", 5, []time.Time{day.AddDate(1, 0, 0), day.AddDate(1, 0, 0).Add(8 * time.Hour), day.AddDate(1, 0, 0).Add(16 * time.Hour),
			day.AddDate(1, 0, 1), day.AddDate(1, 0, 1).Add(8 * time.Hour)}},
		{"share 1", 1, runs[:1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.times) != tc.share {
				t.Fatalf("test: %d times for share %d", len(tc.times), tc.share)
			}
			for i := 1; i < len(tc.times); i++ {
				if fleet.DrillSlot(tc.times[i]) != fleet.DrillSlot(tc.times[i-1])+1 {
					t.Fatalf("%s and %s are not in consecutive slots (%d, %d)", tc.times[i-1], tc.times[i], fleet.DrillSlot(tc.times[i-1]), fleet.DrillSlot(tc.times[i]))
				}
			}
			perSlot := make([]int, len(tc.times))
			for _, id := range ids {
				n := 0
				for i, at := range tc.times {
					if fleet.DrillChosen(id, at, tc.share) {
						n++
						perSlot[i]++
					}
					// Stable: the same answer at any time of the slot.
					if fleet.DrillChosen(id, at, tc.share) != fleet.DrillChosen(id, time.Unix(fleet.DrillSlot(at)*8*3600, 0), tc.share) {
						t.Errorf("%s: chosen differently within the slot of %s", id, at)
					}
				}
				if n != 1 {
					t.Errorf("%s: chosen %d times in %d consecutive slots with share %d, want exactly once", id, n, tc.share, tc.share)
				}
			}
			for i, n := range perSlot {
				want := len(ids) / tc.share
				if n < want/2 || n > want*3/2+1 {
					t.Errorf("slot of %s: %d of %d clusters chosen, want about %d", tc.times[i], n, len(ids), want)
				}
			}
			t.Logf("share %d: clusters chosen per slot %v", tc.share, perSlot)
		})
	}
	if !fleet.DrillChosen("any", time.Now(), 0) {
		t.Errorf("share 0 must choose every cluster (as 1)")
	}
}

// backup --all --drill against a real kube-apiserver: three EtcdClusters
// (etcd 3.5, 3.5 and 3.6), the service account of deploy/10-rbac.yaml, COS
// credentials from the secret, and a bin dir with etcd-3.5 only. Through the
// CLI at --drill-share 1: the 3.5 clusters' new backups are drilled and pass
// against the source (drill.json written, DrillPassed Events); the 3.6
// cluster's backup is committed, its drill could not run (no etcd-3.6:
// DrillNotRun Event, no record), and the exit is 1 naming it. In-process at
// --drill-share 3 with a fixed clock: only the clusters DrillChosen picks
// for the slot are drilled.
func TestBackupAllDrill(t *testing.T) {
	t.Parallel()
	k, admin, dyn, a, m := namespaceWorld(t, drillNS)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	ctx := testfix.Context(t, 5*time.Minute)

	versions := map[string]testenv.Version{"etcd-d1": testenv.V35, "etcd-d2": testenv.V35, "etcd-d3": testenv.V36}
	names := []string{"etcd-d1", "etcd-d2", "etcd-d3"}
	clusters := map[string]kubetest.Cluster{}
	for i, name := range names {
		c := kubetest.AddEtcdCluster(t, admin, dyn, drillNS, name, testenv.EtcdOptions{IP: fmt.Sprintf("127.0.13.%d", 10+i), Members: 1, Version: versions[name]})
		kubetest.PerClusterAccess(t, a, drillNS, name)
		testenv.PutKeys(t, c.Etcd.Client(t), "/registry/pods/", 100+50*i, 256)
		clusters[name] = c
	}
	binDir := t.TempDir()
	if err := os.Symlink(testenv.EtcdBin(t, testenv.V35), filepath.Join(binDir, "etcd-3.5")); err != nil {
		t.Fatal(err)
	}
	token := kubetest.SAToken(t, admin, drillNS, "etcd-recovery")
	st, layout := testfix.Store(t, m, bucket), catalog.Layout{Prefix: prefix}
	kadmin, err := kube.New(kube.Config{Rest: k.RestConfig(""), Namespace: drillNS})
	if err != nil {
		t.Fatal(err)
	}
	events := func(t *testing.T, name string) map[string][]corev1.Event {
		t.Helper()
		evs, err := kadmin.Events(ctx, kube.Cluster{Namespace: drillNS, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]corev1.Event{}
		for _, e := range evs {
			out[e.Reason] = append(out[e.Reason], e)
		}
		return out
	}

	t.Run("CLI", func(t *testing.T) {
		start := time.Now()
		stdout, stderr, code := testfix.RunTool(t, ctx, testfix.Tool(t), nil, "backup", "--all", "--drill", "--drill-share", "1", "--prune", "--kind", "scheduled",
			"--etcd-bin-dir", binDir, "--temp-dir", t.TempDir(),
			"--kubeconfig", k.Kubeconfig(t, token, drillNS), "--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix,
			"--dial-timeout", "2s", "--probe-timeout", "2s", "-o", "json")
		t.Logf("backup --all --drill of %d clusters: %v", len(names), time.Since(start).Round(time.Millisecond))
		if code != 1 {
			t.Fatalf("exit %d, want 1 (etcd-d3's drill could not run)\nstdout:\n%s\nstderr:\n%s", code, stdout, testfix.LastLines(stderr, 20))
		}
		if s := testfix.LastLines(stderr, 1); !strings.Contains(s, "restore drill failed for 1 etcdcluster(s) in "+drillNS) || !strings.Contains(s, "etcd-d3 (backup ") ||
			!strings.Contains(s, "not run") || !strings.Contains(s, "find etcd") || strings.Contains(s, "backup failed for") {
			t.Errorf("the error does not name the cluster, its backup and the drill's step:\n%s", s)
		}
		var rep fleet.BackupAllReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("json: %v\n%s", err, stdout)
		}
		if len(rep.Clusters) != 3 || len(rep.Failed) != 0 || len(rep.DrillFailed) != 1 || rep.DrillShare != 1 || rep.DrillParallel != 1 {
			t.Fatalf("report: %s", stdout)
		}
		for _, r := range rep.Clusters {
			if r.Result != fleet.ResultOK || r.Backup == "" || r.Prune == nil || r.Drill == nil {
				t.Errorf("%s: %+v", r.Cluster, r)
				continue
			}
			rec, err := catalog.LoadDrill(ctx, st, layout, r.Cluster, r.Backup)
			if err != nil {
				t.Fatal(err)
			}
			ev := events(t, r.Cluster)
			if len(ev[kube.ReasonBackupSucceeded]) != 1 {
				t.Errorf("%s: events %v, want one %s", r.Cluster, ev, kube.ReasonBackupSucceeded)
			}
			if r.Cluster == "etcd-d3" {
				if r.Drill.Result != fleet.DrillNotRun || r.Drill.Record != nil || !strings.Contains(r.Drill.Error, "etcd-3.6") || rec != nil {
					t.Errorf("etcd-d3 (etcd 3.6, no etcd-3.6 in the bin dir): drill %+v, record %+v", r.Drill, rec)
				}
				if e := ev[kube.ReasonDrillNotRun]; len(e) != 1 || e[0].Type != corev1.EventTypeWarning || !strings.Contains(e[0].Message, r.Backup) ||
					!strings.Contains(e[0].Message, "could not run") {
					t.Errorf("etcd-d3: events %+v, want one Warning %s naming the backup", ev, kube.ReasonDrillNotRun)
				} else {
					t.Logf("event on etcd-d3: %s %s: %s", e[0].Type, e[0].Reason, e[0].Message)
				}
				continue
			}
			cmp := r.Drill.Record
			if r.Drill.Result != fleet.DrillPassed || r.Drill.Comparison != catalog.CompareSource || cmp == nil || cmp.Comparison.Equal == nil || !*cmp.Comparison.Equal {
				t.Errorf("%s: drill %+v", r.Cluster, r.Drill)
			}
			if rec == nil || !rec.Passed || rec.Comparison.Mode != catalog.CompareSource || rec.Backup != r.Backup {
				t.Errorf("%s: drill.json %+v", r.Cluster, rec)
			}
			if e := ev[kube.ReasonDrillPassed]; len(e) != 1 || e[0].Type != corev1.EventTypeNormal || !strings.Contains(e[0].Message, r.Backup) ||
				!strings.Contains(e[0].Message, "equals the source") {
				t.Errorf("%s: events %+v, want one Normal %s with the comparison", r.Cluster, ev, kube.ReasonDrillPassed)
			} else if r.Cluster == "etcd-d1" {
				t.Logf("event on %s: %s %s: %s", r.Cluster, e[0].Type, e[0].Reason, e[0].Message)
			}
		}
	})

	t.Run("Share", func(t *testing.T) {
		sa, err := kube.New(kube.Config{Rest: k.RestConfig(token), Namespace: drillNS})
		if err != nil {
			t.Fatal(err)
		}
		// A slot in which some but not all of the clusters are chosen.
		at := time.Date(2026, 11, 23, 3, 3, 0, 0, time.UTC)
		var chosen []string
		for range 10 {
			chosen = chosen[:0]
			for _, n := range names {
				if fleet.DrillChosen(n, at, 3) {
					chosen = append(chosen, n)
				}
			}
			if len(chosen) > 0 && len(chosen) < len(names) {
				break
			}
			at = at.Add(8 * time.Hour)
		}
		if len(chosen) == 0 || len(chosen) == len(names) {
			t.Fatalf("no slot in 10 chooses some but not all of %v", names)
		}
		// Both servers this time: a chosen etcd 3.6 cluster is drilled too.
		both := testenv.DrillBinDir(t, testenv.V35, testenv.V36)
		rep, err := fleet.BackupAll(ctx, fleet.BackupAllOptions{
			Kube: sa, NoEvents: true, Now: func() time.Time { return at },
			Template:    backup.Options{Kind: catalog.KindManual, Store: st, Layout: layout, ProbeTimeout: 2 * time.Second},
			DialTimeout: 2 * time.Second,
			Drill:       &fleet.DrillShare{Share: 3, Parallel: 2, EtcdBinDir: both, ScratchDir: t.TempDir()},
		})
		if err != nil {
			t.Fatalf("BackupAll --drill-share 3: %v", err)
		}
		if rep.DrillShare != 3 || rep.DrillSlot != fleet.DrillSlot(at) {
			t.Errorf("report: share %d slot %d, want 3 and %d", rep.DrillShare, rep.DrillSlot, fleet.DrillSlot(at))
		}
		for _, r := range rep.Clusters {
			want := fleet.DrillSkipped
			if fleet.DrillChosen(r.Cluster, at, 3) {
				want = fleet.DrillPassed
			}
			if r.Result != fleet.ResultOK || r.Drill == nil || r.Drill.Result != want {
				t.Errorf("%s at %s (chosen: %v): %+v", r.Cluster, at, chosen, r.Drill)
			}
		}
		tab := rep.Table()
		if strings.Join(tab.Header, " ") != "CLUSTER RESULT BACKUP REVISION STORED DURATION PRUNED ESCROW DRILL ERROR" {
			t.Fatalf("table header %v", tab.Header)
		}
		for _, row := range tab.Rows {
			want := "not chosen"
			if fleet.DrillChosen(row[0], at, 3) {
				want = "passed (source)"
			}
			if row[8] != want {
				t.Errorf("table row %v: DRILL %q, want %q", row, row[8], want)
			}
		}
		if len(rep.Clusters) != len(names) {
			t.Fatalf("%d clusters in the report", len(rep.Clusters))
		}
		t.Logf("slot %d chose %v of %v", rep.DrillSlot, chosen, names)
	})

	// Encrypted (#15): the fleet's backups are encrypted, their drills
	// run on the plaintext each backup streamed (no identity anywhere) and
	// pass against the source, and the scratch dir is empty afterwards.
	t.Run("Encrypted", func(t *testing.T) {
		sa, err := kube.New(kube.Config{Rest: k.RestConfig(token), Namespace: drillNS})
		if err != nil {
			t.Fatal(err)
		}
		rs := testfix.RecipientsOf(t, testfix.NewAgeKey(t))
		scratch := t.TempDir()
		rep, err := fleet.BackupAll(ctx, fleet.BackupAllOptions{
			Kube: sa, NoEvents: true,
			Template: backup.Options{Kind: catalog.KindManual, Store: st, Layout: layout, ProbeTimeout: 2 * time.Second,
				Recipients: rs, RequireEncryption: true, ScratchDir: scratch},
			DialTimeout: 2 * time.Second,
			Drill:       &fleet.DrillShare{Share: 1, Parallel: 2, EtcdBinDir: testenv.DrillBinDir(t, testenv.V35, testenv.V36), ScratchDir: scratch},
		})
		if err != nil {
			t.Fatalf("BackupAll encrypted --drill: %v", err)
		}
		for _, r := range rep.Clusters {
			if r.Result != fleet.ResultOK || r.Manifest == nil || !r.Manifest.Encrypted() || r.Drill == nil || r.Drill.Result != fleet.DrillPassed ||
				r.Drill.Comparison != catalog.CompareSource {
				t.Errorf("%s: result %s, manifest encryption %+v, drill %+v", r.Cluster, r.Result, r.Manifest, r.Drill)
			}
		}
		if left, err := os.ReadDir(scratch); err != nil || len(left) != 0 {
			t.Fatalf("scratch dir after the fleet's drills: %v %v (plaintext left behind?)", left, err)
		}
	})
}
