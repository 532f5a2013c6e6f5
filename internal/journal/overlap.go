package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// OverlapCheckEvery is how often (at most) a capture lists its cluster's
// segments for another writer's (checkOverlap): one listing of the
// cluster's own journal folder, after a segment is stored.
const OverlapCheckEvery = 30 * time.Second

// overlapKeep is how many of its own latest segments a capture compares
// the store's with: a second writer's segment over revisions older than
// those is not looked for (journal retention and the proofs see it).
const overlapKeep = 64

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
	from := c.writtenOrder[0].first
	// Bounded tighter than an upload: it holds the uploader up. Only the
	// keys that share the decimal prefix of the revisions compared are
	// listed (keys are <first %016d>-<last %016d>.seg): a few hundred
	// keys, not the cluster's whole journal (20,000 a week).
	lctx, cancel := context.WithTimeout(ctx, min(c.o.UploadTimeout, 10*time.Second))
	defer cancel()
	objs, err := c.o.Store.List(lctx, c.o.Layout.JournalPrefix(c.o.ClusterID)+revPrefix(from, p.h.LastRev))
	if err != nil {
		// Checked again after OverlapCheckEvery: a slow store is not
		// listed at every segment.
		c.o.Log.Warn("journal: listing the segments for another writer's failed; checked again later", "cluster", c.o.ClusterID, "err", err)
		return nil
	}
	for _, o := range objs {
		ki := c.o.Layout.Classify(o.Key)
		if ki.Kind != catalog.KeyJournal || ki.ClusterID != c.o.ClusterID {
			continue
		}
		s := SegmentInfo{Key: o.Key, FirstRev: ki.FirstRev, LastRev: ki.LastRev}
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

// revPrefix is the longest common prefix of revisions a and b as segment
// keys write them (16 digits, zero-padded): every key whose first
// revision lies between them starts with it.
func revPrefix(a, b int64) string {
	x, y := fmt.Sprintf("%016d", a), fmt.Sprintf("%016d", b)
	n := 0
	for n < len(x) && x[n] == y[n] {
		n++
	}
	return x[:n]
}
