package journal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// referenceWatch records, independently of Capture, every event from rev
// on, as the journal must record it.
type referenceWatch struct {
	mu     sync.Mutex
	events []journal.Event
}

func watchFrom(t *testing.T, ctx context.Context, cli *clientv3.Client, rev int64) *referenceWatch {
	r := &referenceWatch{}
	wch := cli.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	go func() {
		for resp := range wch {
			r.mu.Lock()
			r.events = testfix.AppendWatched(r.events, resp.Events)
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *referenceWatch) upTo(rev int64) []journal.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []journal.Event
	for _, e := range r.events {
		if e.Rev <= rev {
			out = append(out, e)
		}
	}
	return out
}

// workload writes every kind of change: puts, overwrites, deletes, a
// multi-op txn, a range delete, a lease granted with keys then revoked.
func workload(t *testing.T, ctx context.Context, cli *clientv3.Client, round int) (leaseID int64) {
	t.Helper()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p := fmt.Sprintf("/w%d/", round)
	for i := range 20 {
		must(cli.Put(ctx, fmt.Sprintf("%sk%02d", p, i), fmt.Sprintf("v%d", i)))
	}
	must(cli.Put(ctx, p+"k00", "overwritten"))
	must(cli.Put(ctx, p+"k00", "again"))
	must(cli.Delete(ctx, p+"k01"))
	must(cli.Txn(ctx).Then(
		clientv3.OpPut(p+"t1", "a"), clientv3.OpPut(p+"t2", "b"), clientv3.OpDelete(p+"k02"), clientv3.OpPut(p+"k03", "txn"),
	).Commit())
	must(cli.Delete(ctx, p+"k1", clientv3.WithPrefix())) // k10-k19
	g, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	must(cli.Put(ctx, p+"l1", "leased", clientv3.WithLease(g.ID)))
	must(cli.Put(ctx, p+"l2", "leased", clientv3.WithLease(g.ID)))
	must(cli.Put(ctx, p+"bin", string([]byte{0, 1, 0xff, '\n'})))
	time.Sleep(200 * time.Millisecond) // the journal looks a lease up when it sees it: best effort
	must(cli.Revoke(ctx, g.ID))
	return int64(g.ID)
}

func TestCapture(t *testing.T) {
	t.Parallel()
	eachVersion(t, func(t *testing.T, v testenv.Version) {
		ctx := testfix.Context(t, 60*time.Second)
		_, cli := startEtcd(t, v)
		testenv.PutKeys(t, cli, "/before/", 10, 16)
		base := headRev(t, ctx, cli)
		ref := watchFrom(t, ctx, cli, base+1)

		rig := testfix.NewStoreRig(t)
		st, layout := rig.Store, rig.Layout
		key := testfix.NewAgeKey(t)
		enc := objectio.Encoding{Compression: objectio.CompressZstd, Recipients: testfix.RecipientsOf(t, key)}
		o := captureOptions(t, cli, st, layout, enc, base)
		o.Identities = key.IDs
		var segMu sync.Mutex
		var written []journal.SegmentInfo
		o.OnSegment = func(s journal.SegmentInfo) { segMu.Lock(); written = append(written, s); segMu.Unlock() }

		stop := startCapture(ctx, o)
		lease1 := workload(t, ctx, cli, 1)
		time.Sleep(1500 * time.Millisecond) // a segment by interval
		workload(t, ctx, cli, 2)
		// Stop mid-workload (a writer keeps writing), then resume.
		wctx, wcancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; wctx.Err() == nil; i++ {
				cli.Put(wctx, fmt.Sprintf("/busy/%d", i%50), fmt.Sprint(i))
			}
		}()
		time.Sleep(300 * time.Millisecond)
		if err := stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
		time.Sleep(300 * time.Millisecond) // writes nobody captures now
		stop = startCapture(ctx, o)
		time.Sleep(300 * time.Millisecond)
		wcancel()
		wg.Wait()
		workload(t, ctx, cli, 3)
		last := headRev(t, ctx, cli)

		// Every revision lands in a segment within an interval and an upload.
		chain := waitChain(t, ctx, st, layout, "c1", base, last, 10*time.Second)
		if err := stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if chain.Reach != last {
			t.Fatalf("the segments reach revision %d, the cluster is at %d", chain.Reach, last)
		}
		if len(chain.Segments) < 3 || len(chain.All) != len(chain.Segments) {
			t.Fatalf("%d segments chained of %d", len(chain.Segments), len(chain.All))
		}
		segMu.Lock()
		if len(written) != len(chain.All) {
			t.Errorf("OnSegment saw %d segments, %d stored", len(written), len(chain.All))
		}
		segMu.Unlock()

		var got []journal.Event
		leases := map[int64]journal.Lease{}
		for _, s := range chain.Segments {
			h, events, err := journal.ReadSegment(ctx, st, layout, s.Key, key.IDs, journal.Want{ClusterID: "c1", BaseBackup: "base-1"})
			if err != nil {
				t.Fatal(err)
			}
			if h.BaseRev != base || h.Received[h.FirstRev] == 0 || h.Received[h.LastRev] == 0 {
				t.Errorf("%s: header %+v", s.Key, h)
			}
			for _, l := range h.Leases {
				if old, ok := leases[l.ID]; ok {
					old.Revoked = max(old.Revoked, l.Revoked)
					l = old
				}
				leases[l.ID] = l
			}
			got = append(got, events...)
		}
		// The chain is tamper-evident: every segment names the one
		// before it by its trailer's sha256, across the restart too.
		prevSum := ""
		for i, s := range chain.Segments {
			r, err := journal.OpenSegment(ctx, st, layout, s.Key, key.IDs, journal.Want{ClusterID: "c1"})
			if err != nil {
				t.Fatal(err)
			}
			for err == nil {
				_, err = r.Next()
			}
			r.Close()
			if err != io.EOF || len(r.Sum()) != 64 {
				t.Fatalf("%s: %v, sum %q", s.Key, err, r.Sum())
			}
			if h := r.Header(); (i == 0 && h.Prev != "") || (i > 0 && h.Prev != prevSum) {
				t.Errorf("segment %d %s names %q as the one before it, which is %q", i, s.Key, h.Prev, prevSum)
			}
			prevSum = r.Sum()
		}
		want := ref.upTo(last)
		if !jsonEqual(got, want) {
			n := min(len(got), len(want))
			for i := range n {
				if !jsonEqual(got[i], want[i]) {
					t.Fatalf("event %d: journal %+v, watch %+v (%d and %d events)", i, got[i], want[i], len(got), len(want))
				}
			}
			t.Fatalf("the journal has %d events, the watch %d", len(got), len(want))
		}
		if l := leases[lease1]; l.TTL != 60 || l.Rev == 0 {
			t.Errorf("lease %x: %+v (all %+v)", lease1, l, leases)
		}
		// The revoke of round 1's lease is recorded at the revision
		// deleting its keys /w1/l1 and /w1/l2.
		var revokedAt int64
		for _, e := range want {
			if e.Type == journal.Delete && string(e.Key) == "/w1/l2" {
				revokedAt = e.Rev
			}
		}
		if l := leases[lease1]; revokedAt == 0 || l.Revoked != revokedAt {
			t.Errorf("lease %x: revoked at %d, the journal says %+v", lease1, revokedAt, l)
		}
		t.Logf("%d events in %d segments, revisions %d-%d", len(got), len(chain.Segments), base+1, last)
	})
}

