package etcdinternals

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/armada/etcd-recovery/internal/kvevent"
)

// HistoryError is a replay refused because the events are not a history
// the snapshot could have had: a key's create revision or version does not
// follow from its state before (in the snapshot, or after the journal's
// previous change of it), or a delete of a key that did not exist. etcd's
// MVCC obeys these rules for every change (mvcc/kvstore_txn.go: a put of
// an absent key is version 1 created at its own revision; each later put
// keeps the create revision and adds 1 to the version; a delete only
// deletes a key that exists), so a journal that breaks one is of another
// history: a journal continued across a restore without a revision bump
// or a recreated cluster (two histories spliced), segments of another
// cluster, or a forged segment. Nothing of such a replay may be used.
type HistoryError struct {
	Key    []byte
	Rev    int64
	Sub    int64
	Detail string
}

func (e *HistoryError) Error() string {
	return fmt.Sprintf("the journal is not a history of this snapshot: key %q at revision %d/%d: %s "+
		"(a journal continued across a restore without a revision bump or a recreated cluster, another cluster's segments, or a forged segment): nothing replayed may be used",
		e.Key, e.Rev, e.Sub, e.Detail)
}

// keyState is a key's state as far as the history check knows it.
type keyState struct {
	create, version int64 // while it exists
	exists          bool
	// pre is what the journal's first change of the key implies about
	// the snapshot: preExists (with preCreate, preVersion; preVersion 0:
	// any version, a delete's), or absent.
	preExists               bool
	preCreate, preVersion   int64
	firstRev, firstSub      int64
	snapSeen, snapExists    bool
	snapCreate, snapVersion int64
}

// historyCheck follows every key a replay changes: each change must
// follow from the key's state after the journal's previous change of it
// (event), and each key's first change from its state in the snapshot
// (snapshot, once every event is in). Memory: one entry per distinct key
// the replay changes.
type historyCheck struct {
	keys map[string]*keyState
}

func newHistoryCheck() *historyCheck { return &historyCheck{keys: map[string]*keyState{}} }

func (h *historyCheck) fail(ev kvevent.Event, format string, args ...any) error {
	return &HistoryError{Key: ev.Key, Rev: ev.Rev, Sub: ev.Sub, Detail: fmt.Sprintf(format, args...)}
}

// event checks ev against the key's state and moves it on.
func (h *historyCheck) event(ev kvevent.Event) error {
	if ev.Type == kvevent.Put && ev.Version == 1 && ev.CreateRev != ev.Rev {
		return h.fail(ev, "a put of version 1 created at revision %d, not at its own", ev.CreateRev)
	}
	if ev.Type == kvevent.Put && ev.Version > 1 && ev.CreateRev > ev.Rev {
		return h.fail(ev, "a put of version %d created at revision %d, after it", ev.Version, ev.CreateRev)
	}
	s := h.keys[string(ev.Key)]
	if s == nil {
		s = &keyState{firstRev: ev.Rev, firstSub: ev.Sub}
		switch {
		case ev.Type == kvevent.Delete:
			s.preExists = true
		case ev.Version > 1:
			s.preExists, s.preCreate, s.preVersion = true, ev.CreateRev, ev.Version-1
		}
		h.keys[string(ev.Key)] = s
	} else {
		switch {
		case ev.Type == kvevent.Delete && !s.exists:
			return h.fail(ev, "a delete of a key the journal deleted before and never put again")
		case ev.Type == kvevent.Put && s.exists && (ev.CreateRev != s.create || ev.Version != s.version+1):
			return h.fail(ev, "a put of version %d created at %d after the journal's version %d created at %d (want version %d created at %d)",
				ev.Version, ev.CreateRev, s.version, s.create, s.version+1, s.create)
		case ev.Type == kvevent.Put && !s.exists && ev.Version != 1:
			return h.fail(ev, "a put of version %d of a key the journal deleted before (want version 1)", ev.Version)
		}
	}
	if ev.Type == kvevent.Delete {
		s.exists, s.create, s.version = false, 0, 0
	} else {
		s.exists, s.create, s.version = true, ev.CreateRev, ev.Version
	}
	return nil
}

// snapshot checks each key's first change against the snapshot's state
// of the key: its newest entry at or below rev (the snapshot's revision)
// in the key bucket of tx, a tombstone or a key compacted away being
// absent. It reads every entry up to rev, decoding only the key of each
// (the first field of its KeyValue) unless the replay changed it.
func (h *historyCheck) snapshot(tx *bolt.Tx, rev int64) error {
	if len(h.keys) == 0 {
		return nil
	}
	kb := tx.Bucket(KeyBucket)
	if kb == nil {
		return fmt.Errorf(`no "key" bucket: not an etcd v3 database`)
	}
	c := kb.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) < RevBytesLen {
			return fmt.Errorf("key bucket entry of %d bytes: not a revision", len(k))
		}
		if int64(binary.BigEndian.Uint64(k[:8])) > rev {
			break // the replayed events: after the snapshot
		}
		if len(v) == 0 {
			// A revision bump's entry (etcdutl's --bump-revision and
			// BumpRevision write an empty value): no key's change.
			continue
		}
		uk, ok := kvKey(v)
		if !ok {
			return fmt.Errorf("key bucket entry at revision %d: not a key-value", int64(binary.BigEndian.Uint64(k[:8])))
		}
		s := h.keys[string(uk)]
		if s == nil {
			continue
		}
		s.snapSeen = true
		if len(k) == MarkedRevBytesLen && k[RevBytesLen] == MarkTombstone {
			s.snapExists, s.snapCreate, s.snapVersion = false, 0, 0
			continue
		}
		var kv mvccpb.KeyValue
		if err := kv.Unmarshal(v); err != nil {
			return fmt.Errorf("key bucket entry at revision %d: %w", int64(binary.BigEndian.Uint64(k[:8])), err)
		}
		s.snapExists, s.snapCreate, s.snapVersion = true, kv.CreateRevision, kv.Version
	}
	for key, s := range h.keys {
		ev := kvevent.Event{Key: []byte(key), Rev: s.firstRev, Sub: s.firstSub}
		exists := s.snapSeen && s.snapExists
		switch {
		case s.preExists && !exists:
			if s.preVersion == 0 {
				return h.fail(ev, "a delete of a key the snapshot does not hold")
			}
			return h.fail(ev, "a put of version %d created at %d, the snapshot does not hold the key", s.preVersion+1, s.preCreate)
		case !s.preExists && exists:
			return h.fail(ev, "a put of version 1 (a new key), the snapshot holds it as version %d created at %d", s.snapVersion, s.snapCreate)
		case s.preExists && s.preVersion != 0 && (s.preCreate != s.snapCreate || s.preVersion != s.snapVersion):
			return h.fail(ev, "a put of version %d created at %d, the snapshot holds version %d created at %d (want version %d created at %d)",
				s.preVersion+1, s.preCreate, s.snapVersion, s.snapCreate, s.snapVersion+1, s.snapCreate)
		}
	}
	return nil
}

// kvKey is the key of a marshalled mvccpb.KeyValue: its field 1 (bytes),
// which gogo's marshaller writes first.
func kvKey(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != 0x0a {
		return nil, false
	}
	n, w := binary.Uvarint(v[1:])
	if w <= 0 || uint64(len(v)-1-w) < n {
		return nil, false
	}
	return v[1+w : 1+w+int(n)], true
}
