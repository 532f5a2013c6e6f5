package retention

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Journal retention: which journal segments to keep, and which backups
// the retention rule lets go must stay as the base of the journal window.
// Pure, like ApplyPolicy: no I/O, no clock. Prune applies it after the
// backup rule (planJournal), from one listing of the cluster's journal
// (<prefix>/_journal/<cluster>/, keys from Layout.JournalSegmentKey).
//
// The rule, per chain of segments (each starting at the revision after
// the last one's end, as restore's replay reads them):
//
//   - The window must reach back JournalRetention: every revision the
//     journal received since now - JournalRetention stays restorable
//     exactly. E is the chain's first segment whose last revision was
//     received at or after that cutoff (all later ones were too).
//   - Its base is the newest backup whose revision + 1 is in a segment
//     of the chain at or before E (the window needs nothing older); if
//     the backup rule lets it go, it is kept anyway (RuleJournalBase,
//     "base of the journal window"): a base is never pruned while its
//     segments are needed. An older backup the rule keeps (an anchor)
//     does not hold older segments: the journal keeps its retention,
//     not the anchors'.
//   - The first backup of each date after the base in the chain is kept
//     too (RuleJournalBase): the window's start moves to them as the
//     retention passes, so it stays within a day (and one backup
//     interval) of the retention's start, and the segments the journal
//     holds within about JournalRetention + 1 day.
//   - The segments from the one holding the base's revision + 1 to the
//     chain's end are kept; those before it are deleted (they are older
//     than the retention and no kept backup starts them). The window's
//     start moves forward whole segments at a time, never leaving a hole
//     inside the window.
//   - A chain no segment of which is within the retention is deleted,
//     except the newest chain (the one holding the highest revision): it
//     is always kept, from its newest base on, as if its last segment
//     were within the retention (a journal that stopped still ends the
//     window).
//   - A chain without any backup to start from (no good backup's revision
//     + 1 in it) restores nothing; it is kept while a segment of it is
//     within the retention (its backup may be damaged and under
//     investigation: the events are their only copy), then deleted.
//
// A segment's time is when its last revision was received; prune uses
// the object's stored time (LastModified), later than that by the
// upload's duration, so a segment is, if anything, kept a little longer.

// DefaultJournalRetention is how far back the journal window reaches by
// default: 7 days (--journal-retention).
const DefaultJournalRetention = 7 * 24 * time.Hour

// RuleJournalBase keeps a backup the retention rule lets go while the
// journal window starts from it.
const RuleJournalBase = "journal-base"

// JournalBackup is a good committed backup as journal retention sees it:
// its name, its revision (Manifest.Revision), and whether the backup
// rule keeps it.
type JournalBackup struct {
	Name string
	Rev  int64
	Time time.Time
	Keep bool
}

// JournalSegment is a stored segment: its key, the revisions its key
// names, and when its last revision was received (or the object's stored
// time, an upper bound).
type JournalSegment struct {
	Key               string    `json:"key"`
	FirstRev, LastRev int64     `json:"-"`
	Received          time.Time `json:"received"`
}

// SegmentDecision is what journal retention does with one segment.
type SegmentDecision struct {
	Segment JournalSegment
	Keep    bool
	Reason  string // never empty
	// Base is the backup the segment's window starts from (kept).
	Base string
}

// JournalPlan is journal retention's decision for one cluster.
type JournalPlan struct {
	// Segments are every segment's decision, in revision order.
	Segments []SegmentDecision
	// KeepBases are the backups the backup rule lets go that the journal
	// keeps (name -> reason, RuleJournalBase).
	KeepBases map[string]string
}

// ApplyJournalRetention decides a cluster's segments at now: backups are
// its good committed backups (any order) with the backup rule's
// decision, segs its stored segments (any order), retention how far back
// the window reaches (DefaultJournalRetention when not positive). See the
// rule above.
func ApplyJournalRetention(backups []JournalBackup, segs []JournalSegment, now time.Time, retention time.Duration) JournalPlan {
	if retention <= 0 {
		retention = DefaultJournalRetention
	}
	cutoff := now.Add(-retention)
	plan := JournalPlan{KeepBases: map[string]string{}}
	segs = slices.Clone(segs)
	slices.SortStableFunc(segs, func(a, b JournalSegment) int {
		if a.FirstRev != b.FirstRev {
			return cmp.Compare(a.FirstRev, b.FirstRev)
		}
		return cmp.Compare(a.LastRev, b.LastRev)
	})
	bs := slices.Clone(backups)
	slices.SortStableFunc(bs, func(a, b JournalBackup) int { return cmp.Compare(b.Rev, a.Rev) }) // newest first

	// Chains: runs of segments each starting right after the last.
	var chains [][]JournalSegment
	newest := -1
	var top int64
	for i, s := range segs {
		if i == 0 || s.FirstRev != segs[i-1].LastRev+1 {
			chains = append(chains, nil)
		}
		chains[len(chains)-1] = append(chains[len(chains)-1], s)
		if newest < 0 || s.LastRev > top {
			newest, top = len(chains)-1, s.LastRev
		}
	}
	for ci, ch := range chains {
		plan.Segments = append(plan.Segments, decideChain(ch, bs, ci == newest, cutoff, retention, now, plan.KeepBases)...)
	}
	return plan
}

