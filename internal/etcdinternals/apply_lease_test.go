package etcdinternals

import (
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/lease/leasepb"

	"github.com/armada/etcd-recovery/internal/journal"
)

// leaseTTLs are the TTLs of the lease bucket of a bbolt file, by ID.
func leaseTTLs(tb testing.TB, path string) map[int64]int64 {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	out := map[int64]int64{}
	if err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(LeaseBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, v []byte) error {
			var l leasepb.Lease
			if err := l.Unmarshal(v); err != nil {
				return err
			}
			out[l.ID] = l.TTL
			return nil
		})
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// A lease whose granted TTL the journal could not learn is never written
// with TTL 0 (its keys would expire at once): the snapshot's entry stays
// when it has one, else it gets journal.UnknownLeaseTTL. A revoked one is
// deleted whatever its TTL.
func TestApplyEventsUnknownLeaseTTL(t *testing.T) {
	t.Parallel()
	snap, _, evs, _ := etcdBeforeAfter(t) // the snapshot holds lease 1001, TTL 60
	if got := leaseTTLs(t, snap); got[1001] != 60 {
		t.Fatalf("fixture: the snapshot's leases %v, want 1001 with TTL 60", got)
	}
	last := evs[len(evs)-1].Rev
	leases := []journal.Lease{
		{ID: 1001, Rev: 1, TTLUnknown: true},    // the snapshot's: kept as it is
		{ID: 1002, Rev: last, TTLUnknown: true}, // new, unknown: the default
		{ID: 1003, Rev: last},                   // new, TTL 0 recorded by an older journal: the default
		{ID: 1004, Rev: last, TTL: 7},           // known
		{ID: 1005, Rev: last, TTLUnknown: true, Revoked: last},
	}
	a, err := ApplyEvents(snap, seqOf(evs), leases)
	if err != nil {
		t.Fatal(err)
	}
	got := leaseTTLs(t, snap)
	want := map[int64]int64{1001: 60, 1002: journal.UnknownLeaseTTL, 1003: journal.UnknownLeaseTTL, 1004: 7}
	if len(got) != len(want) {
		t.Fatalf("leases %v, want %v", got, want)
	}
	for id, ttl := range want {
		if got[id] != ttl {
			t.Fatalf("lease %d: TTL %d, want %d (all: %v)", id, got[id], ttl, got)
		}
	}
	if a.LeasesPut != 3 || a.LeasesDeleted != 0 {
		t.Fatalf("applied %+v, want 3 leases put, none deleted", a)
	}
}
