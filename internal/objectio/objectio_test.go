package objectio_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

type keys struct {
	rs   seal.Recipients
	ids  *seal.Identities
	pubs []string
}

func newKeys(t testing.TB) keys {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	pub := id.Recipient().String()
	rs, err := seal.ParseRecipients([]string{pub})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := seal.ParseIdentities(strings.NewReader(fmt.Sprintf("# public key: %s\n%s\n", pub, id)), "test")
	if err != nil {
		t.Fatal(err)
	}
	return keys{rs: rs, ids: ids, pubs: []string{pub}}
}

// data is compressible: repeated words with random ones among them.
func data(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	var b bytes.Buffer
	for b.Len() < n {
		fmt.Fprintf(&b, "key-%06d=value-%d;", r.IntN(5000), r.IntN(1<<30))
	}
	return b.Bytes()[:n]
}

// snapshot is a fake etcd snapshot stream: a database and its sha256.
func snapshot(db []byte) []byte {
	s := sha256.Sum256(db)
	return append(bytes.Clone(db), s[:]...)
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

type encCase struct {
	name string
	c    objectio.Compression
	enc  bool
}

// eachEncoding runs f in a parallel subtest for each of encCases, with an
// empty in-memory store.
func eachEncoding(t *testing.T, f func(t *testing.T, ec encCase, st *memstore.Store)) {
	t.Helper()
	for _, ec := range encCases {
		t.Run(ec.name, func(t *testing.T) {
			t.Parallel()
			f(t, ec, memstore.New())
		})
	}
}

var encCases = []encCase{
	{"plain", objectio.CompressNone, false},
	{"zstd", objectio.CompressZstd, false},
	{"age", objectio.CompressNone, true},
	{"zstd+age", objectio.CompressZstd, true},
}

// put writes raw as an object encoded per ec and returns what Open expects.
func put(t testing.TB, st store.Store, key string, raw []byte, ec encCase, k keys) objectio.Expect {
	t.Helper()
	enc := objectio.Encoding{Compression: ec.c}
	if ec.enc {
		enc.Recipients = k.rs
	}
	w, err := objectio.Create(context.Background(), st, key, bytes.NewReader(raw), enc)
	if err != nil {
		t.Fatal(err)
	}
	if w.RawSize != int64(len(raw)) || w.RawSHA256 != sum(raw) {
		t.Fatalf("written raw %d %s, want %d %s", w.RawSize, w.RawSHA256, len(raw), sum(raw))
	}
	stored := readAll(t, st, key)
	if w.StoredSize != int64(len(stored)) || w.StoredSHA256 != sum(stored) {
		t.Fatalf("written stored %d %s, the store holds %d %s", w.StoredSize, w.StoredSHA256, len(stored), sum(stored))
	}
	exp := w.Expect(ec.c)
	if ec.enc {
		exp.Encrypted, exp.Identities, exp.Recipients = true, k.ids, k.pubs
	}
	return exp
}

func readAll(t testing.TB, st store.Store, key string) []byte {
	t.Helper()
	return testfix.ReadObject(t, st, key)
}

// open reads key through Open and returns what it read and the error that
// ended it (nil at io.EOF), from Open or from Read.
func open(st store.Store, key string, exp objectio.Expect) ([]byte, *objectio.Reader, error) {
	r, err := objectio.Open(context.Background(), st, key, exp)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	var out bytes.Buffer
	_, err = io.Copy(&out, r)
	return out.Bytes(), r, err
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	k := newKeys(t)
	for _, ec := range encCases {
		for _, size := range []int{0, 1, 3<<20 + 17} {
			t.Run(fmt.Sprintf("%s/%d", ec.name, size), func(t *testing.T) {
				t.Parallel()
				st := memstore.New()
				raw := data(size, uint64(size))
				exp := put(t, st, "o", raw, ec, k)
				var progress int64
				exp.Progress = func(n int64) { progress = n }
				got, r, err := open(st, "o", exp)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, raw) {
					t.Fatalf("read %d bytes, wrote %d", len(got), len(raw))
				}
				res := r.Result()
				if res.RawSize != int64(len(raw)) || res.RawSHA256 != sum(raw) || res.StoredSize != exp.StoredSize || res.StoredSHA256 != exp.StoredSHA256 {
					t.Fatalf("result %+v, expected %+v", res, exp)
				}
				if progress != exp.StoredSize {
					t.Fatalf("progress %d, stored %d", progress, exp.StoredSize)
				}
				// Read, not WriteTo, in small pieces.
				r2, err := objectio.Open(context.Background(), st, "o", exp)
				if err != nil {
					t.Fatal(err)
				}
				defer r2.Close()
				var out bytes.Buffer
				buf := make([]byte, 777)
				for {
					n, err := r2.Read(buf)
					out.Write(buf[:n])
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				if !bytes.Equal(out.Bytes(), raw) {
					t.Fatal("Read returned other bytes than WriteTo")
				}
			})
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	k := newKeys(t)
	eachEncoding(t, func(t *testing.T, ec encCase, st *memstore.Store) {
		db := data(2<<20+5, 7)
		stream := snapshot(db)
		exp := put(t, st, "snap", stream, ec, k)
		exp.Snapshot, exp.RawSize, exp.RawSHA256 = true, int64(len(db)), sum(db)
		got, r, err := open(st, "snap", exp)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, stream) {
			t.Fatal("the decoded stream differs")
		}
		res := r.Result()
		if res.RawSize != int64(len(db)) || res.RawSHA256 != sum(db) || hex.EncodeToString(res.Trailer) != sum(db) {
			t.Fatalf("result %+v", res)
		}
	})
}

// wantKind checks that err is an *objectio.Error of kind naming key.
func wantKind(t *testing.T, err error, kind objectio.Kind, key string) *objectio.Error {
	t.Helper()
	var oe *objectio.Error
	if !errors.As(err, &oe) {
		t.Fatalf("error %v (%T), want an *objectio.Error of kind %s", err, err, kind)
	}
	if oe.Kind != kind {
		t.Fatalf("kind %q (%v), want %q", oe.Kind, err, kind)
	}
	if !strings.Contains(err.Error(), key) {
		t.Fatalf("error %q does not name the object %s", err, key)
	}
	return oe
}

func TestMismatches(t *testing.T) {
	t.Parallel()
	k := newKeys(t)
	db := data(1<<20+333, 3)
	stream := snapshot(db)
	eachEncoding(t, func(t *testing.T, ec encCase, st *memstore.Store) {
		exp := put(t, st, "backups/o", stream, ec, k)
		snap := exp
		snap.Snapshot, snap.RawSize, snap.RawSHA256 = true, int64(len(db)), sum(db)
		cases := []struct {
			name   string
			change func(e *objectio.Expect)
			kind   objectio.Kind
		}{
			{"stored sha", func(e *objectio.Expect) { e.StoredSHA256 = sum([]byte("other")) }, objectio.KindStoredSHA},
			{"stored size", func(e *objectio.Expect) { e.StoredSize++ }, objectio.KindStoredSize},
			{"raw sha", func(e *objectio.Expect) { e.RawSHA256 = sum([]byte("other")) }, objectio.KindRawSHA},
			{"raw size", func(e *objectio.Expect) { e.RawSize-- }, objectio.KindRawSize},
		}
		for _, c := range cases {
			for _, base := range []objectio.Expect{exp, snap} {
				e := base
				c.change(&e)
				_, _, err := open(st, "backups/o", e)
				oe := wantKind(t, err, c.kind, "backups/o")
				if !oe.Mismatch() || !oe.Damaged() {
					t.Fatalf("%s: Mismatch %v Damaged %v", c.name, oe.Mismatch(), oe.Damaged())
				}
			}
		}
		// Unknown sizes are not checked.
		e := exp
		e.StoredSize, e.RawSize = objectio.UnknownSize, objectio.UnknownSize
		if _, _, err := open(st, "backups/o", e); err != nil {
			t.Fatal(err)
		}
	})
}

func TestEtcdTrailer(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	db := data(100000, 4)
	bad := append(bytes.Clone(db), make([]byte, 32)...) // a trailer that is not the database's sha256
	ec := encCases[1]
	exp := put(t, st, "snap", bad, ec, keys{})
	exp.Snapshot, exp.RawSize, exp.RawSHA256 = true, int64(len(db)), sum(db)
	_, _, err := open(st, "snap", exp)
	wantKind(t, err, objectio.KindEtcdHash, "snap")

	short := []byte("too short")
	exp = put(t, st, "short", short, ec, keys{})
	exp.Snapshot, exp.RawSize, exp.RawSHA256 = true, 0, sum(nil)
	_, _, err = open(st, "short", exp)
	oe := wantKind(t, err, objectio.KindEtcdHash, "short")
	if !strings.Contains(oe.Error(), "too short") {
		t.Fatal(oe)
	}
}

// damage rewrites key's stored bytes with f.
func damage(t *testing.T, st store.Store, key string, f func([]byte) []byte) {
	t.Helper()
	b := f(readAll(t, st, key))
	if _, err := st.Put(context.Background(), key, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
}

func TestDamagedObjects(t *testing.T) {
	t.Parallel()
	k := newKeys(t)
	raw := data(3<<20, 5)
	for _, ec := range encCases {
		t.Run(ec.name, func(t *testing.T) {
			t.Parallel()
			// Truncated: half the stored bytes.
			st := memstore.New()
			exp := put(t, st, "o", raw, ec, k)
			damage(t, st, "o", func(b []byte) []byte { return b[:len(b)/2] })
			_, _, err := open(st, "o", exp)
			want := objectio.KindStoredSHA
			if ec.enc {
				want = objectio.KindTampered // age sees the cut first
			}
			oe := wantKind(t, err, want, "o")
			if ec.enc && !errors.Is(err, seal.ErrTampered) {
				t.Fatalf("%v is not seal.ErrTampered", err)
			}
			if oe.Got.StoredSize != exp.StoredSize/2 {
				t.Fatalf("measured %d stored bytes, %d were left", oe.Got.StoredSize, exp.StoredSize/2)
			}

			// A flipped byte in the middle.
			st = memstore.New()
			exp = put(t, st, "o", raw, ec, k)
			damage(t, st, "o", func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b })
			_, _, err = open(st, "o", exp)
			if ec.enc {
				wantKind(t, err, objectio.KindTampered, "o")
			} else {
				wantKind(t, err, objectio.KindStoredSHA, "o")
			}
		})
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	_, err := objectio.Open(context.Background(), st, "missing/key", objectio.Expect{Compression: objectio.CompressZstd})
	oe := wantKind(t, err, objectio.KindMissing, "missing/key")
	if !store.IsNotFound(err) || !oe.Damaged() || oe.Mismatch() {
		t.Fatalf("%v: IsNotFound %v, Damaged %v, Mismatch %v", err, store.IsNotFound(err), oe.Damaged(), oe.Mismatch())
	}
	// ReadBack gives the store's error itself.
	err = objectio.ReadBack(context.Background(), st, "missing/key", objectio.ExpectPlain(nil))
	var e *objectio.Error
	if !store.IsNotFound(err) || errors.As(err, &e) {
		t.Fatalf("ReadBack of a missing object: %v", err)
	}
}

func TestWrongIdentity(t *testing.T) {
	t.Parallel()
	k, other := newKeys(t), newKeys(t)
	st := memstore.New()
	exp := put(t, st, "o", data(1000, 1), encCases[3], k)
	exp.Identities = other.ids
	_, err := objectio.Open(context.Background(), st, "o", exp)
	oe := wantKind(t, err, objectio.KindNoIdentity, "o")
	if !errors.Is(err, seal.ErrNoIdentity) || oe.Damaged() {
		t.Fatalf("%v: errors.Is ErrNoIdentity %v, Damaged %v", err, errors.Is(err, seal.ErrNoIdentity), oe.Damaged())
	}
	// A plaintext object read as encrypted does not open.
	exp = put(t, st, "p", data(1000, 1), encCases[1], k)
	exp.Encrypted, exp.Identities = true, k.ids
	_, err = objectio.Open(context.Background(), st, "p", exp)
	wantKind(t, err, objectio.KindTampered, "p")
}

// failingStore fails every Get's body after limit bytes with a store error.
type failingStore struct {
	store.Store
	limit int64
}

type failingBody struct {
	io.ReadCloser
	left int64
	key  string
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, &store.Error{Backend: "test", Op: "get", Key: b.key, Err: errors.New("connection reset")}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

func (s failingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return &failingBody{ReadCloser: rc, left: s.limit, key: key}, nil
}

func TestStoreErrorMidStream(t *testing.T) {
	t.Parallel()
	k := newKeys(t)
	eachEncoding(t, func(t *testing.T, ec encCase, st *memstore.Store) {
		exp := put(t, st, "o", data(3<<20, 9), ec, k)
		_, _, err := open(failingStore{Store: st, limit: exp.StoredSize / 2}, "o", exp)
		var oe *objectio.Error
		if !store.IsStoreError(err) || errors.As(err, &oe) {
			t.Fatalf("%v (%T): want the store's error, not a mismatch", err, err)
		}
	})
}

func TestCloseEarly(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	exp := put(t, st, "o", data(8<<20, 2), encCases[1], keys{})
	r, err := objectio.Open(context.Background(), st, "o", exp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := r.Read(make([]byte, 10)); err == nil || err == io.EOF {
		t.Fatalf("Read after Close: %v", err)
	}
}

func TestContextCancelled(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	exp := put(t, st, "o", data(8<<20, 2), encCases[1], keys{})
	ctx, cancel := context.WithCancel(context.Background())
	r, err := objectio.Open(ctx, st, "o", exp)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := io.ReadFull(r, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.Copy(io.Discard, r); !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %v", err)
	}
}

func TestReadBackAndCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := memstore.New()
	body := []byte(`{"manifest":1}`)
	if _, err := objectio.Put(ctx, st, "m", bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	if err := objectio.ReadBack(ctx, st, "m", objectio.ExpectPlain(body)); err != nil {
		t.Fatal(err)
	}
	if _, err := objectio.Put(ctx, st, "m", bytes.NewReader(body)); !errors.Is(err, store.ErrExists) {
		t.Fatalf("Put over an existing object: %v", err)
	}
	if _, err := objectio.Create(ctx, st, "m", bytes.NewReader(body), objectio.Encoding{Compression: objectio.CompressZstd}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("Create over an existing object: %v", err)
	}
	// Write replaces; the old expectation no longer reads back.
	w, err := objectio.Write(ctx, st, "m", strings.NewReader("replaced"), objectio.Encoding{Compression: objectio.CompressNone})
	if err != nil {
		t.Fatal(err)
	}
	err = objectio.ReadBack(ctx, st, "m", objectio.ExpectPlain(body))
	var oe *objectio.Error
	if !errors.As(err, &oe) || !oe.Mismatch() || oe.Got.StoredSHA256 != w.StoredSHA256 {
		t.Fatalf("read back of a replaced object: %v", err)
	}
	if err := objectio.ReadBack(ctx, st, "m", w.Expect(objectio.CompressNone)); err != nil {
		t.Fatal(err)
	}
	if _, err := objectio.Write(ctx, st, "x", strings.NewReader("x"), objectio.Encoding{Compression: "lz4"}); err == nil {
		t.Fatal("unknown compression accepted")
	}
}

// TestOpenStreams reads a 64 MiB object and checks that the heap does not
// grow with it: Open holds a few 1 MiB buffers, never the object. The
// heap is measured live (after a GC) every 8 MiB read.
func TestOpenStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MiB")
	}
	k := newKeys(t)
	for _, ec := range []encCase{encCases[0], encCases[3]} {
		t.Run(ec.name, func(t *testing.T) {
			st := memstore.New()
			const size = 64 << 20
			// Incompressible: the stored object is as large as the raw one.
			raw := make([]byte, size)
			cr := rand.NewChaCha8([32]byte{1, 2})
			cr.Read(raw)
			exp := put(t, st, "big", raw, ec, k)
			raw = nil
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			r, err := objectio.Open(context.Background(), st, "big", exp)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var peak uint64
			var n int64
			buf := make([]byte, 256<<10)
			for i := 0; ; i++ {
				k, err := r.Read(buf)
				n += int64(k)
				if i%32 == 0 { // every 8 MiB, what is live
					runtime.GC()
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					peak = max(peak, ms.HeapAlloc)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if n != size {
				t.Fatalf("read %d bytes", n)
			}
			growth := int64(peak) - int64(before.HeapAlloc)
			t.Logf("heap growth while reading 64 MiB: %d MiB", growth>>20)
			if growth > 40<<20 {
				t.Fatalf("the heap grew by %d MiB reading a 64 MiB object: Open buffers it", growth>>20)
			}
		})
	}
}
