package etcdinternals

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"time"

	bolt "go.etcd.io/bbolt"
)

// KVHash is etcd's HashKV of a database: the hash of its key revisions at
// Revision for the compact revision CompactRevision (what the Maintenance
// API's HashKV answers, hash and compact_revision).
type KVHash struct {
	Hash            uint32 `json:"hash"`
	Revision        int64  `json:"revision"`
	CompactRevision int64  `json:"compactRevision"`
}

// Revisions are a database's revision facts, read from the bbolt file.
type Revisions struct {
	// Revision is the database's revision as etcd reports it on start:
	// the larger of its last key revision and its compactions.
	Revision int64
	// Compact is its compaction: the larger of finishedCompactRev and
	// scheduledCompactRev (etcd finishes a scheduled one as it starts).
	Compact int64
}

// residentEvery is how many bytes a walk reads between two DropResident.
const residentEvery = 64 << 20

// DatabaseRevisions reads the revision and the compact revision of the
// etcd database at path, read-only.
func DatabaseRevisions(path string) (Revisions, error) {
	var r Revisions
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return r, fmt.Errorf("open database %s: %w", path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		r.Compact = CompactRevision(tx)
		b := tx.Bucket(KeyBucket)
		if b == nil {
			return errors.New(`no "key" bucket: not an etcd v3 database`)
		}
		if k, _ := b.Cursor().Last(); len(k) >= 8 {
			r.Revision = int64(binary.BigEndian.Uint64(k))
		}
		r.Revision = max(r.Revision, r.Compact)
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("read database %s: %w", path, err)
	}
	return r, nil
}

// CompactRevision is the compaction a database records in its meta
// bucket: the larger of finishedCompactRev and scheduledCompactRev (etcd
// finishes a scheduled one as it starts), 0 when there is none.
func CompactRevision(tx *bolt.Tx) int64 {
	var c int64
	if meta := tx.Bucket(MetaBucket); meta != nil {
		for _, k := range [][]byte{FinishedCompactKey, ScheduledCompactKey} {
			if v := meta.Get(k); len(v) >= 8 {
				c = max(c, int64(binary.BigEndian.Uint64(v[:8])))
			}
		}
	}
	return c
}

// HashKV computes, offline, the HashKV etcd reports at revision rev for
// compact revision compact on a member whose database is the one at path
// compacted at compact: etcd's mvcc hashByRev (server/v3 mvcc/hash.go
// kvHasher, kvstore.go hashByRev and key_index.go keep, identical in 3.5
// and 3.6), a crc32 Castagnoli over "key" (the bucket's name) and, in
// the bucket's order, each entry's revision key and value:
//
//   - of every revision in (compact, rev];
//   - of a revision at or below compact only when it is in the keep set
//     at rev (treeIndex.Keep(rev): each key's latest revision at or below
//     rev when that is a put, not a deletion); when that set is empty,
//     etcd hashes whatever the compaction left at or below compact: here,
//     each key's latest revision at or below compact when it is a put;
//   - never a deletion at exactly compact (3.5.15 and earlier deleted such
//     a tombstone when compacting, later versions keep it: etcd leaves it
//     out so that both hash alike).
//
// Entries above rev are left out. compact must be at or below rev (-1,
// as etcd says before its first compaction, or 0: none), and at
// or above the database's own compaction (its history below that is
// gone); a database not yet compacted as far as compact (a backup with a
// journal replayed into it) hashes as it would once compacted there.
// Pinned by TestHashKVMatchesEtcd (etcd 3.5 and 3.6). Memory: one
// revision and a 128-bit hash per user key, not the key
// (BenchmarkHashKV).
func HashKV(path string, rev, compact int64) (KVHash, error) {
	res := KVHash{Revision: rev, CompactRevision: compact}
	if rev <= 0 || compact < -1 || compact > rev {
		return res, fmt.Errorf("hash of %s at revision %d, compact revision %d: not a revision and compaction", path, rev, compact)
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return res, fmt.Errorf("open database %s: %w", path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		if own := CompactRevision(tx); own > max(compact, 0) {
			return fmt.Errorf("the database is compacted at %d, above the compact revision %d asked for", own, compact)
		}
		b := tx.Bucket(KeyBucket)
		if b == nil {
			return errors.New(`no "key" bucket: not an etcd v3 database`)
		}
		h, err := hashBucket(db, b, rev, compact)
		res.Hash = h
		return err
	})
	if err != nil {
		return res, fmt.Errorf("hash database %s at revision %d: %w", path, rev, err)
	}
	return res, nil
}

// hashRev is a revision {main, sub} with its tombstone mark.
type hashRev struct {
	main, sub int64
	tomb      bool
	set       bool
}

func revOf(k []byte) (hashRev, error) {
	if len(k) != RevBytesLen && len(k) != MarkedRevBytesLen {
		return hashRev{}, fmt.Errorf("revision key %x: %d bytes", k, len(k))
	}
	return hashRev{main: int64(binary.BigEndian.Uint64(k)), sub: int64(binary.BigEndian.Uint64(k[9:])),
		tomb: len(k) == MarkedRevBytesLen && k[RevBytesLen] == MarkTombstone, set: true}, nil
}

func (r hashRev) same(o hashRev) bool { return r.set && o.set && r.main == o.main && r.sub == o.sub }

// hashBucket is HashKV's walks of the key bucket: each key's latest
// revision at rev (the keep set), then the hash. When no key is alive at
// rev (an empty keep set) a walk between finds each key's latest revision
// at compact instead. A key costs a 128-bit hash and one revision.
func hashBucket(db *bolt.DB, b *bolt.Bucket, rev, compact int64) (uint32, error) {
	s1, s2 := maphash.MakeSeed(), maphash.MakeSeed()
	id := func(key []byte) [2]uint64 { return [2]uint64{maphash.Bytes(s1, key), maphash.Bytes(s2, key)} }
	keys := map[[2]uint64]hashRev{}
	passed := 0
	walk := func(f func(k, v []byte, r hashRev, key []byte) error) error {
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if passed += len(k) + len(v); passed >= residentEvery {
				DropResident(db)
				passed = 0
			}
			r, err := revOf(k)
			if err != nil {
				return err
			}
			if r.main > rev {
				// The bucket is in revision order: nothing after counts.
				return nil
			}
			key, _, err := KeyAndLease(v)
			if err != nil {
				return fmt.Errorf("revision %d_%d: %w", r.main, r.sub, err)
			}
			if err := f(k, v, r, key); err != nil {
				return err
			}
		}
		return nil
	}
	latestAt := func(upTo int64) error {
		clear(keys)
		return walk(func(_, _ []byte, r hashRev, key []byte) error {
			if r.main <= upTo {
				keys[id(key)] = r
			}
			return nil
		})
	}
	if err := latestAt(rev); err != nil {
		return 0, err
	}
	keepAny := false
	for _, r := range keys {
		if !r.tomb {
			keepAny = true
			break
		}
	}
	if !keepAny {
		// etcd hashes what its compaction left at or below compact.
		if err := latestAt(compact); err != nil {
			return 0, err
		}
	}
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	h.Write(KeyBucket)
	err := walk(func(k, v []byte, r hashRev, key []byte) error {
		if r.main <= compact {
			if kept := keys[id(key)]; !kept.same(r) || kept.tomb {
				return nil
			}
		}
		if r.main == compact && r.tomb {
			return nil
		}
		h.Write(k)
		h.Write(v)
		return nil
	})
	return h.Sum32(), err
}
