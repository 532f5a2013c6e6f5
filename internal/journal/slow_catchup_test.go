package journal_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// The settings of TestCaptureSlowCatchUpIsNotAStall: a probe after
// slowProbe silent, the stall timeout slowTimeout; the probe's member
// check ends within 1.5 stall timeouts, and checkWatch runs every tick
// (a quarter of the segment interval).
const (
	slowProbe   = 200 * time.Millisecond
	slowTimeout = 500 * time.Millisecond
	slowSlack   = time.Second // a shared 2-core machine
)

// A watch that starts behind gets nothing from etcd until etcd has read
// every revision up to its own, and no answer to a progress request
// either: a large catch-up on a loaded member is seconds of silence (CI
// saw 6.4 s for TestCaptureLargeCatchUp's 130 MiB). Its member answers,
// ahead of the watch, so the capture waits for it, up to the catch-up
// timeout, instead of taking it for a stall and asking etcd for the same
// catch-up again. Here the member's slowness is held in the client (the
// first message with events of a watch waits), on a real etcd, behind a
// catch-up of 30 revisions:
//   - slow: 8 stall timeouts of silence, no stall;
//   - longer than the catch-up timeout, twice: a stall that says so,
//     within its bound, then one after twice the wait;
//   - the watch's member frozen while the capture waits for its catch-up,
//     the other two of three taking writes: a stall within a few stall
//     timeouts, not at the catch-up timeout (the probe's read of the
//     cluster may land on the frozen member: then it could not be read);
//   - a watch that has once shown the cluster's revision, then is silent
//     while its member answers ahead of it (a stuck stream): a stall at
//     the stall timeout, no catch-up wait.
//
// Each ends with the journal equal to etcd's history.
func TestCaptureSlowCatchUpIsNotAStall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		members        int
		holds          int           // watches whose first message with events waits
		hold           time.Duration // that long (or until the watch ends)
		catchUpTimeout time.Duration
		freeze         bool   // the watch's member, while its catch-up is waited for
		afterSync      bool   // the hold begins once the watch has shown the cluster's revision
		stallWant      string // the stalls' reason says one of these ("|")
		stalls         int
	}{
		{name: "slow", members: 1, holds: 1, hold: 8 * slowTimeout, catchUpTimeout: time.Minute},
		{name: "too slow twice", members: 1, holds: 2, hold: 30 * time.Second, catchUpTimeout: 3 * slowTimeout, stallWant: "a catch-up longer than", stalls: 2},
		{name: "frozen while waited for", members: 3, holds: 1, hold: 30 * time.Second, catchUpTimeout: time.Minute, freeze: true, stallWant: "(member frozen or unreachable)|could not be read (no member answers)", stalls: 1},
		{name: "stuck after sync", members: 1, holds: 1, hold: 30 * time.Second, catchUpTimeout: time.Minute, afterSync: true, stallWant: "(member frozen or unreachable)", stalls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testfix.Context(t, 90*time.Second)
			c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: tc.members})
			cli := c.Client(t)
			testenv.PutKeys(t, cli, "/before/", 10, 16)
			base := headRev(t, ctx, cli)
			for i := range 30 {
				if _, err := cli.Put(ctx, fmt.Sprintf("/behind/%d", i%7), strings.Repeat("v", 200+i)); err != nil {
					t.Fatal(err)
				}
			}
			last := headRev(t, ctx, cli)

			var armed atomic.Bool
			armed.Store(!tc.afterSync)
			var mu sync.Mutex
			heldWatches := map[context.Context]bool{}
			holding := make(chan time.Time, tc.holds)
			undo := journal.SlowSends(cli, func(wctx context.Context, evs []*mvccpb.Event) {
				events := len(evs)
				mu.Lock()
				hold := events > 0 && armed.Load() && len(heldWatches) < tc.holds && !heldWatches[wctx]
				if events > 0 {
					heldWatches[wctx] = true // only a watch's first message with events
				}
				mu.Unlock()
				if !hold {
					return
				}
				holding <- time.Now()
				select {
				case <-wctx.Done():
				case <-time.After(tc.hold):
				}
			})
			defer undo()
			st := memstore.New()
			layout := catalog.Layout{Prefix: testenv.Prefix(t)}
			o := captureOptions(t, cli, st, layout, zstdEnc, base)
			o.SegmentInterval, o.WatchStallTimeout, o.WatchCatchUpTimeout = 4*slowProbe, slowTimeout, tc.catchUpTimeout
			var stalls []journal.WatchStall
			stalled := make(chan time.Time, 10)
			o.OnStall = func(s journal.WatchStall) {
				mu.Lock()
				stalls = append(stalls, s)
				mu.Unlock()
				stalled <- time.Now()
			}
			stop := startCapture(ctx, o)
			if tc.afterSync {
				waitChain(t, ctx, st, layout, "c1", base, last, 20*time.Second)
				// Past a probe answered by a progress notification.
				time.Sleep(slowProbe + slowTimeout + slowSlack)
				mu.Lock()
				clear(heldWatches) // the watch's next message with events is held
				mu.Unlock()
				armed.Store(true)
				p, err := cli.Put(ctx, "/after-sync", "x")
				if err != nil {
					t.Fatal(err)
				}
				last = p.Header.Revision
			}
			var heldAt time.Time
			select {
			case heldAt = <-holding:
			case <-time.After(10 * time.Second):
				t.Fatal("the watch sent no events")
			}
			// A stall at the stall timeout: a probe after slowProbe
			// silent, its member check, a tick.
			stallBound := slowProbe + slowTimeout*3/2 + slowProbe + slowSlack
			switch {
			case tc.freeze:
				// Past the first probe: the capture waits for the catch-up.
				time.Sleep(slowProbe + 2*slowTimeout)
				victim := watchedMember(t, ctx, c)
				var others []string
				for _, mb := range c.Members {
					if mb != victim {
						others = append(others, mb.ClientURL)
					}
				}
				wcli, err := clientv3.New(clientv3.Config{Endpoints: others, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
				if err != nil {
					t.Fatal(err)
				}
				defer wcli.Close()
				frozenAt := time.Now()
				victim.Freeze()
				// The others take a write: the cluster moves on (when the
				// frozen member led, once they have elected another).
				wrote := make(chan struct{})
				go func() {
					defer close(wrote)
					for ctx.Err() == nil {
						pctx, cancel := context.WithTimeout(ctx, time.Second)
						_, err := wcli.Put(pctx, "/while-frozen", "x")
						cancel()
						if err == nil {
							return
						}
					}
				}()
				select {
				case at := <-stalled:
					// The probe under way may have found the member
					// answering: one more probe, then the stall.
					d := at.Sub(frozenAt)
					if bound := slowTimeout + stallBound; d > bound {
						t.Errorf("the stall came %s after the freeze, want within %s", d.Round(time.Millisecond), bound)
					}
					t.Logf("the stall came %s after the freeze", d.Round(time.Millisecond))
				case <-time.After(15 * time.Second):
					t.Fatal("no stall within 15 s of freezing the member")
				}
				victim.Thaw()
				<-wrote
				// A put of the loop that timed out may still land.
				last = settledHeadRev(t, ctx, wcli)
			case tc.stalls > 0:
				bound := stallBound
				if tc.catchUpTimeout < time.Minute {
					bound += tc.catchUpTimeout
				}
				for i := range tc.stalls {
					select {
					case at := <-stalled:
						d := at.Sub(heldAt)
						if d > bound {
							t.Errorf("stall %d came %s after the watch went silent, want within %s", i+1, d.Round(time.Millisecond), bound)
						}
						if tc.catchUpTimeout < time.Minute && d < tc.catchUpTimeout<<i {
							t.Errorf("stall %d came %s after the watch went silent, before its catch-up wait %s", i+1, d.Round(time.Millisecond), tc.catchUpTimeout<<i)
						}
						t.Logf("stall %d came %s after the watch went silent", i+1, d.Round(time.Millisecond))
					case <-time.After(bound + 10*time.Second):
						t.Fatalf("stall %d: none within %s", i+1, bound+10*time.Second)
					}
					if i+1 < tc.stalls {
						select {
						case heldAt = <-holding:
						case <-time.After(10 * time.Second):
							t.Fatal("the next watch sent no events")
						}
						bound += tc.catchUpTimeout << i // the next wait is twice as long
					}
				}
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
			if len(stalls) != tc.stalls {
				t.Fatalf("%d stalls, want %d: %v", len(stalls), tc.stalls, stalls)
			}
			for _, s := range stalls {
				if !slices.ContainsFunc(strings.Split(tc.stallWant, "|"), func(w string) bool { return strings.Contains(s.Reason, w) }) {
					t.Errorf("stall %q, want one saying %q", s.Reason, tc.stallWant)
				}
			}
			t.Logf("%d events, stalls: %v", len(got), stalls)
		})
	}
}
