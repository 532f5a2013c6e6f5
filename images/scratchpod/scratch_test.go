package scratchpod_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/podrun"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// scratchNS is the namespace of TestCronJobScratch (its cluster's loopback
// IP is 127.0.35.10).
const scratchNS = "kubx-etcd-35"

// walAllowance is etcd's two 64 MiB WAL segments, which the drill's etcd
// allocates whatever the database's size (docs/backup.md#scratch-space).
const walAllowance = 128 << 20

// TestCronJobScratch runs the CronJob's pod spec of deploy/ in the image,
// with encryption on (no identity in the pod) and every cluster drilled,
// on one cluster of a ~48 MiB database:
//   - scratch a tmpfs of 1.3x the database (+ etcd's 128 MiB of WAL), the
//     pod's ETCD_RECOVERY_SCRATCH_LIMIT set to it: the encrypted backup
//     --drill passes (the plaintext copy is taken over by the drill, never
//     copied; before, the staged copy made it 2x and it failed);
//   - scratch a disk emptyDir whose sizeLimit (and the variable, as the
//     manifest keeps them equal) is 0.9x the database: statfs sees the
//     node's disk, so only the limit can refuse; the drill is refused
//     before the snapshot streams (nothing written to scratch, no
//     eviction), naming the database size and the limit, the backup is
//     committed, and the job exits 1.
//
// About 40 s (two pod runs).
func TestCronJobScratch(t *testing.T) {
	start := time.Now()
	image := testenv.Image(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ew := kubetest.NewEncryptedWorld(t, ctx, scratchNS)
	admin, dyn, a, m, bucket, prefix := ew.Admin, ew.Dyn, ew.Applier, ew.MinIO, ew.Bucket, ew.Prefix
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}

	const name = "etcd-scratch"
	c := kubetest.AddEtcdCluster(t, admin, dyn, scratchNS, name, testenv.EtcdOptions{IP: "127.0.35.10", Members: 1})
	kubetest.PerClusterAccess(t, a, scratchNS, name)
	cli := c.Etcd.Client(t)
	testenv.PutKeys(t, cli, "/registry/configmaps/", 480, 100<<10)
	// The size the pod's backup sees: once etcd's backend has committed
	// the last writes (dbSize steady for a second).
	var db int64
	for steady := 0; steady < 3; time.Sleep(500 * time.Millisecond) {
		sr, err := cli.Status(ctx, c.Etcd.Endpoints()[0])
		if err != nil {
			t.Fatal(err)
		}
		if sr.DbSize == db {
			steady++
		} else {
			db, steady = sr.DbSize, 0
		}
	}
	t.Logf("database: %.1f MiB (status dbSize)", float64(db)/(1<<20))

	w := kubetest.Workload(t, "30-cronjob.yaml")
	runner := &podrun.Runner{Podman: testenv.PodmanGlobalArgs, RunArgs: testenv.PodmanRunArgs, Image: image, WorkDir: t.TempDir()}
	run := func(t *testing.T, pod string, kind podrun.MountKind, size int64) (*podrun.Spec, podrun.Result, podrun.Usage) {
		t.Helper()
		spec, err := podrun.Translate(w, "", pod, ew.PodCluster(t))
		if err != nil {
			t.Fatal(err)
		}
		share := slices.Index(spec.Args, "--drill-share")
		if !slices.Contains(spec.Args, "--drill") || share < 0 || share+1 >= len(spec.Args) {
			t.Fatalf("the CronJob does not run backup --drill --drill-share N: %q", spec.Args)
		}
		spec.Args[share+1] = "1"
		tmpdir, _ := spec.EnvValue("TMPDIR")
		mnt := spec.Mount(tmpdir)
		limit, ok := spec.EnvValue(restore.EnvScratchLimit)
		if mnt == nil || !ok {
			t.Fatalf("the CronJob has no scratch volume at TMPDIR %q with %s (%q)", tmpdir, restore.EnvScratchLimit, limit)
		}
		mnt.Kind, mnt.SizeLimit = kind, size
		for i := range spec.Env {
			if spec.Env[i].Name == restore.EnvScratchLimit {
				spec.Env[i].Value = fmt.Sprint(size)
			}
		}
		res, u, err := runner.Run(ctx, spec)
		t.Logf("pod %s (scratch %s of %.1f MiB): exit %d in %v; %s", pod, kind, float64(size)/(1<<20), res.ExitCode, res.Duration.Round(time.Millisecond), u)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Check(); err != nil {
			t.Errorf("pod %s: %v", pod, err)
		}
		return spec, res, u
	}

	t.Run("1.3x", func(t *testing.T) {
		since := time.Now()
		_, res, _ := run(t, "etcd-recovery-backup-29000001-scr13", podrun.MountEmptyDirMemory, db*13/10+walAllowance)
		if res.ExitCode != 0 {
			t.Fatalf("exit %d with a scratch of 1.3x the database (+ WAL):\n%s", res.ExitCode, testfix.LastLines(string(res.Stderr), 30))
		}
		man := newest(t, ctx, st, layout, name, since)
		rec, err := catalog.LoadDrill(ctx, st, layout, name, man.Name)
		if err != nil || rec == nil || !rec.Passed {
			t.Fatalf("drill of %s: %+v (%v)", man.Name, rec, err)
		}
	})
	t.Run("0.9x", func(t *testing.T) {
		since := time.Now()
		spec, res, u := run(t, "etcd-recovery-backup-29000001-scr09", podrun.MountEmptyDirDisk, db*9/10)
		out := string(res.Stdout) + string(res.Stderr)
		if res.ExitCode != 1 {
			t.Fatalf("exit %d with a scratch of 0.9x the database; want 1:\n%s", res.ExitCode, testfix.LastLines(out, 30))
		}
		for _, want := range []string{`step \"check free space\"`, "before the snapshot streamed", fmt.Sprintf("reports a database of %d bytes (status dbSize)", db),
			restore.EnvScratchLimit + "=", fmt.Sprintf("(%d bytes)", db*9/10)} {
			if !strings.Contains(out, want) && !strings.Contains(out, strings.ReplaceAll(want, `\"`, `"`)) {
				t.Errorf("the job's output does not say %q:\n%s", want, testfix.LastLines(out, 30))
			}
		}
		tmpdir, _ := spec.EnvValue("TMPDIR")
		if peak := u.EmptyDirPeak[tmpdir]; peak > 1<<20 {
			t.Errorf("%.1f MiB written to the scratch volume by a drill refused before the stream", float64(peak)/(1<<20))
		}
		man := newest(t, ctx, st, layout, name, since)
		if rec, _ := catalog.LoadDrill(ctx, st, layout, name, man.Name); rec != nil {
			t.Errorf("a drill record for %s, whose drill was refused: %+v", man.Name, rec)
		}
	})
	t.Logf("took %v", time.Since(start).Round(time.Second))
}

func newest(t *testing.T, ctx context.Context, st store.Store, layout catalog.Layout, cluster string, since time.Time) *catalog.Manifest {
	t.Helper()
	return testfix.NewestSince(t, ctx, st, layout, cluster, "", since)
}
