package restore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
)

// CheckLineage is the plan's check that a point-in-time restore's backup
// and journal are of one history (see checkLineage).
const CheckLineage = "journal lineage"

// lineageBreak is a journal gap record of a lineage break
// (catalog.JournalGap with Lineage set): the cluster's history was found
// not to be the journal's (a restore without a revision bump, a recreated
// cluster); the journal's old history ends at From - 1. EndReceived is
// when the journal received that revision (zero: its segment unread).
type lineageBreak struct {
	catalog.JournalGap
	EndReceived time.Time
}

// newer says whether backup b is of a history after the break: taken
// after the break was found, or, below the old history's end, taken after
// the journal received that end. The old history had reached its end by
// then, and a history's revisions only grow, so a backup below it taken
// later is not the old history's. That tells apart the backups taken
// between the restore without a bump and the break's detection (the
// journal down meanwhile), which the found time alone does not. The two
// times come from two pods' clocks: a backup within
// catalog.DefaultFutureTolerance of the end is not told apart so.
func (l *lineageBreak) newer(b Candidate) bool {
	if b.Time.After(l.Time) {
		return true
	}
	return !l.EndReceived.IsZero() && b.Time.After(l.EndReceived.Add(catalog.DefaultFutureTolerance)) && b.Revision < l.From-1
}

// LineageError is a point-in-time restore refused because its backup is of
// the history that began when the cluster went back, while the journal at
// the revisions the replay needs holds the old history: replaying it would
// splice two histories into a state that never existed.
type LineageError struct {
	ClusterID string
	Backup    string
	Revision  int64
	Break     string // the gap record's key
	End       int64  // the old history's last journaled revision
	Found     time.Time
}

func (e *LineageError) Error() string {
	return fmt.Sprintf("cluster %s: backup %s (revision %d) was taken after its history restarted (the lineage break recorded at %s, found %s: the journal's old history ends at revision %d), "+
		"and the journal holds only the old history's revisions after %d: a replay would splice two histories; restore backup %s as it is (without --to-*), or to a revision of the old history from a backup taken before the break",
		e.ClusterID, e.Backup, e.Revision, e.Break, e.Found.UTC().Format(time.RFC3339), e.End, e.Revision, e.Backup)
}

// splices reports the lineage break by which a replay from backup b up to
// toRev would splice histories: b was taken after the break was found and
// is below the old history's end, so the segments after it are the old
// history's (the journal stores nothing of the new history below the old
// end). A backup taken between the restore and the break's detection is
// told apart by the old end's receive time (newer); the replay's
// key-by-key check (etcdinternals.HistoryError) is the guard beyond.
func splices(breaks []lineageBreak, b Candidate, toRev int64) *lineageBreak {
	if toRev <= b.Revision {
		return nil
	}
	for i := range breaks {
		l := &breaks[i]
		if l.Lineage && l.newer(b) && b.Revision < l.From-1 {
			return l
		}
	}
	return nil
}

// lineageBreaks reads the cluster's gap records that are lineage breaks.
func lineageBreaks(ctx context.Context, src source) ([]lineageBreak, error) {
	gaps, err := catalog.ReadJournalGaps(ctx, src.store, src.layout, src.clusterID)
	if err != nil {
		return nil, err
	}
	var out []lineageBreak
	var segs []journal.SegmentInfo
	for _, g := range gaps {
		if !g.Lineage {
			continue
		}
		if segs == nil {
			if c, err := journal.ListSegments(ctx, src.store, src.layout, src.clusterID, 0); err == nil {
				segs = c.All
			} else if ctx.Err() != nil {
				return nil, err
			}
		}
		out = append(out, lineageBreak{JournalGap: g, EndReceived: endReceived(ctx, src, segs, g.From-1)})
	}
	return out, nil
}

