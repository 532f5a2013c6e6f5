package etcdinternals

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/mvcc"
	"go.etcd.io/etcd/server/v3/mvcc/backend"
	"go.etcd.io/etcd/server/v3/mvcc/buckets"
	"go.uber.org/zap"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // the codec the forced one stands in for
	"google.golang.org/grpc/mem"
)

// moduleDir is where the go command keeps module mod's source.
func moduleDir(tb testing.TB, mod string) string {
	tb.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
	if err != nil {
		tb.Fatalf("go list -m %s: %v", mod, err)
	}
	return strings.TrimSpace(string(out))
}

// The linkname target: etcd's backend declares boltOpenOptions as a
// *bolt.Options literal with exactly the two fields the tuning replaces.
// A new field (a freelist type, a mmap size) would be overwritten by the
// tuning without anyone noticing; a renamed variable breaks the link.
func TestEtcdBoltOptionsDeclaration(t *testing.T) {
	t.Parallel()
	path := filepath.Join(moduleDir(t, "go.etcd.io/etcd/server/v3"), "mvcc", "backend", "config_linux.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "boltOpenOptions" || len(vs.Values) != 1 {
			return true
		}
		found = true
		u, ok := vs.Values[0].(*ast.UnaryExpr)
		if !ok || u.Op != token.AND {
			t.Fatalf("boltOpenOptions is no longer &bolt.Options{...}")
		}
		cl := u.X.(*ast.CompositeLit)
		if sel, ok := cl.Type.(*ast.SelectorExpr); !ok || sel.Sel.Name != "Options" {
			t.Fatalf("boltOpenOptions is no longer a *bolt.Options")
		}
		for _, e := range cl.Elts {
			fields = append(fields, e.(*ast.KeyValueExpr).Key.(*ast.Ident).Name)
		}
		return false
	})
	if !found {
		t.Fatalf("%s declares no boltOpenOptions: the linkname target is gone", path)
	}
	slices.Sort(fields)
	if want := []string{"MmapFlags", "NoFreelistSync"}; !slices.Equal(fields, want) {
		t.Fatalf("etcd's boltOpenOptions sets %v, the tuning was written for %v: review TuneBoltOptions", fields, want)
	}
	if runtime.GOOS == "linux" && EtcdBoltOptions() == nil {
		t.Fatal("the linked variable is nil on Linux")
	}
}

// lastMeta is the newer valid meta page of a bbolt file.
func lastMeta(tb testing.TB, path string) *boltMeta {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var cur *boltMeta
	for i := range 2 {
		m, err := readBoltMeta(f, int64(i*os.Getpagesize()), os.Getpagesize())
		if err != nil {
			tb.Fatalf("meta page %d: %v", i, err)
		}
		if cur == nil || m.txid > cur.txid {
			cur = m
		}
	}
	return cur
}

// etcd's backend (what etcdutl's restore opens each member's database
// with) uses the tuned options: a database it writes carries a synced
// freelist. With ETCD_RECOVERY_NO_INTERNALS it uses etcd's own, and
// writes none.
func TestTunedOptionsReachEtcdBackend(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("etcd tunes nothing outside Linux")
	}
	path := filepath.Join(t.TempDir(), "db")
	be := backend.NewDefaultBackend(path)
	tx := be.BatchTx()
	tx.LockOutsideApply()
	tx.UnsafeCreateBucket(buckets.Key)
	for i := range 100 {
		tx.UnsafePut(buckets.Key, fmt.Appendf(nil, "%08d", i), bytes.Repeat([]byte{1}, 1000))
	}
	tx.Unlock()
	be.ForceCommit()
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	synced := lastMeta(t, path).freelist != boltNoFreelist
	if Enabled() && !synced {
		t.Fatal("etcd's backend wrote no freelist: the tuned options do not reach it (linkname target changed?)")
	}
	if !Enabled() && synced {
		t.Fatalf("%s is set, yet etcd's backend wrote a freelist: its options were changed", EnvNoInternals)
	}
}

