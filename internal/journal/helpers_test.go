package journal_test

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// Helpers shared by the journal's tests.

// zstdEnc is the segments' encoding in most tests: zstd, no encryption.
var zstdEnc = objectio.Encoding{Compression: objectio.CompressZstd}

// memLayout is the layout of the tests on an in-memory store.
var memLayout = catalog.Layout{Prefix: "p"}

// eachVersion runs f as a parallel subtest on etcd 3.5 and on 3.6.
func eachVersion(t *testing.T, f func(t *testing.T, v testenv.Version)) {
	t.Helper()
	for _, v := range []testenv.Version{testenv.V35, testenv.V36} {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			f(t, v)
		})
	}
}

// startEtcd starts a single-member etcd of version v and returns it and
// a client of it.
func startEtcd(tb testing.TB, v testenv.Version) (*testenv.EtcdCluster, *clientv3.Client) {
	tb.Helper()
	c := testenv.StartEtcd(tb, testenv.EtcdOptions{Version: v, Members: 1})
	return c, c.Client(tb)
}

// headRev is the cluster's revision now.
func headRev(tb testing.TB, ctx context.Context, cli *clientv3.Client) int64 {
	tb.Helper()
	r, err := cli.Get(ctx, "nothing")
	if err != nil {
		tb.Fatal(err)
	}
	return r.Header.Revision
}

// settledHeadRev is cli's cluster's revision once it stops moving (two
// reads a second apart agree): a put whose call timed out during an
// election may still be committed after a first read (seen in make test:
// the journal one revision past it).
func settledHeadRev(tb testing.TB, ctx context.Context, cli *clientv3.Client) int64 {
	tb.Helper()
	prev := headRev(tb, ctx, cli)
	for {
		time.Sleep(time.Second)
		r := headRev(tb, ctx, cli)
		if r == prev {
			return r
		}
		prev = r
	}
}

// captureOptions are a capture of cli as cluster c1 from base-1 at
// revision base into st, cutting a segment a second.
func captureOptions(tb testing.TB, cli *clientv3.Client, st store.Store, layout catalog.Layout, enc objectio.Encoding, base int64) journal.CaptureOptions {
	tb.Helper()
	return journal.CaptureOptions{
		Client: cli, ClusterID: "c1", BaseBackup: "base-1", BaseRev: base,
		Store: st, Layout: layout, Encoding: enc,
		SegmentInterval: time.Second, Log: testfix.Logger(tb),
	}
}

// startCapture runs Capture until stop is called, which returns its error.
func startCapture(ctx context.Context, o journal.CaptureOptions) (stop func() error) {
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- journal.Capture(cctx, o) }()
	return func() error { cancel(); return <-done }
}

// startCaptureErr runs Capture until it ends by itself: stop waits for
// that (20 s at most, then it cancels it and says so).
func startCaptureErr(ctx context.Context, o journal.CaptureOptions) (stop func() error) {
	done := make(chan error, 1)
	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- journal.Capture(cctx, o) }()
	return func() error {
		defer cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			cancel()
			return fmt.Errorf("still running 20 s later: %v", <-done)
		}
	}
}

