package journal

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Reach is how far a cluster's journal reaches exactly from a revision:
// what restore --to-latest restores to.
type Reach struct {
	// From is the revision asked for (a base backup's revision + 1).
	From int64 `json:"from"`
	// Revision is the last revision reachable exactly from From: the
	// last revision of the last segment of the chain holding From.
	Revision int64 `json:"revision"`
	// Received is when the journal received Revision (a segment records
	// its last revision's receive time).
	Received time.Time `json:"received"`
	// Segment is the key of the segment holding Revision.
	Segment string `json:"segment"`
	// Problem is the break in the chain after Revision (a gap or an
	// overlap, by name), nil when the segments simply end there.
	Problem *SegmentError `json:"-"`
}

// ErrNothingAfter is a journal that holds no revision after the one asked
// for: its segments end at or before it.
var ErrNothingAfter = errors.New("the journal holds nothing after it")

// Reach is the chain of stored segments holding from (Cover) and the
// last revision it reaches exactly, with when that revision was received
// (the last segment's header, read and checked). A cluster without a
// stored segment is ErrNoJournal; a journal whose segments all end before
// from wraps ErrNothingAfter, naming where they end.
func (s *Source) Reach(ctx context.Context, from int64) (Reach, error) {
	c, err := s.Cover(ctx, from)
	if err != nil {
		if errors.Is(err, ErrNoJournal) {
			return Reach{}, err
		}
		all, lerr := s.listing(ctx)
		if lerr == nil {
			var last int64
			for _, seg := range all.All {
				last = max(last, seg.LastRev)
			}
			if last < from {
				return Reach{}, fmt.Errorf("%w: the journal of cluster %s ends at revision %d, before revision %d", ErrNothingAfter, s.clusterID, last, from)
			}
		}
		return Reach{}, err
	}
	if len(c.Segments) == 0 {
		return Reach{}, fmt.Errorf("the journal of cluster %s holds no segment continuing revision %d", s.clusterID, from)
	}
	last := c.Segments[len(c.Segments)-1]
	r, err := s.open(ctx, last)
	if err != nil {
		return Reach{}, err
	}
	h := r.Header()
	r.Close()
	return Reach{From: from, Revision: c.Reach, Received: receivedAt(h, c.Reach), Segment: last.Key, Problem: c.Problem}, nil
}
