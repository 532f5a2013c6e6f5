package drill_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// fillDrillData writes Kubernetes-shaped keys, overwrites and deletes some,
// puts some on a lease and compacts, so hashes cover a real history. It
// returns the revision compacted at.
func fillDrillData(tb testing.TB, cli *clientv3.Client, n int) int64 {
	tb.Helper()
	ctx := testfix.Context(tb, 2*time.Minute)
	testenv.PutKeys(tb, cli, "/registry/pods/", n, 64)
	testenv.PutKeys(tb, cli, "/registry/secrets/", n/4, 128)
	testenv.PutKeys(tb, cli, "/registry/pods/", n/5, 64) // overwrite
	if _, err := cli.Put(ctx, "/calico/ipam/v2/x", "y"); err != nil {
		tb.Fatal(err)
	}
	del, err := cli.Delete(ctx, "/registry/pods/00000010", clientv3.WithRange("/registry/pods/00000030"))
	if err != nil {
		tb.Fatal(err)
	}
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range 10 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/leases/kube-node-lease/n%02d", i), "h", clientv3.WithLease(lease.ID)); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		tb.Fatal(err)
	}
	testenv.PutKeys(tb, cli, "/registry/configmaps/", 20, 32)
	return del.Header.Revision
}

func drillOpts(tb testing.TB, r *storeRig, id string, binDir string) drill.Options {
	return drill.Options{ClusterID: id, Store: r.Store, Layout: r.Layout, EtcdBinDir: binDir,
		ScratchDir: tb.TempDir(), StartTimeout: time.Minute, ProbeTimeout: 10 * time.Second, Log: testfix.Logger(tb)}
}

// A good backup of a 3.5 and of a 3.6 cluster passes, compared with the
// source, and the record is next to the manifest.
func TestDrillGoodBackup(t *testing.T) {
	t.Parallel()
	for _, v := range []testenv.Version{testenv.V35, testenv.V36} {
		t.Run(string(v), func(t *testing.T) {
			t.Parallel()
			c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, Members: 1, TLS: true})
			cli := c.Client(t)
			fillDrillData(t, cli, 400)
			r := newStoreRig(t)
			id := "drill-good-" + strings.ReplaceAll(string(v), ".", "")
			m := r.TakeBackup(t, c, id, catalog.KindScheduled)
			o := drillOpts(t, r, id, testenv.DrillBinDir(t, v))
			o.Source = testfix.EtcdConfig(c)
			rec, err := drill.Run(testfix.Context(t, 3*time.Minute), o)
			if err != nil {
				t.Fatalf("drill: %v", err)
			}
			checkPassedSource(t, rec)
			if rec.Backup != m.Name || !strings.HasPrefix(rec.EtcdVersion, string(v)+".") || rec.SourceVersion != m.ServerVersion {
				t.Errorf("record names backup %s etcd %s source %s; want %s, %s.x, %s", rec.Backup, rec.EtcdVersion, rec.SourceVersion, m.Name, v, m.ServerVersion)
			}
			stored, err := catalog.LoadDrill(context.Background(), r.Store, r.Layout, id, m.Name)
			if err != nil || stored == nil {
				t.Fatalf("drill.json: %v %v", stored, err)
			}
			if !stored.Passed || stored.Comparison.Mode != catalog.CompareSource {
				t.Errorf("stored record: passed %v mode %s", stored.Passed, stored.Comparison.Mode)
			}
			b, _ := json.Marshal(stored.Steps)
			t.Logf("steps: %s", b)
			assertEmptyDir(t, o.ScratchDir)
		})
	}
}

func checkPassedSource(tb testing.TB, rec *catalog.DrillRecord) {
	tb.Helper()
	if rec == nil {
		tb.Fatal("no record")
	}
	if !rec.Passed || rec.Failed != "" {
		b, _ := json.MarshalIndent(rec.Checks, "", " ")
		tb.Fatalf("drill failed: %s\n%s", rec.Failed, b)
	}
	cmp := rec.Comparison
	if cmp.Mode != catalog.CompareSource || cmp.SourceHash == nil || cmp.RestoredHash == nil || *cmp.SourceHash != *cmp.RestoredHash || cmp.Equal == nil || !*cmp.Equal {
		b, _ := json.Marshal(cmp)
		tb.Fatalf("comparison: %s", b)
	}
}

