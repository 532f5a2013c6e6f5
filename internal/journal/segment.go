package journal

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
)

// A segment's raw bytes (before objectio's compression and encryption)
// are JSON lines:
//
//	{"format":1,"clusterID":...,"firstRev":F,"lastRev":L,"events":N,...}   the Header (format 2: with "revoking")
//	{"rev":F,"sub":0,"type":"put","key":...,...}                           N Events, in (Rev, Sub) order
//	{"end":{"events":N,"sha256":"<hex>"}}                                  the trailer
//
// The trailer's sha256 is of every byte before it; a segment without its
// trailer is truncated. JSON lines rather than length-prefixed protobuf:
// the Event, Lease and Header types already carry their JSON names, a
// segment is readable with zstd -d (and age -d) alone, and zstd takes
// most of JSON's size back (keys and values are base64 inside, the field
// names repeat). One line per event streams, so a segment is never held
// whole by the Decoder, and no line over maxLine is read. An event line as
// the writer writes it is decoded without reflection (decodeEventFast);
// any other line by encoding/json, so both decode the same.

// Reason says why a segment was refused.
type Reason string

// Reasons a segment is refused.
const (
	ReasonFormat    Reason = "format"      // not a segment, or another format version
	ReasonCluster   Reason = "cluster"     // the header names another cluster
	ReasonBase      Reason = "base backup" // the header names another base backup
	ReasonRange     Reason = "range"       // its revisions are not the ones its key names, or an event is outside [FirstRev, LastRev]
	ReasonOrder     Reason = "order"       // events out of (revision, sub) order
	ReasonGap       Reason = "gap"         // a revision without events, or segments not continuing each other
	ReasonOverlap   Reason = "overlap"     // two segments holding the same revisions
	ReasonCount     Reason = "count"       // the header's or trailer's event count does not match the events
	ReasonTruncated Reason = "truncated"   // the segment ends before its trailer
	ReasonDamaged   Reason = "damaged"     // the bytes do not decode or their sha256 does not match, or tampered (age)
	ReasonMissing   Reason = "missing"     // the object is not in the store
	ReasonStore     Reason = "store"       // the store could not be read or written
	ReasonConflict  Reason = "conflict"    // another writer created the segment's key
	ReasonForged    Reason = "forged"      // not the segment its chain or a proof names: replaced (chain.go)
)

// SegmentError is a segment refused, by name: its key, the reason and what
// was found. errors.As finds it; Unwrap gives the cause when there is one
// (a store's error, a seal error, JSON's).
type SegmentError struct {
	Key    string
	Reason Reason
	Detail string
	Err    error
}

func (e *SegmentError) Error() string {
	s := fmt.Sprintf("journal segment %s: %s", e.Key, e.Reason)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *SegmentError) Unwrap() error { return e.Err }

// IsReason reports whether err holds a *SegmentError of reason r.
func IsReason(err error, r Reason) bool {
	var se *SegmentError
	return errors.As(err, &se) && se.Reason == r
}

// Want is what a reader expects of a segment; empty fields are not
// checked. ReadSegment fills FirstRev and LastRev from the key.
type Want struct {
	ClusterID  string
	BaseBackup string
	FirstRev   int64
	LastRev    int64
}

type trailer struct {
	Events int    `json:"events"`
	SHA256 string `json:"sha256"`
}

// line is one decoded line after the header: an Event or the trailer.
type line struct {
	Event
	End *trailer `json:"end,omitempty"`
}

// Encode writes a segment of events to w: the header (its Format and
// Events set here), the events and the trailer. It refuses (a
// *SegmentError naming key "" ) what the Decoder would refuse: events out
// of order, outside [FirstRev, LastRev], a revision without events.
func Encode(w io.Writer, h Header, events []Event) error {
	_, err := encode(w, h, events)
	return err
}

