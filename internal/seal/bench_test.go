package seal_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/armada/etcd-recovery/internal/seal"
)

// newZstdWriter mirrors objectio.NewWriter's zstd settings (fastest level,
// one goroutine, 1 MiB window, no frame CRC), without importing backup.
func newZstdWriter(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(1<<20), zstd.WithEncoderCRC(false))
}

// mirrors objectio.NewDecoder.
func newZstdReader(r io.Reader) (*zstd.Decoder, error) {
	return zstd.NewReader(r, zstd.WithDecoderConcurrency(2), zstd.WithDecoderLowmem(true))
}

var (
	etcdDBOnce sync.Once
	etcdDB     []byte
	etcdDBErr  error
)

// etcdLikeDB builds (once per process) a bbolt file of about sizeMB laid out
// as etcd's: a "key" bucket of revision keys holding mvccpb.KeyValue
// protobufs of Kubernetes-like JSON objects (random names, uids, IPs and an
// opaque base64 blob, as backup's BenchmarkBackupVsBaseline writes), filled
// to etcd's 90 %, plus "meta".
func etcdLikeDB(tb testing.TB, sizeMB int) []byte {
	tb.Helper()
	etcdDBOnce.Do(func() {
		dir, err := os.MkdirTemp("", "seal-bench-")
		if err != nil {
			etcdDBErr = err
			return
		}
		defer os.RemoveAll(dir)
		p := filepath.Join(dir, "db")
		db, err := bolt.Open(p, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true})
		if err != nil {
			etcdDBErr = err
			return
		}
		r := rand.New(rand.NewPCG(42, 0x5eed))
		blob := make([]byte, 1024)
		rev := int64(1)
		for size := int64(0); size < int64(sizeMB)<<20; {
			err = db.Update(func(tx *bolt.Tx) error {
				kb, err := tx.CreateBucketIfNotExists([]byte("key"))
				if err != nil {
					return err
				}
				kb.FillPercent = 0.9
				if _, err := tx.CreateBucketIfNotExists([]byte("meta")); err != nil {
					return err
				}
				for i := 0; i < 1000; i++ {
					ns := fmt.Sprintf("kube-ns-%03d", r.IntN(200))
					name := fmt.Sprintf("app-%s-%x", []string{"api", "web", "worker", "cron", "db"}[r.IntN(5)], r.Uint64())
					for j := range blob[:r.IntN(900)+100] {
						blob[j] = byte(r.Uint32())
					}
					val := fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"namespace":%q,"uid":"%08x-%04x-%04x-%04x-%012x","resourceVersion":"%d","creationTimestamp":"%s","labels":{"app":%q,"pod-template-hash":"%x"},"annotations":{"kubectl.kubernetes.io/last-applied-configuration":%q}},"spec":{"nodeName":"10.%d.%d.%d","containers":[{"name":"main","image":"registry.ng.bluemix.net/armada/%s:%x","resources":{"requests":{"cpu":"%dm","memory":"%dMi"}}}]},"status":{"phase":"Running","podIP":"172.30.%d.%d","hostIP":"10.%d.%d.%d"}}`,
						name, ns, r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint64()&0xffffffffffff, rev,
						time.Unix(1.7e9+int64(r.IntN(1e7)), 0).UTC().Format(time.RFC3339), name, r.Uint32(),
						base64.StdEncoding.EncodeToString(blob[:r.IntN(900)+100]),
						r.IntN(256), r.IntN(256), r.IntN(256), name, r.Uint32(), r.IntN(4000), r.IntN(8000),
						r.IntN(256), r.IntN(256), r.IntN(256), r.IntN(256), r.IntN(256))
					kv := mvccpb.KeyValue{Key: []byte("/registry/pods/" + ns + "/" + name), Value: []byte(val), CreateRevision: rev, ModRevision: rev, Version: 1}
					v, err := kv.Marshal()
					if err != nil {
						return err
					}
					k := make([]byte, 17)
					binary.BigEndian.PutUint64(k, uint64(rev))
					k[8] = '_'
					if err := kb.Put(k, v); err != nil {
						return err
					}
					rev++
				}
				size = tx.Size()
				return nil
			})
			if err != nil {
				etcdDBErr = err
				db.Close()
				return
			}
		}
		if err := db.Close(); err != nil {
			etcdDBErr = err
			return
		}
		etcdDB, etcdDBErr = os.ReadFile(p)
	})
	if etcdDBErr != nil {
		tb.Fatal(etcdDBErr)
	}
	return etcdDB
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// compress writes data in etcd's 32 KiB snapshot chunks through zstd, and
// through age when rs is not empty, into out.
func compress(tb testing.TB, data []byte, rs seal.Recipients, out io.Writer) {
	var sealed io.WriteCloser = nopCloser{out}
	if rs.Len() > 0 {
		var err error
		if sealed, err = seal.Encrypt(out, rs); err != nil {
			tb.Fatal(err)
		}
	}
	zw, err := newZstdWriter(sealed)
	if err != nil {
		tb.Fatal(err)
	}
	for off := 0; off < len(data); off += 32 << 10 {
		if _, err := zw.Write(data[off:min(off+32<<10, len(data))]); err != nil {
			tb.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := sealed.Close(); err != nil {
		tb.Fatal(err)
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// BenchmarkZstdWithAndWithoutAge: the backup's compress step (zstd as
// backup configures it) over a ~64 MiB etcd-like bbolt file, alone and
// with age on top, and the restore's way back (age, then zstd). Each
// iteration runs all four back to back, so noise hits them alike; it
// reports MB/s of raw data for each, the compression ratio, the size age
// adds and the overhead in percent. BENCH_DB_MB sets the size.
//
//	go test -run '^$' -bench ZstdWithAndWithoutAge -benchtime 5x ./internal/seal/
func BenchmarkZstdWithAndWithoutAge(b *testing.B) {
	sizeMB := 64
	if s := os.Getenv("BENCH_DB_MB"); s != "" {
		fmt.Sscan(s, &sizeMB)
	}
	data := etcdLikeDB(b, sizeMB)
	a, pub := newKey(b)
	_, pub2 := newKey(b)
	rs := recipients(b, pub, pub2)
	ids := identities(b, a)
	var plainZ, sealedZ bytes.Buffer
	compress(b, data, seal.Recipients{}, &plainZ)
	compress(b, data, rs, &sealedZ)
	var dPlain, dSealed, dUnz, dOpen time.Duration
	buf := make([]byte, 32<<10)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		compress(b, data, seal.Recipients{}, &countWriter{})
		t1 := time.Now()
		compress(b, data, rs, &countWriter{})
		t2 := time.Now()
		zr, err := newZstdReader(bytes.NewReader(plainZ.Bytes()))
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.CopyBuffer(io.Discard, zr, buf); err != nil || n != int64(len(data)) {
			b.Fatal(n, err)
		}
		zr.Close()
		t3 := time.Now()
		ar, err := seal.Decrypt(bytes.NewReader(sealedZ.Bytes()), ids, rs.Strings())
		if err != nil {
			b.Fatal(err)
		}
		zr, err = newZstdReader(ar)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.CopyBuffer(io.Discard, zr, buf); err != nil || n != int64(len(data)) {
			b.Fatal(n, err)
		}
		zr.Close()
		t4 := time.Now()
		dPlain += t1.Sub(t0)
		dSealed += t2.Sub(t1)
		dUnz += t3.Sub(t2)
		dOpen += t4.Sub(t3)
	}
	mbps := func(d time.Duration) float64 { return float64(len(data)) * float64(b.N) / 1e6 / d.Seconds() }
	b.ReportMetric(mbps(dPlain), "zstd-MB/s")
	b.ReportMetric(mbps(dSealed), "zstd+age-MB/s")
	b.ReportMetric(100*(dSealed.Seconds()/dPlain.Seconds()-1), "backup-overhead-%")
	b.ReportMetric(mbps(dUnz), "unzstd-MB/s")
	b.ReportMetric(mbps(dOpen), "age+unzstd-MB/s")
	b.ReportMetric(100*(dOpen.Seconds()/dUnz.Seconds()-1), "restore-overhead-%")
	b.ReportMetric(float64(len(data))/float64(plainZ.Len()), "ratio")
	b.ReportMetric(100*(float64(sealedZ.Len())/float64(plainZ.Len())-1), "size-overhead-%")
	b.Logf("db %.1f MiB, zstd %.1f MiB, zstd+age %.1f MiB (+%d bytes)", mib(uint64(len(data))), mib(uint64(plainZ.Len())), mib(uint64(sealedZ.Len())), sealedZ.Len()-plainZ.Len())
}
