package restore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/armada/etcd-recovery/internal/etcdinternals"
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
	// LeasedKeys is how many of the live keys are attached to a lease
	// (their latest revision has a lease): etcd may expire them once the
	// rebuilt cluster runs, so verify counts them apart.
	LeasedKeys int64 `json:"leasedKeys"`
	// AttachedKeys is how many of the leased keys name a lease the
	// database holds: etcd attaches those at its start, and may expire
	// them. The others (LeasedKeys - AttachedKeys) name a lease the
	// database does not hold; etcd attaches them to none, so they never
	// expire, and verify counts them with the keys on no lease.
	AttachedKeys int64 `json:"attachedKeys"`
	// OrphanLeases are the leases those other keys name (sorted).
	OrphanLeases []int64 `json:"orphanLeases,omitempty"`
	// Revisions is the number of entries in the "key" bucket (every
	// revision of every key not yet compacted, tombstones included).
	Revisions int64 `json:"revisions"`
	// CompactRevision is the last compaction recorded in the database. A
	// compaction removes deletions, so the store's revision may be above
	// the last key's: etcd's revision is the larger of the two.
	CompactRevision int64 `json:"compactRevision,omitempty"`
	// MaxEntryBytes is the largest entry of the "key" bucket (a key, its
	// value and metadata): what one key of a range costs the server.
	MaxEntryBytes int64 `json:"-"`
	// Prefixes counts the live keys per top-level prefix (KeyPrefix), for
	// a drill's per-prefix check.
	Prefixes map[string]PrefixCount `json:"-"`
}

// PrefixCount is the live keys under one prefix, and how many of them are
// on a lease.
type PrefixCount struct {
	Live   int64 `json:"live"`
	Leased int64 `json:"leased,omitempty"`
}

// KeyPrefix is the top-level prefix a key is counted under:
// /registry/<resource>/ for Kubernetes data, else the first path segment
// (/<segment>/, or <segment>/ without a leading slash); a key with no
// such segment counts under "/" when it starts with a slash, else "".
func KeyPrefix(key []byte) string {
	const reg = "/registry/"
	if len(key) > len(reg) && string(key[:len(reg)]) == reg {
		rest := key[len(reg):]
		for i, c := range rest {
			if c == '/' {
				return reg + string(rest[:i+1])
			}
		}
		return reg
	}
	start := 0
	if len(key) > 0 && key[0] == '/' {
		start = 1
	}
	for i := start; i < len(key); i++ {
		if key[i] == '/' {
			return string(key[:i+1])
		}
	}
	if start == 1 {
		return "/"
	}
	return ""
}

// StoreRevision is the revision etcd reports for this database.
func (f SnapshotFacts) StoreRevision() int64 { return max(f.Revision, f.CompactRevision) }

// UnleasedKeys is the number of live keys on no live lease: the rebuilt
// cluster must hold exactly as many, however long after the restore.
func (f SnapshotFacts) UnleasedKeys() int64 { return f.LiveKeys - f.AttachedKeys }

// Expect sets what a rebuilt cluster must hold to vo: the live keys on no
// live lease exactly, the attached ones reported apart.
func (f SnapshotFacts) Expect(vo *VerifyOptions) {
	vo.ExpectedKeys = f.LiveKeys
	attached := f.AttachedKeys
	vo.ExpectedLeasedKeys = &attached
	vo.orphanLeases, vo.orphansUpTo = nil, f.StoreRevision()
	for _, l := range f.OrphanLeases {
		if vo.orphanLeases == nil {
			vo.orphanLeases = map[int64]bool{}
		}
		vo.orphanLeases[l] = true
	}
}

