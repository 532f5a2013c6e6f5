package etcdinternals

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/armada/etcd-recovery/internal/journal"
)

// hashBenchDB writes an etcd-shaped database: keys keys, each put
// versions times (256-byte values), one in ten then deleted, one event per
// revision. It returns the path and the last revision.
func hashBenchDB(b *testing.B, keys, versions int) (string, int64) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 10 * time.Second, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	value := make([]byte, 256)
	rev := int64(0)
	create := map[int]int64{}
	put := func(tx *bolt.Tx, ev journal.Event) {
		k, v, err := EventEntry(ev)
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Bucket(KeyBucket).Put(k, v); err != nil {
			b.Fatal(err)
		}
	}
	for ver := 1; ver <= versions+1; ver++ {
		err := db.Update(func(tx *bolt.Tx) error {
			if _, err := tx.CreateBucketIfNotExists(KeyBucket); err != nil {
				return err
			}
			if _, err := tx.CreateBucketIfNotExists(MetaBucket); err != nil {
				return err
			}
			for i := range keys {
				key := []byte(fmt.Sprintf("/registry/bench/%08d", i))
				switch {
				case ver <= versions:
					rev++
					if ver == 1 {
						create[i] = rev
					}
					put(tx, journal.Event{Rev: rev, Type: journal.Put, Key: key, Value: value, CreateRev: create[i], Version: int64(ver)})
				case i%10 == 0:
					rev++
					put(tx, journal.Event{Rev: rev, Type: journal.Delete, Key: key})
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return path, rev
}

// BenchmarkHashKV is the offline HashKV of a database of 100,000 keys put
// three times (300,000 revisions, 77 MiB of values) and one in ten
// deleted, at its last revision, for a compact revision in the middle:
// the time and the memory of a proof's hash (it walks the key bucket
// twice; memory is per key, not per revision).
func BenchmarkHashKV(b *testing.B) {
	path, rev := hashBenchDB(b, 100_000, 3)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := HashKV(path, rev, rev/2); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rev), "revisions")
}
