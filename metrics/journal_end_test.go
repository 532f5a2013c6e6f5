package metrics

import (
	"testing"

	"github.com/armada/etcd-recovery/internal/journal"
)

// The lag reads the journal's real end: a second writer's segment over
// the chain's revisions (two writers for a moment) stops it before the
// overlap, whatever segments come after; a gap between two bases (a heal)
// does not, nor a newest chain that starts after the overlap.
func TestRealEnd(t *testing.T) {
	t.Parallel()
	seg := func(first, last int64) journal.SegmentInfo {
		return journal.SegmentInfo{Key: segKey(first, last), FirstRev: first, LastRev: last}
	}
	for _, c := range []struct {
		name string
		segs []journal.SegmentInfo
		want int64 // the real end's last revision
	}{
		{"one chain", []journal.SegmentInfo{seg(1, 10), seg(11, 20), seg(21, 30)}, 30},
		{"a gap, then the healed chain", []journal.SegmentInfo{seg(1, 10), seg(11, 20), seg(40, 50)}, 50},
		// A replay reaches 14 (11-20 holds 11-14 alone), as restore's does.
		{"a second writer inside the chain", []journal.SegmentInfo{seg(1, 10), seg(11, 20), seg(15, 25), seg(21, 30), seg(31, 40)}, 14},
		{"a second writer's newest segment", []journal.SegmentInfo{seg(1, 10), seg(11, 20), seg(21, 30), seg(25, 35)}, 24},
		{"healed past the overlap", []journal.SegmentInfo{seg(1, 10), seg(5, 12), seg(40, 50), seg(51, 60)}, 60},
	} {
		got := realEnd(c.segs)
		if got.LastRev != c.want || got.FirstRev > c.want {
			t.Errorf("%s: the real end is %+v, want revision %d in the segment holding it", c.name, got, c.want)
		}
	}
}

func segKey(first, last int64) string {
	return "p/_journal/c/" + string(rune('a'+first%26)) + string(rune('a'+last%26))
}