// readSnapshotFacts counts the live keys and finds the latest revision of a
// snapshot file (the database, optionally followed by etcd's 32-byte hash,
// as etcdutl reads it). The database is opened read-only: nothing is
// written, and bbolt does not rebuild its freelist.
//
// Counting walks the "key" bucket in revision order and keeps, per user
// key, whether its latest entry is a deletion or is on a lease. Only the
// user key (the first field) and the lease (the last, after the value) are
// read; the value is skipped by its length, so large values stay on disk.
// User keys are remembered by a 128-bit hash, so the memory used is 16
// bytes per distinct key whatever the key sizes; the pages of the map that
// the walk has passed are dropped from the resident set after every
// trimBytes of keys and values, so the walk's RSS does not grow with the
// database. (Only the ends of a large value are read, but the kernel maps
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
		f.CompactRevision = etcdinternals.CompactRevision(tx)
		b := tx.Bucket(etcdinternals.KeyBucket)
		if b == nil {
			return errors.New(`no "key" bucket: not an etcd v3 database`)
		}
		// Per user key: its latest entry's state.
		// The leases the database holds: etcd attaches a key at its start
		// only to one of these (mvcc's restore, lessor.Attach).
		held := map[int64]bool{}
		if lb := tx.Bucket(etcdinternals.LeaseBucket); lb != nil {
			if err := lb.ForEach(func(k, _ []byte) error {
				if len(k) != 8 {
					return fmt.Errorf("lease bucket: a lease ID of %d bytes", len(k))
				}
				held[int64(binary.BigEndian.Uint64(k))] = true
				return nil
			}); err != nil {
				return err
			}
		}
		const (
			dead     = 0
			live     = 1
			leased   = 2
			attached = 3
		)
		// and the index of its prefix in prefixes.
		type keyState struct {
			state  uint8
			prefix uint32
		}
		// The lease each key in state leased names (rare: not in keyState,
		// whose size is per key).
		orphanOf := map[[2]uint64]int64{}
		alive := map[[2]uint64]keyState{}
		prefixIdx := map[string]uint32{}
		var prefixes []string
		c := b.Cursor()
		passed := 0
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if passed += len(k) + len(v); passed >= trimBytes {
				etcdinternals.DropResident(db)
				passed = 0
			}
			if len(k) != etcdinternals.RevBytesLen && len(k) != etcdinternals.MarkedRevBytesLen {
				return fmt.Errorf("key bucket: revision key of %d bytes", len(k))
			}
			f.Revisions++
			f.Revision = int64(binary.BigEndian.Uint64(k[:8]))
			f.MaxEntryBytes = max(f.MaxEntryBytes, int64(len(v)))
			uk, lease, err := etcdinternals.KeyAndLease(v)
			if err != nil {
				return fmt.Errorf("key bucket: revision %d: %w", f.Revision, err)
			}
			if len(uk) == 0 {
				// A revision-bump marker left by an earlier restore: no key.
				continue
			}
			h := [2]uint64{maphash.Bytes(s1, uk), maphash.Bytes(s2, uk)}
			ks, seen := alive[h]
			if !seen {
				p := KeyPrefix(uk)
				i, ok := prefixIdx[p]
				if !ok {
					i = uint32(len(prefixes))
					prefixIdx[p] = i
					prefixes = append(prefixes, p)
				}
				ks.prefix = i
			}
			switch {
			case len(k) == etcdinternals.MarkedRevBytesLen && k[etcdinternals.RevBytesLen] == etcdinternals.MarkTombstone:
				ks.state = dead
			case lease != 0 && held[lease]:
				ks.state = attached
			case lease != 0:
				ks.state = leased
			default:
				ks.state = live
			}
			if ks.state == leased {
				orphanOf[h] = lease
			} else if len(orphanOf) > 0 {
				delete(orphanOf, h)
			}
			alive[h] = ks
		}
		f.Prefixes = map[string]PrefixCount{}
		for _, a := range alive {
			if a.state == dead {
				continue
			}
			f.LiveKeys++
			pc := f.Prefixes[prefixes[a.prefix]]
			pc.Live++
			if a.state == leased || a.state == attached {
				f.LeasedKeys++
				pc.Leased++
			}
			if a.state == attached {
				f.AttachedKeys++
			}
			f.Prefixes[prefixes[a.prefix]] = pc
		}
		named := map[int64]bool{}
		for h, l := range orphanOf {
			if alive[h].state == leased && !named[l] {
				named[l] = true
				f.OrphanLeases = append(f.OrphanLeases, l)
			}
		}
		slices.Sort(f.OrphanLeases)
		return nil
	})
	return f, err
}

// ReadSnapshotFacts reads the facts of a snapshot file (readSnapshotFacts)
// for a caller that verifies a restore it did not make itself (an adopted
// one: the staged copy a killed process left).
func ReadSnapshotFacts(path string) (SnapshotFacts, error) { return readSnapshotFacts(path) }
