package journal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

func TestFindTable(t *testing.T) {
	t.Parallel()
	seg1 := journal.Segment{
		Header: journal.Header{FirstRev: 11, LastRev: 13, Received: map[int64]int64{11: 1000, 13: 3000}},
		Events: []journal.Event{putAt(11, "/ns/a/x"), putAt(12, "/ns/b/y"), {Rev: 13, Type: journal.Delete, Key: []byte("/ns/a/x")}, {Rev: 13, Sub: 1, Type: journal.Delete, Key: []byte("/ns/a/z")}},
	}
	// Another base's segment over the same revisions, then more.
	seg2 := journal.Segment{
		Header: journal.Header{FirstRev: 12, LastRev: 15, Received: map[int64]int64{12: 2000, 15: 9000}},
		Events: []journal.Event{putAt(12, "/ns/b/y"), {Rev: 13, Type: journal.Delete, Key: []byte("/ns/a/x")}, {Rev: 13, Sub: 1, Type: journal.Delete, Key: []byte("/ns/a/z")}, putAt(14, "/ns/a"), putAt(15, "/ns/a/x")},
	}
	segs := []journal.Segment{seg1, seg2}
	ms := func(n int64) time.Time { return time.UnixMilli(n).UTC() }
	for _, tc := range []struct {
		name string
		q    journal.Query
		want string // rev.sub type key @ms
	}{
		{"key", journal.Query{Key: []byte("/ns/a/x")}, "11.0 put /ns/a/x @1000, 13.0 delete /ns/a/x @3000, 15.0 put /ns/a/x @9000"},
		{"prefix", journal.Query{Prefix: []byte("/ns/a/")}, "11.0 put /ns/a/x @1000, 13.0 delete /ns/a/x @3000, 13.1 delete /ns/a/z @3000, 15.0 put /ns/a/x @9000"},
		{"prefix not key", journal.Query{Key: []byte("/ns/a")}, "14.0 put /ns/a @2000"},
		{"since", journal.Query{Prefix: []byte("/ns/"), Since: ms(2950)}, "13.0 delete /ns/a/x @3000, 13.1 delete /ns/a/z @3000, 15.0 put /ns/a/x @9000"},
		{"since, to within ReceivedEvery", journal.Query{Prefix: []byte("/ns/"), Since: ms(2050)}, "13.0 delete /ns/a/x @3000, 13.1 delete /ns/a/z @3000, 14.0 put /ns/a @2000, 15.0 put /ns/a/x @9000"},
		{"since skips a segment", journal.Query{Prefix: []byte("/ns/"), Since: ms(5000)}, "15.0 put /ns/a/x @9000"},
		{"none", journal.Query{Key: []byte("/other")}, ""},
	} {
		var got []string
		for _, c := range journal.Find(tc.q, segs) {
			got = append(got, fmt.Sprintf("%d.%d %s %s @%d", c.Rev, c.Sub, c.Type, c.Key, c.Time.UnixMilli()))
		}
		if g := strings.Join(got, ", "); g != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, g, tc.want)
		}
	}
}

func TestRevisionAt(t *testing.T) {
	t.Parallel()
	hs := []journal.Header{
		{FirstRev: 11, LastRev: 20, Received: map[int64]int64{11: 1000, 15: 1100, 20: 1500}},
		{FirstRev: 21, LastRev: 30, Received: map[int64]int64{21: 4000, 30: 4000}},
	}
	for _, tc := range []struct {
		at   int64
		want int64
	}{{1000, 11}, {1099, 11}, {1100, 15}, {3999, 20}, {4000, 30}, {99999, 30}} {
		got, err := journal.RevisionAt(hs, time.UnixMilli(tc.at))
		if err != nil || got != tc.want {
			t.Errorf("at %d: %d %v, want %d", tc.at, got, err, tc.want)
		}
	}
	if _, err := journal.RevisionAt(hs, time.UnixMilli(999)); err == nil || !strings.Contains(err.Error(), "before the journal's first revision 11") {
		t.Errorf("before: %v", err)
	}
}

func TestSourceEventsAndLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, write := memJournal(t, ctx)
	src := journal.NewSource(st, memLayout, "c1", nil)
	if _, err := src.Events(ctx, 11, 12); !errors.Is(err, journal.ErrNoJournal) {
		t.Fatalf("no journal: %v", err)
	}
	write(11, 13, []journal.Lease{{ID: 1, TTL: 60, Rev: 12}})
	write(14, 16, []journal.Lease{{ID: 2, TTL: 30, Rev: 16}, {ID: 1, TTL: 60, Rev: 14, Revoked: 15}})
	write(19, 20, nil)                     // after a gap
	events, err := src.Events(ctx, 12, 15) // from inside the first segment
	if err != nil {
		t.Fatal(err)
	}
	revs := eventRevs(t, events)
	if fmt.Sprint(revs) != "[12 13 14 15]" {
		t.Fatalf("revisions %v", revs)
	}
	leases, err := src.Leases(ctx, 12, 15)
	if err != nil || fmt.Sprint(leases) != "[{1 60 12 15 false}]" {
		t.Fatalf("leases %v %v", leases, err)
	}
	_, err = src.Events(ctx, 12, 19)
	var re *journal.ReachError
	if !errors.As(err, &re) || re.Reach != 16 || !strings.Contains(err.Error(), "reaches revision 16 only, not 19") || !journal.IsReason(err, journal.ReasonGap) {
		t.Fatalf("past the gap: %v", err)
	}
	if _, err := src.Events(ctx, 5, 12); err == nil || !strings.Contains(err.Error(), "no segment with revision 5") {
		t.Fatalf("before the journal: %v", err)
	}
	if rev, err := src.RevisionAt(ctx, time.UnixMilli(1500)); err != nil || rev != 14 {
		t.Fatalf("RevisionAt %d %v", rev, err)
	}
}

// A replay that ends inside a segment still reads it to its trailer:
// nothing of a segment is good before its sha256 checked out. A segment
// damaged after the last revision replayed (a value changed, the JSON
// still decodes) fails the replay by name, instead of having its first
// events applied unchecked.
func TestSourceEventsChecksTheLastSegmentWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	layout := memLayout
	st := memstore.New()
	info, err := journal.WriteSegment(ctx, st, layout, objectio.Encoding{Compression: objectio.CompressNone}, putsHeader(11, 16, 0, nil), putsEvents(11, 16))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := st.Get(ctx, info.Key)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(rc)
	rc.Close()
	// The value of revision 16's put: "v" becomes "w".
	i := bytes.LastIndex(raw, []byte(`"value":"dg=="`))
	if i < 0 || !bytes.Contains(raw[:i], []byte(`"rev":16`)) {
		t.Fatalf("no value of revision 16 in %q", raw)
	}
	copy(raw[i:], `"value":"dw=="`)
	if _, err := st.Put(ctx, info.Key, bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	events, err := journal.NewSource(st, layout, "c1", nil).Events(ctx, 12, 13)
	if err != nil {
		t.Fatal(err)
	}
	var revs []int64
	var last error
	for ev, err := range events {
		if err != nil {
			last = err
			break
		}
		revs = append(revs, ev.Rev)
	}
	if !journal.IsReason(last, journal.ReasonDamaged) || !strings.Contains(last.Error(), info.Key) {
		t.Fatalf("revisions %v, then %v: want the damaged segment refused by name", revs, last)
	}
}

// failGet is a store whose Get of key fails as a store that does not
// answer.
type failGet struct {
	store.Store
	key string
}

func (f *failGet) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if key == f.key {
		return nil, fmt.Errorf("get %s: %w", key, store.ErrStalled)
	}
	return f.Store.Get(ctx, key)
}

// getCounter counts the objects read from a store.
type getCounter struct {
	store.Store
	mu   sync.Mutex
	gets int
}

func (g *getCounter) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	g.mu.Lock()
	g.gets++
	g.mu.Unlock()
	return g.Store.Get(ctx, key)
}

// --to-time finds its revision by binary search over the segments'
// headers, not by reading every one: the same answer as the full scan
// over 1,000 segments, in at most log2(1000) + 3 reads (a week of 30 s
// segments, 20,160, would take 17 where it took 20,160).
func TestRevisionAtReadsFewHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	layout := memLayout
	mem := memstore.New()
	const n = 1000
	for i := range int64(n) {
		writePuts(t, ctx, mem, layout, 11+3*i, 13+3*i, nil)
	}
	st := &getCounter{Store: mem}
	src := journal.NewSource(st, layout, "c1", nil)
	_, hs, err := src.Headers(ctx)
	if err != nil || len(hs) != n {
		t.Fatalf("%d headers, %v", len(hs), err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		at := time.UnixMilli(1100 + rnd.Int64N(3*n*100))
		want, werr := journal.RevisionAt(hs, at)
		st.gets = 0
		got, err := src.RevisionAt(ctx, at)
		if got != want || (err == nil) != (werr == nil) {
			t.Fatalf("at %d: %d %v, the full scan says %d %v", at.UnixMilli(), got, err, want, werr)
		}
		if limit := bits.Len(n) + 3; st.gets > limit {
			t.Fatalf("at %d: %d segments read, want at most %d", at.UnixMilli(), st.gets, limit)
		}
	}
	if _, err := src.RevisionAt(ctx, time.UnixMilli(1000)); err == nil || !strings.Contains(err.Error(), "before the journal's first revision 11") {
		t.Fatalf("before the journal: %v", err)
	}
}

