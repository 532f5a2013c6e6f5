package journal

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
)

// The restorable window of a cluster: the revisions a restore reaches
// exactly, from its committed full backups and its stored segments.
//
// A backup restores its own revision; with the journal, a restore from it
// reaches every revision of the chain of segments continuing it (Cover:
// from the segment holding its revision + 1, each segment starting where
// the last ended), as restore's replay reads them. The window is the
// union of those spans; revisions between two spans (a gap in the
// journal, or no journal) are holes: only the revision of a backup is
// restorable there.

// WindowBackup is a committed full backup as the window sees it: its
// name, its revision (Manifest.Revision) and its time (the name's).
type WindowBackup struct {
	Name string    `json:"name"`
	Rev  int64     `json:"rev"`
	Time time.Time `json:"time"`
}

// Span is a range of revisions restorable exactly: from the backup Base
// (FromRev, its revision, at FromTime) through ToRev, the end of the
// chain of segments continuing it (FromRev when none does).
type Span struct {
	Base     string    `json:"base"`
	FromRev  int64     `json:"fromRev"`
	FromTime time.Time `json:"fromTime"`
	ToRev    int64     `json:"toRev"`
	// ToTime is when ToRev was received (from the newest segment's
	// header), the segment's stored time (an upper bound) for an older
	// segment, or the backup's time for a span of a backup alone.
	ToTime time.Time `json:"toTime"`
}

// Hole is a range of revisions no restore reaches exactly: between two
// spans (After is the earlier span's last revision, Before the next
// span's first).
type Hole struct {
	After  int64 `json:"after"`
	Before int64 `json:"before"`
}

// Window is a cluster's restorable window.
type Window struct {
	ClusterID string `json:"clusterID"`
	// FromRev and FromTime are the oldest restorable revision (the oldest
	// backup's), ToRev and ToTime the newest (the newest backup's or the
	// newest journaled revision, whichever is later).
	FromRev  int64     `json:"fromRev"`
	FromTime time.Time `json:"fromTime"`
	ToRev    int64     `json:"toRev"`
	ToTime   time.Time `json:"toTime"`
	Spans    []Span    `json:"spans"`
	Holes    []Hole    `json:"holes"`
	// Journal says the cluster has stored segments; Segments counts them.
	Journal  bool `json:"journal"`
	Segments int  `json:"segments"`
	// LastRev and LastReceived are the newest stored segment's last
	// revision and when the journal received it (its header): what the
	// journal lag is measured from. Zero without a journal.
	LastRev      int64     `json:"lastRev,omitempty"`
	LastReceived time.Time `json:"lastReceived,omitzero"`
	// LastReceivedFrom says where LastReceived comes from: "header" (the
	// newest segment's Received), or "stored" when the header was not
	// read (an encrypted segment without an identity): the segment's
	// stored time, later than the receive time by the upload's duration.
	LastReceivedFrom string `json:"lastReceivedFrom,omitempty"`
}

// Lag is the journal lag at now: now minus when the newest stored
// segment's last revision was received (the RPO right now, as a restore
// from the store would see it); false without a journal or a receive time.
func (w Window) Lag(now time.Time) (time.Duration, bool) {
	if !w.Journal || w.LastReceived.IsZero() {
		return 0, false
	}
	return now.Sub(w.LastReceived), true
}

