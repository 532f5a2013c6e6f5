package journal_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// Source.Leases at revision to: a revoke recorded in the segment after
// the revisions replayed still counts when at or before to; one after to
// is ignored (the lease lived at to); a revoke record of a lease the
// journal never saw put (the snapshot's) is returned only when revoked at
// or before to; a later record with a known TTL fills an unknown one.
func TestSourceLeasesRevokes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, write := memJournal(t, ctx)
	write(11, 13, []journal.Lease{{ID: 1, TTL: 60, Rev: 12}, {ID: 3, Rev: 11, TTLUnknown: true}})
	// Lease 1 revoked at 13, recorded once the capture passed 14; lease 7
	// (the snapshot's) revoked at 15; lease 3's TTL learned after a restart.
	write(14, 16, []journal.Lease{{ID: 1, Rev: 13, Revoked: 13, TTLUnknown: true}, {ID: 7, Rev: 15, Revoked: 15, TTLUnknown: true}, {ID: 3, Rev: 14, TTL: 9}})
	write(17, 18, nil)
	src := journal.NewSource(st, memLayout, "c1", nil)
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

// A journal behind the cluster records a revoke at the revision of the
// revoke, not at an earlier explicit delete of one of the lease's keys
// (when it looks the lease up, the lease is gone already), and records
// nothing for a live lease whose key was deleted. On real etcd 3.5 and 3.6.
func TestCaptureLeaseRevokes(t *testing.T) {
	t.Parallel()
	eachVersion(t, func(t *testing.T, v testenv.Version) {
		ctx := testfix.Context(t, 60*time.Second)
		_, cli := startEtcd(t, v)
		base := headRev(t, ctx, cli)
		must := func(h *etcdserverpb.ResponseHeader, err error) int64 {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			return h.Revision
		}
		g1, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		g2, err := cli.Grant(ctx, 90)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"/a/1", "/a/2", "/a/3"} {
			p, err := cli.Put(ctx, k, "v", clientv3.WithLease(g1.ID))
			must(p.Header, err)
		}
		for _, k := range []string{"/b/1", "/b/2"} {
			p, err := cli.Put(ctx, k, "v", clientv3.WithLease(g2.ID))
			must(p.Header, err)
		}
		d, err := cli.Delete(ctx, "/a/1")
		explicit := must(d.Header, err)
		d, err = cli.Delete(ctx, "/b/1")
		must(d.Header, err)
		rv, err := cli.Revoke(ctx, g1.ID)
		revokedAt := must(rv.Header, err)
		p, err := cli.Put(ctx, "/last", "v")
		last := must(p.Header, err)

		// The journal starts behind all of it.
		st := memstore.New()
		layout := memLayout
		o := captureOptions(t, cli, st, layout, zstdEnc, base)
		stop := startCapture(ctx, o)
		waitChain(t, ctx, st, layout, "c1", base, last, 20*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		src := journal.NewSource(st, layout, "c1", nil)
		at := func(to int64) map[int64]journal.Lease {
			t.Helper()
			ls, err := src.Leases(ctx, base+1, to)
			if err != nil {
				t.Fatal(err)
			}
			out := map[int64]journal.Lease{}
			for _, l := range ls {
				out[l.ID] = l
			}
			return out
		}
		l1, l2 := int64(g1.ID), int64(g2.ID)
		before, after := at(revokedAt-1), at(last)
		if l := before[l1]; l.Revoked != 0 || l.Rev == 0 {
			t.Errorf("lease 1 before its revoke at %d (a key deleted at %d): %+v", revokedAt, explicit, l)
		}
		if l := after[l1]; l.Revoked != revokedAt || !l.TTLUnknown {
			t.Errorf("lease 1 after its revoke at %d: %+v, want revoked there, its TTL unknown (gone before the journal saw it)", revokedAt, l)
		}
		if l := after[l2]; l.Revoked != 0 || l.TTL != 90 || l.TTLUnknown {
			t.Errorf("lease 2, alive, a key deleted: %+v, want TTL 90, not revoked", l)
		}
	})
}
