package journal_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// Source.Leases at revision to: a revoke recorded in the segment after
// the revisions replayed still counts when at or before to; one after to
// is ignored (the lease lived at to); a revoke record of a lease the
// journal never saw put (the snapshot's) is returned only when revoked at
// or before to; a later record with a known TTL fills an unknown one.
func TestSourceLeasesRevokes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	layout := catalog.Layout{Prefix: "p"}
	st := memstore.New()
	enc := objectio.Encoding{Compression: catalog.CompressZstd}
	write := func(first, last int64, leases []journal.Lease) {
		t.Helper()
		h := journal.Header{Format: journal.FormatVersion, ClusterID: "c1", BaseBackup: "b1", BaseRev: 10, FirstRev: first, LastRev: last,
			Received: map[int64]int64{first: first * 100, last: last * 100}, Leases: leases}
		var evs []journal.Event
		for r := first; r <= last; r++ {
			evs = append(evs, putAt(r, fmt.Sprint("k", r)))
		}
		if _, err := journal.WriteSegment(ctx, st, layout, enc, h, evs); err != nil {
			t.Fatal(err)
		}
	}
	write(11, 13, []journal.Lease{{ID: 1, TTL: 60, Rev: 12}, {ID: 3, Rev: 11, TTLUnknown: true}})
	// Lease 1 revoked at 13, recorded once the capture passed 14; lease 7
	// (the snapshot's) revoked at 15; lease 3's TTL learned after a restart.
	write(14, 16, []journal.Lease{{ID: 1, Rev: 13, Revoked: 13, TTLUnknown: true}, {ID: 7, Rev: 15, Revoked: 15, TTLUnknown: true}, {ID: 3, Rev: 14, TTL: 9}})
	write(17, 18, nil)
	src := journal.NewSource(st, layout, "c1", nil)
	cases := []struct {
		from, to int64
		want     string
	}{
		{11, 11, "[{3 0 11 0 true}]"},
		{11, 12, "[{1 60 12 0 false} {3 0 11 0 true}]"},
		{11, 13, "[{1 60 12 13 false} {3 0 11 0 true}]"}, // from the next segment
		{11, 14, "[{1 60 12 13 false} {3 9 11 0 false}]"},
		{12, 15, "[{1 60 12 13 false} {3 9 11 0 false} {7 0 15 15 true}]"},
		{17, 18, "[]"},
	}
	for _, c := range cases {
		got, err := src.Leases(ctx, c.from, c.to)
		if err != nil {
			t.Fatal(err)
		}
		if s := fmt.Sprint(got); s != c.want {
			t.Errorf("Leases(%d, %d) = %s, want %s", c.from, c.to, s, c.want)
		}
	}
}
