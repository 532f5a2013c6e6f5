package journal

import (
	"context"
	"fmt"
	"time"
)

// OverlapCheckEvery is how often (at most) a capture lists its cluster's
// segments for another writer's (checkOverlap): one listing of the
// cluster's own journal folder, after a segment is stored.
const OverlapCheckEvery = 30 * time.Second

// overlapKeep is how many of its own latest segments a capture compares
// the store's with: a second writer's segment over revisions older than
// those is not looked for (journal retention and the proofs see it).
const overlapKeep = 256

// checkOverlap runs after each segment this capture stored, at most every
// OverlapCheckEvery (and always on its first segment): a segment it did not
// write that holds any revision of its last overlapKeep segments is a
// second writer: for a moment during a leader change, or `journal
// --cluster-id` run beside the Deployment. The chain is broken there (two
// segments for one revision: readers stop at the overlap, --to-latest is
// capped), so it is a *GapError from the first revision both hold: the
// caller records it, pages and takes a full backup from which the journal
// continues, past both writers' segments.
func (c *capture) checkOverlap(ctx context.Context, p pending) error {
	key := c.o.Layout.JournalSegmentKey(c.o.ClusterID, p.h.FirstRev, p.h.LastRev)
	c.written[key] = true
	c.writtenOrder = append(c.writtenOrder, writtenSeg{key: key, first: p.h.FirstRev})
	if n := len(c.writtenOrder); n > overlapKeep {
		for _, w := range c.writtenOrder[:n-overlapKeep] {
			delete(c.written, w.key)
		}
		c.writtenOrder = append(c.writtenOrder[:0], c.writtenOrder[n-overlapKeep:]...)
	}
	now := c.o.Now()
	if len(c.writtenOrder) > 1 && now.Sub(c.overlapChecked) < OverlapCheckEvery {
		return nil
	}
	c.overlapChecked = now
	// Bounded tighter than an upload: it holds the uploader up.
	lctx, cancel := context.WithTimeout(ctx, min(c.o.UploadTimeout, 10*time.Second))
	defer cancel()
	chain, err := ListSegments(lctx, c.o.Store, c.o.Layout, c.o.ClusterID, 0)
	if err != nil {
		// A store that cannot be listed now is checked at the next segment.
		c.o.Log.Warn("journal: listing the segments for another writer's failed; checked again at the next segment", "cluster", c.o.ClusterID, "err", err)
		c.overlapChecked = time.Time{}
		return nil
	}
	from := c.writtenOrder[0].first
	for _, s := range chain.All {
		if c.written[s.Key] || s.LastRev < from || s.FirstRev > p.h.LastRev {
			continue
		}
		return &GapError{ClusterID: c.o.ClusterID, From: max(s.FirstRev, from),
			Reason: fmt.Sprintf("another writer stored segment %s (revisions %d-%d) over revisions this journal stored (%d-%d): two writers, the chain is broken there", s.Key, s.FirstRev, s.LastRev, from, p.h.LastRev)}
	}
	return nil
}

type writtenSeg struct {
	key   string
	first int64
}