func TestCaptureCompactedIsAGap(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 30*time.Second)
	_, cli := startEtcd(t, testenv.V36)
	testenv.PutKeys(t, cli, "/a/", 5, 8)
	base := headRev(t, ctx, cli)
	for i := range 10 {
		if _, err := cli.Put(ctx, fmt.Sprint("/b/", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Compact(ctx, base+6); err != nil {
		t.Fatal(err)
	}
	err := journal.Capture(ctx, captureOptions(t, cli, memstore.New(), memLayout, zstdEnc, base))
	var gap *journal.GapError
	if !errors.As(err, &gap) || gap.From != base+1 || gap.To != base+5 {
		t.Fatalf("got %v, want a gap of revisions %d-%d", err, base+1, base+5)
	}
	t.Log(err)
}

// frozenStore never answers a write until its context ends.
type frozenStore struct{ store.Store }

func (f frozenStore) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	<-ctx.Done()
	return 0, &store.Error{Backend: "frozen", Op: "put", Key: key, Err: ctx.Err()}
}

func TestCaptureFrozenStoreIsNamed(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 30*time.Second)
	_, cli := startEtcd(t, testenv.V35)
	base := headRev(t, ctx, cli)
	o := captureOptions(t, cli, frozenStore{memstore.New()}, memLayout, zstdEnc, base)
	o.SegmentInterval, o.UploadTimeout, o.FrozenAfter = 200*time.Millisecond, 300*time.Millisecond, time.Second
	done := make(chan error, 1)
	go func() { done <- journal.Capture(ctx, o) }()
	testenv.PutKeys(t, cli, "/a/", 5, 8)
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Capture did not give up on a frozen store")
	}
	var se *journal.SegmentError
	if !errors.As(err, &se) || se.Reason != journal.ReasonStore || !strings.Contains(se.Detail, "store frozen") ||
		!strings.HasPrefix(se.Key, o.Layout.JournalPrefix("c1")+fmt.Sprintf("%016d-", base+1)) {
		t.Fatalf("got %v, want the store named frozen", err)
	}
	t.Log(err)
}