func assertEmptyDir(tb testing.TB, dir string) {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	if len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		tb.Errorf("left in %s: %v", dir, names)
	}
}

// commitCopy commits a backup of cluster id whose manifest is src's with
// mutate applied, under a new name, holding snap as its snapshot object
// (src's own object when nil). The manifest is written last.
func (r *storeRig) commitCopy(tb testing.TB, src *catalog.Manifest, id, suffix string, snap []byte, mutate func(*catalog.Manifest)) *catalog.Manifest {
	tb.Helper()
	m := *src
	m.ClusterID = id
	m.Name = src.Name[:len(src.Name)-len(suffix)] + suffix
	m.V2, m.V2Skipped = nil, "not exported"
	if snap == nil {
		snap = testfix.ReadObject(tb, r.Store, r.SnapshotKey(src))
	}
	if mutate != nil {
		mutate(&m)
	}
	r.PutObject(tb, r.Layout.Key(id, m.Name, m.Snapshot.Object), snap)
	b, err := catalog.MarshalManifest(&m)
	if err != nil {
		tb.Fatal(err)
	}
	r.PutObject(tb, r.Layout.Key(id, m.Name, catalog.ManifestObject), b)
	return &m
}

// The source compacted after the backup, past the snapshot's compact
// revision but not past its revision: the restored member is compacted the
// same and the hashes still match. Once the source compacts past the
// snapshot's revision, the drill says it checked self-consistency only,
// and still passes.
func TestDrillSourceCompacted(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	cli := c.Client(t)
	snapCompact := fillDrillData(t, cli, 300)
	r := newStoreRig(t)
	const id = "drill-compacted"
	m := r.TakeBackup(t, c, id, catalog.KindScheduled)
	ctx := testfix.Context(t, 3*time.Minute)
	rev := m.Revision()
	if rev <= snapCompact+1 {
		t.Fatalf("revision %d too close to the compaction %d", rev, snapCompact)
	}
	testenv.PutKeys(t, cli, "/registry/events/", 30, 32)
	if _, err := cli.Compact(ctx, rev-1, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	o := drillOpts(t, r, id, testenv.DrillBinDir(t, testenv.V35))
	o.Source = testfix.EtcdConfig(c)
	rec, err := drill.Run(ctx, o)
	if err != nil {
		t.Fatalf("drill: %v", err)
	}
	checkPassedSource(t, rec)
	if rec.Comparison.CompactRevision != rev-1 {
		t.Errorf("compared at compact revision %d, want the source's %d", rec.Comparison.CompactRevision, rev-1)
	}

	// Past the snapshot's revision: self-consistency only.
	testenv.PutKeys(t, cli, "/registry/events/", 30, 32)
	put, err := cli.Put(ctx, "/registry/events/last", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, put.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	o.NoRecord = true
	rec, err = drill.Run(ctx, o)
	if err != nil {
		t.Fatalf("drill: %v", err)
	}
	t.Logf("comparison: %s", rec.Comparison.Detail)
	if !rec.Passed || rec.Comparison.Mode != catalog.CompareSelf || !strings.Contains(rec.Comparison.Detail, "compacted revision") ||
		rec.Comparison.SourceHash != nil || rec.Comparison.RestoredHash == nil {
		b, _ := json.Marshal(rec.Comparison)
		t.Fatalf("passed %v, comparison %s", rec.Passed, b)
	}
}

// A backup whose objects match its manifest, but hold another cluster's
// snapshot: every hash check passes, the drill fails the comparison with
// the source, and says so in drill.json.
func TestDrillForgedBackupFailsComparison(t *testing.T) {
	t.Parallel()
	a := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	b := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	acli, bcli := a.Client(t), b.Client(t)
	ctx := testfix.Context(t, 3*time.Minute)
	// The same history of revisions, different data.
	if _, err := acli.Put(ctx, "/registry/secrets/kube-system/token", "cluster-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := bcli.Put(ctx, "/registry/secrets/kube-system/token", "cluster-b"); err != nil {
		t.Fatal(err)
	}
	fillDrillData(t, acli, 300)
	fillDrillData(t, bcli, 300)
	r := newStoreRig(t)
	const idA, idB = "drill-forged-a", "drill-forged-b"
	ma := r.TakeBackup(t, a, idA, catalog.KindScheduled)
	mb := r.TakeBackup(t, b, idB, catalog.KindScheduled)
	testenv.PutKeys(t, acli, "/registry/events/", 20, 32) // A's revision above B's snapshot
	forged := r.commitCopy(t, ma, idA, "0f0f0f0f", testfix.ReadObject(t, r.Store, r.SnapshotKey(mb)), func(m *catalog.Manifest) {
		m.Snapshot = mb.Snapshot
		m.RevisionBefore, m.RevisionAfter = mb.RevisionBefore, mb.RevisionAfter
	})

	o := drillOpts(t, r, idA, testenv.DrillBinDir(t, testenv.V35))
	o.Source, o.Backup = testfix.EtcdConfig(a), forged.Name
	rec, err := drill.Run(ctx, o)
	var de *drill.Error
	if !errors.As(err, &de) || de.Record == nil || rec == nil {
		t.Fatalf("drill of the forged backup: %v (record %v), want a failed drill with its record", err, rec)
	}
	if rec.Passed || !strings.HasPrefix(rec.Failed, drill.CheckCompare+":") || de.Step() != drill.StepCompare {
		t.Fatalf("passed %v, failed %q at step %q; want the source hash check", rec.Passed, rec.Failed, de.Step())
	}
	for _, c := range rec.Checks {
		if strings.HasPrefix(c.Name, drill.CheckVerify) && c.Status != catalog.DrillCheckPassed {
			t.Errorf("verification check %s: %s (the forged objects match their manifest)", c.Name, c.Status)
		}
	}
	if rec.Comparison.Mode != catalog.CompareSource || rec.Comparison.Equal == nil || *rec.Comparison.Equal {
		b, _ := json.Marshal(rec.Comparison)
		t.Fatalf("comparison %s", b)
	}
	if !strings.Contains(err.Error(), idA) || !strings.Contains(err.Error(), forged.Name) || !strings.Contains(err.Error(), drill.CheckCompare) {
		t.Errorf("error does not name the cluster, backup and check: %v", err)
	}
	stored, lerr := catalog.LoadDrill(ctx, r.Store, r.Layout, idA, forged.Name)
	if lerr != nil || stored == nil || stored.Passed || stored.Failed != rec.Failed {
		t.Fatalf("drill.json: %+v %v", stored, lerr)
	}
}

// A snapshot whose objects match the manifest and whose database reads
// fine, but that etcd cannot start on (a lease record that does not
// parse): the drill fails at "start etcd" with etcd's own cause, recorded.
func TestDrillEtcdCannotStart(t *testing.T) {
	t.Parallel()
	c, r := drillSource(t, testenv.V36, 100)
	const id = "drill-nostart"
	res, err := backup.Run(context.Background(), backup.Options{ClusterID: id, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(c),
		Store: r.Store, Layout: r.Layout, Compression: objectio.CompressNone, ProbeTimeout: 3 * time.Second, Log: testfix.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Manifest
	stored := testfix.ReadObject(t, r.Store, r.SnapshotKey(m))
	db := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(db, stored[:len(stored)-sha256.Size], 0o600); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(db, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("lease"))
		if err != nil {
			return err
		}
		return b.Put([]byte{0, 0, 0, 0, 0, 0, 0x12, 0x34}, []byte{0x0a, 0xff})
	})
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	rawSum := sha256.Sum256(raw)
	obj := append(append([]byte{}, raw...), rawSum[:]...)
	objSum := sha256.Sum256(obj)
	bad := r.commitCopy(t, m, id, "0e0e0e0e", obj, func(m *catalog.Manifest) {
		m.Snapshot.RawSize, m.Snapshot.RawSHA256 = int64(len(raw)), hex.EncodeToString(rawSum[:])
		m.Snapshot.StoredSize, m.Snapshot.StoredSHA256 = int64(len(obj)), hex.EncodeToString(objSum[:])
	})

	o := drillOpts(t, r, id, testenv.DrillBinDir(t, testenv.V36))
	o.Backup = bad.Name
	ctx := testfix.Context(t, 2*time.Minute)
	rec, err := drill.Run(ctx, o)
	var de *drill.Error
	if !errors.As(err, &de) || de.Record == nil || rec == nil || de.Step() != drill.StepStart {
		t.Fatalf("drill: %v (record %v), want a failed drill at step %q with its record", err, rec, drill.StepStart)
	}
	const cause = "unmarshal lease proto"
	if rec.Passed || !strings.HasPrefix(rec.Failed, drill.CheckStart+":") || !strings.Contains(strings.ToLower(rec.Failed), cause) ||
		!strings.Contains(strings.ToLower(err.Error()), cause) {
		t.Fatalf("failed %q / error %v: want etcd's cause (%s)", rec.Failed, err, cause)
	}
	st, lerr := catalog.LoadDrill(ctx, r.Store, r.Layout, id, bad.Name)
	if lerr != nil || st == nil || st.Passed || st.Failed != rec.Failed {
		t.Fatalf("drill.json: %+v %v", st, lerr)
	}
	assertEmptyDir(t, o.ScratchDir)
}

// A backup of a version a drill does not run, or whose etcd is not in the
// bin dir: refused at "find etcd", before any download, nothing recorded.
func TestDrillUnsupportedVersion(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/a/", 10, 16)
	r := newStoreRig(t)
	const id = "drill-version"
	m := r.TakeBackup(t, c, id, catalog.KindScheduled)
	v34 := r.commitCopy(t, m, id, "0d0d0d0d", nil, func(m *catalog.Manifest) { m.ServerVersion = "3.4.27" })
	v36 := r.commitCopy(t, m, id, "0c0c0c0c", nil, func(m *catalog.Manifest) { m.ServerVersion = "3.6.16" })
	binDir := testenv.DrillBinDir(t, testenv.V35)
	for _, tc := range []struct{ name, backup, want string }{
		{"3.4", v34.Name, "can run etcd 3.5 and 3.6 only"},
		{"no etcd-3.6", v36.Name, "no executable etcd-3.6 in " + binDir},
	} {
		o := drillOpts(t, r, id, binDir)
		o.Backup = tc.backup
		rec, err := drill.Run(testfix.Context(t, time.Minute), o)
		var de *drill.Error
		if rec != nil || !errors.As(err, &de) || de.Record != nil || de.Step() != drill.StepEtcd || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: record %v, err %v; want no record and an error at %q saying %q", tc.name, rec, err, drill.StepEtcd, tc.want)
		}
		if st, _ := catalog.LoadDrill(context.Background(), r.Store, r.Layout, id, tc.backup); st != nil {
			t.Errorf("%s: a drill record was written", tc.name)
		}
		assertEmptyDir(t, o.ScratchDir)
	}
}

// A drill cancelled as each step begins (and once etcd runs) leaves no
// process, no bound port, no file and no record behind.
func TestDrillCancelLeavesNothing(t *testing.T) {
	t.Parallel()
	c, r := drillSource(t, testenv.V35, 100)
	const id = "drill-cancel"
	m := r.TakeBackup(t, c, id, catalog.KindScheduled)
	binDir := testenv.DrillBinDir(t, testenv.V35)
	for _, step := range []string{drill.StepVerify, drill.StepRestore, drill.StepStart, "etcd running",
		drill.StepChecks, drill.StepCompare, drill.StepRecord} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(testfix.Context(t, 2*time.Minute))
			defer cancel()
			o := drillOpts(t, r, id, binDir)
			o.Source = testfix.EtcdConfig(c)
			var pid int
			var ports []int
			drill.SetEtcdHook(&o, func(p int, ps []int) {
				pid, ports = p, ps
				if step == "etcd running" {
					cancel()
				}
			})
			drill.SetStepHook(&o, func(_ context.Context, s string) {
				if s == step {
					cancel()
				}
			})
			rec, err := drill.Run(ctx, o)
			if rec != nil || !errors.Is(err, context.Canceled) {
				t.Fatalf("record %v, err %v; want no record and context.Canceled", rec, err)
			}
			var de *drill.Error
			if !errors.As(err, &de) || de.Record != nil {
				t.Fatalf("err %v: want a Error without a record", err)
			}
			if pid != 0 {
				assertEtcdGone(t, pid, ports)
			} else if step != drill.StepVerify && step != drill.StepRestore && step != drill.StepStart {
				t.Errorf("cancelled at %s, yet etcd never started", step)
			}
			assertEmptyDir(t, o.ScratchDir)
		})
	}
	t.Cleanup(func() {
		if st, err := catalog.LoadDrill(context.Background(), r.Store, r.Layout, id, m.Name); st != nil || err != nil {
			t.Errorf("a cancelled drill left a record: %+v %v", st, err)
		}
	})
}

