package journal_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// A watch that starts behind gets nothing from etcd until etcd has read
// every revision up to its own, and no answer to a progress request
// either: a large catch-up on a loaded member is seconds of silence (CI
// saw 6.4 s for TestCaptureLargeCatchUp's 130 MiB). Its member answers,
// ahead of the watch, so the capture waits for it, up to the catch-up
// timeout, instead of taking it for a stall and asking etcd for the same
// catch-up again. Here the member's slowness is held in the client (its
// first message with events waits), on a real etcd:
//   - slow: 8 stall timeouts of silence, no stall, the journal exact;
//   - longer than the catch-up timeout: a stall naming it, then exact;
//   - the member frozen while the capture waits for its catch-up: a
//     stall within the stall timeout, not at the catch-up timeout.
func TestCaptureSlowCatchUpIsNotAStall(t *testing.T) {
	t.Parallel()
	const timeout = 500 * time.Millisecond
	for _, tc := range []struct {
		name           string
		hold           time.Duration // the first message with events waits this long
		catchUpTimeout time.Duration
		freeze         bool
		stallWant      string // "": no stall
	}{
		{name: "slow", hold: 8 * timeout, catchUpTimeout: time.Minute},
		{name: "too slow", hold: 20 * time.Second, catchUpTimeout: 3 * timeout, stallWant: "a catch-up longer than"},
		{name: "frozen while waited for", hold: 30 * time.Second, catchUpTimeout: time.Minute, freeze: true, stallWant: "could not be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testfix.Context(t, time.Minute)
			c, cli := startEtcd(t, testenv.V35)
			testenv.PutKeys(t, cli, "/before/", 10, 16)
			base := headRev(t, ctx, cli)
			testenv.PutKeys(t, cli, "/behind/", 40, 256)
			last := headRev(t, ctx, cli)

			var held atomic.Bool
			holding := make(chan struct{})
			undo := journal.SlowSends(cli, func(ctx context.Context, events int) {
				if events == 0 || held.Swap(true) {
					return
				}
				close(holding)
				select {
				case <-ctx.Done():
				case <-time.After(tc.hold):
				}
			})
			defer undo()
			st := memstore.New()
			layout := catalog.Layout{Prefix: testenv.Prefix(t)}
			o := captureOptions(t, cli, st, layout, zstdEnc, base)
			o.SegmentInterval, o.WatchStallTimeout, o.WatchCatchUpTimeout = 200*time.Millisecond, timeout, tc.catchUpTimeout
			var mu sync.Mutex
			var stalls []journal.WatchStall
			stalled := make(chan time.Time, 10)
			o.OnStall = func(s journal.WatchStall) {
				mu.Lock()
				stalls = append(stalls, s)
				mu.Unlock()
				stalled <- time.Now()
			}
			stop := startCapture(ctx, o)
			select {
			case <-holding:
			case <-time.After(10 * time.Second):
				t.Fatal("the watch sent no events")
			}
			if tc.freeze {
				// Past the first probe: the capture waits for the catch-up.
				time.Sleep(4 * timeout)
				frozenAt := time.Now()
				c.Members[0].Freeze()
				select {
				case at := <-stalled:
					// probe after 200 ms silent + the stall timeout + ticks.
					d := at.Sub(frozenAt)
					if d > 4*timeout+time.Second {
						t.Errorf("the stall came %s after the freeze", d.Round(time.Millisecond))
					}
					t.Logf("the stall came %s after the freeze", d.Round(time.Millisecond))
				case <-time.After(15 * time.Second):
					t.Fatal("no stall within 15 s of freezing the member")
				}
				c.Members[0].Thaw()
			}
			waitChain(t, ctx, st, layout, "c1", base, last, 30*time.Second)
			if err := stop(); err != nil {
				t.Fatalf("capture: %v", err)
			}
			chain, err := journal.ListSegments(ctx, st, layout, "c1", base)
			if err != nil || chain.Problem != nil || chain.Reach != last || len(chain.All) != len(chain.Segments) {
				t.Fatalf("chain: %+v %v", chain, err)
			}
			got := chainEvents(t, ctx, st, layout, chain, journal.Want{ClusterID: "c1"})
			ref := watchFrom(t, ctx, cli, base+1)
			deadline := time.Now().Add(10 * time.Second)
			for len(ref.upTo(last)) < len(got) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if want := ref.upTo(last); !jsonEqual(got, want) {
				t.Fatalf("the journal has %d events, etcd's history %d (or they differ)", len(got), len(want))
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case tc.stallWant == "" && len(stalls) > 0:
				t.Fatalf("a catch-up taken for a stall: %v", stalls)
			case tc.stallWant != "" && len(stalls) == 0:
				t.Fatal("no stall")
			case tc.stallWant != "" && !strings.Contains(stalls[0].Reason, tc.stallWant):
				t.Fatalf("stall %q, want one saying %q", stalls[0].Reason, tc.stallWant)
			}
			t.Logf("%d events, stalls: %s", len(got), fmt.Sprint(stalls))
		})
	}
}
