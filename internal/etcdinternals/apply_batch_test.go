package etcdinternals

import (
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"testing"

	"go.etcd.io/etcd/server/v3/mvcc/buckets"

	"github.com/armada/etcd-recovery/internal/journal"
)

// copied copies src to dst and returns dst.
func copied(tb testing.TB, src, dst string) string {
	tb.Helper()
	copyFile(tb, src, dst)
	return dst
}

// A replay committed in many transactions (a tiny byte budget: one
// commit per event) writes exactly what one transaction writes, etcd's
// own buckets, and the leases a function gives after the events.
func TestApplyEventsBatchesByBytes(t *testing.T) {
	t.Parallel()
	snap, src, evs, leases := etcdBeforeAfter(t)
	dir := t.TempDir()
	one := copied(t, snap, filepath.Join(dir, "one.db"))
	many := copied(t, snap, filepath.Join(dir, "many.db"))

	a1, err := ApplyEventsWith(one, seqOf(evs), ApplyOptions{BatchBytes: 1 << 30, Leases: func() ([]journal.Lease, error) { return leases, nil }})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	an, err := ApplyEventsWith(many, seqOf(evs), ApplyOptions{BatchBytes: 1, Leases: func() ([]journal.Lease, error) { calls++; return leases, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if a1.Commits != 1 || an.Commits != len(evs) || calls != 1 {
		t.Fatalf("commits: %d with a large budget (want 1), %d with a 1-byte budget (want %d, one per event); leases asked %d times", a1.Commits, an.Commits, len(evs), calls)
	}
	if a1.Events != an.Events || an.Events != int64(len(evs)) || a1.LastRevision != an.LastRevision || a1.LeasesPut != an.LeasesPut || an.LeasesPut != 1 || an.LeasesDeleted != 1 {
		t.Fatalf("applied %+v in one transaction, %+v in many", a1, an)
	}
	for _, b := range [][]byte{buckets.Key.Name(), buckets.Lease.Name(), buckets.Meta.Name()} {
		g1, gn := bucketContents(t, one, b), bucketContents(t, many, b)
		if !maps.Equal(g1, gn) {
			t.Fatalf("bucket %s: %d entries in one transaction, %d in many, not the same", b, len(g1), len(gn))
		}
	}
	if g, w := bucketContents(t, many, buckets.Key.Name()), bucketContents(t, src, buckets.Key.Name()); !maps.Equal(g, w) {
		t.Fatalf("key bucket: %d entries, etcd's has %d, not the same", len(g), len(w))
	}
	// A lease function's error fails the apply.
	_, err = ApplyEventsWith(copied(t, snap, filepath.Join(dir, "fail.db")), seqOf(evs), ApplyOptions{Leases: func() ([]journal.Lease, error) {
		return nil, fmt.Errorf("no leases")
	}})
	if err == nil {
		t.Fatal("a failing lease function did not fail the apply")
	}
}

// The memory a replay holds does not grow with the number of events: 96
// MiB of events applied with a 4 MiB budget never have more than 32 MiB
// live on the heap (sampled after a GC every 4,000 events), where
// holding them, or one transaction's dirty pages for all of them, would
// need more than 96.
// TestApplyEventsHeapBounded is not parallel: it measures the process's
// live heap, which parallel tests allocating their own buffers would grow
// (that made it fail on a busy CI machine).
func TestApplyEventsHeapBounded(t *testing.T) {
	snap, _, _, _ := etcdBeforeAfter(t)
	path := copied(t, snap, filepath.Join(t.TempDir(), "big.db"))
	var base int64
	func() {
		a, err := ApplyEventsWith(path, func(func(journal.Event, error) bool) {}, ApplyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		base = a.SnapshotRevision
	}()
	const n, size, budget = 48_000, 2 << 10, 4 << 20
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before, peak := ms.HeapAlloc, uint64(0)
	events := func(yield func(journal.Event, error) bool) {
		for i := range n {
			if i%4000 == 3999 {
				runtime.GC()
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapAlloc)
			}
			v := make([]byte, size)
			for j := range v {
				v[j] = byte(i + j)
			}
			rev := base + 1 + int64(i)
			if !yield(journal.Event{Rev: rev, Type: journal.Put, Key: fmt.Appendf(nil, "/big/%06d", i%5000), Value: v, CreateRev: base + 1 + int64(i%5000), Version: int64(i/5000) + 1}, nil) {
				return
			}
		}
	}
	a, err := ApplyEventsWith(path, events, ApplyOptions{BatchBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	if a.Events != n || a.Commits < n*size/budget {
		t.Fatalf("applied %+v: want %d events in at least %d commits", a, n, n*size/budget)
	}
	grew := int64(peak) - int64(before)
	t.Logf("live heap grew by %.1f MiB at most (%d commits)", float64(grew)/(1<<20), a.Commits)
	if grew > 32<<20 {
		t.Fatalf("the live heap grew by %d MiB while %d MiB of events were applied with a %d MiB budget: memory grows with the events", grew>>20, n*size>>20, budget>>20)
	}
	if got := len(bucketContents(t, path, buckets.Key.Name())); got < n {
		t.Fatalf("%d entries in the key bucket, want at least %d", got, n)
	}
}