// PointAt says whether the journal shows the state at a time: a time in a
// gap of its chain (the revision found ends a segment the next stored one
// does not continue) is refused by name, and a time after its last stored
// revision is marked PastEnd, for the caller to decide (a cluster idle
// since, or changes in no segment). Before, both mapped to the last
// revision before them, silently: a restore older than the time it named.
func TestPointAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := memstore.New()
	writePuts(t, ctx, mem, memLayout, 11, 13, nil) // received at rev*100 ms
	writePuts(t, ctx, mem, memLayout, 14, 16, nil)
	writePuts(t, ctx, mem, memLayout, 20, 22, nil) // after a gap: 17 to 19 in no segment
	src := journal.NewSource(mem, memLayout, "c1", nil)
	for _, tc := range []struct {
		at      int64
		rev     int64
		pastEnd bool
		gap     bool
	}{
		{at: 1250, rev: 11},                // 12 is not recorded: the first and last are
		{at: 1350, rev: 13},                // the end of a segment the next continues
		{at: 1600, rev: 16, gap: true},     // the end of the chain before the gap
		{at: 1950, rev: 16, gap: true},     // inside the gap
		{at: 2000, rev: 20},                // the first revision after it
		{at: 2150, rev: 20},                // 22, the last, was received later
		{at: 2250, rev: 22},                // within ReceivedEvery of the last
		{at: 2301, rev: 22, pastEnd: true}, // after the journal's end
		{at: 900000, rev: 22, pastEnd: true},
	} {
		p, err := src.PointAt(ctx, time.UnixMilli(tc.at))
		var ge *journal.TimeGapError
		switch {
		case tc.gap:
			if !errors.As(err, &ge) || ge.Before != 16 || ge.After != 20 || !strings.Contains(err.Error(), "falls in a gap") {
				t.Errorf("at %d: %+v %v, want the gap after 16", tc.at, p, err)
			}
			if _, rerr := src.RevisionAt(ctx, time.UnixMilli(tc.at)); !errors.As(rerr, &ge) {
				t.Errorf("RevisionAt at %d: %v, want the gap", tc.at, rerr)
			}
		case err != nil || p.Revision != tc.rev || p.PastEnd != tc.pastEnd:
			t.Errorf("at %d: %+v %v, want revision %d, past the end %v", tc.at, p, err, tc.rev, tc.pastEnd)
		case tc.pastEnd && (p.LastRev != 22 || p.LastReceived.UnixMilli() != 2200):
			t.Errorf("at %d: the end %d received %v, want 22 at 2200", tc.at, p.LastRev, p.LastReceived)
		}
	}
}

