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
type Base struct {
	Name string `json:"name"`
	Rev  int64  `json:"rev"`
}

// ChooseBase is the base a (re)starting journal continues, from the
// cluster's committed backups (any order) and its stored segments:
//
//   - the newest backup at or past every stored segment's last revision:
//     a fresh journal from it (nothing stored after it to continue);
//   - else the newest backup whose chain of segments (Chain) runs without
//     a problem to the last stored revision: the journal resumes exactly
//     there (a backup taken while the journal ran is not a new base: the
//     journal keeps the one it continues);
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
	var last int64
	for _, s := range all.All {
		last = max(last, s.LastRev)
	}
	var first *Chain
	for _, b := range bases {
		c := &Chain{ClusterID: clusterID, BaseRev: b.Rev, Reach: b.Rev, All: all.All}
		c.chain()
		if b.Rev >= last {
			return b, c, nil
		}
		if c.Problem == nil && c.Reach == last {
			return b, c, nil
		}
		if first == nil {
			first = c
		}
	}
	gap := &GapError{ClusterID: clusterID, From: first.Reach + 1, Reason: fmt.Sprintf("no backup's journal reaches the last stored revision %d", last)}
	if first.Problem != nil {
		gap.Err = first.Problem
	}
	return Base{}, nil, gap
}
