package etcdinternals

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// KV is a key as an etcd database holds it at a revision: the fields of
// etcd's mvccpb.KeyValue.
type KV struct {
	Key            []byte
	Value          []byte
	CreateRevision int64
	ModRevision    int64
	Version        int64
	Lease          int64
}

// walkKeys calls fn, in revision order, for each entry at or below rev
// (0: every entry) of the "key" bucket of the etcd database at path
// (read-only; etcd's sha256 trailer after it, if any, is not read) whose
// user key match accepts, with its revision, whether it is a deletion, and
// its marshalled mvccpb.KeyValue (valid during the call only). Entries of
// other keys are skipped without decoding their value (KeyAndLease).
func walkKeys(path string, rev int64, match func(key []byte) bool, fn func(main int64, tomb bool, key, v []byte) error) error {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("open database %s: %w", path, err)
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		if c := CompactRevision(tx); rev > 0 && c > rev {
			return fmt.Errorf("the database is compacted at revision %d, above %d: its keys at %d are gone", c, rev, rev)
		}
		b := tx.Bucket(KeyBucket)
		if b == nil {
			return errors.New(`no "key" bucket: not an etcd v3 database`)
		}
		cur := b.Cursor()
		for k, v := cur.First(); k != nil; k, v = cur.Next() {
			if len(k) != RevBytesLen && len(k) != MarkedRevBytesLen {
				return fmt.Errorf("revision key %x: %d bytes, want %d or %d", k, len(k), RevBytesLen, MarkedRevBytesLen)
			}
			main := int64(binary.BigEndian.Uint64(k[:8]))
			if rev > 0 && main > rev {
				return nil
			}
			key, _, err := KeyAndLease(v)
			if err != nil {
				return fmt.Errorf("revision %x: %w", k, err)
			}
			if !match(key) {
				continue
			}
			if err := fn(main, len(k) == MarkedRevBytesLen && k[RevBytesLen] == MarkTombstone, key, v); err != nil {
				return fmt.Errorf("revision %x (key %q): %w", k, key, err)
			}
		}
		return nil
	})
}

// decodeKV decodes a marshalled mvccpb.KeyValue (its bytes copied).
func decodeKV(v []byte) (KV, error) {
	var kv mvccpb.KeyValue
	if err := kv.Unmarshal(v); err != nil {
		return KV{}, err
	}
	return KV{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
		Version: kv.Version, Lease: kv.Lease}, nil
}

// KeysAt reads the etcd database at path and returns the keys that exist
// at revision rev (0: the database's newest) for which match is true,
// with their values, sorted by key. It walks the "key" bucket in revision
// order, as etcd rebuilds its index when it starts: the last entry of a
// key at or below rev is its state, and a tombstone there means it does
// not exist. A revision below the database's compaction is refused: its
// history there is gone.
func KeysAt(path string, rev int64, match func(key []byte) bool) ([]KV, error) {
	live := map[string]*KV{}
	err := walkKeys(path, rev, match, func(_ int64, tomb bool, key, v []byte) error {
		if tomb {
			delete(live, string(key))
			return nil
		}
		kv, err := decodeKV(v)
		live[string(key)] = &kv
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the keys of %s at revision %d: %w", path, rev, err)
	}
	out := make([]KV, 0, len(live))
	for _, kv := range live {
		out = append(out, *kv)
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].Key, out[j].Key) < 0 })
	return out, nil
}

// KeyHistories reads, from the etcd database at path, every revision at
// or below rev of each of the keys: their puts and deletions (a deletion
// has ModRevision set, no value and CreateRevision 0), oldest first, as
// far back as the database holds them (its compaction, or the backup it
// was built from, ends them).
func KeyHistories(path string, rev int64, keys map[string]bool) (map[string][]KV, error) {
	out := map[string][]KV{}
	err := walkKeys(path, rev, func(key []byte) bool { return keys[string(key)] }, func(main int64, tomb bool, key, v []byte) error {
		if tomb {
			out[string(key)] = append(out[string(key)], KV{Key: bytes.Clone(key), ModRevision: main})
			return nil
		}
		kv, err := decodeKV(v)
		out[string(key)] = append(out[string(key)], kv)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the history of %d key(s) in %s: %w", len(keys), path, err)
	}
	return out, nil
}
