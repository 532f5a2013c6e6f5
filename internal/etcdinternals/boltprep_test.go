package etcdinternals

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// writeSnapshotFile writes db as etcd's Maintenance.Snapshot does: the
// pages of one read transaction (Tx.WriteTo), then the sha256 of them.
func writeSnapshotFile(tb testing.TB, db *bolt.DB, path string) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if err := db.View(func(tx *bolt.Tx) error {
		_, err := tx.WriteTo(io.MultiWriter(f, h))
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	if _, err := f.Write(h.Sum(nil)); err != nil {
		tb.Fatal(err)
	}
}

// randomBolt fills a database the way etcd opens it (NoFreelistSync), with
// top-level, nested and inline buckets, values from a few bytes to many
// pages, and deletions that leave free pages behind.
func randomBolt(tb testing.TB, path string, seed uint64, pageSize, rounds int) map[string]string {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, PageSize: pageSize})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	rng := rand.New(rand.NewPCG(seed, 7))
	buckets := [][]string{{"key"}, {"meta"}, {"lease"}, {"nest"}, {"nest", "inner"}, {"nest", "inner", "deep"}, {"tiny"}}
	for range rounds {
		if err := db.Update(func(tx *bolt.Tx) error {
			for range 1 + rng.IntN(200) {
				path := buckets[rng.IntN(len(buckets))]
				b, err := tx.CreateBucketIfNotExists([]byte(path[0]))
				if err != nil {
					return err
				}
				for _, p := range path[1:] {
					if b, err = b.CreateBucketIfNotExists([]byte(p)); err != nil {
						return err
					}
				}
				if path[0] == "tiny" {
					// Stays inline: a few small keys.
					if err := b.Put([]byte{byte(rng.IntN(3))}, []byte("x")); err != nil {
						return err
					}
					continue
				}
				k := fmt.Appendf(nil, "%08d", rng.IntN(5000))
				switch r := rng.IntN(10); {
				case r < 3:
					if err := b.Delete(k); err != nil {
						return err
					}
				default:
					size := 1 + rng.IntN(300)
					if r == 9 {
						size = pageSize * (1 + rng.IntN(5)) // overflow pages
					}
					v := make([]byte, size)
					for i := range v {
						v[i] = byte(rng.Uint32())
					}
					if err := b.Put(k, v); err != nil {
						return err
					}
				}
			}
			if rng.IntN(20) == 0 {
				if err := tx.DeleteBucket([]byte("lease")); err != nil && err != bolt.ErrBucketNotFound {
					return err
				}
			}
			return nil
		}); err != nil {
			tb.Fatal(err)
		}
	}
	return dumpBolt(tb, db)
}

// dumpBolt is every key and value of every bucket, by path.
func dumpBolt(tb testing.TB, db *bolt.DB) map[string]string {
	tb.Helper()
	out := map[string]string{}
	var walk func(prefix string, b *bolt.Bucket) error
	walk = func(prefix string, b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				out[prefix+string(k)+"/"] = "(bucket)"
				return walk(prefix+string(k)+"/", b.Bucket(k))
			}
			out[prefix+string(k)] = string(v)
			return nil
		})
	}
	if err := db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			out[string(name)+"/"] = "(bucket)"
			return walk(string(name)+"/", b)
		})
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// checkBolt opens path as etcd would next (NoFreelistSync, so it reads the
// freelist written for it) and runs bbolt's consistency check, which
// fails for a page that is both free and in use, or neither.
func checkBolt(tb testing.TB, path string, noFreelistSync bool) (map[string]string, bolt.Stats) {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: noFreelistSync, Timeout: 10 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	stats := db.Stats()
	if err := db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			return fmt.Errorf("%d problems, first: %v", len(errs), errs[0])
		}
		return nil
	}); err != nil {
		tb.Fatalf("bbolt check of %s: %v", path, err)
	}
	return dumpBolt(tb, db), stats
}

func copyFile(tb testing.TB, from, to string) {
	tb.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		tb.Fatal(err)
	}
}

func sameDump(tb testing.TB, got, want map[string]string) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			tb.Fatalf("entry %q differs", k)
		}
	}
}

func TestSyncFreelistAgreesWithBbolt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		seed             uint64
		pageSize, rounds int
	}{
		{1, 4096, 50}, {2, 4096, 300}, {3, 1024, 300}, {4, 1024, 1000}, {5, 16384, 100},
	} {
		t.Run(fmt.Sprintf("seed%d-page%d", tc.seed, tc.pageSize), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			src := filepath.Join(dir, "src.db")
			want := randomBolt(t, src, tc.seed, tc.pageSize, tc.rounds)
			db, err := bolt.Open(src, 0o600, &bolt.Options{NoFreelistSync: true, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			snap := filepath.Join(dir, "snapshot.db")
			writeSnapshotFile(t, db, snap)
			db.Close()

			// What bbolt itself finds when it rebuilds the freelist.
			rebuilt := filepath.Join(dir, "rebuilt.db")
			copyFile(t, snap, rebuilt)
			_, wantStats := checkBolt(t, rebuilt, true)

			free, err := SyncFreelist(snap)
			if err != nil {
				t.Fatal(err)
			}
			if free != wantStats.FreePageN || free == 0 {
				t.Fatalf("%d free pages, bbolt finds %d", free, wantStats.FreePageN)
			}
			st, _ := os.Stat(snap)
			if st.Size()%int64(tc.pageSize) != 0 {
				t.Fatalf("size %d: the trailer is still there", st.Size())
			}
			// A second pass finds the freelist and leaves the file alone.
			before, _ := os.ReadFile(snap)
			if free, err := SyncFreelist(snap); err != nil || free != 0 {
				t.Fatalf("second pass: %d, %v", free, err)
			}
			if after, _ := os.ReadFile(snap); !bytes.Equal(before, after) {
				t.Fatal("second pass changed the file")
			}
			// The synced freelist is what a plain open reads, with no walk.
			got, stats := checkBolt(t, snap, false)
			sameDump(t, got, want)
			if stats.FreePageN != free {
				t.Fatalf("bbolt reads %d free pages from the freelist, %d were written", stats.FreePageN, free)
			}
			// And etcd's own open (NoFreelistSync) after a write.
			db, err = bolt.Open(snap, 0o600, &bolt.Options{NoFreelistSync: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("key"))
				if err != nil {
					return err
				}
				return b.Put([]byte("after"), bytes.Repeat([]byte{1}, 3*tc.pageSize))
			}); err != nil {
				t.Fatal(err)
			}
			db.Close()
			want["key/after"] = string(bytes.Repeat([]byte{1}, 3*tc.pageSize))
			got, _ = checkBolt(t, snap, true)
			sameDump(t, got, want)

		})
	}
}