// waitChain waits until the chain of cluster id's segments stored from
// base reaches revision want, within bound, and returns it; it fails tb
// on a chain with a problem.
func waitChain(tb testing.TB, ctx context.Context, st store.Store, layout catalog.Layout, id string, base, want int64, bound time.Duration) *journal.Chain {
	tb.Helper()
	deadline := time.Now().Add(bound)
	for {
		chain, err := journal.ListSegments(ctx, st, layout, id, base)
		if err != nil || chain.Problem != nil {
			tb.Fatalf("chain: %v %v", err, chain.Problem)
		}
		if chain.Reach >= want {
			return chain
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the journal reaches %d, want %d within %s", chain.Reach, want, bound)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReach waits (15 s at most) until c1's chain from base reaches want.
func waitReach(tb testing.TB, ctx context.Context, st store.Store, layout catalog.Layout, base, want int64) *journal.Chain {
	tb.Helper()
	return waitChain(tb, ctx, st, layout, "c1", base, want, 15*time.Second)
}

// waitLastSegment waits until the stored segments reach the cluster's
// revision and returns the last one.
func waitLastSegment(tb testing.TB, ctx context.Context, st store.Store, layout catalog.Layout, base int64, cli *clientv3.Client) journal.SegmentInfo {
	tb.Helper()
	chain := waitChain(tb, ctx, st, layout, "c1", base, headRev(tb, ctx, cli), 20*time.Second)
	return chain.Segments[len(chain.Segments)-1]
}

// captureRig is a capture's world on a real single-member etcd 3.5 (the
// base: its revision now) and an in-memory store.
type captureRig struct {
	etcd   *testenv.EtcdCluster
	cli    *clientv3.Client
	base   int64
	etcdID string
	st     *memstore.Store
	layout catalog.Layout
	o      journal.CaptureOptions
}

func newCaptureRig(tb testing.TB, ctx context.Context) *captureRig {
	tb.Helper()
	c, cli := startEtcd(tb, testenv.V35)
	r, err := cli.Get(ctx, "nothing")
	if err != nil {
		tb.Fatal(err)
	}
	rig := &captureRig{etcd: c, cli: cli, base: r.Header.Revision, etcdID: journal.EtcdID(r.Header.ClusterId), st: memstore.New(),
		layout: catalog.Layout{Prefix: testenv.Prefix(tb)}}
	rig.o = captureOptions(tb, cli, rig.st, rig.layout, zstdEnc, rig.base)
	return rig
}

// writeSegment writes the segment of h and evs in zstd.
func writeSegment(tb testing.TB, ctx context.Context, st store.Store, layout catalog.Layout, h journal.Header, evs []journal.Event) journal.SegmentInfo {
	tb.Helper()
	info, err := journal.WriteSegment(ctx, st, layout, zstdEnc, h, evs)
	if err != nil {
		tb.Fatal(err)
	}
	return info
}

// putsHeader is the header of cluster c1's segment (base b1 at 10)
// holding revisions first..last, received at rev*100 ms (the last one
// lastRecvExtra ms later), with leases.
func putsHeader(first, last, lastRecvExtra int64, leases []journal.Lease) journal.Header {
	return journal.Header{Format: journal.FormatVersion, ClusterID: "c1", BaseBackup: "b1", BaseRev: 10, FirstRev: first, LastRev: last,
		Received: map[int64]int64{first: first * 100, last: last*100 + lastRecvExtra}, Leases: leases}
}

// putsEvents are a put of key k<rev> at each revision first..last.
func putsEvents(first, last int64) []journal.Event {
	var evs []journal.Event
	for r := first; r <= last; r++ {
		evs = append(evs, putAt(r, fmt.Sprint("k", r)))
	}
	return evs
}

// writePuts writes the segment of cluster c1 (base b1 at 10) holding a
// put of key k<rev> at each revision first..last, received at rev*100 ms,
// with leases in its header.
func writePuts(tb testing.TB, ctx context.Context, st store.Store, layout catalog.Layout, first, last int64, leases []journal.Lease) {
	tb.Helper()
	writeSegment(tb, ctx, st, layout, putsHeader(first, last, 0, leases), putsEvents(first, last))
}

func putAt(rev int64, key string) journal.Event {
	return journal.Event{Rev: rev, Type: journal.Put, Key: []byte(key), Value: []byte("v"), CreateRev: rev, Version: 1}
}

// eventRevs is the revision of every event of seq; it fails tb on an error.
func eventRevs(tb testing.TB, seq iter.Seq2[journal.Event, error]) []int64 {
	tb.Helper()
	var revs []int64
	for ev, err := range seq {
		if err != nil {
			tb.Fatal(err)
		}
		revs = append(revs, ev.Rev)
	}
	return revs
}

// memJournal is an in-memory store (layout memLayout) and write, which
// stores c1's segment of puts at revisions first..last with leases
// (writePuts).
func memJournal(tb testing.TB, ctx context.Context) (st *memstore.Store, write func(first, last int64, leases []journal.Lease)) {
	tb.Helper()
	st = memstore.New()
	return st, func(first, last int64, leases []journal.Lease) {
		tb.Helper()
		writePuts(tb, ctx, st, memLayout, first, last, leases)
	}
}

// stubSegments is an in-memory store holding an object "x" at c1's
// segment key (in memLayout) of each range: a chain by name only, as
// ChooseBase reads it.
func stubSegments(tb testing.TB, ctx context.Context, ranges [][2]int64) *memstore.Store {
	tb.Helper()
	st := memstore.New()
	for _, r := range ranges {
		if _, err := st.Put(ctx, memLayout.JournalSegmentKey("c1", r[0], r[1]), strings.NewReader("x")); err != nil {
			tb.Fatal(err)
		}
	}
	return st
}

// chainEvents reads every event of chain's segments, each read as want.
func chainEvents(tb testing.TB, ctx context.Context, st store.Store, layout catalog.Layout, chain *journal.Chain, want journal.Want) []journal.Event {
	tb.Helper()
	var got []journal.Event
	for _, s := range chain.Segments {
		_, events, err := journal.ReadSegment(ctx, st, layout, s.Key, nil, want)
		if err != nil {
			tb.Fatal(err)
		}
		got = append(got, events...)
	}
	return got
}
