package journal_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/journal"
)

func winSeg(first, last int64, stored time.Time) journal.SegmentInfo {
	return journal.SegmentInfo{Key: fmt.Sprintf("%d-%d", first, last), FirstRev: first, LastRev: last, Modified: stored}
}

// spansOf renders a window as "from-to,from-to / holes after-before".
func spansOf(w journal.Window) string {
	var sp, hs []string
	for _, s := range w.Spans {
		sp = append(sp, fmt.Sprintf("%d-%d", s.FromRev, s.ToRev))
	}
	for _, h := range w.Holes {
		hs = append(hs, fmt.Sprintf("%d..%d", h.After, h.Before))
	}
	return strings.Join(sp, ",") + " / " + strings.Join(hs, ",")
}

func TestComputeWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	b := func(name string, rev int64, m int) journal.WindowBackup {
		return journal.WindowBackup{Name: name, Rev: rev, Time: at(m)}
	}
	for _, tc := range []struct {
		name    string
		backups []journal.WindowBackup
		segs    []journal.SegmentInfo
		newest  *journal.Header
		want    string
		from    int64
		to      int64
		toTime  time.Time
	}{
		{"nothing", nil, nil, nil, " / ", 0, 0, time.Time{}},
		{"backups alone: each its revision, holes between",
			[]journal.WindowBackup{b("b2", 50, 60), b("b1", 10, 0)}, nil, nil,
			"10-10,50-50 / 10..50", 10, 50, at(60)},
		{"one chain from the oldest backup through the newest",
			[]journal.WindowBackup{b("b1", 10, 0), b("b2", 25, 30)},
			[]journal.SegmentInfo{winSeg(11, 20, at(10)), winSeg(21, 30, at(40)), winSeg(31, 40, at(50))},
			&journal.Header{FirstRev: 31, LastRev: 40, Received: map[int64]int64{31: at(45).UnixMilli(), 40: at(49).UnixMilli()}},
			"10-40 / ", 10, 40, at(49)},
		{"a gap in the journal is a hole until the next backup",
			[]journal.WindowBackup{b("b1", 10, 0), b("b2", 50, 60)},
			[]journal.SegmentInfo{winSeg(11, 20, at(10)), winSeg(31, 40, at(50)), winSeg(51, 55, at(70))},
			&journal.Header{FirstRev: 51, LastRev: 55, Received: map[int64]int64{51: at(65).UnixMilli(), 55: at(69).UnixMilli()}},
			"10-20,50-55 / 20..50", 10, 55, at(69)},
		{"a backup inside a segment: replay starts inside it",
			[]journal.WindowBackup{b("b1", 15, 0)},
			[]journal.SegmentInfo{winSeg(11, 20, at(10)), winSeg(21, 30, at(20))},
			nil, "15-30 / ", 15, 30, at(20)},
		{"segments before every backup restore nothing",
			[]journal.WindowBackup{b("b1", 100, 0)},
			[]journal.SegmentInfo{winSeg(11, 20, at(10))}, nil,
			"100-100 / ", 100, 100, at(0)},
		{"newest header of another segment: stored time",
			[]journal.WindowBackup{b("b1", 10, 0)},
			[]journal.SegmentInfo{winSeg(11, 20, at(10))},
			&journal.Header{FirstRev: 1, LastRev: 5, Received: map[int64]int64{5: 1}},
			"10-20 / ", 10, 20, at(10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := journal.ComputeWindow("c1", tc.backups, tc.segs, tc.newest)
			if got := spansOf(w); got != tc.want {
				t.Errorf("spans %q, want %q", got, tc.want)
			}
			if w.FromRev != tc.from || w.ToRev != tc.to || !w.ToTime.Equal(tc.toTime) {
				t.Errorf("window %d-%d to %s, want %d-%d to %s", w.FromRev, w.ToRev, w.ToTime, tc.from, tc.to, tc.toTime)
			}
			if w.Journal != (len(tc.segs) > 0) || w.Segments != len(tc.segs) {
				t.Errorf("journal %v segments %d for %d segments", w.Journal, w.Segments, len(tc.segs))
			}
		})
	}
}

func TestWindowLag(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	segs := []journal.SegmentInfo{winSeg(11, 20, t0.Add(2*time.Second))}
	h := &journal.Header{FirstRev: 11, LastRev: 20, Received: map[int64]int64{11: t0.Add(-time.Second).UnixMilli(), 20: t0.UnixMilli()}}
	w := journal.ComputeWindow("c1", []journal.WindowBackup{{Name: "b", Rev: 10, Time: t0.Add(-time.Hour)}}, segs, h)
	if lag, ok := w.Lag(t0.Add(90 * time.Second)); !ok || lag != 90*time.Second || w.LastReceivedFrom != "header" || w.LastRev != 20 {
		t.Errorf("lag %v %v from %q rev %d, want 1m30s from the header at revision 20", lag, ok, w.LastReceivedFrom, w.LastRev)
	}
	// Without the header (encrypted, no identity): the stored time.
	w = journal.ComputeWindow("c1", nil, segs, nil)
	if lag, ok := w.Lag(t0.Add(90 * time.Second)); !ok || lag != 88*time.Second || w.LastReceivedFrom != "stored" {
		t.Errorf("lag %v %v from %q, want 1m28s from the stored time", lag, ok, w.LastReceivedFrom)
	}
	if _, ok := journal.ComputeWindow("c1", nil, nil, nil).Lag(t0); ok {
		t.Error("a lag without a journal")
	}
}
