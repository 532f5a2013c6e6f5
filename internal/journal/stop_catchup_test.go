package journal_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// burst writes n values of size bytes from 8 writers at once and returns
// the revision of the last acknowledged write: the watch is still
// delivering them when it returns.
func burst(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string, n, size int) int64 {
	t.Helper()
	var (
		mu   sync.Mutex
		last int64
		wg   sync.WaitGroup
		errs = make(chan error, 8)
	)
	val := strings.Repeat("v", size)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				r, err := cli.Put(ctx, fmt.Sprintf("%s%05d", prefix, i), val)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				last = max(last, r.Header.Revision)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return last
}

// TestCaptureStopCatchesUp: a graceful stop (ctx ends, as on SIGTERM)
// right after a burst of writes still journals every write etcd
// acknowledged before it: the watch is consumed up to the cluster's
// revision before the final flush (CaptureOptions.StopCatchUp). Each of 8
// rounds stops within a millisecond of the last acknowledgement, with 8 MiB
// of events in flight; the segment interval (1 min) writes nothing before.
// With a member that no longer answers, the stop still ends within the
// catch-up bound and the final flush.
func TestCaptureStopCatchesUp(t *testing.T) {
	t.Parallel()
	eachVersion(t, func(t *testing.T, v testenv.Version) {
		ctx := testfix.Context(t, 3*time.Minute)
		c, cli := startEtcd(t, v)
		st := memstore.New()
		for round := range 8 {
			base := headRev(t, ctx, cli)
			layout := catalog.Layout{Prefix: fmt.Sprintf("round%d", round)}
			var logs testfix.SyncBuffer
			o := captureOptions(t, cli, st, layout, zstdEnc, base)
			o.SegmentInterval, o.Log = time.Minute, slog.New(slog.NewTextHandler(&logs, nil))
			stop := startCapture(ctx, o)
			last := burst(t, ctx, cli, fmt.Sprintf("/burst/%d/", round), 512, 16<<10)
			if err := stop(); err != nil {
				t.Fatalf("round %d: stop: %v", round, err)
			}
			chain, err := journal.ListSegments(ctx, st, layout, "c1", base)
			if err != nil || chain.Problem != nil {
				t.Fatalf("round %d: %+v %v", round, chain, err)
			}
			if chain.Reach != last {
				t.Fatalf("round %d: the journal reaches revision %d after the stop; the last write acknowledged before it is %d\n%s", round, chain.Reach, last, logs.String())
			}
			if !bytes.Contains([]byte(logs.String()), []byte("caught up before stopping")) {
				t.Errorf("round %d: no catch-up logged:\n%s", round, logs.String())
			}
		}

		// No member answers: the stop is bounded.
		var logs testfix.SyncBuffer
		o := captureOptions(t, cli, st, catalog.Layout{Prefix: "dead"}, zstdEnc, headRev(t, ctx, cli))
		o.SegmentInterval, o.StopCatchUp, o.FinalFlush, o.Log = time.Minute, 2*time.Second, 5*time.Second, slog.New(slog.NewTextHandler(&logs, nil))
		stop := startCapture(ctx, o)
		burst(t, ctx, cli, "/dead/", 64, 1<<10)
		for _, m := range c.Members {
			m.Kill()
		}
		start := time.Now()
		err := stop()
		took := time.Since(start)
		t.Logf("stop with no member answering: %v in %v", err, took.Round(time.Millisecond))
		if took > o.StopCatchUp+o.FinalFlush+5*time.Second {
			t.Errorf("the stop took %v with no member answering; the bound is StopCatchUp %v + FinalFlush %v", took, o.StopCatchUp, o.FinalFlush)
		}
		if !strings.Contains(logs.String(), "stopping without catching up") && !strings.Contains(logs.String(), "stopping before catching up") &&
			!strings.Contains(logs.String(), "caught up before stopping") {
			t.Errorf("the stop logged nothing of the catch-up:\n%s", logs.String())
		}
	})
}