// decideChain decides one chain (see ApplyJournalRetention).
func decideChain(ch []JournalSegment, newestFirst []JournalBackup, newestChain bool, cutoff time.Time, retention time.Duration, now time.Time, keepBases map[string]string) []SegmentDecision {
	out := make([]SegmentDecision, len(ch))
	for i, s := range ch {
		out[i].Segment = s
	}
	deleteAll := func(reason string) []SegmentDecision {
		for i := range out {
			out[i].Reason = reason
		}
		return out
	}
	e := slices.IndexFunc(ch, func(s JournalSegment) bool { return !s.Received.Before(cutoff) })
	forced := e < 0
	if forced {
		if !newestChain {
			last := ch[len(ch)-1]
			return deleteAll(fmt.Sprintf("its chain ends at revision %d, received %s ago, older than the journal retention %s",
				last.LastRev, FormatDuration(now.Sub(last.Received)), FormatDuration(retention)))
		}
		e = len(ch) - 1
	}
	// holding is the index of the segment of ch holding rev, -1 if none.
	holding := func(rev int64) int {
		return slices.IndexFunc(ch, func(s JournalSegment) bool { return s.FirstRev <= rev && rev <= s.LastRev })
	}
	var base *JournalBackup
	var from int
	for i := range newestFirst {
		if j := holding(newestFirst[i].Rev + 1); j >= 0 && j <= e {
			base, from = &newestFirst[i], j
			break
		}
	}
	if base == nil {
		// No backup starts the chain at or before E: the oldest one
		// starting it later (one the rule keeps first), if any, restores
		// the rest.
		for _, kept := range []bool{true, false} {
			for i := len(newestFirst) - 1; i >= 0 && base == nil; i-- {
				b := &newestFirst[i]
				if j := holding(b.Rev + 1); j >= 0 && (b.Keep || !kept) {
					base, from = b, j
				}
			}
		}
	}
	if base == nil {
		what := fmt.Sprintf("no backup that checks out starts its chain (revisions %d-%d): nothing restores from it", ch[0].FirstRev, ch[len(ch)-1].LastRev)
		if forced {
			return deleteAll(what + ", and all of it is older than the journal retention " + FormatDuration(retention))
		}
		// Not deleted while within the retention: its backup may be
		// damaged or being investigated, and the events are the only copy.
		for i := range out {
			out[i].Keep, out[i].Reason = true, what+"; kept within the journal retention "+FormatDuration(retention)+" for investigation"
		}
		return out
	}
	if !base.Keep {
		if _, ok := keepBases[base.Name]; !ok {
			keepBases[base.Name] = fmt.Sprintf("base of the journal window: its start; the segments from revision %d to %d continue it", base.Rev+1, ch[len(ch)-1].LastRev)
		}
	}
	// The bases the window's start moves to as the retention passes: the
	// first backup of each date inside the kept part of the chain, so the
	// start stays within a day (plus one backup interval) of the
	// retention's start.
	if !forced {
		seen := map[civilDate]bool{}
		for i := len(newestFirst) - 1; i >= 0; i-- { // oldest first
			b := &newestFirst[i]
			j := holding(b.Rev + 1)
			if b.Rev <= base.Rev || j < from {
				continue
			}
			d := dateOf(b.Time)
			if seen[d] {
				continue
			}
			seen[d] = true
			if _, ok := keepBases[b.Name]; !b.Keep && !ok {
				keepBases[b.Name] = fmt.Sprintf("base of the journal window: the first backup of %s in it, where the window's start moves as the journal retention passes", d)
			}
		}
	}
	for i := range out {
		s := ch[i]
		if i < from {
			out[i].Reason = fmt.Sprintf("received %s ago, older than the journal retention %s, and before the window's base %s (revision %d)",
				FormatDuration(now.Sub(s.Received)), FormatDuration(retention), base.Name, base.Rev)
			continue
		}
		out[i].Keep, out[i].Base = true, base.Name
		switch {
		case !s.Received.Before(cutoff):
			out[i].Reason = fmt.Sprintf("within the journal retention %s (received %s ago)", FormatDuration(retention), FormatDuration(max(now.Sub(s.Received), 0)))
		case forced:
			out[i].Reason = "the newest chain of the journal, none of it within the journal retention: kept from its base " + base.Name
		default:
			out[i].Reason = fmt.Sprintf("continues the window's base %s (revision %d) to the journal retention's start", base.Name, base.Rev)
		}
	}
	return out
}
