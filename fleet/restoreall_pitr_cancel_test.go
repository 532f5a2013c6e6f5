package fleet_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// TestRestoreAllToTimePlanCancel: a cancel (SIGTERM) while restore-all
// --to-time plans returns at once with the context's error (the CLI's exit
// 130), in both of the plan's point-in-time steps: the check that each
// cluster's journal reaches T, and restore's selection of the base backup
// at T. The store blocks the step's reads until their context ends, as a
// store that does not answer does; the point is the cancel, so the rest
// is real (kube-apiserver, MinIO, etcd, a backup and a journal segment
// reaching past T).
func TestRestoreAllToTimePlanCancel(t *testing.T) {
	t.Parallel()
	const ns = "kubx-etcd-76"
	s := newSmallWorld(t, ns)
	ctx := testfix.Context(t, 3*time.Minute)
	layout := catalog.Layout{Prefix: ns + "/"}
	fc := s.backedUp(t, ctx, "etcd-pc0", "127.0.19.60", 20, layout)
	base := testfix.NewestSince(t, ctx, s.st, layout, fc.Name, catalog.KindScheduled, time.Time{})
	// A journal segment from the backup that reaches past T: the
	// journal check passes and the plan goes on to the selection.
	toTime := time.Now().Add(-time.Minute)
	h := journal.Header{Format: journal.FormatVersion, ClusterID: fc.Name, BaseBackup: base.Name, BaseRev: base.Revision(),
		FirstRev: base.Revision() + 1, LastRev: base.Revision() + 2,
		Received: map[int64]int64{base.Revision() + 1: toTime.Add(-time.Second).UnixMilli(), base.Revision() + 2: toTime.Add(time.Second).UnixMilli()}}
	evs := []journal.Event{{Rev: base.Revision() + 1, Type: journal.Put, Key: []byte("/registry/j1"), Value: []byte("v"), CreateRev: base.Revision() + 1, Version: 1},
		{Rev: base.Revision() + 2, Type: journal.Delete, Key: []byte("/registry/j1")}}
	if _, err := journal.WriteSegment(ctx, s.st, layout, objectio.Encoding{Compression: objectio.CompressZstd}, h, evs); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		step  string
		fault faults.Fault // a Hook: it blocks until its context ends
	}{
		{"journal reach", faults.Fault{Op: faults.OpList, KeyContains: "/_journal/"}},
		{"base backup selection", faults.Fault{Op: faults.OpGet, KeySuffix: "/" + catalog.ManifestObject}},
	} {
		t.Run(tc.step, func(t *testing.T) {
			fs := faults.Wrap(s.st)
			reached := make(chan string, 1)
			var once sync.Once
			tc.fault.Kind = faults.Hook
			tc.fault.Func = func(hctx context.Context, key string) {
				once.Do(func() { reached <- key })
				<-hctx.Done()
			}
			fs.Inject(tc.fault)
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			type result struct {
				rep *fleet.RestoreAllReport
				err error
			}
			done := make(chan result, 1)
			go func() {
				rep, err := fleet.RestoreAll(rctx, fleet.RestoreAllOptions{
					Namespaces: []fleet.RestoreAllNamespace{{Kube: s.sa, Store: fs, Layout: layout}},
					ToTime:     toTime, DryRun: true, Parallel: 1, HealthTimeout: 2 * time.Second, ClusterTimeout: time.Minute,
					Template: kube.OperatorRestoreOptions{Bucket: s.bucket, Endpoint: s.m.Endpoint, ForcePathStyle: true, TempDir: t.TempDir()},
				})
				done <- result{rep, err}
			}()
			select {
			case key := <-reached:
				t.Logf("the plan blocked on %s", key)
			case r := <-done:
				t.Fatalf("restore-all returned before the plan reached the %s: %+v, %v", tc.step, r.rep, r.err)
			case <-time.After(time.Minute):
				t.Fatalf("the plan never reached the %s", tc.step)
			}
			cancelled := time.Now()
			cancel()
			var r result
			select {
			case r = <-done:
			case <-time.After(20 * time.Second):
				t.Errorf("restore-all still planning 20 s after the cancel (the %s runs on another context)", tc.step)
				r = <-done
			}
			elapsed := time.Since(cancelled)
			if !errors.Is(r.err, context.Canceled) {
				t.Errorf("restore-all cancelled during the %s: %v, want context.Canceled", tc.step, r.err)
			}
			if elapsed > 3*time.Second {
				t.Errorf("restore-all returned %v after the cancel during the %s, want promptly", elapsed, tc.step)
			}
			t.Logf("returned %v after the cancel: %v", elapsed.Round(time.Millisecond), r.err)
		})
	}
}
