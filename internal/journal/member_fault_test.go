package journal_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// Bounds of TestCaptureMemberFaults, with the capture's settings below
// (interval 1 s, stall timeout 2 s, probe after 1 s silent): a stall is
// named within probe + timeout (+ the 1 s tick and slack); a revision
// written while the member is down reaches a segment within stall
// detection + re-watch (one stall timeout per member tried) + one
// interval + one upload (+ slack for a shared 2-core machine).
const (
	faultStallBound = 10 * time.Second
	faultRPOBound   = 20 * time.Second
)

// TestCaptureMemberFaults: a journal watching a 3-member cluster through
// all its endpoints, as in production, loses the member its watch stream
// is on (frozen with SIGSTOP, or SIGKILLed) while a writer keeps writing
// through the other two. The stall is named (frozen: the stream stays up
// and silent), the segments keep reaching the writer's revisions within
// the bound while the member stays down, and once it is back the chain has
// no gap or overlap and its events equal etcd's history.
func TestCaptureMemberFaults(t *testing.T) {
	t.Parallel()
	for _, v := range []testenv.Version{testenv.V35, testenv.V36} {
		for _, fault := range []string{"frozen", "killed"} {
			t.Run(v.String()+"/"+fault, func(t *testing.T) {
				t.Parallel()
				memberFault(t, v, fault)
			})
		}
	}
}