// The hand-written page decoding agrees with bbolt's own view of every
// page of a file bbolt wrote: page types, meta fields, the freelist.
func TestBoltLayoutMatchesBbolt(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "db")
	randomBolt(t, path, 11, 4096, 200)
	// A write with bbolt's defaults gives the file a synced freelist;
	// bbolt only describes pages of a database it opened for writing.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("key")).Put([]byte("x"), []byte("y")) }); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pageSize := db.Info().PageSize
	m := lastMeta(t, path)
	if int(m.pageSize) != pageSize {
		t.Fatalf("meta says page size %d, bbolt %d", m.pageSize, pageSize)
	}
	types := map[uint16]string{boltBranchPage: "branch", boltLeafPage: "leaf", boltMetaPage: "meta", boltFreelistPage: "freelist"}
	if err := db.View(func(tx *bolt.Tx) error {
		if uint64(tx.ID()) != m.txid {
			t.Fatalf("meta txid %d, bbolt's %d", m.txid, tx.ID())
		}
		if tx.Size() != int64(m.hwm)*int64(pageSize) {
			t.Fatalf("high-water mark %d pages, bbolt's size %d", m.hwm, tx.Size())
		}
		hdr := make([]byte, boltPageHeaderSize)
		checked := map[string]int{}
		next := 0 // pages below are the overflow of an earlier page
		for id := 0; uint64(id) < m.hwm; id++ {
			pi, err := tx.Page(id)
			if err != nil {
				return err
			}
			if pi.Type == "free" || id < next {
				continue
			}
			next = id + 1 + pi.OverflowCount
			if _, err := f.ReadAt(hdr, int64(id)*int64(pageSize)); err != nil {
				return err
			}
			if got := boltOrder.Uint64(hdr); got != uint64(id) {
				t.Fatalf("page %d: header id %d", id, got)
			}
			if got := types[boltOrder.Uint16(hdr[8:])]; got != pi.Type {
				t.Fatalf("page %d: flags say %q, bbolt %q", id, got, pi.Type)
			}
			if pi.Type != "freelist" && int(boltOrder.Uint16(hdr[10:])) != pi.Count {
				t.Fatalf("page %d: count %d, bbolt %d", id, boltOrder.Uint16(hdr[10:]), pi.Count)
			}
			if int(boltOrder.Uint32(hdr[12:])) != pi.OverflowCount {
				t.Fatalf("page %d: overflow %d, bbolt %d", id, boltOrder.Uint32(hdr[12:]), pi.OverflowCount)
			}
			if pi.Type == "freelist" && uint64(id) != m.freelist {
				t.Fatalf("freelist at page %d, the meta page says %d", id, m.freelist)
			}
			checked[pi.Type]++
		}
		if checked["branch"] == 0 || checked["leaf"] == 0 || checked["meta"] != 2 || checked["freelist"] != 1 {
			t.Fatalf("pages checked %v: the file does not exercise every type", checked)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// The copied bucket names are etcd's.
func TestBucketNamesMatchEtcd(t *testing.T) {
	t.Parallel()
	if !bytes.Equal(KeyBucket, buckets.Key.Name()) || !bytes.Equal(MetaBucket, buckets.Meta.Name()) {
		t.Fatalf("buckets %q %q, etcd's %q %q", KeyBucket, MetaBucket, buckets.Key.Name(), buckets.Meta.Name())
	}
}

// etcd's own mvcc store writes what the copied layout reads: revision keys
// of RevBytesLen (big-endian main revision first), tombstones marked with
// MarkTombstone, values whose field 1 is the user key, and a compaction
// recorded under ScheduledCompactKey and FinishedCompactKey.
func TestRevisionLayoutMatchesEtcd(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "db")
	be := backend.NewDefaultBackend(path)
	s := mvcc.NewStore(zap.NewNop(), be, &lease.FakeLessor{}, mvcc.StoreConfig{})
	s.Put([]byte("/a"), []byte("1"), lease.NoLease)
	s.Put([]byte("/b"), []byte("2"), lease.NoLease)
	s.Put([]byte("/a"), []byte("3"), lease.NoLease)
	s.DeleteRange([]byte("/b"), nil)
	rev := s.Put([]byte("/c"), []byte("4"), lease.NoLease)
	done, err := s.Compact(traceutil.TODO(), 4)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("compaction did not finish")
	}
	s.Close()
	be.ForceCommit()
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}

	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got []string
	if err := db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(MetaBucket)
		if meta == nil {
			t.Fatalf("no %q bucket", MetaBucket)
		}
		for _, k := range [][]byte{ScheduledCompactKey, FinishedCompactKey} {
			v := meta.Get(k)
			if len(v) < RevBytesLen || boltBE(v) != 4 {
				t.Fatalf("meta %q = %x, want revision 4", k, v)
			}
		}
		kb := tx.Bucket(KeyBucket)
		if kb == nil {
			t.Fatalf("no %q bucket", KeyBucket)
		}
		return kb.ForEach(func(k, v []byte) error {
			if len(k) != RevBytesLen && len(k) != MarkedRevBytesLen {
				t.Fatalf("revision key of %d bytes", len(k))
			}
			uk, _, err := KeyAndLease(v)
			if err != nil {
				return err
			}
			e := fmt.Sprintf("%d:%s", boltBE(k), uk)
			if len(k) == MarkedRevBytesLen && k[RevBytesLen] == MarkTombstone {
				e += ":deleted"
			}
			got = append(got, e)
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	// Revisions start at 2: /a@2, /b@3, /a@4, /b deleted@5, /c@6. The
	// compaction at 4 drops /a@2 (superseded by /a@4) and keeps the rest.
	want := []string{"3:/b", "4:/a", "5:/b:deleted", strconv.FormatInt(rev, 10) + ":/c"}
	if !slices.Equal(got, want) {
		t.Fatalf("key bucket %v, want %v", got, want)
	}
}

func boltBE(b []byte) int64 {
	return int64(uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7]))
}

