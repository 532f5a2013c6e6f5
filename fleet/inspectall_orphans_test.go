package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// bucketState is every object of the bucket (key, size, time) and every
// multipart upload: what inspect must leave as it found it.
func bucketState(t *testing.T, st store.Store) string {
	t.Helper()
	objs, err := st.List(testfix.Context(t, time.Minute), "")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, o := range objs {
		fmt.Fprintf(&b, "%s %d %s\n", o.Key, o.Size, o.LastModified.UTC().Format(time.RFC3339Nano))
	}
	if mp, ok := st.(store.Multipart); ok {
		ups, err := mp.ListUploads(testfix.Context(t, time.Minute), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range ups {
			fmt.Fprintf(&b, "upload %s %s\n", u.Key, u.UploadID)
		}
	}
	return b.String()
}

// stallRootList is a store whose listing of the whole prefix (the orphan
// pass's) never answers until its context ends; every other call passes.
type stallRootList struct {
	store.Store
	root string
}

func (s stallRootList) List(ctx context.Context, prefix string) ([]store.ObjectInfo, error) {
	if prefix == s.root {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.List(ctx, prefix)
}

// TestInspectAllOrphans: inspect --all, with the backup CronJob's service
// account, over a namespace with one live EtcdCluster and two orphans
// (etcd-gone: recorded by an orphan pass; etcd-new: not yet recorded) under
// a prefix the namespace owns, against a real kube-apiserver, etcd and
// MinIO. The JSON and the table show each orphan and when its backups go;
// nothing in the bucket is written or deleted; a failed orphan listing is
// a note, bounded by its deadline, and never changes the verdict.
func TestInspectAllOrphans(t *testing.T) {
	t.Parallel()
	k := testenv.StartKubeAPIServer(t)
	kubetest.InstallCRDs(t, k)
	const nsName = "kubx-etcd-61"
	e := newOrphanEnv(t, k, nsName)
	admin := k.Clientset(t, "")
	a := kubetest.NewApplier(t, k)
	for _, o := range kubetest.DecodeManifests(t, filepath.Join(testenv.RepoRoot(t), "deploy", "10-rbac.yaml")) {
		if err := a.Apply(testfix.Context(t, time.Minute), o, nsName, false); err != nil {
			t.Fatal(err)
		}
	}
	kubetest.CreateCOSSecret(t, admin, nsName, e.m)
	live := kubetest.AddEtcdCluster(t, admin, e.dyn, nsName, "etcd-live", testenv.EtcdOptions{IP: "127.0.5.41", Members: 1})
	kubetest.PerClusterAccess(t, a, nsName, live.Name)
	token := kubetest.SAToken(t, admin, nsName, "etcd-recovery")
	sa, err := kube.New(kube.Config{Rest: k.RestConfig(token), Namespace: nsName})
	if err != nil {
		t.Fatal(err)
	}
	e.claim(t)
	if _, err := fleet.BackupAll(testfix.Context(t, time.Minute), fleet.BackupAllOptions{Kube: sa, NoEvents: true,
		Template:    backup.Options{Kind: catalog.KindScheduled, Store: e.store, Layout: e.layout, ProbeTimeout: 2 * time.Second},
		DialTimeout: 2 * time.Second}); err != nil {
		t.Fatalf("backup of %s: %v", live.Name, err)
	}
	// etcd-gone: backups of a deleted cluster, recorded by an orphan pass
	// half an hour after its newest backup.
	t0 := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Second)
	grace := prune.DefaultOrphanGrace
	e.backups(t, "etcd-gone", catalog.KindScheduled, t0.Add(-16*time.Hour), t0.Add(-8*time.Hour), t0)
	seen := t0.Add(30 * time.Minute)
	if _, err := e.run(t, seen, sa); err != nil {
		t.Fatal(err)
	}
	if m := e.marker(t, "etcd-gone"); m == nil || !m.FirstSeen.Equal(seen) {
		t.Fatalf("marker of etcd-gone: %+v", m)
	}
	// etcd-new: an orphan no pass has seen yet.
	tNew := t0.Add(time.Hour)
	e.backups(t, "etcd-new", catalog.KindManual, tNew.Add(-time.Hour), tNew)
	before := bucketState(t, e.store)

	tool := testfix.Tool(t)
	kc := k.Kubeconfig(t, token, "default")
	runTool := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.CommandContext(testfix.Context(t, time.Minute), tool, append([]string{"inspect", "--all", "--kubeconfig", kc, "--namespace", nsName,
			"--cos-endpoint", e.m.Endpoint, "--cos-region", e.m.Region, "--bucket", e.bucket, "--prefix", e.prefix,
			"--probe-timeout", "2s", "--dial-timeout", "2s"}, args...)...)
		cmd.Env = testfix.ToolEnv()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		code := 0
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stdout.String(), stderr.String()
	}
	// etcd-gone's grace runs from its first sighting (after its newest
	// backup); etcd-new's from the pass that will record it: now, at
	// the earliest.
	goneAfter := seen.Add(grace).UTC().Format("2006-01-02 15:04 UTC")
	runStart := time.Now().UTC().Truncate(time.Second)

	t.Run("JSON", func(t *testing.T) {
		code, stdout, stderr := runTool("-o", "json")
		if code != inspect.ExitHealthy {
			t.Fatalf("exit %d, want 0 (orphans do not change the verdict)\n%s\n%s", code, stdout, stderr)
		}
		var rep fleet.InspectAllReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("json: %v\n%s", err, stdout)
		}
		if len(rep.Clusters) != 1 || rep.Clusters[0].Cluster != live.Name || rep.Clusters[0].Backup != string(inspect.BackupOK) {
			t.Fatalf("rows: %+v", rep.Clusters)
		}
		c := rep.OrphanCheck
		if !c.Checked || !c.Owned || c.Error != "" || c.Prefix != e.prefix || c.Grace != grace.String() {
			t.Fatalf("orphan check: %+v", c)
		}
		if len(rep.Orphans) != 2 {
			t.Fatalf("orphans: %+v, want etcd-gone and etcd-new", rep.Orphans)
		}
		gone, nw := rep.Orphans[0], rep.Orphans[1]
		if gone.ClusterID != "etcd-gone" || gone.State != prune.OrphanWaiting || !gone.Recorded || !gone.FirstSeen.Equal(seen) ||
			!gone.NewestBackup.Equal(t0) || !gone.DeleteAfter.Equal(seen.Add(grace)) || gone.Backups != 3 ||
			gone.Deletion != "deleted after "+goneAfter {
			t.Errorf("etcd-gone: %+v", gone)
		}
		if nw.ClusterID != "etcd-new" || nw.State != prune.OrphanWaiting || nw.Recorded || !nw.FirstSeen.IsZero() ||
			nw.DeleteAfter.Before(runStart.Add(grace)) || nw.DeleteAfter.After(time.Now().Add(grace)) || nw.Backups != 2 ||
			nw.Deletion != "deleted after "+nw.DeleteAfter.UTC().Format("2006-01-02 15:04 UTC")+" at the earliest (the next orphan pass records it; the grace runs from then)" {
			t.Errorf("etcd-new: %+v; want deleted at the earliest the grace after this run (%s)", nw, runStart.Add(grace))
		}
		t.Logf("orphans computed in %d ms; inspect --all %d ms", c.ElapsedMS, rep.ElapsedMS)
	})

	t.Run("Table", func(t *testing.T) {
		code, stdout, stderr := runTool()
		if code != inspect.ExitHealthy {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		for _, l := range strings.Split(stdout, "\n") {
			if n := utf8.RuneCountInString(l); n > output.Width {
				t.Errorf("a line of %d runes (max %d): %s", n, output.Width, l)
			}
		}
		flat := strings.Join(strings.Fields(stdout), " ")
		for _, want := range []string{
			"orphan etcd-gone: no EtcdCluster (since " + seen.Format("2006-01-02 15:04 UTC") + "), 3 backups",
			"deleted after " + goneAfter,
			"orphan etcd-new: no EtcdCluster (not yet recorded), 2 backups",
			"at the earliest (the next orphan pass records it; the grace runs from then)",
		} {
			if !strings.Contains(flat, want) {
				t.Errorf("the table lacks %q:\n%s", want, stdout)
			}
		}
		t.Logf("\n%s", stdout)
	})

	// Nothing written or deleted by inspect (the marker of etcd-new is
	// not written, etcd-gone's is not rewritten).
	t.Run("ReadOnly", func(t *testing.T) {
		if after := bucketState(t, e.store); after != before {
			t.Fatalf("inspect changed the bucket:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		if e.marker(t, "etcd-new") != nil {
			t.Fatal("inspect recorded etcd-new")
		}
	})

	// The orphan listing stalls: a note within its deadline, the same
	// verdict and exit code, the rows unchanged.
	t.Run("ListingStalls", func(t *testing.T) {
		ctx := testfix.Context(t, time.Minute)
		tmpl := inspect.Options{Timeout: 2 * time.Second, Store: stallRootList{e.store, e.layout.RootPrefix()}, Layout: e.layout}
		start := time.Now()
		rep, err := fleet.InspectAll(ctx, fleet.InspectAllOptions{Kube: sa, Template: tmpl, DialTimeout: 2 * time.Second,
			Orphans: true, OrphanTimeout: time.Second, NoReports: true})
		elapsed := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		c := rep.OrphanCheck
		if rep.ExitCode != inspect.ExitHealthy || len(rep.Clusters) != 1 || rep.Clusters[0].Verdict != inspect.VerdictHealthy ||
			!c.Checked || len(rep.Orphans) != 0 ||
			!strings.Contains(c.Error, "no answer within 1s") || !strings.Contains(c.Error, prune.OrphanStepList) {
			t.Fatalf("exit %d, rows %+v, orphans %+v, check %+v", rep.ExitCode, rep.Clusters, rep.Orphans, c)
		}
		notes := rep.Table().Notes
		if !slices.ContainsFunc(notes, func(n string) bool {
			return strings.HasPrefix(n, "orphans: ") && strings.Contains(n, "no answer within 1s")
		}) {
			t.Fatalf("no note: %q", notes)
		}
		if elapsed > 10*time.Second {
			t.Errorf("inspect --all took %v with a stalled orphan listing (deadline 1s)", elapsed)
		}
		t.Logf("stalled orphan listing: %s (inspect --all %v)", c.Error, elapsed.Round(time.Millisecond))
	})
}
