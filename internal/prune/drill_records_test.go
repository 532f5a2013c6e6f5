package prune_test

import (
	"context"
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// PutDrill, LoadDrill and LoadDrills against a real MinIO: a record is
// refused without a manifest, read back as written, replaced by a later
// drill; a bad record is summarised with Err (no proof, no error); a
// store failure is returned, naming the backup.
func TestDrillRecords(t *testing.T) {
	t.Parallel()
	sr := testfix.NewStoreRig(t)
	st, l := sr.Store, sr.Layout
	ctx := context.Background()
	const id = "drec"
	runs := scheduledRuns(id, at("2100-01-15 03:00"), at("2100-01-15 20:00")) // 3 runs
	runs = append(runs, folder{cluster: id, at: at("2100-01-15 21:00"), kind: catalog.KindScheduled, incomplete: true})
	putAll(t, st, l, runs)
	name := func(i int) string { return runs[i].name() }

	// No manifest: refused, and nothing written.
	err := catalog.PutDrill(ctx, st, l, drillRecord(id, name(3), true, at("2100-01-15 22:00")))
	if !errors.Is(err, catalog.ErrNoManifest) {
		t.Fatalf("PutDrill without a manifest: %v, want ErrNoManifest", err)
	}
	if keys := testfix.Keys(t, st, l.BackupPrefix(id, name(3))); len(keys) != 1 {
		t.Errorf("the incomplete folder holds %q after a refused drill record", keys)
	}

	// Written, read back, replaced.
	putDrill(t, st, l, drillRecord(id, name(0), false, at("2100-01-15 04:00")))
	putDrill(t, st, l, drillRecord(id, name(0), true, at("2100-01-15 05:00")))
	r, err := catalog.LoadDrill(ctx, st, l, id, name(0))
	if err != nil || r == nil || !r.Passed || !r.FinishedAt.Equal(at("2100-01-15 05:00")) || r.Format != catalog.DrillFormat {
		t.Fatalf("LoadDrill: %+v, %v", r, err)
	}
	if r, err := catalog.LoadDrill(ctx, st, l, id, name(1)); r != nil || err != nil {
		t.Errorf("LoadDrill of a backup never drilled: %+v, %v", r, err)
	}
	putDrill(t, st, l, drillRecord(id, name(1), false, at("2100-01-15 12:00")))
	// A bad record, and one moved from another backup.
	putObject(t, st, l.Key(id, name(2), catalog.DrillObject), testfix.ReadObject(t, st, l.Key(id, name(0), catalog.DrillObject)))

	entries, err := catalog.Inventory(ctx, st, l, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := catalog.LoadDrills(ctx, st, l, entries, 2); err != nil {
		t.Fatalf("LoadDrills: %v", err)
	}
	got := map[string]*catalog.DrillSummary{}
	for _, e := range entries {
		got[e.Name] = e.Drill
	}
	if s := got[name(0)]; !s.Proven() || s.Mode != catalog.CompareSource {
		t.Errorf("%s: %+v, want proven", name(0), s)
	}
	if s := got[name(1)]; s == nil || s.Proven() || s.Passed || !strings.HasPrefix(s.Failed, "hashkv") || s.Err != "" {
		t.Errorf("%s: %+v, want a failed drill", name(1), s)
	}
	if s := got[name(2)]; s == nil || s.Proven() || !strings.Contains(s.Err, "refusing a record that was moved") {
		t.Errorf("%s: %+v, want an unreadable (moved) record", name(2), s)
	}
	if s := got[name(3)]; s != nil {
		t.Errorf("the incomplete folder has a drill: %+v", s)
	}

	// A store failure reading one record: returned, naming the backup;
	// the others are still loaded; the failed one proves nothing.
	entries, _ = catalog.Inventory(ctx, st, l, id)
	fs := &faultyStore{Store: st, failGet: func(k string) error {
		if path.Base(k) == catalog.DrillObject && strings.Contains(k, name(0)) {
			return errors.New("cos: get: connection reset by peer")
		}
		return nil
	}}
	err = catalog.LoadDrills(ctx, fs, l, entries, 2)
	if err == nil || !strings.Contains(err.Error(), id+"/"+name(0)) || !strings.Contains(err.Error(), "connection reset by peer") {
		t.Fatalf("LoadDrills with a failing store: %v", err)
	}
	for _, e := range entries {
		switch e.Name {
		case name(0):
			if e.Drill.Proven() || e.Drill == nil || e.Drill.Err == "" {
				t.Errorf("the record the store failed to return: %+v", e.Drill)
			}
		case name(1):
			if e.Drill == nil || e.Drill.Failed == "" {
				t.Errorf("the other records were not loaded: %+v", e.Drill)
			}
		}
	}
}