func memberFault(t *testing.T, v testenv.Version, fault string) {
	ctx := testfix.Context(t, 90*time.Second)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, Members: 3})
	cli := c.Client(t) // every endpoint, as the journal command's client
	testenv.PutKeys(t, cli, "/before/", 10, 16)
	base := headRev(t, ctx, cli)

	rig := testfix.NewStoreRig(t)
	st, layout := rig.Store, rig.Layout
	o := captureOptions(t, cli, st, layout, zstdEnc, base)
	o.WatchStallTimeout = 2 * time.Second
	stalls := make(chan journal.WatchStall, 100)
	o.OnStall = func(s journal.WatchStall) { stalls <- s }
	stop := sync.OnceValue(startCapture(ctx, o))
	defer stop()

	// The journal's watch is up once a first write reaches a segment.
	if _, err := cli.Put(ctx, "/first", "x"); err != nil {
		t.Fatal(err)
	}
	waitChain(t, ctx, st, layout, "c1", base, base+1, 10*time.Second)
	victim := watchedMember(t, ctx, c)
	var others []string
	var survivor *testenv.EtcdMember
	for _, mb := range c.Members {
		if mb != victim {
			others = append(others, mb.ClientURL)
			survivor = mb
		}
	}
	wcli, err := clientv3.New(clientv3.Config{Endpoints: others, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer wcli.Close()

	// A writer keeps writing through the other members (a leader change,
	// when the victim led, fails a few writes: they are retried).
	var written atomic.Int64
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; wctx.Err() == nil; i++ {
			pctx, cancel := context.WithTimeout(wctx, time.Second)
			r, err := wcli.Put(pctx, fmt.Sprintf("/w/%d", i%40), strconv.Itoa(i))
			cancel()
			if err == nil {
				written.Store(r.Header.Revision)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	defer func() { wcancel(); wg.Wait() }()
	time.Sleep(500 * time.Millisecond)

	faultAt := time.Now()
	switch fault {
	case "frozen":
		victim.Freeze()
	case "killed":
		victim.Kill()
	}
	t.Logf("%s member %s (the journal's watch stream's)", fault, victim.Name)

	n := 0 // stalls named
	if fault == "frozen" {
		// The stream stays up, silent: only the liveness probe sees it.
		select {
		case s := <-stalls:
			if s.ClusterID != "c1" || s.AwaitedRev <= base || s.Reason == "" {
				t.Errorf("stall: %+v", s)
			}
			n++
			t.Logf("stall named after %s: %s", time.Since(faultAt).Round(time.Millisecond), s)
		case <-time.After(faultStallBound):
			t.Fatalf("no stall named within %s of freezing the watched member", faultStallBound)
		}
	}
	// While the member stays down, a revision written now reaches a
	// segment within the bound; twice, to see the journal keep going.
	for range 2 {
		rev := writtenAfter(t, &written, 5*time.Second)
		began := time.Now()
		waitChain(t, ctx, st, layout, "c1", base, rev, faultRPOBound)
		t.Logf("revision %d (written %s after the fault) stored %s later", rev, began.Sub(faultAt).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	}

	switch fault {
	case "frozen":
		victim.Thaw()
	case "killed":
		victim.Start(t)
	}
	time.Sleep(500 * time.Millisecond)
	wcancel()
	wg.Wait()
	// The cluster's own last revision, once it stops moving: a put in
	// flight when the writer was cancelled may still commit (without an
	// acknowledgement) after a first read.
	scli := survivor.Client(t)
	var last int64
	for {
		rev := headRev(t, ctx, scli)
		if rev == last {
			break
		}
		last = rev
		time.Sleep(500 * time.Millisecond)
	}
	chain := waitChain(t, ctx, st, layout, "c1", base, last, faultRPOBound)
	if err := stop(); err != nil {
		t.Fatalf("capture: %v", err)
	}
	close(stalls)
	for s := range stalls {
		n++
		t.Logf("stall: %s", s)
	}
	// No gap, no overlap: every stored segment is in the chain, which
	// ends at the cluster's revision.
	chain, err = journal.ListSegments(ctx, st, layout, "c1", base)
	if err != nil || chain.Problem != nil || chain.Reach != last || len(chain.All) != len(chain.Segments) {
		t.Fatalf("chain: reach %d of %d, %d of %d segments chained, problem %v, err %v", chain.Reach, last, len(chain.Segments), len(chain.All), chain.Problem, err)
	}
	got := chainEvents(t, ctx, st, layout, chain, journal.Want{ClusterID: "c1", BaseBackup: "base-1"})
	// etcd's history, read afterwards from a member that stayed up.
	ref := watchFrom(t, ctx, scli, base+1)
	deadline := time.Now().Add(10 * time.Second)
	for len(ref.upTo(last)) < len(got) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	want := ref.upTo(last)
	if !jsonEqual(got, want) {
		for i := range min(len(got), len(want)) {
			if !jsonEqual(got[i], want[i]) {
				t.Fatalf("event %d: journal %+v, etcd %+v (%d and %d events)", i, got[i], want[i], len(got), len(want))
			}
		}
		t.Fatalf("the journal has %d events, etcd's history %d", len(got), len(want))
	}
	t.Logf("%d events in %d segments, revisions %d-%d, %d stalls", len(got), len(chain.Segments), base+1, last, n)
}

// writtenAfter returns the writer's newest revision once it has moved
// past where it is now.
func writtenAfter(t *testing.T, written *atomic.Int64, bound time.Duration) int64 {
	t.Helper()
	from := written.Load()
	deadline := time.Now().Add(bound)
	for written.Load() <= from {
		if time.Now().After(deadline) {
			t.Fatalf("the writer wrote nothing through the other members within %s (stuck at revision %d)", bound, from)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return written.Load()
}

// watchedMember is the member serving the cluster's only watch (the
// journal's), from each member's etcd_debugging_mvcc_watcher_total.
func watchedMember(t *testing.T, ctx context.Context, c *testenv.EtcdCluster) *testenv.EtcdMember {
	t.Helper()
	var found *testenv.EtcdMember
	for _, mb := range c.Members {
		n := watchers(t, ctx, mb.ClientURL)
		if n > 0 {
			if found != nil {
				t.Fatalf("watches on %s and %s: want only the journal's", found.Name, mb.Name)
			}
			found = mb
		}
	}
	if found == nil {
		t.Fatal("no member serves the journal's watch")
	}
	return found
}

func watchers(t *testing.T, ctx context.Context, url string) float64 {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "etcd_debugging_mvcc_watcher_total "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("%s/metrics: no etcd_debugging_mvcc_watcher_total", url)
	return 0
}
