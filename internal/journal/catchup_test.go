package journal_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// A catch-up larger than the client's receive limit (64 MiB, the
// journal's etcd connection: etcdconn) is journaled exactly, never taken
// for a cancelled watch: 56 overwrites of 1.2 MiB values, written while
// no journal ran, make one watch response of about 130 MiB with their
// previous values. Before the watch asked for fragments, etcd sent it as
// one message and clientv3 reported the ResourceExhausted as a cancelled
// watch: a gap, while etcd held every revision.
func TestCaptureLargeCatchUp(t *testing.T) {
	t.Parallel()
	eachVersion(t, func(t *testing.T, v testenv.Version) {
		ctx := testfix.Context(t, 2*time.Minute)
		cli, base, last := bigHistory(t, ctx, v, 56, 4, 1200<<10)
		// Revisions larger than a fragment (etcd's request limit,
		// 1.5 MiB) with their previous values: txns overwriting two
		// 700 KiB values, and a range delete of the four 1.2 MiB
		// keys. Fragments end inside them; the capture never cuts
		// a segment there.
		half := bytes.Repeat([]byte("y"), 700<<10)
		multi := map[int64]int{}
		for i := range 3 {
			half[0] = byte(i)
			tr, err := cli.Txn(ctx).Then(clientv3.OpPut("/half/a", string(half)), clientv3.OpPut("/half/b", string(half))).Commit()
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				multi[tr.Header.Revision] = 2
			}
		}
		d, err := cli.Delete(ctx, "/big/", clientv3.WithPrefix())
		if err != nil || d.Deleted != 4 {
			t.Fatalf("range delete: %v %v", d, err)
		}
		multi[d.Header.Revision], last = 4, d.Header.Revision
		st := memstore.New()
		layout := catalog.Layout{Prefix: testenv.Prefix(t)}
		o := captureOptions(t, cli, st, layout, zstdEnc, base)
		// Small segments: a cut is due after every fragment, inside
		// the large revisions too.
		o.SegmentSize = 256 << 10
		var stalls []journal.WatchStall
		o.OnStall = func(s journal.WatchStall) { stalls = append(stalls, s) }
		stop := startCapture(ctx, o)
		deadline := time.Now().Add(60 * time.Second)
		for {
			chain, err := journal.ListSegments(ctx, st, layout, "c1", base)
			if err != nil || chain.Problem != nil {
				t.Fatalf("chain: %v %v", err, chain.Problem)
			}
			if chain.Reach >= last {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the journal reaches %d, want %d: %v", chain.Reach, last, stop())
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := stop(); err != nil {
			t.Fatalf("the capture: %v", err)
		}
		chain, err := journal.ListSegments(ctx, st, layout, "c1", base)
		if err != nil || chain.Problem != nil || chain.Reach != last {
			t.Fatalf("chain: %+v %v", chain, err)
		}
		got := map[int64]int{}
		for _, ev := range chainEvents(t, ctx, st, layout, chain, journal.Want{ClusterID: "c1"}) {
			if _, ok := multi[ev.Rev]; ok {
				got[ev.Rev]++
			}
		}
		for rev, n := range multi {
			if got[rev] != n {
				t.Errorf("revision %d: %d events in the journal, want %d (a revision larger than a fragment)", rev, got[rev], n)
			}
		}
		if len(stalls) > 0 {
			t.Fatalf("the catch-up stalled: %v", stalls)
		}
	})
}

// Captures sharing a small memory budget (real etcd 3.5, one process, four
// clusters' journals over one member) catching up 1 MiB values at once:
// each journal is exact, the budget's peak stays within its limit plus one
// message a capture (a capture holding nothing may take one past it), and
// every byte comes back once they stop (a budget that leaked would stall
// the journal for good).
func TestCaptureBudgetSharedCatchUp(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 2*time.Minute)
	cli, base, last := bigHistory(t, ctx, testenv.V35, 12, 3, 1<<20)
	const limit = 4 << 20
	budget := journal.NewBudget(limit)
	st := memstore.New()
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	ids := []string{"b1", "b2", "b3", "b4"}
	var stops []func() error
	for _, id := range ids {
		o := captureOptions(t, cli, st, layout, zstdEnc, base)
		o.ClusterID, o.Budget, o.SegmentInterval = id, budget, time.Second
		stops = append(stops, startCapture(ctx, o))
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, id := range ids {
		for {
			chain, err := journal.ListSegments(ctx, st, layout, id, base)
			if err != nil || chain.Problem != nil {
				t.Fatalf("%s: %v %v", id, err, chain.Problem)
			}
			if chain.Reach >= last {
				break
			}
			if time.Now().After(deadline) {
				used, peak := budget.Used()
				t.Fatalf("%s reaches %d, want %d (budget used %d, peak %d)", id, chain.Reach, last, used, peak)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	used, peak := budget.Used()
	// A message: a 1 MiB value and its previous one, counted as base64.
	if bound := int64(limit + len(ids)*3<<20); peak > bound || peak < limit/2 {
		t.Errorf("budget peak %d, want at most the limit %d plus a message a capture (%d)", peak, limit, bound)
	}
	if used != 0 {
		t.Errorf("%d bytes of the budget not given back after every capture stopped", used)
	}
	t.Logf("budget %d MiB: peak %.1f MiB", limit>>20, float64(peak)/(1<<20))
}

// bigHistory starts a 1-member etcd of version v and writes n overwrites
// of size-byte values over keys keys, after its revision base; it returns
// the journal's client (the command's connection: etcdconn), base and the
// last revision written.
func bigHistory(tb testing.TB, ctx context.Context, v testenv.Version, n, keys, size int) (*clientv3.Client, int64, int64) {
	tb.Helper()
	c := testenv.StartEtcd(tb, testenv.EtcdOptions{Version: v, Members: 1})
	cli, err := testfix.EtcdConfig(c).Client(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	r, err := cli.Get(ctx, "nothing")
	if err != nil {
		tb.Fatal(err)
	}
	val := bytes.Repeat([]byte("x"), size)
	last := r.Header.Revision
	for i := range n {
		val[0] = byte(i)
		p, err := cli.Put(ctx, fmt.Sprintf("/big/%d", i%keys), string(val))
		if err != nil {
			tb.Fatal(err)
		}
		last = p.Header.Revision
	}
	return cli, r.Header.Revision, last
}