// ComputeWindow is the window of backups (any order) and segs (a
// cluster's stored segments, ListSegments' All), pure. newest is the
// header of the newest segment (the one with the highest LastRev), nil
// when not read: it gives the newest revision's receive time. Backups
// without a revision (< 1) are left out.
func ComputeWindow(clusterID string, backups []WindowBackup, segs []SegmentInfo, newest *Header) Window {
	w := Window{ClusterID: clusterID, Spans: []Span{}, Holes: []Hole{}, Journal: len(segs) > 0, Segments: len(segs)}
	segs = slices.Clone(segs)
	slices.SortStableFunc(segs, func(a, b SegmentInfo) int {
		if a.FirstRev != b.FirstRev {
			return cmp.Compare(a.FirstRev, b.FirstRev)
		}
		return cmp.Compare(a.LastRev, b.LastRev)
	})
	var last *SegmentInfo
	for i := range segs {
		if last == nil || segs[i].LastRev > last.LastRev {
			last = &segs[i]
		}
	}
	if last != nil {
		w.LastRev = last.LastRev
		if newest != nil && newest.LastRev == last.LastRev {
			w.LastReceived, w.LastReceivedFrom = receivedAt(*newest, last.LastRev), "header"
		}
		if w.LastReceived.IsZero() && !last.Modified.IsZero() {
			w.LastReceived, w.LastReceivedFrom = last.Modified.UTC(), "stored"
		}
	}
	segTime := func(s SegmentInfo) time.Time {
		if last != nil && s.Key == last.Key && !w.LastReceived.IsZero() {
			return w.LastReceived
		}
		return s.Modified.UTC()
	}
	bs := slices.Clone(backups)
	bs = slices.DeleteFunc(bs, func(b WindowBackup) bool { return b.Rev < 1 })
	slices.SortStableFunc(bs, func(a, b WindowBackup) int {
		return cmp.Compare(a.Rev, b.Rev)
	})
	var spans []Span
	for _, b := range bs {
		sp := Span{Base: b.Name, FromRev: b.Rev, FromTime: b.Time.UTC(), ToRev: b.Rev, ToTime: b.Time.UTC()}
		if c := coverFrom(clusterID, segs, b.Rev+1); c != nil && c.Reach > b.Rev {
			sp.ToRev = c.Reach
			sp.ToTime = segTime(c.Segments[len(c.Segments)-1])
		}
		spans = append(spans, sp)
	}
	// Merge: a span starting at or right after the previous one's end
	// continues it.
	for _, sp := range spans {
		n := len(w.Spans)
		if n > 0 && sp.FromRev <= w.Spans[n-1].ToRev+1 {
			if sp.ToRev > w.Spans[n-1].ToRev {
				w.Spans[n-1].ToRev, w.Spans[n-1].ToTime = sp.ToRev, sp.ToTime
			}
			continue
		}
		if n > 0 {
			w.Holes = append(w.Holes, Hole{After: w.Spans[n-1].ToRev, Before: sp.FromRev})
		}
		w.Spans = append(w.Spans, sp)
	}
	if len(w.Spans) > 0 {
		first, end := w.Spans[0], w.Spans[len(w.Spans)-1]
		w.FromRev, w.FromTime, w.ToRev, w.ToTime = first.FromRev, first.FromTime, end.ToRev, end.ToTime
	}
	return w
}

// coverFrom is Source.Cover over segs: the chain from the segment holding
// from reaching furthest, nil when no segment holds from.
func coverFrom(clusterID string, segs []SegmentInfo, from int64) *Chain {
	var best *Chain
	for _, s := range segs {
		if s.FirstRev > from || s.LastRev < from {
			continue
		}
		c := &Chain{ClusterID: clusterID, BaseRev: s.FirstRev - 1, Reach: s.FirstRev - 1, All: segs}
		c.chain()
		if best == nil || c.Reach > best.Reach {
			best = c
		}
	}
	return best
}

// LoadWindow is the window of clusterID from the store: its segments
// (one listing) and the header of the newest one (one read, the header
// only), with backups its committed full backups. ids decrypt an
// encrypted segment. A listing that fails is an error naming the
// cluster and the step, and no window. A header that cannot be read (an
// encrypted segment without ids, a damaged one, a store error) is
// returned as headerErr beside the window, whose newest time is then the
// segment's stored time (LastReceivedFrom "stored").
func LoadWindow(ctx context.Context, st store.Store, layout catalog.Layout, clusterID string, backups []WindowBackup, ids *seal.Identities) (w Window, headerErr, err error) {
	all, err := ListSegments(ctx, st, layout, clusterID, 0)
	if err != nil {
		return Window{}, nil, fmt.Errorf("window of cluster %s: listing the journal under %s: %w", clusterID, layout.JournalPrefix(clusterID), err)
	}
	w, headerErr = WindowOf(ctx, st, layout, clusterID, backups, all.All, ids)
	return w, headerErr, nil
}

// WindowOf is LoadWindow over segments already listed (ListSegments'
// All, or SegmentsOf a listing): one read, the newest segment's header.
func WindowOf(ctx context.Context, st store.Store, layout catalog.Layout, clusterID string, backups []WindowBackup, segs []SegmentInfo, ids *seal.Identities) (w Window, headerErr error) {
	var newest *Header
	if n := len(segs); n > 0 {
		last := segs[0]
		for _, s := range segs {
			if s.LastRev > last.LastRev {
				last = s
			}
		}
		r, err := OpenSegment(ctx, st, layout, last.Key, ids, Want{ClusterID: clusterID})
		if err != nil {
			headerErr = fmt.Errorf("window of cluster %s: reading the newest segment's header: %w", clusterID, err)
		} else {
			h := r.Header()
			r.Close()
			newest = &h
		}
	}
	return ComputeWindow(clusterID, backups, segs, newest), headerErr
}

// SegmentsOf are the segments of clusterID in a listing, in key
// (revision) order as listed.
func SegmentsOf(layout catalog.Layout, clusterID string, objs []store.ObjectInfo) []SegmentInfo {
	var out []SegmentInfo
	for _, o := range objs {
		if ki := layout.Classify(o.Key); ki.Kind == catalog.KeyJournal && ki.ClusterID == clusterID {
			out = append(out, SegmentInfo{Key: o.Key, FirstRev: ki.FirstRev, LastRev: ki.LastRev, Size: o.Size, Modified: o.LastModified})
		}
	}
	return out
}