// encode is Encode, returning the trailer's sha256 (hex): what the next
// segment of the chain names as its Prev.
func encode(w io.Writer, h Header, events []Event) (string, error) {
	h.Format = formatOf(h)
	h.Events = len(events)
	c := newChecker("", h)
	if err := c.header(Want{}); err != nil {
		return "", err
	}
	for i := range events {
		if err := c.event(&events[i]); err != nil {
			return "", err
		}
	}
	if err := c.finish(len(events)); err != nil {
		return "", err
	}
	sum := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, sum), 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil {
		return "", err
	}
	for i := range events {
		if err := enc.Encode(&events[i]); err != nil {
			return "", err
		}
	}
	if err := bw.Flush(); err != nil {
		return "", err
	}
	digest := hex.EncodeToString(sum.Sum(nil))
	t := struct {
		End trailer `json:"end"`
	}{trailer{Events: len(events), SHA256: digest}}
	b, err := json.Marshal(t)
	if err != nil {
		return "", err
	}
	_, err = w.Write(append(b, '\n'))
	return digest, err
}

// Decoder reads a segment as it streams, checking it as it goes: Next
// returns io.EOF only once the whole segment was read and every check
// passed (the event count, the revisions through LastRev, the trailer's
// sha256). A caller applies nothing before that io.EOF, or applies into
// scratch it can throw away.
type Decoder struct {
	key  string
	r    *bufio.Reader
	sum  hash.Hash
	h    Header
	c    *checker
	n    int
	done bool
	err  error
	buf  []byte
	slab slab
	end  string // the trailer's sha256, once checked
}

// NewDecoder reads and checks the header of the segment key from r.
func NewDecoder(r io.Reader, key string, want Want) (*Decoder, error) {
	d := &Decoder{key: key, r: bufio.NewReaderSize(r, 256<<10), sum: sha256.New()}
	b, err := d.line()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, d.fail(ReasonTruncated, "no header", nil)
		}
		return nil, d.fail(ReasonDamaged, "reading the header", err)
	}
	d.sum.Write(b)
	b = b[:len(b)-1]
	// The format first, leniently: a later format is refused by its
	// number, not by a field this tool does not know.
	var f struct {
		Format int `json:"format"`
	}
	if json.Unmarshal(b, &f) == nil && f.Format > FormatCaughtUp {
		return nil, d.fail(ReasonFormat, fmt.Sprintf("format %d, this tool reads formats %d to %d", f.Format, FormatVersion, FormatCaughtUp), nil)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d.h); err != nil {
		return nil, d.fail(ReasonFormat, "the first line is not a segment header", err)
	}
	d.c = newChecker(key, d.h)
	if err := d.c.header(want); err != nil {
		return nil, err
	}
	return d, nil
}

// Header is the segment's header (checked against the Want).
func (d *Decoder) Header() Header { return d.h }

// Sum is the sha256 (hex) of the segment's raw bytes before its trailer,
// as its trailer records it and Next checked: empty until Next returned
// io.EOF. The next segment of its chain names it as its Header.Prev.
func (d *Decoder) Sum() string { return d.end }

// Next returns the next event; io.EOF after the last one once the segment
// checked out, or a *SegmentError.
func (d *Decoder) Next() (Event, error) {
	if d.err != nil {
		return Event{}, d.err
	}
	if d.done {
		return Event{}, io.EOF
	}
	raw, err := d.line()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Event{}, d.fail(ReasonTruncated, fmt.Sprintf("it ends after %d events, without its trailer", d.n), nil)
		}
		return Event{}, d.fail(ReasonDamaged, fmt.Sprintf("reading after %d events", d.n), err)
	}
	b := raw[:len(raw)-1]
	var l line
	if !decodeEventFast(b, &l.Event, &d.slab) {
		// Anything but a plain event line (the trailer among them):
		// encoding/json, as the writer's counterpart.
		l = line{}
		if err := json.Unmarshal(b, &l); err != nil {
			return Event{}, d.fail(ReasonDamaged, fmt.Sprintf("line %d", d.n+2), err)
		}
	}
	if l.End != nil {
		// The sha256 of every byte before the trailer.
		if got := hex.EncodeToString(d.sum.Sum(nil)); got != l.End.SHA256 {
			return Event{}, d.fail(ReasonDamaged, fmt.Sprintf("its bytes hash to %s, its trailer records %s", got, l.End.SHA256), nil)
		}
		if l.End.Events != d.n {
			return Event{}, d.fail(ReasonCount, fmt.Sprintf("%d events, its trailer counts %d", d.n, l.End.Events), nil)
		}
		if err := d.c.finish(d.n); err != nil {
			d.err = err
			return Event{}, err
		}
		if _, err := d.line(); !errors.Is(err, io.EOF) {
			return Event{}, d.fail(ReasonDamaged, "bytes after its trailer", err)
		}
		d.done, d.end = true, l.End.SHA256
		return Event{}, io.EOF
	}
	d.sum.Write(raw)
	if err := d.c.event(&l.Event); err != nil {
		d.err = err
		return Event{}, err
	}
	d.n++
	return l.Event, nil
}

