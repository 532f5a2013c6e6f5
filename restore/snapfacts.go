package restore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/armada/etcd-recovery/backup"
)

// SnapshotFacts are read from a verified snapshot file before any data dir
// is written: what the rebuilt cluster must hold.
type SnapshotFacts struct {
	// Revision is the latest revision in the database (the last key of
	// etcd's "key" bucket).
	Revision int64 `json:"revision"`
	// LiveKeys is the number of keys whose latest revision is not a
	// deletion: what a range over the whole keyspace counts.
	LiveKeys int64 `json:"liveKeys"`
	// Revisions is the number of entries in the "key" bucket (every
	// revision of every key not yet compacted, tombstones included).
	Revisions int64 `json:"revisions"`
	// CompactRevision is the last compaction recorded in the database. A
	// compaction removes deletions, so the store's revision may be above
	// the last key's: etcd's revision is the larger of the two.
	CompactRevision int64 `json:"compactRevision,omitempty"`
}

// StoreRevision is the revision etcd reports for this database.
func (f SnapshotFacts) StoreRevision() int64 { return max(f.Revision, f.CompactRevision) }

// etcd's mvcc layout: the "key" bucket maps a revision (8-byte main,
// '_', 8-byte sub; plus a trailing 't' for a deletion) to a marshalled
// mvccpb.KeyValue whose field 1 is the user key.
const (
	revBytesLen       = 8 + 1 + 8
	markedRevBytesLen = revBytesLen + 1
	markTombstone     = 't'
)

var (
	keyBucket           = []byte("key")
	metaBucket          = []byte("meta")
	finishedCompactKey  = []byte("finishedCompactRev")
	scheduledCompactKey = []byte("scheduledCompactRev")
)

// readSnapshotFacts counts the live keys and finds the latest revision of a
// snapshot file (the database, optionally followed by etcd's 32-byte hash,
// as etcdutl reads it). The database is opened read-only: nothing is
// written, and bbolt does not rebuild its freelist.
//
// Counting walks the "key" bucket in revision order and keeps, per user
// key, whether its latest entry is a deletion. Only the start of each value
// is read (the user key is the first field), so large values stay on disk.
// User keys are remembered by a 128-bit hash, so the memory used is 16
// bytes per distinct key whatever the key sizes; the pages of the map that
// the walk has passed are dropped from the resident set after every
// trimBytes of keys and values, so the walk's RSS does not grow with the
// database. (Only the start of a large value is read, but the kernel maps
// the pages around a fault that are already cached, so a walk past
// 100 KiB values would otherwise map nearly all of them.)
const trimBytes = 8 << 20

func readSnapshotFacts(path string) (SnapshotFacts, error) {
	var f SnapshotFacts
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return f, fmt.Errorf("open snapshot database %s: %w", path, err)
	}
	defer db.Close()
	s1, s2 := maphash.MakeSeed(), maphash.MakeSeed()
	err = db.View(func(tx *bolt.Tx) error {
		if meta := tx.Bucket(metaBucket); meta != nil {
			for _, k := range [][]byte{finishedCompactKey, scheduledCompactKey} {
				if v := meta.Get(k); len(v) >= 8 {
					f.CompactRevision = max(f.CompactRevision, int64(binary.BigEndian.Uint64(v[:8])))
				}
			}
		}
		b := tx.Bucket(keyBucket)
		if b == nil {
			return errors.New(`no "key" bucket: not an etcd v3 database`)
		}
		alive := map[[2]uint64]bool{}
		c := b.Cursor()
		passed := 0
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if passed += len(k) + len(v); passed >= trimBytes {
				dropResident(db)
				passed = 0
			}
			if len(k) != revBytesLen && len(k) != markedRevBytesLen {
				return fmt.Errorf("key bucket: revision key of %d bytes", len(k))
			}
			f.Revisions++
			f.Revision = int64(binary.BigEndian.Uint64(k[:8]))
			uk, err := userKey(v)
			if err != nil {
				return fmt.Errorf("key bucket: revision %d: %w", f.Revision, err)
			}
			if len(uk) == 0 {
				// A revision-bump marker left by an earlier restore: no key.
				continue
			}
			h := [2]uint64{maphash.Bytes(s1, uk), maphash.Bytes(s2, uk)}
			alive[h] = !(len(k) == markedRevBytesLen && k[revBytesLen] == markTombstone)
		}
		for _, a := range alive {
			if a {
				f.LiveKeys++
			}
		}
		return nil
	})
	return f, err
}

// userKey returns field 1 (key) of a marshalled mvccpb.KeyValue without
// decoding the rest or reading past it (the value that follows may span
// pages that should stay on disk). An empty value has no key.
func userKey(v []byte) ([]byte, error) {
	k, _, err := backup.BytesField(v, 1)
	return k, err
}
