package journal

import (
	"context"
	"fmt"
	"sort"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// Base is a full backup a journal may continue: its name and revision
// (catalog.Manifest.Revision: the snapshot holds at least that revision,
// so the journal from Rev+1 leaves nothing out; a replay skips the
// revisions the snapshot already holds).
type Base = catalog.JournalBase

// ChooseBase is the base a (re)starting journal continues, from the
// cluster's committed backups (any order) and its stored segments:
//
//   - the newest backup at or past every stored segment's last revision:
//     a fresh journal from it (nothing stored after it to continue);
//   - else the oldest backup whose continuation (Continuation: the chain
//     of segments from the one holding its revision + 1) runs without a
//     problem to the last stored revision: the journal resumes exactly
//     there. The backup may lie inside the chain rather than at its start:
//     journal retention prunes the base a long-running journal started
//     from, and the early segments, and keeps a newer backup as the
//     window's base; the restart continues the stored chain from that kept
//     backup (no gap, no new full backup), and its segments name it
//     (Header.BaseBackup) while the earlier ones name the pruned base.
//     Readers accept that (Continues). The oldest such backup: a backup
//     taken while the journal ran does not replace the base it continues
//     while that base is kept;
//   - else none can continue exactly: a *GapError (the stored segments
//     break), for the caller to take a full backup, which then starts a
//     fresh journal.
//
// No backups at all is an error too: a journal needs a base.
func ChooseBase(ctx context.Context, st store.Store, layout catalog.Layout, clusterID string, bases []Base) (Base, *Chain, error) {
	if len(bases) == 0 {
		return Base{}, nil, fmt.Errorf("journal of cluster %s: no committed full backup to continue: take one first", clusterID)
	}
	bases = append([]Base(nil), bases...)
	sort.SliceStable(bases, func(i, j int) bool { return bases[i].Rev > bases[j].Rev })
	all, err := ListSegments(ctx, st, layout, clusterID, bases[0].Rev)
	if err != nil {
		return Base{}, nil, err
	}
	b, c, gap := chooseBase(clusterID, all.All, bases)
	if gap != nil {
		return Base{}, nil, gap
	}
	return b, c, nil
}

// chooseBase is ChooseBase over segments listed, bases newest first.
func chooseBase(clusterID string, all []SegmentInfo, bases []Base) (Base, *Chain, *GapError) {
	var last int64
	for _, s := range all {
		last = max(last, s.LastRev)
	}
	if b := bases[0]; b.Rev >= last {
		return b, Continuation(clusterID, all, b.Rev), nil
	}
	var first *Chain
	for i := len(bases) - 1; i >= 0; i-- { // oldest first
		b := bases[i]
		c := Continuation(clusterID, all, b.Rev)
		if c.Problem == nil && c.Reach == last {
			return b, c, nil
		}
		if i == 0 {
			first = c
		}
	}
	gap := &GapError{ClusterID: clusterID, From: first.Reach + 1, Reason: fmt.Sprintf("no backup's journal reaches the last stored revision %d", last)}
	if first.Problem != nil {
		gap.Err = first.Problem
	}
	return Base{}, nil, gap
}

// Continuation is the chain of stored segments a journal from a backup
// at revision rev continues, as restore's replay reads it (Source.Cover):
// from the segment holding rev + 1 (the backup lies inside the chain,
// or at its start when the segment starts at rev + 1), the one reaching
// furthest when several do; with no segment holding rev + 1, the chain
// from rev + 1 (ListSegments': its Reach is rev, and a segment after
// rev + 1 is its Problem, a gap). Its Reach is the last revision the
// journal holds exactly from rev, and the capture resumes after it.
func Continuation(clusterID string, all []SegmentInfo, rev int64) *Chain {
	if c := coverFrom(clusterID, all, rev+1); c != nil {
		return c
	}
	c := &Chain{ClusterID: clusterID, BaseRev: rev, Reach: rev, All: all}
	c.chain()
	return c
}

// Continues is the one rule by which a segment continues the segment
// before it in a chain, for every reader (the capture's resume,
// Source.Events for restore's replay and journal prove): the same
// cluster, and its first revision right after the previous one's last.
// The bases their headers name may differ (a journal restarted after its
// base was pruned continues from a kept backup inside the chain, and
// names it; ChooseBase): the events are exact whichever base a journal
// started from, as long as the revisions continue; each header's own
// base is checked by the Decoder (its revisions after its BaseRev).
// prev nil is a chain's first segment: only its cluster is checked.
func Continues(key string, prev *Header, h Header) error {
	switch {
	case prev == nil:
		return nil
	case h.ClusterID != prev.ClusterID:
		return &SegmentError{Key: key, Reason: ReasonCluster, Detail: fmt.Sprintf("it belongs to cluster %q, the segment before it to %q", h.ClusterID, prev.ClusterID)}
	case h.FirstRev > prev.LastRev+1:
		return &SegmentError{Key: key, Reason: ReasonGap, Detail: fmt.Sprintf("it starts at revision %d, the segment before it ends at %d", h.FirstRev, prev.LastRev)}
	case h.FirstRev <= prev.LastRev:
		return &SegmentError{Key: key, Reason: ReasonOverlap, Detail: fmt.Sprintf("it starts at revision %d, the segment before it holds through %d", h.FirstRev, prev.LastRev)}
	}
	return nil
}