// A catch-up (a watch opened again: a restart, a leader change, a stall)
// delivers revisions etcd committed while no journal watched, with the
// catch-up's receive times. A time between the revision before it and the
// catch-up's first answer maps to no revision: which of them etcd had
// committed by then is unknown (before, it mapped to the revision before
// the window: older than the time, with exit 0). A time after that answer
// holds the whole catch-up, however late its revisions were received,
// also when they span several segments.
func TestPointAtCatchUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seg := func(mem store.Store, first, last int64, recv map[int64]int64, cu ...journal.CatchUp) {
		t.Helper()
		h := putsHeader(first, last, 0, nil)
		if recv != nil {
			h.Received = recv
		}
		h.CaughtUp = cu
		writeSegment(t, ctx, mem, memLayout, h, putsEvents(first, last))
	}
	// Caught up at 2100, when the watch had delivered 16, the revision of
	// the response holding it.
	cu := journal.CatchUp{From: 14, To: 16, At: 2100}
	mem := memstore.New()
	seg(mem, 11, 13, nil) // received at rev*100 ms
	seg(mem, 14, 16, map[int64]int64{14: 2050, 16: 2100}, cu)
	seg(mem, 17, 18, map[int64]int64{17: 2500, 18: 2600})
	// A catch-up over three segments, to revision 18: the first two sealed
	// before the watch caught up (open), the last after (closed at 2090).
	mem2 := memstore.New()
	seg(mem2, 11, 13, nil)
	seg(mem2, 14, 15, map[int64]int64{14: 2050, 15: 2060}, journal.CatchUp{From: 14, To: 15, Open: true})
	seg(mem2, 16, 17, map[int64]int64{16: 2070, 17: 2080}, journal.CatchUp{From: 14, To: 17, Open: true})
	seg(mem2, 18, 18, map[int64]int64{18: 2090}, journal.CatchUp{From: 14, To: 18, At: 2090})
	seg(mem2, 19, 20, map[int64]int64{19: 2500, 20: 2600})
	for _, tc := range []struct {
		st  store.Store
		at  int64
		rev int64 // 0: a window no journal watched
	}{
		{mem, 1250, 11},
		{mem, 1299, 11},
		{mem, 1300, 0}, // 13 received: 14 may have been committed right after it, unseen
		{mem, 1500, 0},
		{mem, 2000, 0},
		{mem, 2060, 0},  // 14 received; 15 and 16, committed before, not yet
		{mem, 2100, 16}, // caught up: all of it committed, the rest live
		{mem, 2550, 17},
		{mem2, 1500, 0},
		{mem2, 2055, 0}, // the next revision in a segment sealed before the watch caught up
		{mem2, 2065, 0}, // the next in the last, caught up later
		{mem2, 2090, 18},
		{mem2, 2095, 18},
		{mem2, 2500, 19},
	} {
		p, err := journal.NewSource(tc.st, memLayout, "c1", nil).PointAt(ctx, time.UnixMilli(tc.at))
		var ce *journal.CatchUpError
		switch {
		case tc.rev == 0:
			if !errors.As(err, &ce) || ce.Before < 13 || ce.CatchUp.From != 14 ||
				!strings.Contains(err.Error(), "did not watch") || !strings.Contains(err.Error(), "--to-revision") {
				t.Errorf("at %d: %+v %v, want the window before the catch-up", tc.at, p, err)
			}
		case err != nil || p.Revision != tc.rev:
			t.Errorf("at %d: %+v %v, want revision %d", tc.at, p, err, tc.rev)
		}
	}
}

