package drill_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// Drills judge the backup, not the node the drill runs on.

// leaseTTL is the TTL of the keys kept alive at the source: shorter than
// any drill, as kube-apiserver's 15 s master leases are shorter than a
// drill of a large database.
const leaseTTL = 2

// leasedSource is a source cluster with a database of about dbMiB and
// leasedKeys keys on a 2 s lease kept alive at the source until the test
// ends (the keys are in the backup; on the drill's etcd nothing keeps
// their lease alive).
func leasedSource(tb testing.TB, v testenv.Version, dbMiB, leasedKeys int) *testenv.EtcdCluster {
	tb.Helper()
	c := testenv.StartEtcd(tb, testenv.EtcdOptions{Version: v, Members: 1, TLS: true})
	cli := c.Client(tb)
	fillDrillData(tb, cli, 200)
	testenv.PutKeys(tb, cli, "/registry/configmaps/big/", dbMiB*16, 64<<10)
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	lease, err := cli.Grant(ctx, leaseTTL)
	if err != nil {
		tb.Fatal(err)
	}
	ka, err := cli.KeepAlive(ctx, lease.ID)
	if err != nil {
		tb.Fatal(err)
	}
	go func() {
		for range ka {
		}
	}()
	for i := range leasedKeys {
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/masterleases/10.0.0.%d", i), "ip", clientv3.WithLease(lease.ID)); err != nil {
			tb.Fatal(err)
		}
	}
	return c
}

// waitLeasedGone waits until the drill's etcd (client port) has revoked
// every key under prefix: the leases expired inside the drill.
func waitLeasedGone(tb testing.TB, port int, prefix string) {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{fmt.Sprintf("http://127.0.0.1:%d", port)}, DialTimeout: 5 * time.Second})
	if err != nil {
		tb.Errorf("client of the drill's etcd: %v", err)
		return
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err == nil && r.Count == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Errorf("the drill's etcd kept the leased keys for 30 s (%v, %v)", r, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Keys on a 2 s lease, kept alive at the source, expire on the drill's
// etcd while the drill checks it: the revision moves, and the verdict
// must not. The drill passes, compared with the source, and says how many
// leased keys expired. The leases are made to expire (a) before the
// checks and (b) after them, before the comparison with the source.
func TestDrillLeasesExpireInsideTheDrill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    testenv.Version
		step string
	}{{testenv.V35, drill.StepChecks}, {testenv.V36, drill.StepChecks}, {testenv.V36, drill.StepCompare}} {
		t.Run(string(tc.v)+"/"+strings.ReplaceAll(tc.step, " ", "-"), func(t *testing.T) {
			t.Parallel()
			const leased = 30
			c := leasedSource(t, tc.v, 24, leased)
			r := newStoreRig(t)
			id := "drill-lease-" + strings.ReplaceAll(string(tc.v), ".", "")
			m := r.TakeBackup(t, c, id, catalog.KindScheduled)
			o := drillOpts(t, r, id, testenv.DrillBinDir(t, tc.v))
			o.Source = testfix.EtcdConfig(c)
			var port int
			drill.SetEtcdHook(&o, func(_ int, ps []int) { port = ps[0] })
			drill.SetStepHook(&o, func(_ context.Context, s string) {
				if s == tc.step && port != 0 {
					waitLeasedGone(t, port, "/registry/masterleases/")
				}
			})
			start := time.Now()
			rec, err := drill.Run(testfix.Context(t, 3*time.Minute), o)
			took := time.Since(start)
			if err != nil {
				if rec != nil {
					b, _ := json.MarshalIndent(rec.Checks, "", " ")
					t.Logf("checks: %s", b)
				}
				t.Fatalf("drill of a good backup whose leases expired inside it: %v", err)
			}
			checkPassedSource(t, rec)
			if rec.Verdict != catalog.VerdictPassed || rec.Drilled != catalog.DrilledStored || rec.Encrypted {
				t.Errorf("verdict %q drilled %q encrypted %v; want passed, stored, false", rec.Verdict, rec.Drilled, rec.Encrypted)
			}
			var expiry string
			for _, ck := range rec.Checks {
				if ck.Name == drill.CheckRevision {
					expiry = ck.Detail
				}
				if ck.Name == drill.CheckLeasedKeys && (ck.Status != catalog.DrillCheckPassed || fmt.Sprint(ck.Got) != fmt.Sprint(leased+10)) {
					t.Errorf("leased keys check: %+v; want passed, exact at the pinned revision (%d)", ck, leased+10)
				}
			}
			if tc.step == drill.StepChecks && !strings.Contains(expiry, fmt.Sprintf("%d keys", leased)) {
				t.Errorf("revision check %q: want the %d expired keys named", expiry, leased)
			}
			t.Logf("etcd %s: drill of backup %s (%d MiB database) took %s; leases expired before %q; revision check: %s",
				tc.v, m.Name, rec.DBSize>>20, took.Round(time.Millisecond), tc.step, expiry)
		})
	}
}

