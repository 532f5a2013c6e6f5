package journal_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func testHeader() journal.Header {
	return journal.Header{Format: journal.FormatRevoking, ClusterID: "c1", BaseBackup: "b1", BaseRev: 10, FirstRev: 11, LastRev: 13,
		Received: map[int64]int64{11: 1000, 13: 2000}, Leases: []journal.Lease{{ID: 7, TTL: 60, Rev: 12}},
		// Found gone (lookup failed) after a delete before this segment.
		Revoking: []journal.PendingRevoke{{ID: 5, Last: 9, SeenGone: 40}, {ID: 6, Last: 12, SeenGone: -1}}}
}

func testEvents() []journal.Event {
	return []journal.Event{
		{Rev: 11, Sub: 0, Type: journal.Put, Key: []byte("a"), Value: []byte("1"), CreateRev: 11, Version: 1},
		{Rev: 12, Sub: 0, Type: journal.Put, Key: []byte("b"), Value: []byte("2"), CreateRev: 12, Version: 1, Lease: 7},
		{Rev: 12, Sub: 1, Type: journal.Delete, Key: []byte("a")},
		{Rev: 13, Sub: 0, Type: journal.Put, Key: []byte("b"), Value: []byte{0, 0xff, '\n'}, CreateRev: 12, Version: 2, Lease: 7},
	}
}