// A revoke the capture had not placed when it sealed a segment rides in
// the headers after it (Header.Revoking) until it is placed, which may be
// several segments later (a catch-up cut by size, a capture killed and
// resumed): a replay reads on until it is, and no further. Lease 7's keys
// were deleted at 12 and it was found gone at 25: its revoke lands in the
// fourth segment, and a replay to 13 must remove it (it read one segment
// past its window before, and kept the lease on no key). Lease 8 had
// another key deleted at 18, its revoke's own: alive at 13, revoked at 19.
// Lease 9 is still pending where the journal ends: not returned (it may
// have lived on, with its keys).
func TestSourceLeasesReadOnUntilARevokeIsPlaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := memstore.New()
	write := func(first, last int64, leases []journal.Lease, pend ...journal.PendingRevoke) {
		t.Helper()
		h := putsHeader(first, last, 0, leases)
		h.Revoking = pend
		writeSegment(t, ctx, mem, memLayout, h, putsEvents(first, last))
	}
	write(11, 13, nil, journal.PendingRevoke{ID: 7, Last: 12, SeenGone: 25}, journal.PendingRevoke{ID: 8, Last: 12, SeenGone: 25})
	write(14, 16, nil, journal.PendingRevoke{ID: 7, Last: 12, SeenGone: 25}, journal.PendingRevoke{ID: 8, Last: 12, SeenGone: 25})
	write(17, 19, nil, journal.PendingRevoke{ID: 7, Last: 12, SeenGone: 25}, journal.PendingRevoke{ID: 8, Last: 18, SeenGone: 25})
	write(20, 26, []journal.Lease{{ID: 7, Rev: 12, Revoked: 12, TTLUnknown: true}, {ID: 8, Rev: 18, Revoked: 18, TTLUnknown: true}},
		journal.PendingRevoke{ID: 9, Last: 26, SeenGone: 30})
	write(27, 28, nil, journal.PendingRevoke{ID: 9, Last: 26, SeenGone: 30})
	write(29, 29, nil, journal.PendingRevoke{ID: 9, Last: 26, SeenGone: 30})
	st := &getCounter{Store: mem}
	src := journal.NewSource(st, memLayout, "c1", nil)
	for _, tc := range []struct {
		to    int64
		want  string
		reads int // at most: the window, its last again, then each read on
	}{
		{12, "[{7 0 12 12 true}]", 1 + 1 + 3},
		{13, "[{7 0 12 12 true}]", 1 + 1 + 3},
		{16, "[{7 0 12 12 true}]", 2 + 1 + 2},
		{19, "[{7 0 12 12 true} {8 0 18 18 true}]", 3 + 1 + 1},
		{26, "[{7 0 12 12 true} {8 0 18 18 true}]", 4 + 1 + 2},
		{29, "[{7 0 12 12 true} {8 0 18 18 true}]", 6},
	} {
		st.gets = 0
		got, err := src.Leases(ctx, 11, tc.to)
		if err != nil || fmt.Sprint(got) != tc.want {
			t.Errorf("leases to %d: %v %v, want %s", tc.to, got, err, tc.want)
		}
		if st.gets > tc.reads {
			t.Errorf("leases to %d: %d segments read, want at most %d", tc.to, st.gets, tc.reads)
		}
	}
	// A lease whose lookups keep failing rides in every header: the read
	// on stops after MaxLeaseReadOn segments, the lease kept (not
	// returned). A segment read on that cannot be read stops it too,
	// instead of refusing a replay of revisions before it.
	mem3 := memstore.New()
	for i := range int64(journal.MaxLeaseReadOn + 8) {
		h := putsHeader(11+i, 11+i, 0, nil)
		h.Revoking = []journal.PendingRevoke{{ID: 7, Last: 11, SeenGone: -1}}
		writeSegment(t, ctx, mem3, memLayout, h, putsEvents(11+i, 11+i))
	}
	st3 := &getCounter{Store: mem3}
	src3 := journal.NewSource(st3, memLayout, "c1", nil)
	got, err := src3.Leases(ctx, 11, 11)
	if err != nil || len(got) != 0 || st3.gets != 1+1+1+journal.MaxLeaseReadOn {
		t.Errorf("a revoke never placed: %v %v after %d segments read, want none after %d", got, err, st3.gets, 3+journal.MaxLeaseReadOn)
	}
	if u := src3.UnplacedRevokes(); fmt.Sprint(u.Leases) != "[7]" || !strings.Contains(u.Why, "not placed within 33 segments") {
		t.Errorf("unplaced: %+v", u)
	}
	// A store that does not answer fails the read (a retry may place
	// the revoke), past the next segment too.
	failing := &failGet{Store: mem3, key: memLayout.JournalSegmentKey("c1", 14, 14)}
	if _, err := journal.NewSource(failing, memLayout, "c1", nil).Leases(ctx, 11, 11); !journal.IsReason(err, journal.ReasonStore) {
		t.Errorf("a store error reading on: %v, want the read failed", err)
	}
	if _, err := mem3.Put(ctx, memLayout.JournalSegmentKey("c1", 14, 14), strings.NewReader("damaged")); err != nil {
		t.Fatal(err)
	}
	st3.gets = 0
	got, err = src3.Leases(ctx, 11, 11)
	if err != nil || len(got) != 0 || st3.gets != 5 {
		t.Errorf("a damaged segment read on: %v %v after %d segments read, want none after 5", got, err, st3.gets)
	}
	if u := src3.UnplacedRevokes(); fmt.Sprint(u.Leases) != "[7]" || !strings.Contains(u.Why, "0000000000000014") {
		t.Errorf("unplaced past a damaged segment: %+v", u)
	}
	// Placed: nothing unplaced; to before the delete: nothing asked.
	if _, err := src.Leases(ctx, 11, 13); err != nil || len(src.UnplacedRevokes().Leases) != 0 {
		t.Errorf("placed, still unplaced: %+v %v", src.UnplacedRevokes(), err)
	}
	if _, err := src.Leases(ctx, 27, 29); err != nil || fmt.Sprint(src.UnplacedRevokes().Leases) != "[9]" {
		t.Errorf("pending where the journal ends: %+v %v", src.UnplacedRevokes(), err)
	}
	// Nothing pending: one segment past the window, as before.
	mem2 := memstore.New()
	for _, r := range [][2]int64{{11, 12}, {13, 14}, {15, 16}} {
		writePuts(t, ctx, mem2, memLayout, r[0], r[1], nil)
	}
	st2 := &getCounter{Store: mem2}
	if _, err := journal.NewSource(st2, memLayout, "c1", nil).Leases(ctx, 11, 12); err != nil || st2.gets != 3 {
		t.Errorf("no revoke pending: %d segments read (%v), want 3: the window, again whole, the next", st2.gets, err)
	}
}
