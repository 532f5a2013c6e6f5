package journal

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
)

// ListResult is `list` with the journal: catalog.List's backups, and the
// cluster's restorable window (LoadWindow) from its committed backups
// that check out and its stored segments.
type ListResult struct {
	*catalog.ListResult
	Window Window
	// WindowErr: the newest segment's header could not be read (the
	// window's end time is then the segment's stored time): a note under
	// the window, not a failure. (A journal that cannot be listed fails
	// catalog.List, step ListStepJournal.)
	WindowErr error
	now       time.Time
}

// WindowRow is a row of list -o json: the backup's row and the
// cluster's window (the same on every row, as the orphan marker).
type WindowRow struct {
	catalog.ListRow
	Window *Window `json:"window,omitempty"`
}

// List is `list`: catalog.List (which lists the journal too: journal
// retention keeps the backups it starts from), then the restorable
// window of the cluster from that listing and one read of its newest
// segment's header, decrypted with opts.Identities when set.
func List(ctx context.Context, opts catalog.ListOptions) (*ListResult, error) {
	res, err := catalog.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	out := &ListResult{ListResult: res, now: now}
	var bs []WindowBackup
	for _, r := range res.Rows {
		if r.Status == "committed" && r.Damaged == "" && !r.Deleted && !r.Overwritten && r.Revision > 0 {
			bs = append(bs, WindowBackup{Name: r.Name, Rev: r.Revision, Time: r.Time})
		}
	}
	out.Window, out.WindowErr = WindowOf(ctx, opts.Store, opts.Layout, opts.ClusterID, bs, SegmentsOf(opts.Layout, opts.ClusterID, res.Journal), opts.Identities)
	return out, nil
}

// Rows are the JSON rows: each backup's row with the window.
func (r *ListResult) Rows() []WindowRow {
	out := make([]WindowRow, len(r.ListResult.Rows))
	for i, row := range r.ListResult.Rows {
		out[i] = WindowRow{ListRow: row, Window: &r.Window}
	}
	return out
}

// Tables are catalog's tables, then the WINDOW table.
func (r *ListResult) Tables() []output.Table {
	return append(r.ListResult.Tables(), r.WindowTable())
}

// WindowTable is the cluster's restorable window: one row (FROM REV,
// FROM TIME, TO REV, TO TIME, LAG, GAPS, JOURNAL), its spans below.
func (r *ListResult) WindowTable() output.Table {
	t := output.Table{Title: "WINDOW (the revisions a restore reaches exactly)\n",
		Header: []string{"FROM REV", "FROM TIME", "TO REV", "TO TIME", "LAG", "GAPS", "JOURNAL"}}
	w := r.Window
	t.Rows = append(t.Rows, WindowCells(w, r.now))
	if w.Journal && len(w.Spans) > 1 {
		for _, s := range w.Spans {
			t.Notes = append(t.Notes, fmt.Sprintf("restorable: revisions %d (%s, backup %s) to %d (%s)", s.FromRev, fmtWhen(s.FromTime), s.Base, s.ToRev, fmtWhen(s.ToTime)))
		}
	}
	if !w.Journal && len(w.Spans) > 0 {
		t.Notes = append(t.Notes, "no journal: only each backup's own revision is restorable")
	}
	if w.LastReceivedFrom == "stored" {
		t.Notes = append(t.Notes, "TO TIME and LAG are the newest segment's stored time (its header was not read), later than its receive time by the upload")
	}
	if r.WindowErr != nil {
		t.Notes = append(t.Notes, r.WindowErr.Error())
	}
	return t
}

// WindowCells are the WINDOW table's cells of w at now.
func WindowCells(w Window, now time.Time) []string {
	if len(w.Spans) == 0 {
		journal := "no journal"
		if w.Journal {
			journal = fmt.Sprintf("%d segments, none continues a backup", w.Segments)
		}
		return []string{"-", "-", "-", "-", "-", "-", journal}
	}
	lag, journal := "-", "no journal"
	if d, ok := w.Lag(now); ok {
		lag = d.Round(time.Second).String()
	}
	if w.Journal {
		journal = fmt.Sprintf("%d segments through revision %d", w.Segments, w.LastRev)
	}
	gaps := "none"
	switch {
	case !w.Journal && len(w.Holes) > 0:
		gaps = "between backups"
	case len(w.Holes) > 0:
		var hs []string
		for _, h := range w.Holes {
			hs = append(hs, fmt.Sprintf("%d-%d", h.After+1, h.Before-1))
		}
		gaps = strings.Join(hs, ", ")
	}
	return []string{fmt.Sprint(w.FromRev), fmtWhen(w.FromTime), fmt.Sprint(w.ToRev), fmtWhen(w.ToTime), lag, gaps, journal}
}

func fmtWhen(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}
