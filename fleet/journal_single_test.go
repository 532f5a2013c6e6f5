package fleet_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// JournalAll for one cluster (its endpoints), on real etcd 3.5 and MinIO:
// a cluster without a backup is a gap (no base), recorded once; its full
// backup fails while the member is down and is retried with backoff (the
// record stays, no second one); once the member is back the backup is
// committed and the journal runs from it. Cancelling stops it: nil, after
// writing what it held.
func TestJournalOneClusterGapBackupRetried(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 90*time.Second)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/k", 20, 64)
	rig := testfix.NewStoreRig(t)
	st, layout := rig.Store, rig.Layout
	const id = "one"
	member := c.Members[0]
	member.Stop()

	logs := &testfix.SyncBuffer{}
	jctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		err := fleet.JournalAll(jctx, fleet.JournalAllOptions{
			ClusterID: id, Etcd: testfix.EtcdConfig(c), Store: st, Layout: layout, MaxBackoff: 2 * time.Second,
			Capture: journal.CaptureOptions{SegmentInterval: 300 * time.Millisecond},
			Backup:  backup.Options{V2: backup.V2Off, ProbeTimeout: time.Second},
			Log:     slog.New(slog.NewTextHandler(logs, nil)),
		})
		fmt.Fprintf(logs, "JournalAll returned: %v\n", err)
		done <- err
	}()
	defer func() {
		stop()
		<-done
	}()

	// The gap is recorded and the backup fails, at least twice.
	for deadline := time.Now().Add(30 * time.Second); strings.Count(logs.String(), "full backup after a gap failed; retrying") < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no failed backup retried; log:\n%s", testfix.LastLines(logs.String(), 20))
		}
	}
	gaps, err := catalog.ReadJournalGaps(ctx, st, layout, id)
	if err != nil || len(gaps) != 1 || gaps[0].From != 1 || gaps[0].Reason != fleet.ErrNoJournalBase.Error() || gaps[0].OldBase != nil {
		t.Fatalf("gap records while the backup fails: %+v %v", gaps, err)
	}
	if !strings.Contains(logs.String(), `step="full backup after a gap"`) {
		t.Fatalf("the retry does not name its step:\n%s", testfix.LastLines(logs.String(), 20))
	}

	// The member is back: the backup, then the journal.
	member.Start(t)
	c.WaitHealthy(t)
	r, err := c.Client(t).Put(ctx, "/registry/after", "x")
	if err != nil {
		t.Fatal(err)
	}
	waitReach(t, ctx, st, layout, id, r.Header.Revision, logs)
	gaps, err = catalog.ReadJournalGaps(ctx, st, layout, id)
	if err != nil || len(gaps) != 1 {
		t.Fatalf("gap records after the backup: %+v %v", gaps, err)
	}
	bs, err := catalog.ListBackups(ctx, st, layout, id)
	if err != nil || len(bs) != 1 || bs[0].Manifest == nil || bs[0].Manifest.Kind != catalog.KindScheduled {
		t.Fatalf("backups: %+v %v", bs, err)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatalf("JournalAll: %v", err)
	}
	done <- nil // for the deferred stop
	if !strings.Contains(logs.String(), `msg="journal: stopped" cluster=one`) {
		t.Fatalf("no stop logged:\n%s", testfix.LastLines(logs.String(), 10))
	}
}
