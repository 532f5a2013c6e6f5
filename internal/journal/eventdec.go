package journal

import (
	"bytes"
	"encoding/base64"
	"math"
)

// maxLine is the longest line a Decoder reads (a header or an event, its
// key and value base64 inside): far above what a writer writes (etcd
// refuses requests over --max-request-bytes, 1.5 MiB by default, 10 MiB
// at most in practice; base64 makes that 13.4 MiB), so a damaged segment
// that never ends its line is refused instead of filling memory.
const maxLine = 64 << 20

// slabSize is the size of the chunks decoded keys and values are cut
// from (smaller ones only): one allocation per chunk rather than two per
// event. A chunk is never reused: an event's Key and Value stay valid as
// long as the caller keeps them.
const (
	slabSize  = 1 << 20
	slabAlone = 64 << 10
)

// slab hands out byte slices cut from shared chunks.
type slab struct{ b []byte }

func (s *slab) alloc(n int) []byte {
	if n > slabAlone {
		return make([]byte, n)
	}
	if cap(s.b)-len(s.b) < n {
		s.b = make([]byte, 0, slabSize)
	}
	i := len(s.b)
	s.b = s.b[:i+n]
	return s.b[i : i+n : i+n]
}

// decodeEventFast decodes an event line as the writer writes it
// (json.Encoder of an Event: no whitespace, no escapes, integers,
// base64 strings) into ev, without encoding/json's reflection. It
// accepts only lines encoding/json decodes to the same Event (a line
// with exactly the Event's field names, each once or more, the last
// winning, integers that fit, strings without escapes or bytes outside
// printable ASCII, base64 that decodes), and reports false for anything
// else — the trailer, an unknown or differently cased field, null, a
// float, whitespace, an escape, bad base64 — which the caller decodes
// with encoding/json, so a line decodes (or fails) exactly as before.
func decodeEventFast(b []byte, ev *Event, sl *slab) bool {
	*ev = Event{}
	n := len(b)
	if n < 2 || b[0] != '{' || b[n-1] != '}' {
		return false
	}
	i := 1
	if b[i] == '}' {
		return i+1 == n
	}
	for {
		// "name":
		if i >= n || b[i] != '"' {
			return false
		}
		j := i + 1
		for j < n && b[j] != '"' {
			if b[j] < 0x20 || b[j] >= 0x7f || b[j] == '\\' {
				return false
			}
			j++
		}
		if j+1 >= n || b[j+1] != ':' {
			return false
		}
		name := b[i+1 : j]
		i = j + 2
		var ok bool
		switch string(name) {
		case "rev":
			ev.Rev, i, ok = fastInt(b, i)
		case "sub":
			ev.Sub, i, ok = fastInt(b, i)
		case "createRev":
			ev.CreateRev, i, ok = fastInt(b, i)
		case "version":
			ev.Version, i, ok = fastInt(b, i)
		case "lease":
			ev.Lease, i, ok = fastInt(b, i)
		case "type":
			var s []byte
			if s, i, ok = fastString(b, i); ok {
				switch string(s) {
				case Put:
					ev.Type = Put
				case Delete:
					ev.Type = Delete
				default:
					ev.Type = string(s)
				}
			}
		case "key":
			ev.Key, i, ok = fastBase64(b, i, sl)
		case "value":
			ev.Value, i, ok = fastBase64(b, i, sl)
		default:
			return false
		}
		if !ok || i >= n {
			return false
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			return i+1 == n
		default:
			return false
		}
	}
}

// fastInt reads a JSON integer at b[i:] (-?(0|[1-9][0-9]*), within
// int64) and returns it and the index after it.
func fastInt(b []byte, i int) (int64, int, bool) {
	neg := false
	if i < len(b) && b[i] == '-' {
		neg, i = true, i+1
	}
	start := i
	var v uint64
	for i < len(b) && b[i] >= '0' && b[i] <= '9' && i-start < 19 {
		v = v*10 + uint64(b[i]-'0') // 19 digits fit in a uint64
		i++
	}
	switch d := i - start; {
	case d == 0:
		return 0, i, false
	case d > 1 && b[start] == '0':
		return 0, i, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E' || (b[i] >= '0' && b[i] <= '9')) {
		return 0, i, false // a fraction, an exponent, a 20th digit
	}
	switch {
	case !neg && v > math.MaxInt64, neg && v > 1<<63:
		return 0, i, false
	case neg:
		return -int64(v), i, true
	}
	return int64(v), i, true
}

// fastString reads a JSON string at b[i:] without escapes, of printable
// ASCII only, and returns its bytes (inside b) and the index after it.
func fastString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	j := i + 1
	for j < len(b) && b[j] != '"' {
		if b[j] < 0x20 || b[j] >= 0x7f || b[j] == '\\' {
			return nil, j, false
		}
		j++
	}
	if j >= len(b) {
		return nil, j, false
	}
	return b[i+1 : j], j + 1, true
}

// fastBase64 reads a JSON string of standard base64 at b[i:], as
// encoding/json decodes a []byte field, into a slice of sl.
func fastBase64(b []byte, i int, sl *slab) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	// The string ends at the next quote: an escape, a control or
	// non-ASCII byte before it is not base64 and fails the decode below,
	// except '\r', which base64 skips and JSON refuses.
	j := bytes.IndexByte(b[i+1:], '"')
	if j < 0 {
		return nil, i, false
	}
	s := b[i+1 : i+1+j]
	if bytes.IndexByte(s, '\r') >= 0 {
		return nil, i, false
	}
	i += j + 2
	out := sl.alloc(base64.StdEncoding.DecodedLen(len(s)))
	m, err := base64.StdEncoding.Decode(out, s)
	if err != nil {
		return nil, i, false
	}
	return out[:m:m], i, true
}
