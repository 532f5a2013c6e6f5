package journal

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
)

// ListResult is `list` with the journal: prune.List's backups, and the
// cluster's restorable window (LoadWindow) from its committed backups
// that check out and its stored segments.
type ListResult struct {
	*prune.ListResult
	Window Window
	// WindowErr: the newest segment's header could not be read (the
	// window's end time is then the segment's stored time): a note under
	// the window, not a failure. (A journal that cannot be listed fails
	// prune.List, step ListStepJournal.)
	WindowErr error
	// Gaps are the journal's newest gap records (ReadGapRecords), shown
	// next to the window's holes; GapsTotal how many there are.
	Gaps      []GapRecord
	GapsTotal int
	now       time.Time
}

// WindowRow is a row of list -o json: the backup's row and the
// cluster's window (the same on every row, as the orphan marker).
type WindowRow struct {
	prune.ListRow
	Window *Window `json:"window,omitempty"`
	// Gaps are the journal's newest gap records (the same on every row).
	Gaps []GapRecord `json:"journalGaps,omitempty"`
}

// List is `list`: prune.List (which lists the journal too: journal
// retention keeps the backups it starts from), then the restorable
// window of the cluster from that listing and one read of its newest
// segment's header, decrypted with opts.Identities when set.
func List(ctx context.Context, opts prune.ListOptions) (*ListResult, error) {
	res, err := prune.List(ctx, opts)
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
	out.Gaps, out.GapsTotal = ReadGapRecords(ctx, opts.Store, opts.Layout, opts.ClusterID, res.Journal)
	return out, nil
}

// Rows are the JSON rows: each backup's row with the window.
func (r *ListResult) Rows() []WindowRow {
	out := make([]WindowRow, len(r.ListResult.Rows))
	for i, row := range r.ListResult.Rows {
		out[i] = WindowRow{ListRow: row, Window: &r.Window, Gaps: r.Gaps}
	}
	return out
}

// Tables are catalog's tables, the restorable window in lines under the
// backups' table (WindowNotes, as Lines: whole with -o wide): its rows
// stay the backups'.
func (r *ListResult) Tables() []output.Table {
	ts := r.ListResult.Tables()
	ts[0].Lines = append(ts[0].Lines, r.WindowNotes()...)
	return ts
}

// WindowNotes are the cluster's restorable window: a WINDOW line (from
// and to revision and time, lag, gaps, journal), the spans when there are
// several, and why a time is approximate.
func (r *ListResult) WindowNotes() []string {
	w := r.Window
	out := []string{"WINDOW: " + WindowLine(w, r.now)}
	if len(w.Spans) > 1 && w.Journal {
		for _, s := range w.Spans {
			out = append(out, fmt.Sprintf("WINDOW span: revisions %d (%s, backup %s) to %d (%s)", s.FromRev, fmtWhen(s.FromTime), s.Base, s.ToRev, fmtWhen(s.ToTime)))
		}
	}
	if n := r.GapsTotal - len(r.Gaps); n > 0 {
		out = append(out, fmt.Sprintf("WINDOW gap: %d older gap record(s) not shown", n))
	}
	for _, g := range r.Gaps {
		out = append(out, gapLine(g))
	}
	if w.LastReceivedFrom == "stored" {
		out = append(out, "WINDOW: the newest time and the lag are the newest segment's stored time (its header was not read), later than its receive time by the upload")
	}
	if r.WindowErr != nil {
		out = append(out, "WINDOW: "+r.WindowErr.Error())
	}
	return out
}

// WindowLine is the window of w at now in one line: "from revision F
// (time) to revision T (time), lag L, gaps G; journal: J".
func WindowLine(w Window, now time.Time) string {
	journal := "no journal: only each backup's own revision is restorable"
	if w.Journal {
		journal = fmt.Sprintf("journal: %d segments through revision %d", w.Segments, w.LastRev)
	}
	if len(w.Spans) == 0 {
		if w.Journal {
			journal += ", none continues a backup that checks out"
		}
		return "none (no backup that checks out); " + journal
	}
	lag := "-"
	if d, ok := w.Lag(now); ok {
		lag = d.Round(time.Second).String()
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
	return fmt.Sprintf("from revision %d (%s) to revision %d (%s), lag %s, gaps %s; %s", w.FromRev, fmtWhen(w.FromTime), w.ToRev, fmtWhen(w.ToTime), lag, gaps, journal)
}

func fmtWhen(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}