// KeyAndLease reads mvccpb.KeyValue's field numbers as etcd's generated
// code writes them.
func TestKeyAndLease(t *testing.T) {
	t.Parallel()
	v, err := (&mvccpb.KeyValue{Key: []byte("/registry/pods/a"), CreateRevision: 7, ModRevision: 9, Version: 2,
		Value: bytes.Repeat([]byte("v"), 300), Lease: 12345}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	k, l, err := KeyAndLease(v)
	if err != nil || string(k) != "/registry/pods/a" || l != 12345 {
		t.Fatalf("key %q lease %d err %v", k, l, err)
	}
	if k, l, err := KeyAndLease(nil); k != nil || l != 0 || err != nil {
		t.Fatalf("empty value: %q %d %v", k, l, err)
	}
	if _, _, err := KeyAndLease(v[:len(v)-1]); err == nil {
		t.Fatal("a cut value was accepted")
	}
}

// The forced codec stands in for gRPC's proto codec (same name) and reads
// the blob of a SnapshotResponse as etcd's generated code writes it,
// without copying it.
func TestSnapshotCodec(t *testing.T) {
	t.Parallel()
	var _ encoding.CodecV2 = snapshotCodec{}
	if c := encoding.GetCodecV2("proto"); c == nil || c.Name() != (snapshotCodec{}).Name() {
		t.Fatalf("gRPC's proto codec is %v, the forced codec is named %q", c, (snapshotCodec{}).Name())
	}
	b, err := (&pb.SnapshotResponse{Header: &pb.ResponseHeader{Revision: 5}, RemainingBytes: 99,
		Blob: []byte("chunk of a database")}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var c SnapshotChunk
	buf := mem.SliceBuffer(b)
	if err := (snapshotCodec{}).Unmarshal(mem.BufferSlice{buf}, &c); err != nil {
		t.Fatal(err)
	}
	if string(c.Blob) != "chunk of a database" {
		t.Fatalf("blob %q", c.Blob)
	}
	if &c.Blob[0] != &b[bytes.Index(b, []byte("chunk"))] {
		t.Fatal("the blob was copied out of the received buffer")
	}
	c.Release()
	if err := (snapshotCodec{}).Unmarshal(mem.BufferSlice{buf}, &pb.SnapshotResponse{}); err == nil {
		t.Fatal("unmarshalled into a foreign type")
	}
	req, err := (snapshotCodec{}).Marshal(&pb.SnapshotRequest{})
	if err != nil || req.Len() != 0 {
		t.Fatalf("request: %d bytes, %v", req.Len(), err)
	}
}

// smapsRss is the resident size, in KiB, of the mappings of path.
func smapsRss(tb testing.TB, path string) int {
	tb.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	total, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 6 && fields[len(fields)-1] == path
			continue
		}
		if in && len(fields) >= 2 && fields[0] == "Rss:" {
			n, _ := strconv.Atoi(fields[1])
			total += n
		}
	}
	return total
}

// DropResident empties the resident set of bbolt's read-only shared map
// (DB.Info().Data is its address) after a walk.
func TestDropResidentShrinksRSS(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" || !Enabled() {
		t.Skip("madvise is only used on Linux, with the internals on")
	}
	path := filepath.Join(t.TempDir(), "db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := bytes.Repeat([]byte{7}, 64<<10)
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		for i := range 512 { // 32 MiB
			if err := b.Put(fmt.Appendf(nil, "%06d", i), v); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		var sum int
		tx.Bucket([]byte("key")).ForEach(func(_, v []byte) error {
			for i := 0; i < len(v); i += 4096 {
				sum += int(v[i])
			}
			return nil
		})
		before := smapsRss(t, path)
		DropResident(db)
		after := smapsRss(t, path)
		t.Logf("resident map of a walked 32 MiB database: %d KiB before, %d KiB after DropResident (sum %d)", before, after, sum)
		if before < 16<<10 {
			t.Fatalf("only %d KiB resident after the walk: the test measures nothing", before)
		}
		if after > before/8 {
			t.Fatalf("%d KiB still resident after DropResident (%d before)", after, before)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