// line returns the next line with its newline (valid until the next
// call), not hashed yet: the caller hashes it, the trailer excepted;
// io.EOF at the end, a line without its newline io.ErrUnexpectedEOF, and
// one over maxLine an error.
func (d *Decoder) line() ([]byte, error) {
	d.buf = d.buf[:0]
	for {
		b, err := d.r.ReadSlice('\n')
		if len(d.buf)+len(b) > maxLine {
			return nil, fmt.Errorf("a line over %d MiB (no writer writes one)", maxLine>>20)
		}
		if len(d.buf) == 0 && err == nil {
			// The whole line is in the reader's buffer: no copy.
			return b, nil
		}
		d.buf = append(d.buf, b...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(d.buf) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		return d.buf, nil
	}
}

func (d *Decoder) fail(r Reason, detail string, err error) error {
	d.err = &SegmentError{Key: d.key, Reason: r, Detail: detail, Err: err}
	return d.err
}

// Decode reads a whole segment: its header and events, refused as the
// Decoder refuses them.
func Decode(r io.Reader, key string, want Want) (Header, []Event, error) {
	d, err := NewDecoder(r, key, want)
	if err != nil {
		return Header{}, nil, err
	}
	events := make([]Event, 0, min(d.h.Events, 1<<16))
	for {
		ev, err := d.Next()
		if err == io.EOF {
			return d.h, events, nil
		}
		if err != nil {
			return d.h, nil, err
		}
		events = append(events, ev)
	}
}

// checker holds the rules a segment's header and events obey, for the
// encoder and the decoder alike.
type checker struct {
	key     string
	h       Header
	rev     int64 // of the last event; 0 before the first
	sub     int64
	started bool
}

func newChecker(key string, h Header) *checker { return &checker{key: key, h: h} }

func (c *checker) fail(r Reason, format string, args ...any) error {
	return &SegmentError{Key: c.key, Reason: r, Detail: fmt.Sprintf(format, args...)}
}

func (c *checker) header(want Want) error {
	h := c.h
	switch {
	case h.Format < FormatVersion || h.Format > FormatCaughtUp:
		return c.fail(ReasonFormat, "format %d, this tool reads formats %d to %d", h.Format, FormatVersion, FormatCaughtUp)
	case h.Format == FormatVersion && len(h.Revoking) > 0:
		return c.fail(ReasonFormat, "format %d with pending revokes (format %d)", h.Format, FormatRevoking)
	case h.Format < FormatCaughtUp && len(h.CaughtUp) > 0:
		return c.fail(ReasonFormat, "format %d with catch-ups (format %d)", h.Format, FormatCaughtUp)
	case want.ClusterID != "" && h.ClusterID != want.ClusterID:
		return c.fail(ReasonCluster, "it belongs to cluster %q, not %q", h.ClusterID, want.ClusterID)
	case want.BaseBackup != "" && h.BaseBackup != want.BaseBackup:
		return c.fail(ReasonBase, "it continues backup %q, not %q", h.BaseBackup, want.BaseBackup)
	case h.FirstRev < 1 || h.LastRev < h.FirstRev || h.FirstRev <= h.BaseRev:
		return c.fail(ReasonRange, "revisions %d-%d after base revision %d", h.FirstRev, h.LastRev, h.BaseRev)
	case want.FirstRev != 0 && (h.FirstRev != want.FirstRev || h.LastRev != want.LastRev):
		return c.fail(ReasonRange, "it holds revisions %d-%d, its key names %d-%d", h.FirstRev, h.LastRev, want.FirstRev, want.LastRev)
	case h.Events < int(h.LastRev-h.FirstRev+1):
		return c.fail(ReasonCount, "%d events for %d revisions (every revision is at least one event)", h.Events, h.LastRev-h.FirstRev+1)
	}
	if len(h.Revoking) > maxPendingRevokes {
		return c.fail(ReasonFormat, "%d pending revokes, a journal carries %d at most", len(h.Revoking), maxPendingRevokes)
	}
	seen := make(map[int64]bool, len(h.Revoking))
	for _, r := range h.Revoking {
		switch {
		case r.ID == 0:
			return c.fail(ReasonFormat, "a pending revoke of lease 0")
		case seen[r.ID]:
			return c.fail(ReasonFormat, "lease %x: two pending revokes", r.ID)
		case r.Last < 1 || r.Last > h.LastRev:
			// Not bounded by BaseRev: a chain continued from a newer
			// base carries what the one before it left pending.
			return c.fail(ReasonRange, "lease %x: a pending revoke after a delete at revision %d, not within 1-%d", r.ID, r.Last, h.LastRev)
		case r.SeenGone != -1 && r.SeenGone <= h.LastRev:
			// Found gone by the segment's end: the capture placed it.
			return c.fail(ReasonFormat, "lease %x: pending, found gone at revision %d, not after the segment's last, %d", r.ID, r.SeenGone, h.LastRev)
		}
		seen[r.ID] = true
	}
	if len(h.CaughtUp) > maxCatchUps {
		return c.fail(ReasonFormat, "%d catch-ups, a segment carries %d at most", len(h.CaughtUp), maxCatchUps)
	}
	for _, u := range h.CaughtUp {
		if u.From < 1 || u.To < u.From || u.From > h.LastRev || (!u.Open && (u.To < h.FirstRev || u.At <= 0)) {
			return c.fail(ReasonRange, "a catch-up of revisions %d-%d at %d, not one of revisions %d-%d", u.From, u.To, u.At, h.FirstRev, h.LastRev)
		}
	}
	return nil
}

func (c *checker) event(ev *Event) error {
	switch {
	case ev.Rev < c.h.FirstRev || ev.Rev > c.h.LastRev:
		return c.fail(ReasonRange, "an event at revision %d, outside %d-%d", ev.Rev, c.h.FirstRev, c.h.LastRev)
	case ev.Type != Put && ev.Type != Delete:
		return c.fail(ReasonFormat, "an event of type %q at revision %d", ev.Type, ev.Rev)
	case len(ev.Key) == 0:
		return c.fail(ReasonFormat, "an event without a key at revision %d", ev.Rev)
	}
	switch {
	case !c.started:
		if ev.Rev != c.h.FirstRev {
			return c.fail(ReasonGap, "its first event is at revision %d, not %d: revisions %d-%d have no events", ev.Rev, c.h.FirstRev, c.h.FirstRev, ev.Rev-1)
		}
		if ev.Sub != 0 {
			return c.fail(ReasonOrder, "revision %d starts at sub %d, not 0", ev.Rev, ev.Sub)
		}
	case ev.Rev == c.rev:
		if ev.Sub != c.sub+1 {
			return c.fail(ReasonOrder, "revision %d: sub %d after sub %d", ev.Rev, ev.Sub, c.sub)
		}
	case ev.Rev < c.rev:
		return c.fail(ReasonOrder, "revision %d after revision %d", ev.Rev, c.rev)
	case ev.Rev > c.rev+1:
		return c.fail(ReasonGap, "revisions %d-%d have no events", c.rev+1, ev.Rev-1)
	default: // c.rev+1
		if ev.Sub != 0 {
			return c.fail(ReasonOrder, "revision %d starts at sub %d, not 0", ev.Rev, ev.Sub)
		}
	}
	c.started, c.rev, c.sub = true, ev.Rev, ev.Sub
	return nil
}

func (c *checker) finish(n int) error {
	if n != c.h.Events {
		return c.fail(ReasonCount, "%d events, its header counts %d", n, c.h.Events)
	}
	if c.rev != c.h.LastRev {
		return c.fail(ReasonGap, "its last event is at revision %d, its header ends at %d", c.rev, c.h.LastRev)
	}
	return nil
}
