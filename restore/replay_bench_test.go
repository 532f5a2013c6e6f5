package restore_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// BenchmarkReplay measures the replay of a point-in-time restore against
// the peers' approach (gardener's etcd-backup-restore replays its deltas
// through an etcd client): BENCH_REPLAY_EVENTS (default 100,000) events,
// one revision each (256-byte values, a tenth of them overwrites, a
// twentieth deletes), applied
//
//   - file:   straight into a snapshot's bbolt file
//     (etcdinternals.ApplyEvents, what restore.Replay does);
//   - client: the same events, in revision order (one request per
//     revision, as exact replay needs), through a clientv3 client into a
//     running one-member etcd 3.5 started from nothing but the same
//     snapshot's keyspace (empty here).
//
// It reports both times and the ratio client/file; the goal is at
// least 10x.
func BenchmarkReplay(b *testing.B) {
	n := testfix.BenchInt("BENCH_REPLAY_EVENTS", 100_000)
	c := testenv.StartEtcd(b, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(b)
	ctx := context.Background()
	put, err := cli.Put(ctx, "/bench/base", "x")
	if err != nil {
		b.Fatal(err)
	}
	snap := filepath.Join(b.TempDir(), "snap.db")
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(snap)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		b.Fatal(err)
	}
	rc.Close()
	f.Close()
	base := put.Header.Revision
	evs := benchEvents(base, n)

	for range b.N {
		path := filepath.Join(b.TempDir(), "db")
		raw, err := os.ReadFile(snap)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			b.Fatal(err)
		}
		t := time.Now()
		a, err := etcdinternals.ApplyEvents(path, func(yield func(journal.Event, error) bool) {
			for _, ev := range evs {
				if !yield(ev, nil) {
					return
				}
			}
		}, nil)
		if err != nil {
			b.Fatal(err)
		}
		file := time.Since(t)
		if a.Events != int64(n) {
			b.Fatalf("applied %d events of %d", a.Events, n)
		}

		t = time.Now()
		for _, ev := range evs {
			var err error
			if ev.Type == journal.Delete {
				_, err = cli.Delete(ctx, string(ev.Key))
			} else {
				_, err = cli.Put(ctx, string(ev.Key), string(ev.Value))
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		client := time.Since(t)
		b.ReportMetric(file.Seconds(), "file-s")
		b.ReportMetric(client.Seconds(), "client-s")
		b.ReportMetric(client.Seconds()/file.Seconds(), "client/file")
		fmt.Printf("BenchmarkReplay: %d events: file %v (%.0f events/s), client %v (%.0f events/s): %.1fx\n",
			n, file.Round(time.Millisecond), float64(n)/file.Seconds(), client.Round(time.Millisecond),
			float64(n)/client.Seconds(), client.Seconds()/file.Seconds())
	}
}

// benchEvents are n events after revision base, one revision each.
func benchEvents(base int64, n int) []journal.Event {
	type state struct{ create, version int64 }
	keys := map[string]*state{}
	val := make([]byte, 256)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	evs := make([]journal.Event, 0, n)
	for i := 0; len(evs) < n; i++ {
		rev := base + int64(len(evs)) + 1
		k := fmt.Sprintf("/bench/%08d", i)
		switch {
		case i%20 == 19:
			k = fmt.Sprintf("/bench/%08d", i-5)
			if keys[k] == nil {
				continue
			}
			delete(keys, k)
			evs = append(evs, journal.Event{Rev: rev, Type: journal.Delete, Key: []byte(k)})
			continue
		case i%10 == 9:
			k = fmt.Sprintf("/bench/%08d", i-3)
		}
		s := keys[k]
		if s == nil {
			s = &state{create: rev}
			keys[k] = s
		}
		s.version++
		evs = append(evs, journal.Event{Rev: rev, Type: journal.Put, Key: []byte(k), Value: val, CreateRev: s.create, Version: s.version})
	}
	return evs
}
