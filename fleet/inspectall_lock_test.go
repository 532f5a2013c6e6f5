package fleet_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// TestInspectAllLocks: inspect --all against a real kube-apiserver, real
// etcd and a MinIO bucket created with object lock. etcd-locked's newest
// backup has a GOVERNANCE retention on its manifest, etcd-unlocked's has
// none: the LOCKED column shows the mode and the time for one and NO (with
// a note) for the other, -o json has objectLock and lock per cluster (also
// from the real binary), and the verdicts and exit code are untouched. The
// same clusters on a bucket without object lock have no column and no
// lock fields.
func TestInspectAllLocks(t *testing.T) {
	t.Parallel()
	const nsLock = "kubx-etcd-63"
	ctx := testfix.Context(t, 5*time.Minute)
	k, admin, dyn, a, m := namespaceWorld(t, nsLock)
	lockedBucket, plainBucket := m.NewLockedBucket(t), m.NewBucket(t)
	locked, plain := testfix.Store(t, m, lockedBucket), testfix.Store(t, m, plainBucket)
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	token := kubetest.SAToken(t, admin, nsLock, "etcd-recovery")
	sa, err := kube.New(kube.Config{Rest: k.RestConfig(token), Namespace: nsLock})
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(3 * time.Hour).Truncate(time.Second).UTC()
	for name, ip := range map[string]string{"etcd-locked": "127.0.63.10", "etcd-unlocked": "127.0.63.11"} {
		fc := kubetest.AddEtcdCluster(t, admin, dyn, nsLock, name, testenv.EtcdOptions{IP: ip})
		kubetest.PerClusterAccess(t, a, nsLock, fc.Name)
		testenv.PutKeys(t, fc.Etcd.Client(t), "/registry/k", 20, 64)
		for _, st := range []store.Store{locked, plain} {
			rep, err := fleet.BackupAll(ctx, fleet.BackupAllOptions{Kube: sa, Names: []string{name}, NoEvents: true,
				Template:    backup.Options{Kind: catalog.KindScheduled, Store: st, Layout: layout, ProbeTimeout: 2 * time.Second},
				DialTimeout: 2 * time.Second})
			if err != nil || len(rep.Clusters) != 1 || rep.Clusters[0].Manifest == nil {
				t.Fatalf("backup of %s: %v %+v", name, err, rep)
			}
			if name == "etcd-locked" && st == store.Store(locked) {
				key := layout.Key(name, rep.Clusters[0].Manifest.Name, catalog.ManifestObject)
				if err := locked.SetRetention(ctx, key, "", store.Retention{Mode: store.LockGovernance, Until: until}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	inspectAll := func(st store.Store) *fleet.InspectAllReport {
		t.Helper()
		rep, err := fleet.InspectAll(ctx, fleet.InspectAllOptions{Kube: sa, DialTimeout: 2 * time.Second,
			Template: inspect.Options{Store: st, Layout: layout, Timeout: 2 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		if rep.ExitCode != inspect.ExitHealthy || len(rep.Clusters) != 2 {
			t.Fatalf("exit %d, %d rows; want 0 (HEALTHY) and 2: locks never change the verdict", rep.ExitCode, len(rep.Clusters))
		}
		return rep
	}
	render := func(rep *fleet.InspectAllReport, f output.Format) string {
		t.Helper()
		var sb strings.Builder
		if err := output.Render(&sb, f, rep.Table(), rep); err != nil {
			t.Fatal(err)
		}
		return sb.String()
	}

	rep := inspectAll(locked)
	if !rep.ObjectLock || rep.LockError != "" {
		t.Fatalf("objectLock %v, lockError %q; want true and none", rep.ObjectLock, rep.LockError)
	}
	if l := inspectRow(t, rep, "etcd-locked").Lock; l == nil || !l.Locked || l.Mode != store.LockGovernance || !l.Until.Equal(until) {
		t.Errorf("etcd-locked: lock %+v; want GOVERNANCE until %v", l, until)
	}
	unlocked := inspectRow(t, rep, "etcd-unlocked")
	if l := unlocked.Lock; l == nil || l.Locked || l.Error != "" {
		t.Errorf("etcd-unlocked: lock %+v; want not locked", l)
	}
	table := render(rep, output.FormatTable)
	words := strings.Join(strings.Fields(table), " ") // notes wrap
	for _, want := range []string{"LOCKED", "GOVERNANCE until " + until.Format("2006-01-02T15:04Z"), " NO ",
		"cluster etcd-unlocked: newest backup " + unlocked.BackupName + " is not locked, though the bucket has object lock"} {
		if !strings.Contains(words, want) {
			t.Errorf("table does not show %q:\n%s", want, table)
		}
	}

	// The real binary, -o json.
	out, errb, code := testfix.RunTool(t, ctx, testfix.Tool(t), []string{"KUBECONFIG=" + k.Kubeconfig(t, token, nsLock)},
		"inspect", "--all", "-o", "json", "--cos-endpoint", m.Endpoint, "--cos-region", m.Region,
		"--cos-ca-file", m.CAFile, "--bucket", lockedBucket, "--prefix", layout.Prefix, "--probe-timeout", "2s")
	if code != 0 {
		t.Fatalf("etcd-recovery inspect --all: exit %d\n%s\n%s", code, out, errb)
	}
	var raw struct {
		ObjectLock bool `json:"objectLock"`
		Clusters   []struct {
			Cluster string         `json:"cluster"`
			Lock    map[string]any `json:"lock"`
		} `json:"clusters"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("inspect --all -o json: %v\n%s", err, out)
	}
	if !raw.ObjectLock || len(raw.Clusters) != 2 {
		t.Fatalf("CLI -o json: objectLock %v, %d clusters:\n%s", raw.ObjectLock, len(raw.Clusters), out)
	}
	for _, c := range raw.Clusters {
		want := map[string]any{"locked": false}
		if c.Cluster == "etcd-locked" {
			want = map[string]any{"locked": true, "mode": "GOVERNANCE", "until": until.Format(time.RFC3339)}
		}
		if len(c.Lock) != len(want) {
			t.Errorf("CLI: %s: lock %v, want %v", c.Cluster, c.Lock, want)
		}
		for k, v := range want {
			if c.Lock[k] != v {
				t.Errorf("CLI: %s: lock.%s = %v, want %v", c.Cluster, k, c.Lock[k], v)
			}
		}
	}

	// No object lock: no column, no field.
	rep = inspectAll(plain)
	if rep.ObjectLock {
		t.Errorf("objectLock on a bucket without object lock")
	}
	for _, r := range rep.Clusters {
		if r.Lock != nil {
			t.Errorf("%s: lock %+v on a bucket without object lock", r.Cluster, r.Lock)
		}
	}
	if tb := rep.Table(); strings.Contains(strings.Join(tb.Header, " "), "LOCKED") || len(tb.Notes) != 0 {
		t.Errorf("LOCKED column or notes without object lock: %v %v", tb.Header, tb.Notes)
	}
	if js := render(rep, output.FormatJSON); strings.Contains(js, `"lock"`) || strings.Contains(js, `"objectLock"`) {
		t.Errorf("-o json has lock fields without object lock:\n%s", js)
	}
}
