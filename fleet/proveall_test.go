package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// snapshotFails is a store whose reads of one cluster's snapshot objects
// fail (a store outage for that cluster only).
type snapshotFails struct {
	store.Store
	cluster string
}

func (s snapshotFails) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if strings.Contains(key, "/"+s.cluster+"/") && strings.Contains(key, "/snapshot.db") {
		return nil, fmt.Errorf("get %s: %w", key, errors.New("injected: connection reset by peer"))
	}
	return s.Store.Get(ctx, key)
}

// ProveAll on real etcd 3.5 and MinIO: three cluster ids with a journal
// between two full backups each (one etcd), found by one listing of the
// prefix, two at a time. One cluster's backups cannot be read (the store
// fails its snapshots): its proof is inconclusive, nothing recorded, and
// the other two are proven and recorded passed all the same. The error
// names it (and only it) as inconclusive; the table and the JSON report
// say the same. A cluster with only backups (no journal) is not listed.
func TestProveAllOneClusterFailsOthersProven(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 3*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/registry/a/", 20, 32)
	rig := testfix.NewStoreRig(t)
	st, layout := rig.Store, rig.Layout
	ids := []string{"pa", "pb", "pc"}
	full := func(id string) {
		t.Helper()
		if _, err := backup.Run(ctx, backup.Options{ClusterID: id, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(c), Store: st, Layout: layout, V2: backup.V2Off}); err != nil {
			t.Fatalf("backup of %s: %v", id, err)
		}
	}
	for _, id := range ids {
		full(id)
	}
	full("no-journal")
	jctx, stop := context.WithCancel(ctx)
	done := make(chan error, len(ids))
	for _, id := range ids {
		go func() {
			done <- fleet.JournalAll(jctx, fleet.JournalAllOptions{ClusterID: id, Etcd: testfix.EtcdConfig(c), Store: st, Layout: layout,
				Capture: journal.CaptureOptions{SegmentInterval: 200 * time.Millisecond}, Backup: backup.Options{V2: backup.V2Off}})
		}()
	}
	testenv.PutKeys(t, cli, "/registry/w/", 30, 32)
	r, err := cli.Delete(ctx, "/registry/a/key000003")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		full(id)
	}
	for _, id := range ids {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			segs, err := journal.ListSegments(ctx, st, layout, id, 0)
			if err != nil {
				t.Fatal(err)
			}
			var reach int64
			for _, sg := range segs.All {
				reach = max(reach, sg.LastRev)
			}
			if reach >= r.Header.Revision {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the journal of %s does not reach %d", id, r.Header.Revision)
			}
		}
	}
	stop()
	for range ids {
		if err := <-done; err != nil {
			t.Fatalf("journal: %v", err)
		}
	}

	rep, err := fleet.ProveAll(ctx, fleet.ProveAllOptions{Parallel: 2,
		Template: drill.ProveOptions{Store: snapshotFails{Store: st, cluster: "pb"}, Layout: layout, ScratchDir: t.TempDir(), Timeout: time.Minute}})
	var pe *fleet.ProveAllError
	if !errors.As(err, &pe) || !slices.Equal(pe.Inconclusive, []string{"pb"}) || len(pe.Failed) != 0 ||
		!strings.Contains(err.Error(), "inconclusive for pb") || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("ProveAll: %v (%#v), want pb inconclusive, naming the cause", err, pe)
	}
	if rep == nil || len(rep.Clusters) != 3 {
		t.Fatalf("report: %+v, want the three clusters with a journal", rep)
	}
	for i, id := range ids {
		cr := rep.Clusters[i]
		if cr.Cluster != id {
			t.Fatalf("row %d: %s, want %s (cluster order)", i, cr.Cluster, id)
		}
		proofs, err := catalog.ListJournalProofs(ctx, st, layout, id)
		if err != nil {
			t.Fatal(err)
		}
		if id == "pb" {
			if cr.Result != fleet.ProveInconclusive || len(cr.Inconclusive) != 1 || len(cr.Proofs) != 0 || len(proofs) != 0 ||
				!strings.Contains(cr.Inconclusive[0].Reason, "cluster pb") {
				t.Errorf("pb: %+v, recorded %d: want inconclusive, nothing recorded", cr, len(proofs))
			}
			continue
		}
		if cr.Result != fleet.ProvePassed || len(cr.Proofs) != 1 || cr.Proofs[0].Verdict != catalog.ProofPassed || len(proofs) != 1 {
			t.Errorf("%s: %+v, recorded %d: want one passed proof, recorded", id, cr, len(proofs))
		}
	}
	var b strings.Builder
	if err := output.Render(&b, output.FormatTable, rep.Table(), rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Inconclusive") || !strings.Contains(b.String(), "3 clusters with a journal") {
		t.Errorf("table:\n%s", b.String())
	}
	j, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Clusters []struct {
			Cluster, Result string
		}
		Inconclusive []string
	}
	if err := json.Unmarshal(j, &back); err != nil || len(back.Clusters) != 3 || !slices.Equal(back.Inconclusive, []string{"pb"}) {
		t.Errorf("JSON report %s: %v", j, err)
	}
}
