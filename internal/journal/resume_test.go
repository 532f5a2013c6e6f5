package journal_test

import (
	"context"
	"errors"
	"testing"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// ChooseBase after journal retention pruned the base a journal started
// from: a kept backup inside the stored chain continues it (no gap); a
// base whose revision + 1 is in no stored segment, or a chain broken
// after it, is a gap.
func TestChooseBaseAfterPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	layout := memLayout
	b10, b25, b40, b60 := journal.Base{Name: "b10", Rev: 10}, journal.Base{Name: "b25", Rev: 25}, journal.Base{Name: "b40", Rev: 40}, journal.Base{Name: "b60", Rev: 60}
	for _, c := range []struct {
		name    string
		ranges  [][2]int64
		bases   []journal.Base
		want    string
		reach   int64
		first   int64 // the chain's first segment's FirstRev
		gapFrom int64 // a *GapError from this revision
		reason  journal.Reason
	}{
		{"pruned base, the kept one inside a segment", [][2]int64{{21, 30}, {31, 50}}, []journal.Base{b25}, "b25", 50, 21, 0, ""},
		{"pruned base, the kept one at a segment's end", [][2]int64{{31, 40}, {41, 50}}, []journal.Base{b40}, "b40", 50, 41, 0, ""},
		{"base inside the chain, the first base kept: the first", [][2]int64{{11, 30}, {31, 50}}, []journal.Base{b25, b10}, "b10", 50, 11, 0, ""},
		{"pruned base, two kept inside: the oldest", [][2]int64{{21, 30}, {31, 50}}, []journal.Base{b40, b25}, "b25", 50, 21, 0, ""},
		{"a newer backup past the journal: fresh", [][2]int64{{21, 30}, {31, 50}}, []journal.Base{b25, b60}, "b60", 60, 0, 0, ""},
		{"base inside the chain, a real gap after it", [][2]int64{{21, 30}, {36, 50}}, []journal.Base{b25}, "", 0, 0, 31, journal.ReasonGap},
		{"pruned too far: the base's next revision in no segment", [][2]int64{{31, 50}}, []journal.Base{b25}, "", 0, 0, 26, journal.ReasonGap},
		{"an overlap inside the chain", [][2]int64{{21, 30}, {31, 40}, {35, 50}}, []journal.Base{b25}, "", 0, 0, 41, journal.ReasonOverlap},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st := stubSegments(t, ctx, c.ranges)
			b, ch, err := journal.ChooseBase(ctx, st, layout, "c1", c.bases)
			if c.gapFrom != 0 {
				var gap *journal.GapError
				if !errors.As(err, &gap) || gap.From != c.gapFrom || !journal.IsReason(err, c.reason) {
					t.Fatalf("got %+v, %v; want a gap from %d (%s)", b, err, c.gapFrom, c.reason)
				}
				t.Log(err)
				return
			}
			if err != nil || b.Name != c.want || ch.Reach != c.reach || ch.Problem != nil {
				t.Fatalf("got %+v, %+v, %v; want %s reaching %d", b, ch, err, c.want, c.reach)
			}
			if c.first != 0 && (len(ch.Segments) == 0 || ch.Segments[0].FirstRev != c.first) {
				t.Fatalf("the chain starts at %+v, want the segment from %d", ch.Segments, c.first)
			}
			if c.first == 0 && len(ch.Segments) != 0 {
				t.Fatalf("a fresh journal continues %+v", ch.Segments)
			}
		})
	}
}

// Continues: the one rule of a chain's segments: the same cluster and
// the next revision; the bases they name may differ.
func TestContinues(t *testing.T) {
	t.Parallel()
	prev := journal.Header{ClusterID: "c1", BaseBackup: "a", BaseRev: 10, FirstRev: 11, LastRev: 20}
	for _, c := range []struct {
		name   string
		h      journal.Header
		reason journal.Reason
	}{
		{"same base", journal.Header{ClusterID: "c1", BaseBackup: "a", BaseRev: 10, FirstRev: 21, LastRev: 30}, ""},
		{"another base inside the chain", journal.Header{ClusterID: "c1", BaseBackup: "b", BaseRev: 15, FirstRev: 21, LastRev: 30}, ""},
		{"a gap", journal.Header{ClusterID: "c1", BaseBackup: "a", BaseRev: 10, FirstRev: 22, LastRev: 30}, journal.ReasonGap},
		{"an overlap", journal.Header{ClusterID: "c1", BaseBackup: "a", BaseRev: 10, FirstRev: 20, LastRev: 30}, journal.ReasonOverlap},
		{"another cluster", journal.Header{ClusterID: "c2", BaseBackup: "a", BaseRev: 10, FirstRev: 21, LastRev: 30}, journal.ReasonCluster},
	} {
		err := journal.Continues("k", &prev, c.h)
		if (c.reason == "" && err != nil) || (c.reason != "" && !journal.IsReason(err, c.reason)) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.reason)
		}
	}
	if err := journal.Continues("k", nil, prev); err != nil {
		t.Errorf("a chain's first segment: %v", err)
	}
}

// Source.Events reads a chain whose segments name different bases (a
// journal restarted from a kept backup inside it) as one, and still
// refuses a real gap.
func TestSourceEventsAcrossBases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	layout := memLayout
	st := memstore.New()
	write := func(base string, baseRev, first, last int64) {
		t.Helper()
		h := journal.Header{ClusterID: "c1", BaseBackup: base, BaseRev: baseRev, FirstRev: first, LastRev: last}
		var evs []journal.Event
		for r := first; r <= last; r++ {
			evs = append(evs, journal.Event{Rev: r, Type: journal.Put, Key: []byte("k"), Value: []byte{byte(r)}, CreateRev: first, Version: r - first + 1})
		}
		writeSegment(t, ctx, st, layout, h, evs)
	}
	write("a", 10, 21, 30) // a's journal, its first segments pruned
	write("b", 25, 31, 40) // restarted from b, inside it
	src := journal.NewSource(st, layout, "c1", nil)
	seq, err := src.Events(ctx, 26, 40)
	if err != nil {
		t.Fatal(err)
	}
	revs := eventRevs(t, seq)
	if len(revs) != 15 || revs[0] != 26 || revs[14] != 40 {
		t.Fatalf("events at %v, want 26 to 40", revs)
	}

	write("b", 25, 45, 50) // revisions 41-44 missing
	if _, err := src.Events(ctx, 26, 50); !journal.IsReason(err, journal.ReasonGap) {
		t.Fatalf("a real gap: got %v", err)
	}
}
