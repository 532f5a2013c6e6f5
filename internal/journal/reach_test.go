package journal_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// Source.Reach: the last revision reachable exactly from a revision, its
// receive time (the last segment's header) and the break after it; no
// journal is ErrNoJournal, a journal ending before the revision
// ErrNothingAfter, and a revision inside the first segment (a backup's
// revision past its manifest's) is reached from that segment.
func TestSourceReach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	layout := memLayout
	st := memstore.New()
	write := func(first, last int64) {
		t.Helper()
		writeSegment(t, ctx, st, layout, putsHeader(first, last, 7, nil), putsEvents(first, last))
	}
	src := journal.NewSource(st, layout, "c1", nil)
	if _, err := src.Reach(ctx, 11); !errors.Is(err, journal.ErrNoJournal) {
		t.Fatalf("no journal: %v", err)
	}
	write(11, 13)
	write(14, 16)
	write(19, 20) // after a gap
	for _, from := range []int64{11, 12, 14} {
		r, err := src.Reach(ctx, from)
		if err != nil {
			t.Fatalf("from %d: %v", from, err)
		}
		if r.Revision != 16 || r.Received.UnixMilli() != 1607 || !strings.HasSuffix(r.Segment, "0000000000000014-0000000000000016.seg") ||
			r.Problem == nil || r.Problem.Reason != journal.ReasonGap {
			t.Errorf("from %d: %+v (problem %v)", from, r, r.Problem)
		}
	}
	if r, err := src.Reach(ctx, 19); err != nil || r.Revision != 20 || r.Problem != nil || r.Received.UnixMilli() != 2007 {
		t.Errorf("from 19: %+v %v", r, err)
	}
	if _, err := src.Reach(ctx, 21); !errors.Is(err, journal.ErrNothingAfter) || !strings.Contains(err.Error(), "ends at revision 20") {
		t.Errorf("past the end: %v", err)
	}
	if _, err := src.Reach(ctx, 17); err == nil || errors.Is(err, journal.ErrNothingAfter) || !strings.Contains(err.Error(), "no segment with revision 17") {
		t.Errorf("in the gap: %v", err)
	}
}