// More free pages than a page header's 16-bit count: bbolt's overflow
// encoding of the count.
func TestSyncFreelistLargeCount(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	db, err := bolt.Open(src, 0o600, &bolt.Options{NoFreelistSync: true, PageSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	v := bytes.Repeat([]byte("v"), 600) // one leaf page per key or so
	for batch := range 16 {
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			for i := range 5000 {
				if err := b.Put(fmt.Appendf(nil, "%02d-%06d", batch, i), v); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if k[1] != '0' {
				if err := c.Delete(); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := dumpBolt(t, db)
	snap := filepath.Join(dir, "snapshot.db")
	writeSnapshotFile(t, db, snap)
	db.Close()
	free, err := SyncFreelist(snap)
	if err != nil {
		t.Fatal(err)
	}
	if free < 0xFFFF {
		t.Fatalf("only %d free pages: the test needs more than 65535", free)
	}
	got, stats := checkBolt(t, snap, false)
	sameDump(t, got, want)
	if stats.FreePageN != free {
		t.Fatalf("bbolt reads %d free pages, %d were written", stats.FreePageN, free)
	}
}

func TestSyncFreelistRefusesDamage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	randomBolt(t, src, 9, 4096, 100)
	db, err := bolt.Open(src, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.db")
	writeSnapshotFile(t, db, good)
	var root uint64
	db.View(func(tx *bolt.Tx) error { root = uint64(tx.Bucket([]byte("key")).Root()); return nil })
	db.Close()
	orig, _ := os.ReadFile(good)
	for name, damage := range map[string]func([]byte) []byte{
		"truncated":    func(b []byte) []byte { return b[:len(b)-4096-sha256.Size] },
		"padded":       func(b []byte) []byte { return append(b, make([]byte, 100)...) },
		"meta":         func(b []byte) []byte { b[16+20]++; return b },
		"page header":  func(b []byte) []byte { b[root*4096]++; return b },
		"page flags":   func(b []byte) []byte { b[root*4096+8] = 0x40; return b },
		"not a bbolt":  func(b []byte) []byte { return bytes.Repeat([]byte{0}, len(b)) },
		"empty":        func(b []byte) []byte { return nil },
		"page overrun": func(b []byte) []byte { b[root*4096+12] = 0xff; b[root*4096+13] = 0xff; return b },
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "snapshot.db")
			if err := os.WriteFile(p, damage(bytes.Clone(orig)), 0o600); err != nil {
				t.Fatal(err)
			}
			if free, err := SyncFreelist(p); err == nil {
				t.Fatalf("accepted (%d free pages)", free)
			} else {
				t.Log(err)
			}
		})
	}
}

// PrepareSnapshot's bump, applied once to the staged file, must leave each
// member's database exactly as etcdutl's own --bump-revision
// --mark-compacted does, on a snapshot of a real etcd.
func TestPreparedRestoreMatchesEtcdutl(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	testenv.PutKeys(t, cli, "/a/", 3000, 200)
	mid, err := cli.Get(ctx, "/a/")
	if err != nil {
		t.Fatal(err)
	}
	testenv.PutKeys(t, cli, "/a/", 1000, 200) // overwrites
	if _, err := cli.Delete(ctx, "/a/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	testenv.PutKeys(t, cli, "/b/", 2000, 300)
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/leased", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, mid.Header.Revision); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	snap := filepath.Join(dir, "snapshot.db")
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Create(snap)
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rc.Close()

	restoreWith := func(path string, bump uint64, out string) map[string]string {
		t.Helper()
		if err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath: path, Name: "m1", OutputDataDir: out, PeerURLs: []string{"http://127.0.0.1:2380"},
			InitialCluster: "m1=http://127.0.0.1:2380", InitialClusterToken: "tok",
			SkipHashCheck: true, RevisionBump: bump, MarkCompacted: bump > 0,
		}); err != nil {
			t.Fatal(err)
		}
		got, _ := checkBolt(t, filepath.Join(out, "member", "snap", "db"), true)
		return got
	}
	etcdutlCopy := filepath.Join(dir, "etcdutl.db")
	copyFile(t, snap, etcdutlCopy)
	want := restoreWith(etcdutlCopy, testBump, filepath.Join(dir, "etcdutl"))

	if err := PrepareSnapshot(snap, testBump, true, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	got := restoreWith(snap, 0, filepath.Join(dir, "prepared"))
	sameDump(t, got, want)
	if _, ok := want["meta/scheduledCompactRev"]; !ok {
		t.Fatal("etcdutl marked no compaction: the comparison proves nothing")
	}
}

// testBump is restore.DefaultBumpRevision (which this package cannot
// import).
const testBump = 1_000_000_000

func TestMain(m *testing.M) { testenv.Main(m) }