// The drill's etcd killed by a signal from outside (SIGKILL while it is
// checked), or by the OOM killer as it starts (a memory cgroup too small
// for its database): the node's fault, not the backup's. The drill is
// inconclusive with its cause, records nothing (restore never skips the
// backup for it), and leaves no process, port or file behind.
func TestDrillEtcdKilledIsInconclusive(t *testing.T) {
	t.Parallel()
	for _, v := range []testenv.Version{testenv.V35, testenv.V36} {
		c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, Members: 1, TLS: true})
		cli := c.Client(t)
		fillDrillData(t, cli, 200)
		// Many small keys: etcd builds its index of them as it starts.
		testenv.PutKeys(t, cli, "/registry/events/", 120000, 100)
		r := newStoreRig(t)
		id := "drill-killed-" + strings.ReplaceAll(string(v), ".", "")
		m := r.TakeBackup(t, c, id, catalog.KindScheduled)
		for _, kill := range []string{"sigkill", "oom"} {
			t.Run(string(v)+"/"+kill, func(t *testing.T) {
				o := drillOpts(t, r, id, testenv.DrillBinDir(t, v))
				o.Source = testfix.EtcdConfig(c)
				var pid int
				var ports []int
				drill.SetEtcdHook(&o, func(p int, ps []int) { pid, ports = p, ps })
				var cg *testenv.MemoryCgroup
				want := "killed by signal"
				switch kill {
				case "sigkill":
					drill.SetStepHook(&o, func(_ context.Context, s string) {
						if s == drill.StepChecks && pid != 0 {
							if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
								t.Errorf("SIGKILL etcd: %v", err)
							}
						}
					})
				case "oom":
					cg = testenv.NewMemoryCgroup(t, 32<<20)
					o.EtcdBinDir = cg.Wrap(t, map[string]string{"etcd-" + string(v): testenv.EtcdBin(t, v)})
					o.EtcdMemoryLimit = -1
					want = "OOM"
				}
				rec, err := drill.Run(testfix.Context(t, 3*time.Minute), o)
				var de *drill.Error
				if rec != nil || !errors.As(err, &de) || de.Record != nil || de.Inconclusive == "" {
					if rec != nil {
						b, _ := json.MarshalIndent(rec.Checks, "", " ")
						t.Logf("checks: %s", b)
					}
					t.Fatalf("record %v, err %v; want no record and an inconclusive Error", rec, err)
				}
				if !strings.Contains(de.Inconclusive, want) || !strings.Contains(err.Error(), "inconclusive") || !strings.Contains(err.Error(), m.Name) {
					t.Errorf("err %v (cause %q): want inconclusive, the backup and %q named", err, de.Inconclusive, want)
				}
				if cg != nil && cg.OOMKills() == 0 {
					t.Errorf("the OOM killer killed nothing in %s: the test did not test it", cg.Dir)
				}
				if pid != 0 {
					assertEtcdGone(t, pid, ports)
				}
				assertEmptyDir(t, o.ScratchDir)
				if st, err := catalog.LoadDrill(context.Background(), r.Store, r.Layout, id, m.Name); st != nil || err != nil {
					t.Errorf("an inconclusive drill left a record: %+v %v", st, err)
				}
				t.Logf("etcd %s %s: %v", v, kill, err)
			})
		}
	}
}

