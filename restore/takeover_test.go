package restore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// takeOverMember (the drill's data dir, written by renaming the staged
// database into it) writes the data dir etcdutl's restore writes by
// copying it: every bucket and key of member/snap/db, the WAL and the raft
// snapshot are the same, and the staged file is gone (moved, not copied).
// The snapshot is a real etcd 3.5's, with members of its own cluster in
// its membership buckets (replaced by the new member's), staged as a drill
// stages it: by PrepareSnapshot (trailer dropped), and on the public path
// (ETCD_RECOVERY_NO_INTERNALS: the bump through bbolt, etcd's trailer
// left for the restore to drop). About 2 s.
func TestTakeOverMatchesCopy(t *testing.T) {
	for _, public := range []bool{false, true} {
		t.Run(fmt.Sprintf("public=%v", public), func(t *testing.T) { testTakeOverMatchesCopy(t, public) })
	}
}

func testTakeOverMatchesCopy(t *testing.T, public bool) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/registry/pods/", 300, 512)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatalf("snapshot of %v: %v", c.Endpoints(), err)
	}
	var snap bytes.Buffer
	if _, err := io.Copy(&snap, rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()

	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	write := func(name string, takeOver bool) (dataDir, staged string) {
		t.Helper()
		staged = filepath.Join(dir, name+".snapshot.db")
		if err := os.WriteFile(staged, snap.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		// As a drill stages it (stageSnapshot): a freelist, the bump, no
		// trailer; or on the public path, the bump only.
		if public {
			if _, err := etcdinternals.BumpRevision(staged, DefaultBumpRevision, false); err != nil {
				t.Fatalf("stage %s: %v", staged, err)
			}
		} else if err := etcdinternals.PrepareSnapshot(staged, DefaultBumpRevision, false, log); err != nil {
			t.Fatalf("stage %s: %v", staged, err)
		}
		dataDir = filepath.Join(dir, name+".etcd")
		rcfg := restoreConfig{snapshotPath: staged, initialCluster: "drill=http://127.0.0.1:2380", token: "tok", takeOver: takeOver}
		if _, err := restoreMember(rcfg, Member{Name: "drill", PeerURLs: []string{"http://127.0.0.1:2380"}, DataDir: dataDir, State: DirAbsent}); err != nil {
			t.Fatalf("restore (take over %v): %v", takeOver, err)
		}
		return dataDir, staged
	}
	copied, _ := write("copied", false)
	moved, staged := write("moved", true)
	if _, err := os.Stat(staged); !os.IsNotExist(err) {
		t.Errorf("the staged file %s is still there after the take-over (stat: %v): it was copied, not moved", staged, err)
	}
	if _, err := os.Stat(staged + ".seed"); !os.IsNotExist(err) {
		t.Errorf("the seed database is left behind (stat: %v)", err)
	}

	wantDB, gotDB := dbContents(t, filepath.Join(copied, "member/snap/db")), dbContents(t, filepath.Join(moved, "member/snap/db"))
	if len(wantDB) == 0 || len(wantDB["key"]) < 300 || len(wantDB["members"]) != 1 {
		t.Fatalf("the copied data dir's database looks wrong: %d buckets, %d keys, %d members", len(wantDB), len(wantDB["key"]), len(wantDB["members"]))
	}
	for _, b := range slices.Sorted(mapKeys(wantDB, gotDB)) {
		w, g := wantDB[b], gotDB[b]
		for _, k := range slices.Sorted(mapKeys(w, g)) {
			if w[k] != g[k] {
				t.Errorf("bucket %s key %q: take-over %q, etcdutl's copy %q", b, k, trunc(g[k]), trunc(w[k]))
			}
		}
	}
	wantFiles, gotFiles := files(t, copied), files(t, moved)
	if !slices.Equal(slices.Sorted(mapKeys(wantFiles)), slices.Sorted(mapKeys(gotFiles))) {
		t.Fatalf("files: take-over %v, etcdutl's copy %v", slices.Sorted(mapKeys(gotFiles)), slices.Sorted(mapKeys(wantFiles)))
	}
	if n := len(gotFiles["member/snap/db"]); n%512 != 0 {
		t.Errorf("the taken-over database is %d bytes, not whole pages: etcd's trailer was left in it", n)
	}
	for name, w := range wantFiles {
		if name == "member/snap/db" {
			continue // compared by content above (bbolt's page layout differs)
		}
		if !bytes.Equal(w, gotFiles[name]) {
			t.Errorf("%s differs between the take-over and etcdutl's copy", name)
		}
	}
}

func dbContents(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	out := map[string]map[string]string{}
	if err := db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			m := map[string]string{}
			out[string(name)] = m
			return b.ForEach(func(k, v []byte) error { m[string(k)] = string(v); return nil })
		})
	}); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return out
}

