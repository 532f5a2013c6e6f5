package testfix

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
)

// StartJournal runs the journal of cluster id in-process (journal.Capture
// from base, zstd segments sealed every interval) until the returned stop
// is called or the test ends; stop waits for it and fails the test if it
// ended with an error other than its cancellation.
func StartJournal(tb testing.TB, cli *clientv3.Client, st store.Store, layout catalog.Layout, id string, base *catalog.Manifest,
	interval time.Duration, log *slog.Logger) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- journal.Capture(ctx, journal.CaptureOptions{Client: cli, ClusterID: id, BaseBackup: base.Name, BaseRev: base.Revision(),
			Store: st, Layout: layout, Encoding: objectio.Encoding{Compression: objectio.CompressZstd},
			SegmentInterval: interval, Log: log})
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		select {
		case err := <-done:
			// It ended by itself, before stop: whatever it returned.
			cancel()
			if err != nil {
				tb.Errorf("journal of %s ended before it was stopped: %v", id, err)
			} else {
				tb.Errorf("journal of %s ended before it was stopped", id)
			}
			return
		default:
		}
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			tb.Errorf("journal of %s: %v", id, err)
		}
	}
	tb.Cleanup(stop)
	return stop
}

// JournalReach is the last revision of the stored segments of id.
func JournalReach(tb testing.TB, ctx context.Context, st store.Store, layout catalog.Layout, id string) int64 {
	tb.Helper()
	segs, err := journal.ListSegments(ctx, st, layout, id, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var last int64
	for _, s := range segs.All {
		last = max(last, s.LastRev)
	}
	return last
}

// WaitJournalReach waits (up to within) until the journal of id holds rev.
func WaitJournalReach(tb testing.TB, ctx context.Context, st store.Store, layout catalog.Layout, id string, rev int64, within time.Duration) {
	tb.Helper()
	for deadline := time.Now().Add(within); JournalReach(tb, ctx, st, layout, id) < rev; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("the journal of %s does not reach revision %d within %v", id, rev, within)
		}
	}
}

// AppendWatched appends watched events to out as the journal records them,
// independently of Capture: Sub is the event's index within its revision
// (the order of a txn's changes), counted on from out's last event; a
// delete holds only its key.
func AppendWatched(out []journal.Event, evs []*clientv3.Event) []journal.Event {
	for _, ev := range evs {
		kv := ev.Kv
		var sub int64
		if n := len(out); n > 0 && out[n-1].Rev == kv.ModRevision {
			sub = out[n-1].Sub + 1
		}
		e := journal.Event{Rev: kv.ModRevision, Sub: sub, Type: journal.Put, Key: kv.Key, Value: kv.Value, CreateRev: kv.CreateRevision, Version: kv.Version, Lease: kv.Lease}
		if ev.Type == clientv3.EventTypeDelete {
			e = journal.Event{Rev: kv.ModRevision, Sub: sub, Type: journal.Delete, Key: kv.Key}
		}
		out = append(out, e)
	}
	return out
}