// A drill records every failed check, and a real mismatch found after a
// check that timed out still fails the drill: the verdict looks at every
// check, not only the first.
func TestDrillVerdictOverAllChecks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		checks []catalog.DrillCheck
		want   string
	}{
		{"passed", []catalog.DrillCheck{{Name: "a", Status: catalog.DrillCheckPassed}, {Name: "b", Status: catalog.DrillCheckInfo}}, catalog.VerdictPassed},
		{"inconclusive only", []catalog.DrillCheck{{Name: "a", Status: catalog.DrillCheckInconclusive, Detail: "deadline"}, {Name: "b", Status: catalog.DrillCheckPassed}}, catalog.VerdictInconclusive},
		{"timeout then mismatch", []catalog.DrillCheck{{Name: "a", Status: catalog.DrillCheckInconclusive, Detail: "deadline"}, {Name: "b", Status: catalog.DrillCheckFailed, Detail: "mismatch"}}, catalog.VerdictFailed},
		{"mismatch then timeout", []catalog.DrillCheck{{Name: "b", Status: catalog.DrillCheckFailed, Detail: "mismatch"}, {Name: "a", Status: catalog.DrillCheckInconclusive}}, catalog.VerdictFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verdict, failures, _ := drill.Verdict(tc.checks)
			if verdict != tc.want {
				t.Errorf("verdict %q, want %q", verdict, tc.want)
			}
			if verdict == catalog.VerdictFailed && (len(failures) != 1 || !strings.Contains(failures[0], "mismatch")) {
				t.Errorf("failures %q: want the mismatch", failures)
			}
		})
	}
}

// A full scratch disk (filled by another writer after the space check, as
// the drill writes its data dir) and the drill's own deadline passing
// while it checks are the node's: inconclusive with the cause, nothing
// recorded, nothing left behind.
func TestDrillNodeFaultsAreInconclusive(t *testing.T) {
	t.Parallel()
	c, r := drillSource(t, testenv.V35, 200)
	testenv.PutKeys(t, c.Client(t), "/registry/configmaps/", 64, 64<<10)
	const id = "drill-node-faults"
	m := r.TakeBackup(t, c, id, catalog.KindScheduled)
	for _, tc := range []struct{ name, want, step string }{
		{"full-scratch", "scratch disk is full", drill.StepRestore},
		{"deadline", "deadline passed", drill.StepChecks},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := drillOpts(t, r, id, testenv.DrillBinDir(t, testenv.V35))
			o.Source = testfix.EtcdConfig(c)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if tc.name == "full-scratch" {
				o.ScratchDir = mountTmpfs(t, 3*m.Snapshot.RawSize+(200<<20)) // the check reserves room for etcd's WAL
				drill.SetStepHook(&o, func(_ context.Context, s string) {
					if s == tc.step {
						fillDisk(t, o.ScratchDir)
					}
				})
			} else {
				// The deadline passes while the drill checks its etcd.
				cancel()
				ctx, cancel = context.WithTimeout(context.Background(), 12*time.Second)
				defer cancel()
				drill.SetStepHook(&o, func(hctx context.Context, s string) {
					if s == tc.step {
						<-hctx.Done()
					}
				})
			}
			rec, err := drill.Run(ctx, o)
			var de *drill.Error
			if rec != nil || !errors.As(err, &de) || de.Record != nil || !strings.Contains(de.Inconclusive, tc.want) {
				t.Fatalf("record %v, err %v; want no record and an inconclusive Error naming %q", rec, err, tc.want)
			}
			if !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), m.Name) {
				t.Errorf("err %v: want the cluster and the backup named", err)
			}
			if tc.name == "full-scratch" {
				removeFiller(t, o.ScratchDir)
			}
			assertEmptyDir(t, o.ScratchDir)
			if st, err := catalog.LoadDrill(context.Background(), r.Store, r.Layout, id, m.Name); st != nil || err != nil {
				t.Errorf("an inconclusive drill left a record: %+v %v", st, err)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}

// mountTmpfs mounts a tmpfs of size bytes for the test (tests run as root).
func mountTmpfs(tb testing.TB, size int64) string {
	tb.Helper()
	dir := tb.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		tb.Fatalf("mount a tmpfs (tests run as root): %v: %s", err, out)
	}
	tb.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	return dir
}

const fillerName = "filler-of-another-writer"

// fillDisk writes a file into dir until the file system is full.
func fillDisk(tb testing.TB, dir string) {
	tb.Helper()
	f, err := os.Create(filepath.Join(dir, fillerName))
	if err != nil {
		tb.Error(err)
		return
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				tb.Errorf("fill %s: %v", dir, err)
			}
			return
		}
	}
}

func removeFiller(tb testing.TB, dir string) {
	tb.Helper()
	if err := os.Remove(filepath.Join(dir, fillerName)); err != nil {
		tb.Error(err)
	}
}
