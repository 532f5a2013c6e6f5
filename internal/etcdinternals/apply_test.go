package etcdinternals

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/mvcc"
	"go.etcd.io/etcd/server/v3/mvcc/backend"
	"go.etcd.io/etcd/server/v3/mvcc/buckets"
	"go.uber.org/zap"

	"github.com/armada/etcd-recovery/internal/journal"
)

// seqOf yields events from a slice.
func seqOf(evs []journal.Event) iter.Seq2[journal.Event, error] {
	return func(yield func(journal.Event, error) bool) {
		for _, ev := range evs {
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// watchEvents converts watched events to journal events: Sub is the
// index of the event within its revision, as etcd numbers a txn's changes.
func watchEvents(evs []mvccpb.Event) []journal.Event {
	var out []journal.Event
	for _, e := range evs {
		je := journal.Event{Rev: e.Kv.ModRevision, Key: e.Kv.Key}
		if n := len(out); n > 0 && out[n-1].Rev == je.Rev {
			je.Sub = out[n-1].Sub + 1
		}
		if e.Type == mvccpb.DELETE {
			je.Type = journal.Delete
		} else {
			je.Type, je.Value, je.CreateRev, je.Version, je.Lease = journal.Put, e.Kv.Value, e.Kv.CreateRevision, e.Kv.Version, e.Kv.Lease
		}
		out = append(out, je)
	}
	return out
}

// bucketContents is every entry of a bucket of a bbolt file.
func bucketContents(tb testing.TB, path string, bucket []byte) map[string]string {
	tb.Helper()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	out := map[string]string{}
	if err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error { out[string(k)] = string(v); return nil })
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// etcdBeforeAfter runs etcd's own MVCC store and lessor on a backend: a
// first workload, a snapshot (Backend.Snapshot, as etcd's Maintenance
// API writes it) at its revision, then a second workload watched from the
// snapshot's revision + 1. It returns the snapshot's path, the source's
// path (closed, after the second workload), the watched events and the
// leases the second workload granted and revoked.
func etcdBeforeAfter(tb testing.TB) (snap, src string, evs []journal.Event, leases []journal.Lease) {
	tb.Helper()
	dir := tb.TempDir()
	src, snap = filepath.Join(dir, "src.db"), filepath.Join(dir, "snap.db")
	be := backend.NewDefaultBackend(src)
	le := lease.NewLessor(zap.NewNop(), be, nil, lease.LessorConfig{MinLeaseTTL: 1})
	s := mvcc.New(zap.NewNop(), be, le, mvcc.StoreConfig{})

	// Before the snapshot: puts, overwrites, a delete, a lease with keys.
	l1, err := le.Grant(1001, 60)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range 20 {
		s.Put(fmt.Appendf(nil, "/a/%02d", i), fmt.Appendf(nil, "v%d", i), lease.NoLease)
	}
	s.Put([]byte("/a/03"), []byte("over"), lease.NoLease)
	s.DeleteRange([]byte("/a/04"), nil)
	s.Put([]byte("/l/1"), []byte("leased"), l1.ID)
	s.Put([]byte("/l/2"), []byte("leased"), l1.ID)
	base := s.Rev()
	be.ForceCommit()
	f, err := os.Create(snap)
	if err != nil {
		tb.Fatal(err)
	}
	bs := be.Snapshot()
	if _, err := bs.WriteTo(f); err != nil {
		tb.Fatal(err)
	}
	if err := bs.Close(); err != nil {
		tb.Fatal(err)
	}
	f.Close()

	ws := s.NewWatchStream()
	if _, err := ws.Watch(0, []byte{0}, []byte{}, base+1); err != nil {
		tb.Fatal(err)
	}
	// After: overwrites, a range delete, a multi-op txn, a revoke (its
	// keys' deletes in one revision), a new lease with keys.
	for i := range 10 {
		s.Put(fmt.Appendf(nil, "/a/%02d", i), fmt.Appendf(nil, "w%d", i), lease.NoLease)
	}
	s.DeleteRange([]byte("/a/10"), []byte("/a/15"))
	txn := s.Write(traceutil.TODO())
	txn.Put([]byte("/t/1"), []byte("x"), lease.NoLease)
	txn.Put([]byte("/t/2"), []byte("y"), lease.NoLease)
	txn.DeleteRange([]byte("/a/00"), nil)
	txn.Put([]byte("/t/1"), []byte("z"), lease.NoLease)
	txn.End()
	if err := le.Revoke(l1.ID); err != nil {
		tb.Fatal(err)
	}
	revoked := s.Rev()
	l2, err := le.Grant(1002, 120)
	if err != nil {
		tb.Fatal(err)
	}
	s.Put([]byte("/l/3"), []byte("new lease"), l2.ID)
	s.Put([]byte("/l/1"), []byte("back"), l2.ID)
	s.Put([]byte("/a/04"), []byte("again"), lease.NoLease)
	last := s.Rev()

	var watched []mvccpb.Event
	for len(watched) == 0 || watched[len(watched)-1].Kv.ModRevision < last {
		select {
		case r := <-ws.Chan():
			watched = append(watched, r.Events...)
		case <-time.After(30 * time.Second):
			tb.Fatalf("the watch stopped at %d events, want up to revision %d", len(watched), last)
		}
	}
	ws.Close()
	s.Close()
	le.Stop()
	be.ForceCommit()
	if err := be.Close(); err != nil {
		tb.Fatal(err)
	}
	leases = []journal.Lease{{ID: int64(l1.ID), TTL: 60, Rev: 1, Revoked: revoked}, {ID: int64(l2.ID), TTL: 120, Rev: revoked}}
	return snap, src, watchEvents(watched), leases
}

// The pin of the replay: the events etcd's own watch reports, applied to
// etcd's own snapshot, give the "key" and "lease" buckets etcd's MVCC
// store and lessor wrote, byte for byte.
func TestApplyEventsMatchesEtcd(t *testing.T) {
	t.Parallel()
	snap, src, evs, leases := etcdBeforeAfter(t)
	// Every kind of change is there: a txn's several subs, deletes.
	var deletes, subs int
	for _, ev := range evs {
		if ev.Type == journal.Delete {
			deletes++
		}
		subs = max(subs, int(ev.Sub))
	}
	if deletes < 5 || subs < 3 {
		t.Fatalf("%d deletes, at most %d subs in one revision: the workload lost its point", deletes, subs)
	}
	a, err := ApplyEvents(snap, seqOf(evs), leases)
	if err != nil {
		t.Fatal(err)
	}
	if a.Events != int64(len(evs)) || a.FirstRevision != a.SnapshotRevision+1 || a.LastRevision != evs[len(evs)-1].Rev ||
		a.LeasesPut != 1 || a.LeasesDeleted != 1 {
		t.Fatalf("applied %+v, %d events", a, len(evs))
	}
	for _, b := range [][]byte{buckets.Key.Name(), buckets.Lease.Name()} {
		got, want := bucketContents(t, snap, b), bucketContents(t, src, b)
		if !maps.Equal(got, want) {
			var diff []string
			for _, k := range slices.Sorted(maps.Keys(want)) {
				if got[k] != want[k] {
					diff = append(diff, fmt.Sprintf("%x: got %x, want %x", k, got[k], want[k]))
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					diff = append(diff, fmt.Sprintf("%x: not in etcd's", k))
				}
			}
			t.Fatalf("bucket %s differs from etcd's (%d vs %d entries): %s", b, len(got), len(want), strings.Join(diff[:min(5, len(diff))], "; "))
		}
		if len(got) == 0 {
			t.Fatalf("bucket %s is empty", b)
		}
	}
	// etcd's own store opens the result and serves it as the source.
	be := backend.NewDefaultBackend(snap)
	defer be.Close()
	s := mvcc.NewStore(zap.NewNop(), be, &lease.FakeLessor{}, mvcc.StoreConfig{})
	defer s.Close()
	if s.Rev() != a.LastRevision {
		t.Fatalf("etcd reads revision %d, want %d", s.Rev(), a.LastRevision)
	}
	r, err := s.Range(t.Context(), []byte("/t/1"), nil, mvcc.RangeOptions{})
	if err != nil || len(r.KVs) != 1 || string(r.KVs[0].Value) != "z" || r.KVs[0].Version != 2 {
		t.Fatalf("/t/1: %+v, %v", r.KVs, err)
	}
}

// The names and encodings ApplyEvents writes are etcd's: buckets, lease
// keys (lessor's int64ToBytes: big-endian).
func TestApplyBucketNamesMatchEtcd(t *testing.T) {
	t.Parallel()
	if !bytes.Equal(LeaseBucket, buckets.Lease.Name()) || !bytes.Equal(KeyBucket, buckets.Key.Name()) {
		t.Fatalf("lease bucket %q, key bucket %q: etcd's are %q, %q", LeaseBucket, KeyBucket, buckets.Lease.Name(), buckets.Key.Name())
	}
	if got := binary.BigEndian.Uint64(LeaseKey(0x0102030405060708)); got != 0x0102030405060708 {
		t.Fatalf("lease key %x", got)
	}
}

// Events that do not continue the snapshot exactly are refused before
// anything is written.
func TestApplyEventsRefuses(t *testing.T) {
	t.Parallel()
	snap, _, evs, leases := etcdBeforeAfter(t)
	base := evs[0].Rev - 1
	put := func(rev, sub int64) journal.Event {
		return journal.Event{Rev: rev, Sub: sub, Type: journal.Put, Key: fmt.Appendf(nil, "/k%d-%d", rev, sub), Value: []byte("v"), CreateRev: rev, Version: 1}
	}
	cases := []struct {
		name string
		evs  []journal.Event
		want string
	}{
		{"at the snapshot's revision", []journal.Event{put(base, 0)}, "not after the snapshot's revision"},
		{"below it", []journal.Event{put(base-3, 0)}, "not after the snapshot's revision"},
		{"a gap at the start", []journal.Event{put(base+2, 0)}, "gap"},
		{"a first sub not 0", []journal.Event{put(base+1, 1)}, "gap"},
		{"a revision skipped", []journal.Event{put(base+1, 0), put(base+3, 0)}, "gap"},
		{"a sub skipped", []journal.Event{put(base+1, 0), put(base+1, 2)}, "gap"},
		{"repeated", []journal.Event{put(base+1, 0), put(base+1, 0)}, "out of order or repeated"},
		{"reordered", []journal.Event{put(base+1, 0), put(base+2, 0), put(base+1, 1)}, "out of order"},
		{"no type", []journal.Event{{Rev: base + 1, Key: []byte("/k")}}, "neither"},
		{"a put without versions", []journal.Event{{Rev: base + 1, Type: journal.Put, Key: []byte("/k")}}, "create revision"},
	}
	before := bucketContents(t, snap, KeyBucket)
	for _, c := range cases {
		path := filepath.Join(t.TempDir(), "db")
		b, err := os.ReadFile(snap)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = ApplyEvents(path, seqOf(c.evs), leases)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
		// Refused within the first batch: nothing was committed.
		if got := bucketContents(t, path, KeyBucket); !maps.Equal(got, before) {
			t.Errorf("%s: the key bucket was written to", c.name)
		}
	}
}

// Events of another history are refused by name, whatever their order
// of revisions says: each change must follow from its key's state before
// it, in the snapshot or after the journal's previous change. The worst
// case is the real one: the same cluster's journal continued across a
// restore from the snapshot without a revision bump, the second history
// appended after the first (its revisions shifted past the first's).
func TestApplyEventsRefusesAnotherHistory(t *testing.T) {
	t.Parallel()
	snap, _, evs, leases := etcdBeforeAfter(t)
	base, last := evs[0].Rev-1, evs[len(evs)-1].Rev
	clone := func() []journal.Event { return slices.Clone(evs) }
	find := func(evs []journal.Event, key string, typ string) int {
		for i, ev := range evs {
			if string(ev.Key) == key && ev.Type == typ {
				return i
			}
		}
		t.Fatalf("no %s of %s in the workload", typ, key)
		return -1
	}
	cases := []struct {
		name string
		evs  func() []journal.Event
		key  string
		want string
	}{
		{"an overwrite one version too far", func() []journal.Event {
			e := clone()
			e[find(e, "/a/01", journal.Put)].Version++
			return e
		}, "/a/01", "the snapshot holds version 1"},
		{"an overwrite created elsewhere", func() []journal.Event {
			e := clone()
			e[find(e, "/a/05", journal.Put)].CreateRev = 1
			return e
		}, "/a/05", "the snapshot holds version 1 created at"},
		{"a new key the snapshot holds", func() []journal.Event {
			e := clone()
			i := find(e, "/a/06", journal.Put)
			e[i].Version, e[i].CreateRev = 1, e[i].Rev
			return e
		}, "/a/06", "a put of version 1 (a new key), the snapshot holds it"},
		{"a delete of a key the snapshot lacks", func() []journal.Event {
			e := clone()
			e[find(e, "/a/11", journal.Delete)].Key = []byte("/never")
			return e
		}, "/never", "a delete of a key the snapshot does not hold"},
		{"a second put of a new key as new again", func() []journal.Event {
			e := clone()
			i := slices.IndexFunc(e, func(ev journal.Event) bool { return string(ev.Key) == "/t/1" && ev.Version == 2 })
			e[i].Version, e[i].CreateRev = 1, e[i].Rev
			return e
		}, "/t/1", "a put of version 1 created at"},
		{"the history spliced after itself (a restore without a bump)", func() []journal.Event {
			e := clone()
			shift := last - base
			for _, ev := range evs {
				ev.Rev += shift
				if ev.CreateRev > base {
					ev.CreateRev += shift
				}
				e = append(e, ev)
			}
			return e
		}, "", "the journal is not a history of this snapshot"},
	}
	for _, c := range cases {
		path := copied(t, snap, filepath.Join(t.TempDir(), "db"))
		_, err := ApplyEvents(path, seqOf(c.evs()), leases)
		var he *HistoryError
		if !errors.As(err, &he) || !strings.Contains(err.Error(), c.want) || (c.key != "" && string(he.Key) != c.key) {
			t.Errorf("%s: %v, want a HistoryError of key %q saying %q", c.name, err, c.key, c.want)
		}
	}
	// The real history itself passes (TestApplyEventsMatchesEtcd checks
	// what it writes).
	if _, err := ApplyEvents(snap, seqOf(evs), leases); err != nil {
		t.Fatalf("the real history: %v", err)
	}
}

// A backup of a cluster restored with a revision bump holds the bump's
// entry (an empty value, as etcdutl's --bump-revision writes it, kept by
// compactions): the history check passes over it, and the replay applies.
func TestApplyEventsAfterABump(t *testing.T) {
	t.Parallel()
	snap, _, evs, leases := etcdBeforeAfter(t)
	const bump = 1000
	if _, err := BumpRevision(snap, bump, true); err != nil {
		t.Fatal(err)
	}
	shift := int64(bump)
	for i := range evs {
		evs[i].Rev += shift
		if evs[i].CreateRev >= evs[0].Rev-shift {
			evs[i].CreateRev += shift
		}
	}
	if _, err := ApplyEvents(snap, seqOf(evs), leases); err != nil {
		t.Fatalf("a replay onto a bumped snapshot: %v", err)
	}
}