// A drill whose own etcd stops answering (frozen: SIGSTOP, as on an
// overloaded node) ends within its deadlines, records nothing (a false
// failure would make restore skip a good backup) and leaves no process,
// port or file behind.
func TestDrillFrozenEtcdIsInconclusive(t *testing.T) {
	t.Parallel()
	c, r := drillSource(t, testenv.V35, 100)
	const id = "drill-frozen"
	m := r.TakeBackup(t, c, id, catalog.KindScheduled)
	o := drillOpts(t, r, id, testenv.DrillBinDir(t, testenv.V35))
	o.Source = testfix.EtcdConfig(c)
	o.ProbeTimeout = 2 * time.Second
	var pid int
	var ports []int
	drill.SetEtcdHook(&o, func(p int, ps []int) { pid, ports = p, ps })
	drill.SetStepHook(&o, func(_ context.Context, s string) {
		if s == drill.StepChecks && pid != 0 {
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Errorf("SIGSTOP etcd: %v", err)
			}
		}
	})
	start := time.Now()
	rec, err := drill.Run(testfix.Context(t, 2*time.Minute), o)
	took := time.Since(start)
	var de *drill.Error
	if rec != nil || !errors.As(err, &de) || de.Record != nil || de.Inconclusive == "" || !strings.Contains(err.Error(), "nothing recorded") ||
		!strings.Contains(de.Inconclusive, "did not answer in time") {
		t.Fatalf("record %v, err %v; want no record and an inconclusive Error", rec, err)
	}
	if !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), m.Name) || de.Step() != drill.StepChecks {
		t.Errorf("err %v (step %q): want the cluster, the backup and step %q named", err, de.Step(), drill.StepChecks)
	}
	if took > time.Minute {
		t.Errorf("the drill took %s against a frozen etcd", took)
	}
	if pid == 0 {
		t.Fatal("etcd never started")
	}
	assertEtcdGone(t, pid, ports)
	assertEmptyDir(t, o.ScratchDir)
	if st, err := catalog.LoadDrill(context.Background(), r.Store, r.Layout, id, m.Name); st != nil || err != nil {
		t.Errorf("an inconclusive drill left a record: %+v %v", st, err)
	}
	t.Logf("frozen etcd: %v after %s", err, took.Round(time.Millisecond))
}

// assertEtcdGone checks that the drill's etcd process is gone and its ports
// are free.
func assertEtcdGone(tb testing.TB, pid int, ports []int) {
	tb.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		tb.Errorf("etcd pid %d still exists: %v", pid, err)
	}
	for _, p := range ports {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			tb.Errorf("port %d still bound: %v", p, err)
			continue
		}
		l.Close()
	}
}