// rawSegment writes lines as a segment would, bypassing Encode's checks:
// the header, the events and a trailer counting n with a correct sha256.
func rawSegment(t *testing.T, h journal.Header, events []journal.Event, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	if err := enc.Encode(h); err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	sum := sha256.Sum256(b.Bytes())
	tr, _ := json.Marshal(map[string]any{"end": map[string]any{"events": n, "sha256": hex.EncodeToString(sum[:])}})
	b.Write(append(tr, '\n'))
	return b.Bytes()
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	h := testHeader()
	h.Events = 0
	if err := journal.Encode(&b, h, testEvents()); err != nil {
		t.Fatal(err)
	}
	got, events, err := journal.Decode(bytes.NewReader(b.Bytes()), "k", journal.Want{ClusterID: "c1", BaseBackup: "b1", FirstRev: 11, LastRev: 13})
	if err != nil {
		t.Fatal(err)
	}
	h.Events = 4
	if !jsonEqual(got, h) || !jsonEqual(events, testEvents()) {
		t.Fatalf("round trip:\n%+v\n%+v", got, events)
	}
	// The format is the documented JSON lines.
	if lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n"); len(lines) != 6 || !strings.HasPrefix(lines[5], `{"end":{"events":4,"sha256":"`) {
		t.Fatalf("lines: %q", lines)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func TestEncodeRefuses(t *testing.T) {
	t.Parallel()
	evs := testEvents()
	evs = []journal.Event{evs[0], evs[3], {Rev: 13, Sub: 1, Type: journal.Delete, Key: []byte("a")}} // revision 12 gone
	if err := journal.Encode(io.Discard, testHeader(), evs); !journal.IsReason(err, journal.ReasonGap) {
		t.Fatalf("a gap: %v", err)
	}
	if err := journal.Encode(io.Discard, testHeader(), nil); !journal.IsReason(err, journal.ReasonCount) {
		t.Fatalf("empty: %v", err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	want := journal.Want{ClusterID: "c1", BaseBackup: "b1", FirstRev: 11, LastRev: 13}
	good := func() (journal.Header, []journal.Event) { h := testHeader(); h.Events = 4; return h, testEvents() }
	type tc struct {
		name   string
		raw    func() []byte
		want   journal.Want
		reason journal.Reason
		detail string
	}
	cases := []tc{
		{"not a segment", func() []byte { return []byte("hello\n") }, want, journal.ReasonFormat, "not a segment header"},
		{"empty", func() []byte { return nil }, want, journal.ReasonTruncated, "no header"},
		{"format", func() []byte { h, e := good(); h.Format = 4; return rawSegment(t, h, e, 4) }, want, journal.ReasonFormat, "format 4, this tool reads formats 1 to 3"},
		{"format 2 with catch-ups", func() []byte {
			h, e := good()
			h.Format, h.CaughtUp = 2, []journal.CatchUp{{From: 11, To: 13, At: 1000}}
			return rawSegment(t, h, e, 4)
		}, want, journal.ReasonFormat, "format 2 with catch-ups (format 3)"},
		{"catch-up outside", func() []byte {
			h, e := good()
			h.Format, h.CaughtUp = 3, []journal.CatchUp{{From: 14, To: 20, At: 1000}}
			return rawSegment(t, h, e, 4)
		}, want, journal.ReasonRange, "a catch-up of revisions 14-20"},
		{"catch-up backwards", func() []byte {
			h, e := good()
			h.Format, h.CaughtUp = 3, []journal.CatchUp{{From: 12, To: 11, At: 1000}}
			return rawSegment(t, h, e, 4)
		}, want, journal.ReasonRange, "a catch-up of revisions 12-11"},
		{"catch-up without a time", func() []byte {
			h, e := good()
			h.Format, h.CaughtUp = 3, []journal.CatchUp{{From: 5, To: 12}}
			return rawSegment(t, h, e, 4)
		}, want, journal.ReasonRange, "a catch-up of revisions 5-12 at 0"},
		{"too many catch-ups", func() []byte {
			h, e := good()
			h.Format, h.CaughtUp = 3, make([]journal.CatchUp, 65)
			return rawSegment(t, h, e, 4)
		}, want, journal.ReasonFormat, "65 catch-ups, a segment carries 64 at most"},
		{"format 1 with pending revokes", func() []byte { h, e := good(); h.Format = 1; return rawSegment(t, h, e, 4) }, want, journal.ReasonFormat, "format 1 with pending revokes"},
		{"cluster", func() []byte { h, e := good(); return rawSegment(t, h, e, 4) }, journal.Want{ClusterID: "c2"}, journal.ReasonCluster, `cluster "c1", not "c2"`},
		{"base backup", func() []byte { h, e := good(); return rawSegment(t, h, e, 4) }, journal.Want{BaseBackup: "b0"}, journal.ReasonBase, `backup "b1", not "b0"`},
		{"key range", func() []byte { h, e := good(); return rawSegment(t, h, e, 4) }, journal.Want{FirstRev: 11, LastRev: 14}, journal.ReasonRange, "its key names 11-14"},
		{"at or before base", func() []byte { h, e := good(); h.BaseRev = 11; return rawSegment(t, h, e, 4) }, journal.Want{}, journal.ReasonRange, "after base revision 11"},
		{"outside range", func() []byte {
			h, e := good()
			h.Events = 5
			return rawSegment(t, h, append(e, journal.Event{Rev: 14, Type: journal.Put, Key: []byte("x")}), 5)
		}, want, journal.ReasonRange, "revision 14, outside 11-13"},
		{"revision order", func() []byte { h, e := good(); e[0], e[3] = e[3], e[0]; return rawSegment(t, h, e, 4) }, want, journal.ReasonGap, "first event is at revision 13"},
		{"revision backwards", func() []byte {
			h, e := good()
			e = []journal.Event{e[0], e[1], e[2], e[3], e[0]}
			h.Events = 5
			return rawSegment(t, h, e, 5)
		}, want, journal.ReasonOrder, "revision 11 after revision 13"},
		{"sub order", func() []byte { h, e := good(); e[1], e[2] = e[2], e[1]; return rawSegment(t, h, e, 4) }, want, journal.ReasonOrder, "starts at sub 1"},
		{"sub skipped", func() []byte { h, e := good(); e[2].Sub = 2; return rawSegment(t, h, e, 4) }, want, journal.ReasonOrder, "sub 2 after sub 0"},
		{"gap", func() []byte {
			h, e := good()
			h.Events = 3
			return rawSegment(t, h, []journal.Event{e[0], e[3], {Rev: 13, Sub: 1, Type: journal.Delete, Key: []byte("z")}}, 3)
		}, want, journal.ReasonGap, "revisions 12-12 have no events"},
		{"ends early", func() []byte { h, e := good(); h.Events = 3; return rawSegment(t, h, e[:3], 3) }, want, journal.ReasonGap, "last event is at revision 12"},
		{"header count", func() []byte { h, e := good(); h.Events = 5; return rawSegment(t, h, e, 4) }, want, journal.ReasonCount, "4 events, its header counts 5"},
		{"trailer count", func() []byte { h, e := good(); return rawSegment(t, h, e, 3) }, want, journal.ReasonCount, "its trailer counts 3"},
		{"too few for its revisions", func() []byte { h, e := good(); h.Events = 2; return rawSegment(t, h, e, 4) }, want, journal.ReasonCount, "2 events for 3 revisions"},
		{"truncated at a line", func() []byte {
			h, e := good()
			b := rawSegment(t, h, e, 4)
			return b[:bytes.LastIndexByte(b[:len(b)-1], '\n')+1]
		}, want, journal.ReasonTruncated, "without its trailer"},
		{"truncated mid-line", func() []byte { h, e := good(); b := rawSegment(t, h, e, 4); return b[:len(b)-30] }, want, journal.ReasonDamaged, "unexpected EOF"},
		{"damaged", func() []byte {
			h, e := good()
			b := rawSegment(t, h, e, 4)
			i := bytes.Index(b, []byte(`"key":"Yg=="`))
			b[i+8] = 'Z' // "Zg==": key "f"
			return b
		}, want, journal.ReasonDamaged, "trailer records"},
		{"after the trailer", func() []byte { h, e := good(); return append(rawSegment(t, h, e, 4), "{}\n"...) }, want, journal.ReasonDamaged, "after its trailer"},
		{"bad type", func() []byte { h, e := good(); e[1].Type = "patch"; return rawSegment(t, h, e, 4) }, want, journal.ReasonFormat, `type "patch"`},
		{"pending revoke of lease 0", func() []byte {
			h, e := good()
			h.Revoking = []journal.PendingRevoke{{ID: 0, Last: 12, SeenGone: 20}}
			return rawSegment(t, h, e, 4)
		}, want, journal.ReasonFormat, "pending revoke of lease 0"},
		{"pending revoke after the segment", func() []byte {
			h, e := good()
			h.Revoking = []journal.PendingRevoke{{ID: 7, Last: 14, SeenGone: 20}}
			return rawSegment(t, h, e, 4)
		}, want, journal.ReasonRange, "delete at revision 14, not within 1-13"},
		{"pending revoke at revision 0", func() []byte {
			h, e := good()
			h.Revoking = []journal.PendingRevoke{{ID: 7, Last: 0, SeenGone: 20}}
			return rawSegment(t, h, e, 4)
		}, want, journal.ReasonRange, "delete at revision 0, not within 1-13"},
		{"pending revoke twice", func() []byte {
			h, e := good()
			h.Revoking = []journal.PendingRevoke{{ID: 7, Last: 12, SeenGone: 20}, {ID: 7, Last: 13, SeenGone: -1}}
			return rawSegment(t, h, e, 4)
		}, want, journal.ReasonFormat, "lease 7: two pending revokes"},
		{"pending revoke found gone at 0", func() []byte {
			h, e := good()
			h.Revoking = []journal.PendingRevoke{{ID: 7, Last: 12, SeenGone: 0}}
			return rawSegment(t, h, e, 4)
		}, want, journal.ReasonFormat, "found gone at revision 0"},
		{"pending revoke found gone at -2", func() []byte {
			h, e := good()
			h.Revoking = []journal.PendingRevoke{{ID: 7, Last: 12, SeenGone: -2}}
			return rawSegment(t, h, e, 4)
		}, want, journal.ReasonFormat, "found gone at revision -2"},
		{"pending revoke already placed", func() []byte {
			h, e := good()
			h.Revoking = []journal.PendingRevoke{{ID: 7, Last: 12, SeenGone: 13}}
			return rawSegment(t, h, e, 4)
		}, want, journal.ReasonFormat, "found gone at revision 13, not after the segment's last, 13"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := journal.Decode(bytes.NewReader(c.raw()), "p/_journal/c1/seg", c.want)
			var se *journal.SegmentError
			if !errors.As(err, &se) || se.Reason != c.reason || se.Key != "p/_journal/c1/seg" || !strings.Contains(err.Error(), c.detail) {
				t.Fatalf("got %v; want reason %q naming the key and %q", err, c.reason, c.detail)
			}
		})
	}
}

func TestSegmentStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	layout := memLayout
	st := memstore.New()
	key := testfix.NewAgeKey(t)
	enc := objectio.Encoding{Compression: objectio.CompressZstd, Recipients: testfix.RecipientsOf(t, key)}
	h := testHeader()
	info, err := journal.WriteSegment(ctx, st, layout, enc, h, testEvents())
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != layout.JournalSegmentKey("c1", 11, 13) || info.Written.StoredSize == 0 {
		t.Fatalf("info %+v", info)
	}
	if _, err := journal.WriteSegment(ctx, st, layout, enc, h, testEvents()); !journal.IsReason(err, journal.ReasonConflict) {
		t.Fatalf("second create: %v", err)
	}
	ids := key.IDs
	got, events, err := journal.ReadSegment(ctx, st, layout, info.Key, ids, journal.Want{ClusterID: "c1", BaseBackup: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Events != 4 || !jsonEqual(events, testEvents()) {
		t.Fatalf("read %+v %+v", got, events)
	}
	// Plain (uncompressed, unencrypted) reads too.
	h2 := h
	h2.FirstRev, h2.LastRev = 14, 14
	plain, err := journal.WriteSegment(ctx, st, layout, objectio.Encoding{Compression: objectio.CompressNone}, h2, []journal.Event{{Rev: 14, Type: journal.Delete, Key: []byte("b")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := journal.ReadSegment(ctx, st, layout, plain.Key, nil, journal.Want{ClusterID: "c1"}); err != nil {
		t.Fatal(err)
	}

	// Refusals by name through the store.
	stored := testfix.ReadObject(t, st, info.Key)
	tampered := bytes.Clone(stored)
	tampered[len(tampered)-5] ^= 1
	badKey := layout.JournalSegmentKey("c1", 15, 17)
	if _, err := st.Put(ctx, badKey, bytes.NewReader(tampered)); err != nil {
		t.Fatal(err)
	}
	moved := layout.JournalSegmentKey("c1", 11, 12)
	if _, err := st.Put(ctx, moved, bytes.NewReader(stored)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key    string
		want   journal.Want
		reason journal.Reason
	}{
		{badKey, journal.Want{}, journal.ReasonDamaged},                  // tampered (age)
		{moved, journal.Want{}, journal.ReasonRange},                     // renamed: its key names other revisions
		{info.Key, journal.Want{ClusterID: "c2"}, journal.ReasonCluster}, // asked for another cluster
		{layout.JournalSegmentKey("c1", 20, 21), journal.Want{}, journal.ReasonMissing},
	} {
		_, _, err := journal.ReadSegment(ctx, st, layout, c.key, ids, c.want)
		var se *journal.SegmentError
		if !errors.As(err, &se) || se.Reason != c.reason || se.Key != c.key {
			t.Errorf("%s: got %v, want %s", c.key, err, c.reason)
		}
	}
	// Without an identity, an encrypted segment is not read.
	if _, _, err := journal.ReadSegment(ctx, st, layout, info.Key, nil, journal.Want{}); err == nil {
		t.Fatal("read without identities")
	}
}

func TestListSegmentsChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	layout := memLayout
	put := func(st *memstore.Store, ranges ...[2]int64) {
		for _, r := range ranges {
			if _, err := st.Put(ctx, layout.JournalSegmentKey("c1", r[0], r[1]), strings.NewReader("x")); err != nil {
				t.Fatal(err)
			}
		}
		// Another cluster's segments and other objects are not its.
		st.Put(ctx, layout.JournalSegmentKey("c10", 1, 100), strings.NewReader("x"))
		st.Put(ctx, layout.JournalPrefix("c1")+"notes.txt", strings.NewReader("x"))
	}
	for _, c := range []struct {
		name    string
		ranges  [][2]int64
		base    int64
		reach   int64
		n       int
		reason  journal.Reason
		problem string
	}{
		{"none", nil, 10, 10, 0, "", ""},
		{"continuous", [][2]int64{{11, 20}, {21, 21}, {22, 40}}, 10, 40, 3, "", ""},
		{"earlier base passed over", [][2]int64{{3, 8}, {9, 12}, {11, 20}, {21, 30}}, 10, 30, 2, "", ""},
		{"first missing", [][2]int64{{12, 20}}, 10, 10, 0, journal.ReasonGap, "revisions 11-11 are in no segment"},
		{"missing middle", [][2]int64{{11, 20}, {31, 40}}, 10, 20, 1, journal.ReasonGap, "revisions 21-30"},
		{"overlap", [][2]int64{{11, 20}, {15, 25}}, 10, 20, 1, journal.ReasonOverlap, "holds revisions 15-25"},
		{"same start", [][2]int64{{11, 20}, {11, 25}}, 10, 10, 0, journal.ReasonOverlap, "starts at revision 11"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := memstore.New()
			put(st, c.ranges...)
			ch, err := journal.ListSegments(ctx, st, layout, "c1", c.base)
			if err != nil {
				t.Fatal(err)
			}
			if ch.Reach != c.reach || len(ch.Segments) != c.n {
				t.Fatalf("reach %d with %d segments, want %d with %d", ch.Reach, len(ch.Segments), c.reach, c.n)
			}
			switch {
			case c.reason == "" && ch.Problem != nil:
				t.Fatalf("problem %v", ch.Problem)
			case c.reason != "" && (ch.Problem == nil || ch.Problem.Reason != c.reason || !strings.Contains(ch.Problem.Error(), c.problem)):
				t.Fatalf("problem %v, want %s %q", ch.Problem, c.reason, c.problem)
			}
		})
	}
}

func TestChooseBase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	layout := memLayout
	b10, b25, b60 := journal.Base{Name: "b10", Rev: 10}, journal.Base{Name: "b25", Rev: 25}, journal.Base{Name: "b60", Rev: 60}
	for _, c := range []struct {
		name   string
		ranges [][2]int64
		bases  []journal.Base
		want   string
		reach  int64
		gap    bool
	}{
		{"fresh", nil, []journal.Base{b10, b25}, "b25", 25, false},
		{"resume the base it continues", [][2]int64{{11, 20}, {21, 40}}, []journal.Base{b25, b10}, "b10", 40, false},
		{"a newer backup past the journal", [][2]int64{{11, 20}, {21, 40}}, []journal.Base{b10, b25, b60}, "b60", 60, false},
		{"after a gap, the new base's journal", [][2]int64{{11, 20}, {26, 30}, {31, 40}}, []journal.Base{b10, b25}, "b25", 40, false},
		{"broken", [][2]int64{{11, 20}, {31, 40}}, []journal.Base{b10, b25}, "", 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := stubSegments(t, ctx, c.ranges)
			b, ch, err := journal.ChooseBase(ctx, st, layout, "c1", c.bases)
			var gap *journal.GapError
			if c.gap {
				if !errors.As(err, &gap) {
					t.Fatalf("got %v, want a gap", err)
				}
				t.Log(err)
				return
			}
			if err != nil || b.Name != c.want || ch.Reach != c.reach {
				t.Fatalf("got %+v reach %v, %v; want %s reaching %d", b, ch, err, c.want, c.reach)
			}
		})
	}
	if _, _, err := journal.ChooseBase(ctx, memstore.New(), layout, "c1", nil); err == nil {
		t.Fatal("no base: no error")
	}
}