// slowStore takes its time over every write.
type slowStore struct {
	store.Store
	delay time.Duration
	// gate, when set, holds every Put until it is closed: the store is
	// behind for as long as the test says, whatever the machine's speed.
	gate chan struct{}
}

func (s slowStore) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
		}
	}
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
	}
	return s.Store.Put(ctx, key, r)
}

// A store slower than the cluster gets segments cut by size while the
// watch pauses, and the journal stays exact.
func TestCaptureSlowStoreCutsBySize(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	_, cli := startEtcd(t, testenv.V36)
	base := headRev(t, ctx, cli)
	ref := watchFrom(t, ctx, cli, base+1)
	// The store takes nothing until every put is in (then 300 ms a
	// segment): the first sealed segment waits in the uploader, so the
	// next one finds it busy and the watch pauses however fast or slow
	// the machine writes (on a loaded machine the puts once came slower
	// than a 300 ms store, and the watch never paused).
	gate := make(chan struct{})
	st := slowStore{Store: memstore.New(), delay: 300 * time.Millisecond, gate: gate}
	layout := memLayout
	o := captureOptions(t, cli, st, layout, zstdEnc, base)
	var logs testfix.SyncBuffer
	o.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o.SegmentInterval, o.SegmentSize = 2*time.Second, 8<<10
	var mu sync.Mutex
	var sizes []int64
	o.OnSegment = func(s journal.SegmentInfo) { mu.Lock(); sizes = append(sizes, s.Written.RawSize); mu.Unlock() }
	stop := startCapture(ctx, o)
	value := strings.Repeat("v", 64)
	var last int64
	for i := range 600 {
		r, err := cli.Put(ctx, fmt.Sprintf("/k/%03d", i%200), value)
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	close(gate)
	var (
		chain *journal.Chain
		err   error
	)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if chain, err = journal.ListSegments(ctx, st, layout, "c1", base); err != nil {
			t.Fatal(err)
		}
		if chain.Reach >= last || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := stop(); err != nil { // writes the rest
		t.Fatal(err)
	}
	if chain, err = journal.ListSegments(ctx, st, layout, "c1", base); err != nil || chain.Problem != nil || chain.Reach != last {
		t.Fatalf("chain %+v, %v", chain, err)
	}
	got := chainEvents(t, ctx, st, layout, chain, journal.Want{ClusterID: "c1"})
	if want := ref.upTo(last); !jsonEqual(got, want) {
		t.Fatalf("the journal has %d events, the watch %d (or they differ)", len(got), len(want))
	}
	if !strings.Contains(logs.String(), "watch paused") {
		t.Errorf("the watch never paused for the store:\n%s", logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	var biggest int64
	for _, s := range sizes {
		biggest = max(biggest, s)
	}
	if len(sizes) < 5 || biggest > int64(2*o.SegmentSize) {
		t.Errorf("%d segments, the biggest %d bytes raw: not cut by size", len(sizes), biggest)
	}
	t.Logf("%d events in %d segments, the biggest %d bytes raw", len(got), len(sizes), biggest)
}

// A restart that finds the stored segments broken cannot continue
// exactly: a gap, before anything is watched.
func TestCaptureResumeRefusesABrokenChain(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 30*time.Second)
	_, cli := startEtcd(t, testenv.V35)
	st := memstore.New()
	layout := memLayout
	if _, err := st.Put(ctx, layout.JournalSegmentKey("c1", 11, 20), strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, layout.JournalSegmentKey("c1", 25, 30), strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	err := journal.Capture(ctx, captureOptions(t, cli, st, layout, objectio.Encoding{}, 10))
	var gap *journal.GapError
	if !errors.As(err, &gap) || gap.From != 21 || !journal.IsReason(err, journal.ReasonGap) {
		t.Fatalf("got %v, want a gap from 21", err)
	}
	t.Log(err)

	// The last segment, under this cluster's key, is another cluster's:
	// not continued. (One naming another base backup is continued: the
	// revisions are what count, journal.Continues.)
	st = memstore.New()
	h := testHeader()
	h.ClusterID = "other"
	raw, err := journal.EncodeSegment(h, testEvents())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, layout.JournalSegmentKey("c1", 11, 13), bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	o := captureOptions(t, cli, st, layout, objectio.Encoding{}, 10)
	err = journal.Capture(ctx, o)
	if !errors.As(err, &gap) || gap.From != 14 || !journal.IsReason(err, journal.ReasonCluster) {
		t.Fatalf("got %v, want a gap from 14: another cluster's segment", err)
	}
	t.Log(err)
}