func files(t *testing.T, root string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		b, err := os.ReadFile(p)
		out[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mapKeys[V any](ms ...map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		seen := map[string]bool{}
		for _, m := range ms {
			for k := range m {
				if !seen[k] {
					seen[k] = true
					if !yield(k) {
						return
					}
				}
			}
		}
	}
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

type internalRig struct {
	store  *cos.Store
	layout catalog.Layout
}

func newStoreRigInternal(tb testing.TB) *internalRig {
	tb.Helper()
	m := testenv.SharedMinIO(tb)
	return &internalRig{store: testfix.Store(tb, m, m.NewBucket(tb)), layout: catalog.Layout{Prefix: testenv.Prefix(tb)}}
}

func (r *internalRig) take(tb testing.TB, c *testenv.EtcdCluster, id string) *catalog.Manifest {
	tb.Helper()
	res, err := backup.Run(context.Background(), backup.Options{ClusterID: id, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(c),
		Store: r.store, Layout: r.layout, ProbeTimeout: 5 * time.Second})
	if err != nil {
		tb.Fatalf("backup of %s: %v", id, err)
	}
	return res.Manifest
}

// TestWriteDataDirsTakesOverTheLast: a restore of three members writes
// two copies of the staged database and then moves the staged file
// itself into the last member's data dir (three writes of the database,
// not four): every member's database holds the same buckets and keys,
// the last one is the staged file's inode and the file is gone. When a
// copy fails, the staged file is left as it was, not taken over, and the
// data dirs written are removed (all or nothing).
func TestWriteDataDirsTakesOverTheLast(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/configmaps/", 200, 256)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := c.Client(t).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	plan := func(dir string) (*Plan, string) {
		t.Helper()
		staged := filepath.Join(dir, "staged.snapshot.db")
		if err := os.WriteFile(staged, snap, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := etcdinternals.PrepareSnapshot(staged, DefaultBumpRevision, false, log); err != nil {
			t.Fatal(err)
		}
		p := &Plan{ClusterID: "takeover", InitialCluster: "r0=http://127.0.0.1:2380,r1=http://127.0.0.1:2381,r2=http://127.0.0.1:2382", Token: "tok"}
		for i := range 3 {
			p.Members = append(p.Members, Member{Name: fmt.Sprintf("r%d", i), PeerURLs: []string{fmt.Sprintf("http://127.0.0.1:%d", 2380+i)},
				DataDir: filepath.Join(dir, fmt.Sprintf("r%d.etcd", i)), State: DirAbsent})
		}
		return p, staged
	}
	inode := func(path string) uint64 {
		t.Helper()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}

	t.Run("written", func(t *testing.T) {
		dir := t.TempDir()
		p, staged := plan(dir)
		stagedIno := inode(staged)
		rcfg := restoreConfig{snapshotPath: staged, initialCluster: p.InitialCluster, token: p.Token, takeOver: true}
		if err := writeDataDirs(ctx, p, 0, rcfg, log); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(staged); !os.IsNotExist(err) {
			t.Errorf("the staged file is still there (stat: %v): not taken over", err)
		}
		var dbs []map[string]map[string]string
		for i, m := range p.Members {
			db := filepath.Join(m.DataDir, "member/snap/db")
			if got := inode(db) == stagedIno; got != (i == 2) {
				t.Errorf("member %s's database is the staged file: %v, want %v", m.Name, got, i == 2)
			}
			dbs = append(dbs, dbContents(t, db))
		}
		if len(dbs[0]["key"]) < 200 || len(dbs[0]["members"]) != 3 {
			t.Fatalf("member r0's database: %d keys, %d members", len(dbs[0]["key"]), len(dbs[0]["members"]))
		}
		for i := 1; i < 3; i++ {
			for _, b := range slices.Sorted(mapKeys(dbs[0], dbs[i])) {
				for _, k := range slices.Sorted(mapKeys(dbs[0][b], dbs[i][b])) {
					if dbs[0][b][k] != dbs[i][b][k] {
						t.Errorf("bucket %s key %q: member r%d %q, r0 %q", b, k, i, trunc(dbs[i][b][k]), trunc(dbs[0][b][k]))
					}
				}
			}
		}
	})

	t.Run("another mount of the file system", func(t *testing.T) {
		// The toolkit pod's /scratch and /restore: two mounts of one
		// disk (same device), where a rename is refused (EXDEV).
		base := t.TempDir()
		scratch, data := filepath.Join(base, "scratch"), filepath.Join(base, "data")
		for _, m := range []string{scratch, data} {
			src := m + ".src"
			if err := os.MkdirAll(src, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(m, 0o700); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("mount", "--bind", src, m).CombinedOutput(); err != nil {
				t.Skipf("no bind mount here (%v: %s)", err, strings.TrimSpace(string(out)))
			}
			t.Cleanup(func() { _ = exec.Command("umount", m).Run() })
		}
		p, moved := plan(scratch)
		for i := range p.Members {
			p.Members[i].DataDir = filepath.Join(data, filepath.Base(p.Members[i].DataDir))
		}
		rcfg := restoreConfig{snapshotPath: moved, initialCluster: p.InitialCluster, token: p.Token, takeOver: true}
		if err := writeDataDirs(ctx, p, 0, rcfg, log); err != nil {
			t.Fatalf("written across two mounts of one file system: %v", err)
		}
		if _, err := os.Stat(moved); err != nil {
			t.Errorf("the staged file: %v; want it left, copied as etcdutl copies it", err)
		}
		for _, m := range p.Members {
			if db := dbContents(t, filepath.Join(m.DataDir, "member/snap/db")); len(db["key"]) < 200 || len(db["members"]) != 3 {
				t.Errorf("member %s's database: %d keys, %d members", m.Name, len(db["key"]), len(db["members"]))
			}
			if left, _ := filepath.Glob(filepath.Join(m.DataDir, ".etcd-recovery-*")); len(left) > 0 {
				t.Errorf("member %s: %v left in the data dir", m.Name, left)
			}
		}
	})

	t.Run("the take-over fails", func(t *testing.T) {
		// The last member's restore on the seed fails (its name is not in
		// the initial cluster): its data dir holds no member/ an etcd
		// could start, nothing is left in it, and the others are removed.
		dir := t.TempDir()
		p, staged := plan(dir)
		p.Members[2].Name = "not-in-the-cluster"
		rcfg := restoreConfig{snapshotPath: staged, initialCluster: p.InitialCluster, token: p.Token, takeOver: true}
		if err := writeDataDirs(ctx, p, 0, rcfg, log); err == nil {
			t.Fatal("written although the last member is not in the initial cluster")
		}
		for _, m := range p.Members {
			if _, err := os.Stat(m.DataDir); !os.IsNotExist(err) {
				t.Errorf("member %s's data dir is left after the failure (stat: %v)", m.Name, err)
			}
		}
	})

	t.Run("a copy fails", func(t *testing.T) {
		dir := t.TempDir()
		p, staged := plan(dir)
		before, err := os.ReadFile(staged)
		if err != nil {
			t.Fatal(err)
		}
		// r1's dir appears after it was checked absent: its copy is refused.
		if err := os.MkdirAll(filepath.Join(p.Members[1].DataDir, "member"), 0o700); err != nil {
			t.Fatal(err)
		}
		rcfg := restoreConfig{snapshotPath: staged, initialCluster: p.InitialCluster, token: p.Token, takeOver: true}
		if err := writeDataDirs(ctx, p, 1, rcfg, log); err == nil {
			t.Fatal("written although member r1's data dir changed since it was checked")
		}
		after, err := os.ReadFile(staged)
		if err != nil || !bytes.Equal(before, after) {
			t.Errorf("the staged file was changed or moved after a copy failed (%v)", err)
		}
		for _, m := range []Member{p.Members[0], p.Members[2]} {
			if _, err := os.Stat(m.DataDir); !os.IsNotExist(err) {
				t.Errorf("member %s's data dir is left after the failure (stat: %v)", m.Name, err)
			}
		}
	})
}
