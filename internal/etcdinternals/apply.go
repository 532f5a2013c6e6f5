package etcdinternals

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/lease/leasepb"

	"github.com/armada/etcd-recovery/internal/kvevent"
)

// LeaseBucket is etcd's "lease" bucket (server/v3 mvcc/buckets): a
// lease's ID, 8 bytes big-endian (lease/lessor.go int64ToBytes), to a
// marshalled leasepb.Lease{ID, TTL}. Callers must not modify it.
var LeaseBucket = []byte("lease")

// DefaultApplyBatchBytes is how many bytes of entries (the "key"
// bucket's keys and values as written) one bbolt transaction applies
// before it commits: bbolt keeps a transaction's dirty pages and the
// entries it was given in memory until the commit, so memory stays
// bounded by this budget, not by the length of the journal. Committing
// more often costs little: the pages are appended (keys only ever go
// after the last) and the file is a staging copy, never synced.
const DefaultApplyBatchBytes = 16 << 20

// ApplyOptions tune ApplyEventsWith.
type ApplyOptions struct {
	// BatchBytes is the byte budget of one transaction
	// (DefaultApplyBatchBytes when 0): it commits once its entries reach
	// it.
	BatchBytes int
	// Leases, when set, gives the leases after the last event was
	// applied (instead of ApplyEvents' leases argument): a journal
	// source can then collect them while it reads the events. An error
	// fails the apply.
	Leases func() ([]kvevent.Lease, error)
}

// Applied is what ApplyEvents wrote.
type Applied struct {
	// SnapshotRevision is the database's revision before: the larger of
	// its last key's revision and its compactions (what etcd reports).
	SnapshotRevision int64
	// FirstRevision and LastRevision are the revisions of the first and
	// last event applied (0 when there were none).
	FirstRevision, LastRevision int64
	// Events is the number of events applied.
	Events int64
	// LeasesPut and LeasesDeleted count the lease bucket's changes.
	LeasesPut, LeasesDeleted int
	// Commits is the number of transactions that wrote events.
	Commits int
}

// RevisionKey is etcd's key of revision {main, sub} in the "key" bucket
// (mvcc/revision.go revToBytes), with the tombstone mark for a deletion.
func RevisionKey(main, sub int64, tombstone bool) []byte {
	n := RevBytesLen
	if tombstone {
		n = MarkedRevBytesLen
	}
	b := make([]byte, n)
	binary.BigEndian.PutUint64(b, uint64(main))
	b[8] = '_'
	binary.BigEndian.PutUint64(b[9:], uint64(sub))
	if tombstone {
		b[RevBytesLen] = MarkTombstone
	}
	return b
}

// LeaseKey is etcd's key of a lease in the "lease" bucket.
func LeaseKey(id int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(id))
	return b
}

// EventEntry is the "key" bucket entry etcd's MVCC writes for the change
// ev (mvcc/kvstore_txn.go put and delete): a put's KeyValue{Key, Value,
// CreateRevision, ModRevision, Version, Lease} under revision {Rev, Sub};
// a delete's tombstone, KeyValue{Key} alone, under the same revision
// marked 't'.
func EventEntry(ev kvevent.Event) (key, value []byte, err error) {
	var kv mvccpb.KeyValue
	switch ev.Type {
	case kvevent.Put:
		kv = mvccpb.KeyValue{Key: ev.Key, Value: ev.Value, CreateRevision: ev.CreateRev,
			ModRevision: ev.Rev, Version: ev.Version, Lease: ev.Lease}
	case kvevent.Delete:
		kv = mvccpb.KeyValue{Key: ev.Key}
	default:
		return nil, nil, fmt.Errorf("event at revision %d/%d: type %q, neither %q nor %q", ev.Rev, ev.Sub, ev.Type, kvevent.Put, kvevent.Delete)
	}
	value, err = kv.Marshal()
	if err != nil {
		return nil, nil, err
	}
	return RevisionKey(ev.Rev, ev.Sub, ev.Type == kvevent.Delete), value, nil
}

// LeaseEntry is the "lease" bucket entry etcd's lessor writes for a
// granted lease (lease/lessor.go persistTo): leasepb.Lease{ID, TTL}.
func LeaseEntry(l kvevent.Lease) (key, value []byte, err error) {
	value, err = (&leasepb.Lease{ID: l.ID, TTL: l.TTL}).Marshal()
	return LeaseKey(l.ID), value, err
}

// eventCheck refuses an event that does not continue the last one
// exactly: the first is at the database's revision + 1 with sub 0, each
// next one at the same revision with the next sub or at the next revision
// with sub 0.
type eventCheck struct {
	rev, sub int64 // the last event's, or (snapshot revision, -1)
}