// endReceived is when the journal received revision end, the last of a
// stored segment (zero when no segment ends there or it cannot be read:
// the found time alone then tells the histories apart).
func endReceived(ctx context.Context, src source, segs []journal.SegmentInfo, end int64) time.Time {
	for _, seg := range segs {
		if seg.LastRev != end {
			continue
		}
		r, err := journal.NewSource(src.store, src.layout, src.clusterID, src.ids).Open(ctx, seg.Key)
		if err != nil {
			src.log.Warn("reading the old history's last journal segment, for when it ended", "cluster", src.clusterID, "segment", seg.Key, "err", err)
			return time.Time{}
		}
		h := r.Header()
		r.Close()
		if ms, ok := h.Received[end]; ok {
			return time.UnixMilli(ms).UTC()
		}
	}
	return time.Time{}
}

// checkLineage is the select stage's check, with checkJournalProof, of a
// point-in-time restore's chosen backup against the lineage breaks (gates
// every candidate, fallbacks included): a splice (see splices) is a
// *LineageError, never replayed.
func checkLineage(ctx context.Context, src source, to Target, plan *Plan) (string, error) {
	chosen := plan.Chosen
	if to.Revision <= 0 || chosen == nil || chosen.survivor || to.Revision <= chosen.Revision {
		return "", nil
	}
	breaks, err := lineageBreaks(ctx, src)
	if err != nil {
		return StepList, err
	}
	if l := splices(breaks, *chosen, to.Revision); l != nil {
		lerr := &LineageError{ClusterID: src.clusterID, Backup: chosen.Name, Revision: chosen.Revision, Break: l.Key, End: l.From - 1, Found: l.Time}
		plan.Checks = append(plan.Checks, Check{Name: CheckLineage, Status: CheckFailed, Detail: lerr.Error()})
		return StepSelect, lerr
	}
	if len(breaks) > 0 {
		plan.Checks = append(plan.Checks, Check{Name: CheckLineage, Status: CheckPassed,
			Detail: fmt.Sprintf("backup %s and the journal after it are of one history (%d lineage break(s) recorded, none between them)", chosen.Name, len(breaks))})
	}
	return "", nil
}

// CheckHistory is the plan's check, for a restore of the newest state,
// of which recorded history the chosen backup belongs to (byLineage).
const CheckHistory = "history"

// byLineage orders the candidates of a restore of the newest state by the
// history they belong to, the newest first, then as sortCandidates does:
// a backup taken after a recorded lineage break (the journal found the
// cluster gone back: a restore without a revision bump, a cluster
// recreated under the same name) is of the new history, and ranks above
// every backup of the old one, whose revisions are higher. Without a
// break recorded nothing changes. The plan says which history it chose
// from (CheckHistory).
func byLineage(ctx context.Context, src source, plan *Plan, cands []Candidate) ([]Candidate, error) {
	if src.store == nil {
		return cands, nil
	}
	breaks, err := lineageBreaks(ctx, src)
	if err != nil || len(breaks) == 0 {
		return cands, err
	}
	sort.Slice(breaks, func(i, j int) bool { return breaks[i].Time.Before(breaks[j].Time) })
	history := func(c Candidate) int {
		if c.Planned || c.survivor {
			return len(breaks) // the live cluster's own snapshot
		}
		n := 0
		for i := range breaks {
			if breaks[i].newer(c) {
				n++
			}
		}
		return n
	}
	sort.SliceStable(cands, func(i, j int) bool { return history(cands[i]) > history(cands[j]) })
	newest := breaks[len(breaks)-1]
	if len(cands) > 0 && cands[0].Name != "" {
		detail := fmt.Sprintf("backup %s is of the newest history, begun when the journal found the cluster gone back (%s, found %s); %d backup(s) of older histories rank below it whatever their revisions",
			cands[0].Name, newest.Key, newest.Time.UTC().Format(time.RFC3339), countBelow(cands, history))
		if history(cands[0]) < len(breaks) {
			detail = fmt.Sprintf("no backup of the newest history (begun at %s, found %s) yet: backup %s is of an older one", newest.Key, newest.Time.UTC().Format(time.RFC3339), cands[0].Name)
		}
		plan.Checks = append(plan.Checks, Check{Name: CheckHistory, Status: CheckPassed, Detail: detail})
	}
	return cands, nil
}

func countBelow(cands []Candidate, history func(Candidate) int) int {
	n := 0
	for _, c := range cands {
		if history(c) < history(cands[0]) {
			n++
		}
	}
	return n
}
