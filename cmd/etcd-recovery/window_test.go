package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// On a real etcd 3.5 with the journal running: list shows the restorable
// window from the backup's revision to the newest journaled revision, with
// its lag and no gap, in the table and in -o json (the same window on
// every row); inspect shows the journal lag within its bound, and past a
// tiny bound flags it with the runbook.
func TestListWindowAndInspectLagCLI(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 2*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/registry/a/", 20, 16)
	cr := newCLIRig(t)
	m, bucket, prefix, cos := cr.MinIO, cr.Bucket, cr.Layout.Prefix, cr.cos
	const id = "window"

	// Without a journal: the backups-only window.
	backupCLI(t, ctx, c, cos, id)
	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"list", "--cluster-id", id}, cos)...)
	if code != 0 || !strings.Contains(out, "WINDOW: from revision") || !strings.Contains(out, "gaps none; no journal") {
		t.Fatalf("list without a journal: exit %d\n%s\n%s", code, out, errOut)
	}

	stopJournal := journalRun(t, ctx, concatArgs([]string{"--cluster-id", id, "--segment-interval", "1s"}, clusterArgs(c), cos)...)
	for i := range 3 {
		testenv.PutKeys(t, cli, fmt.Sprintf("/registry/w%d-", i), 5, 16)
		time.Sleep(600 * time.Millisecond)
	}
	r, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	top := r.Header.Revision
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}
	testfix.WaitJournalReach(t, ctx, st, layout, id, top, 30*time.Second)
	if code, jerr := stopJournal(); code != 0 {
		t.Fatalf("journal: exit %d: %s", code, jerr)
	}
	listed, err := catalog.ListBackups(ctx, st, layout, id)
	if err != nil || len(listed) != 1 {
		t.Fatalf("backups: %v %v", listed, err)
	}
	base := listed[0].Manifest.Revision()

	code, out, errOut = runCtx(t, ctx, concatArgs([]string{"list", "--cluster-id", id, "-o", "json"}, cos)...)
	if code != 0 {
		t.Fatalf("list -o json: exit %d\n%s\n%s", code, out, errOut)
	}
	var rows []struct {
		Name   string          `json:"name"`
		Window *journal.Window `json:"window"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0].Window == nil {
		t.Fatalf("list -o json: %v\n%s", err, out)
	}
	w := rows[0].Window
	if w.FromRev != base || w.ToRev < top || !w.Journal || len(w.Holes) != 0 || len(w.Spans) != 1 || w.LastReceivedFrom != "header" {
		t.Fatalf("window %+v, want %d to at least %d from the header, one span, no hole", w, base, top)
	}
	if lag := time.Since(w.LastReceived); lag < 0 || lag > time.Minute || w.ToTime.Before(w.FromTime) {
		t.Fatalf("window to %s (lag %v), from %s", w.ToTime, lag, w.FromTime)
	}

	code, out, errOut = runCtx(t, ctx, concatArgs([]string{"list", "--cluster-id", id, "-o", "wide"}, cos)...)
	if code != 0 {
		t.Fatalf("list -o wide: exit %d\n%s\n%s", code, out, errOut)
	}
	if want := fmt.Sprintf("WINDOW: from revision %d (%s) to revision %d (%s), lag ", base, w.FromTime.UTC().Format("2006-01-02 15:04:05"),
		w.ToRev, w.ToTime.UTC().Format("2006-01-02 15:04:05")); !strings.Contains(out, want) ||
		!strings.Contains(out, fmt.Sprintf("gaps none; journal: %d segments through revision %d", w.Segments, w.LastRev)) {
		t.Errorf("list -o wide lacks %q and the gaps and journal:\n%s", want, out)
	}

	// inspect: the lag within the default bound, then past a 1 ms one.
	code, out, errOut = runCtx(t, ctx, concatArgs([]string{"inspect", "--cluster-id", id, "-o", "json"}, clusterArgs(c), cos)...)
	if code != 0 {
		t.Fatalf("inspect: exit %d\n%s\n%s", code, out, errOut)
	}
	var rep inspect.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Backup == nil || rep.Backup.Journal == nil {
		t.Fatalf("inspect -o json: %v\n%s", err, out)
	}
	if j := rep.Backup.Journal; j.State != inspect.JournalOK || j.LastRev != w.LastRev || j.LagSeconds < 0 || j.LagSeconds > 60 {
		t.Fatalf("journal status %+v, want ok at revision %d", j, w.LastRev)
	}
	code, out, errOut = runCtx(t, ctx, concatArgs([]string{"inspect", "--cluster-id", id, "--journal-lag-bound", "1ms"}, clusterArgs(c), cos)...)
	if code != 0 || !strings.Contains(out, "JOURNAL LAG: ") || !strings.Contains(out, "LAGGING (bound 1ms)") ||
		!strings.Contains(out, "journal lagging") || !strings.Contains(out, inspect.RunbookJournalLagging) {
		t.Fatalf("inspect --journal-lag-bound 1ms: exit %d\n%s\n%s", code, out, errOut)
	}
}
