package journal

import (
	"bytes"
	"time"
)

// Query is what `journal find` looks for: the changes of one key (Key) or
// of every key under a prefix (Prefix; "" with Key "" is every key),
// received at or after Since (zero: all).
type Query struct {
	Key    []byte
	Prefix []byte
	Since  time.Time
}

// Change is one change of a matching key: its revision and sub, put or
// delete, the key, and when the journal received the revision (to within
// ReceivedEvery: the receive time of the last recorded revision at or
// before it). A put carries the version and size of the value it wrote.
type Change struct {
	Rev       int64     `json:"revision"`
	Sub       int64     `json:"sub"`
	Type      string    `json:"type"`
	Key       string    `json:"key"`
	Time      time.Time `json:"time,omitzero"`
	Version   int64     `json:"version,omitempty"`
	ValueSize int       `json:"valueSize,omitempty"`
	Lease     int64     `json:"lease,omitempty"`
}

// Finder collects the changes matching a query from decoded segments,
// fed in revision order (Segment, then its events): pure, no store. An
// event already seen (a segment of another base holding the same
// revisions) is passed over, so the result is in (revision, sub) order,
// newest last, each change once.
type Finder struct {
	q       Query
	h       Header
	lastRev int64
	lastSub int64
	out     []Change
}

// NewFinder is a Finder for q.
func NewFinder(q Query) *Finder { return &Finder{q: q, lastRev: -1} }

// Skip reports whether a segment with header h holds nothing the query
// can match: every revision it holds was received before Since (less
// ReceivedEvery, the precision of the receive times).
func (f *Finder) Skip(h Header) bool {
	if f.q.Since.IsZero() || len(h.Received) == 0 {
		return false
	}
	var last int64
	for _, ms := range h.Received {
		last = max(last, ms)
	}
	return time.UnixMilli(last).Add(ReceivedEvery).Before(f.q.Since)
}

// Segment starts a segment: its events follow (Event).
func (f *Finder) Segment(h Header) { f.h = h }

// Event looks at one event of the current segment.
func (f *Finder) Event(ev Event) {
	if ev.Rev < f.lastRev || (ev.Rev == f.lastRev && ev.Sub <= f.lastSub) {
		return
	}
	f.lastRev, f.lastSub = ev.Rev, ev.Sub
	if !f.matches(ev.Key) {
		return
	}
	at := receivedAt(f.h, ev.Rev)
	// A revision's time is a lower bound, at most ReceivedEvery early.
	if !f.q.Since.IsZero() && !at.IsZero() && at.Add(ReceivedEvery).Before(f.q.Since) {
		return
	}
	c := Change{Rev: ev.Rev, Sub: ev.Sub, Type: ev.Type, Key: string(ev.Key), Time: at}
	if ev.Type == Put {
		c.Version, c.ValueSize, c.Lease = ev.Version, len(ev.Value), ev.Lease
	}
	f.out = append(f.out, c)
}

func (f *Finder) matches(key []byte) bool {
	if f.q.Key != nil {
		return bytes.Equal(key, f.q.Key)
	}
	return bytes.HasPrefix(key, f.q.Prefix)
}

// Changes are the matching changes so far, in (revision, sub) order.
func (f *Finder) Changes() []Change { return f.out }

// Find is a Finder over segments already decoded.
func Find(q Query, segs []Segment) []Change {
	f := NewFinder(q)
	for _, s := range segs {
		if f.Skip(s.Header) {
			continue
		}
		f.Segment(s.Header)
		for _, ev := range s.Events {
			f.Event(ev)
		}
	}
	return f.Changes()
}

// Segment is a decoded segment: its header and events.
type Segment struct {
	Header Header
	Events []Event
}