func (c *eventCheck) next(ev kvevent.Event) error {
	switch {
	case ev.Rev <= 0 || ev.Sub < 0:
		return fmt.Errorf("event at revision %d/%d: not a revision", ev.Rev, ev.Sub)
	case c.sub < 0 && ev.Rev <= c.rev:
		return fmt.Errorf("event at revision %d/%d is not after the snapshot's revision %d", ev.Rev, ev.Sub, c.rev)
	case c.sub < 0 && (ev.Rev != c.rev+1 || ev.Sub != 0):
		return fmt.Errorf("gap: the snapshot ends at revision %d, the first event is at %d/%d (want %d/0)", c.rev, ev.Rev, ev.Sub, c.rev+1)
	case ev.Rev == c.rev && ev.Sub == c.sub+1, ev.Rev == c.rev+1 && ev.Sub == 0:
	case ev.Rev < c.rev || (ev.Rev == c.rev && ev.Sub <= c.sub):
		return fmt.Errorf("event at revision %d/%d is not after the last one, %d/%d: out of order or repeated", ev.Rev, ev.Sub, c.rev, c.sub)
	default:
		return fmt.Errorf("gap: event at revision %d/%d follows %d/%d", ev.Rev, ev.Sub, c.rev, c.sub)
	}
	if len(ev.Key) == 0 {
		return fmt.Errorf("event at revision %d/%d: empty key", ev.Rev, ev.Sub)
	}
	if ev.Type == kvevent.Put && (ev.CreateRev <= 0 || ev.CreateRev > ev.Rev || ev.Version <= 0) {
		return fmt.Errorf("put at revision %d/%d of %q: create revision %d, version %d", ev.Rev, ev.Sub, ev.Key, ev.CreateRev, ev.Version)
	}
	c.rev, c.sub = ev.Rev, ev.Sub
	return nil
}

// SnapshotRevision is the revision etcd reports for the database in tx:
// the larger of its last key's revision and its compactions (a
// compaction removes deletions, the last key's among them; mvcc/kvstore.go
// restore).
func SnapshotRevision(tx *bolt.Tx) (int64, error) {
	kb := tx.Bucket(KeyBucket)
	if kb == nil {
		return 0, errors.New(`no "key" bucket: not an etcd v3 database`)
	}
	var rev int64
	if last, _ := kb.Cursor().Last(); last != nil {
		if len(last) < RevBytesLen {
			return 0, fmt.Errorf("last key of the key bucket is %d bytes, not a revision", len(last))
		}
		rev = int64(binary.BigEndian.Uint64(last[:8]))
	}
	return max(rev, CompactRevision(tx)), nil
}

// ApplyEvents writes journaled events straight into a snapshot's bbolt
// file, exactly as etcd's MVCC would have written them (EventEntry), and
// the leases into the "lease" bucket (LeaseEntry): a lease with Revoked
// set is deleted, any other put; one whose TTL is unknown (TTLUnknown or
// 0) keeps the snapshot's entry, or is put with kvevent.UnknownLeaseTTL. The caller gives the leases as they are
// at the last event's revision. The events must continue the snapshot
// exactly (the first at its revision + 1, sub 0; then each revision's
// subs in order, no revision skipped): anything else is refused before it
// is written, as is an event at or below the snapshot's revision. Every
// change must also follow from its key's state before it (history.go: the
// create revision and version etcd's MVCC gives a put, a delete only of a
// key that exists), in the snapshot for a key's first change: a journal
// of another history (spliced across a restore without a bump, another
// cluster's, forged) is a *HistoryError, once every event is in. Events
// are written as they come, in transactions committed every
// DefaultApplyBatchBytes of entries (ApplyEventsWith: another budget),
// so memory does not grow with the number of events; on error the file
// holds a prefix of them and must be thrown away (a restore's staged
// copy).
//
// The meta bucket (consistent index and term, compactions) is left as it
// is: etcdutl's restore sets the consistent index and term of each
// member's copy, and Prepare's bump and compaction mark go above the last
// event. etcd's sha256 trailer (size % 512 == 32), if still there, is
// dropped first: it no longer matches once the file is written.
func ApplyEvents(path string, events iter.Seq2[kvevent.Event, error], leases []kvevent.Lease) (Applied, error) {
	return applyEvents(path, events, leases, ApplyOptions{})
}

// ApplyEventsWith is ApplyEvents with options: another transaction
// budget, or the leases given by a function called once every event is
// applied.
func ApplyEventsWith(path string, events iter.Seq2[kvevent.Event, error], o ApplyOptions) (Applied, error) {
	return applyEvents(path, events, nil, o)
}

func applyEvents(path string, events iter.Seq2[kvevent.Event, error], leases []kvevent.Lease, o ApplyOptions) (a Applied, err error) {
	if err := DropTrailer(path); err != nil {
		return a, err
	}
	opts := restoreBoltOptions
	opts.Timeout = 10 * time.Second
	// A staging copy: no fdatasync at commit or growth (see BumpRevision).
	opts.NoSync, opts.NoGrowSync = true, true
	db, err := bolt.Open(path, 0o600, &opts)
	if err != nil {
		return a, fmt.Errorf("open %s: %w", path, err)
	}
	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := db.View(func(tx *bolt.Tx) error {
		a.SnapshotRevision, err = SnapshotRevision(tx)
		return err
	}); err != nil {
		return a, err
	}
	check := eventCheck{rev: a.SnapshotRevision, sub: -1}
	hist := newHistoryCheck()
	budget := o.BatchBytes
	if budget <= 0 {
		budget = DefaultApplyBatchBytes
	}
	// One write transaction open at a time, committed once its entries
	// reach the budget: events are written as they come, never held.
	var (
		tx       *bolt.Tx
		kb       *bolt.Bucket
		txBytes  int
		txFirst  [2]int64
		txLast   [2]int64
		txEvents int64
	)
	rollback := func() {
		if tx != nil {
			tx.Rollback()
			tx = nil
		}
	}
	defer rollback()
	commit := func() error {
		if tx == nil {
			return nil
		}
		err := tx.Commit()
		tx = nil
		if err != nil {
			return fmt.Errorf("apply events %d/%d to %d/%d: commit: %w", txFirst[0], txFirst[1], txLast[0], txLast[1], err)
		}
		a.Events += txEvents
		a.Commits++
		txBytes, txEvents = 0, 0
		return nil
	}
	for ev, err := range events {
		if err != nil {
			return a, fmt.Errorf("read the journal: %w", err)
		}
		if err := check.next(ev); err != nil {
			return a, err
		}
		if err := hist.event(ev); err != nil {
			return a, err
		}
		if a.FirstRevision == 0 {
			a.FirstRevision = ev.Rev
		}
		a.LastRevision = ev.Rev
		k, v, err := EventEntry(ev)
		if err != nil {
			return a, err
		}
		if tx == nil {
			if tx, err = db.Begin(true); err != nil {
				return a, fmt.Errorf("apply events from %d/%d: %w", ev.Rev, ev.Sub, err)
			}
			if kb = tx.Bucket(KeyBucket); kb == nil {
				return a, errors.New(`no "key" bucket: not an etcd v3 database`)
			}
			// Keys only ever go after the last: pages are filled, as
			// etcd's backend fills them for sequential writes.
			kb.FillPercent = 0.9
			txFirst = [2]int64{ev.Rev, ev.Sub}
		}
		if err := kb.Put(k, v); err != nil {
			return a, fmt.Errorf("apply event %d/%d: %w", ev.Rev, ev.Sub, err)
		}
		txLast = [2]int64{ev.Rev, ev.Sub}
		txEvents++
		txBytes += len(k) + len(v)
		if txBytes >= budget {
			if err := commit(); err != nil {
				return a, err
			}
		}
	}
	if err := commit(); err != nil {
		return a, err
	}
	// Every event is in: their keys' first changes against the snapshot.
	if err := db.View(func(tx *bolt.Tx) error { return hist.snapshot(tx, a.SnapshotRevision) }); err != nil {
		return a, err
	}
	if o.Leases != nil {
		if leases, err = o.Leases(); err != nil {
			return a, err
		}
	}
	if len(leases) == 0 {
		return a, nil
	}
	err = db.Update(func(tx *bolt.Tx) error {
		lb, err := tx.CreateBucketIfNotExists(LeaseBucket)
		if err != nil {
			return err
		}
		for _, l := range leases {
			if l.ID == 0 {
				return errors.New("lease 0 is no lease")
			}
			k, v, err := LeaseEntry(l)
			if err != nil {
				return err
			}
			if l.Revoked != 0 {
				if lb.Get(k) != nil {
					a.LeasesDeleted++
				}
				if err := lb.Delete(k); err != nil {
					return err
				}
				continue
			}
			if l.TTLUnknown || l.TTL <= 0 {
				// Its granted TTL is unknown: the snapshot's entry
				// stays; else UnknownLeaseTTL, never 0.
				if lb.Get(k) != nil {
					continue
				}
				l.TTL = kvevent.UnknownLeaseTTL
				if k, v, err = LeaseEntry(l); err != nil {
					return err
				}
			}
			if old := lb.Get(k); old != nil && bytes.Equal(old, v) {
				continue
			}
			if err := lb.Put(k, v); err != nil {
				return err
			}
			a.LeasesPut++
		}
		return nil
	})
	if err != nil {
		return a, fmt.Errorf("apply leases: %w", err)
	}
	return a, nil
}
