package journal

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// The fast event decoder gives what encoding/json gives for every line
// the writer writes, and declines (so encoding/json decides) every line
// it could decode differently.
func TestDecodeEventFastMatchesJSON(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 25))
	var sl slab
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i := range 5000 {
		ev := Event{Rev: rnd.Int64N(1 << 40), Sub: rnd.Int64N(5), Type: Put, Key: randBytes(rnd, 1+rnd.IntN(100))}
		switch i % 4 {
		case 0:
			ev.Type = Delete
		case 1:
			ev.Value, ev.CreateRev, ev.Version, ev.Lease = randBytes(rnd, rnd.IntN(70_000)), rnd.Int64N(1<<40)+1, rnd.Int64N(1000)+1, rnd.Int64()
		case 2:
			ev.Value, ev.CreateRev, ev.Version = []byte{}, 1, 1 // an empty value: omitted
		default:
			ev.Value, ev.CreateRev, ev.Version, ev.Lease = randBytes(rnd, 1+rnd.IntN(2000)), 7, 3, -rnd.Int64N(1<<62)
		}
		buf.Reset()
		if err := enc.Encode(&ev); err != nil {
			t.Fatal(err)
		}
		b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		var fast, std line
		if !decodeEventFast(b, &fast.Event, &sl) {
			t.Fatalf("the fast decoder declined a line the writer wrote: %.200s", b)
		}
		if err := json.Unmarshal(b, &std); err != nil {
			t.Fatal(err)
		}
		if !sameEvent(fast.Event, std.Event) {
			t.Fatalf("line %.200s: fast %+v, encoding/json %+v", b, fast.Event, std.Event)
		}
	}
	// Lines it must leave to encoding/json: each decodes (or fails)
	// differently from a naive reading, or is not an event.
	for _, l := range []string{
		`{"end":{"events":3,"sha256":"00"}}`,
		`{"rev":1,"sub":0,"type":"put","key":"YQ==","extra":1}`,
		`{"Rev":1,"sub":0,"type":"put","key":"YQ=="}`,
		`{"rev":1, "sub":0,"type":"put","key":"YQ=="}`,
		`{"rev":1.0,"sub":0,"type":"put","key":"YQ=="}`,
		`{"rev":1e3,"sub":0,"type":"put","key":"YQ=="}`,
		`{"rev":01,"sub":0,"type":"put","key":"YQ=="}`,
		`{"rev":99999999999999999999,"sub":0,"type":"put","key":"YQ=="}`,
		`{"rev":1,"sub":0,"type":"p\u0075t","key":"YQ=="}`,
		`{"rev":1,"sub":0,"type":"put","key":null}`,
		`{"rev":1,"sub":0,"type":"put","key":"YQ"}`,
		`{"rev":1,"sub":0,"type":"put","key":"Y\/=="}`,
		"{\"rev\":1,\"sub\":0,\"type\":\"put\",\"key\":\"YQ\r==\"}",
		"{\"rev\":1,\"sub\":0,\"type\":\"put\",\"key\":\"YQ\t==\"}",
		`{"rev":1,"sub":0,"type":"put","key":"YQ=\"="}`,
		`{"rev":1,"sub":0,"type":"put","key":"YQ=="} `,
		`{"rev":1,"sub":0,"type":"put","key":"YQ=="}{}`,
		`{"rev":1,"sub":0,"type":"put","key":"YQ==",}`,
		`{"rev":1,"sub":0,"type":"pütt","key":"YQ=="}`,
		`{"rev":"1","sub":0,"type":"put","key":"YQ=="}`,
		`{"rev":1,"sub":0,"type":"put","key":"YQ==`,
		`[]`,
		``,
	} {
		var ev Event
		if decodeEventFast([]byte(l), &ev, &sl) {
			t.Errorf("the fast decoder took %s (%+v): encoding/json must decide", l, ev)
		}
	}
	// What it takes beyond the writer's lines, it takes as encoding/json
	// does: fields in any order, repeated (the last wins), negative.
	for _, l := range []string{
		`{"key":"YWI=","type":"delete","sub":2,"rev":9}`,
		`{"rev":1,"rev":2,"sub":0,"type":"put","key":"YQ==","key":"Yg=="}`,
		`{"rev":-1,"sub":0,"type":"other","key":"","value":""}`,
		`{}`,
	} {
		var fast, std Event
		if !decodeEventFast([]byte(l), &fast, &sl) {
			t.Errorf("declined %s", l)
			continue
		}
		if err := json.Unmarshal([]byte(l), &std); err != nil || !sameEvent(fast, std) {
			t.Errorf("%s: fast %+v, encoding/json %+v (%v)", l, fast, std, err)
		}
	}
}

func sameEvent(a, b Event) bool {
	// nil and empty are the same bytes to etcd; the rest exactly.
	if len(a.Value) == 0 && len(b.Value) == 0 {
		a.Value, b.Value = nil, nil
	}
	if len(a.Key) == 0 && len(b.Key) == 0 {
		a.Key, b.Key = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

func randBytes(rnd *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rnd.Uint32())
	}
	return b
}

// A line longer than maxLine is refused as damaged, not read into
// memory without end.
func TestDecoderRefusesEndlessLine(t *testing.T) {
	t.Parallel()
	raw, err := EncodeSegment(Header{ClusterID: "c1", BaseBackup: "b", BaseRev: 1, FirstRev: 2, LastRev: 2},
		[]Event{{Rev: 2, Type: Put, Key: []byte("k"), Value: []byte("v"), CreateRev: 2, Version: 1}})
	if err != nil {
		t.Fatal(err)
	}
	head := raw[:bytes.IndexByte(raw, '\n')+1]
	r := ioMulti(head, []byte(`{"rev":2,"sub":0,"type":"put","key":"`), []byte(strings.Repeat("A", maxLine+1)))
	d, err := NewDecoder(r, "seg", Want{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Next()
	if !IsReason(err, ReasonDamaged) || !strings.Contains(err.Error(), "a line over") {
		t.Fatalf("an endless line: %v", err)
	}
}

func ioMulti(parts ...[]byte) *bytes.Reader { return bytes.NewReader(bytes.Join(parts, nil)) }

// Integers at int64's ends decode as encoding/json decodes them, and
// one past them is left to it.
func TestDecodeEventFastIntegers(t *testing.T) {
	t.Parallel()
	var sl slab
	for _, n := range []string{"0", "-0", "9223372036854775807", "-9223372036854775808", "1000000000000000000", "-1"} {
		l := `{"rev":1,"sub":0,"type":"put","key":"YQ==","lease":` + n + `}`
		var fast, std Event
		if !decodeEventFast([]byte(l), &fast, &sl) {
			t.Errorf("declined lease %s", n)
			continue
		}
		if err := json.Unmarshal([]byte(l), &std); err != nil || fast.Lease != std.Lease {
			t.Errorf("lease %s: fast %d, encoding/json %d (%v)", n, fast.Lease, std.Lease, err)
		}
	}
	for _, n := range []string{"9223372036854775808", "-9223372036854775809", "12345678901234567890", "-", "1-"} {
		var ev Event
		if decodeEventFast([]byte(`{"rev":1,"sub":0,"type":"put","key":"YQ==","lease":`+n+`}`), &ev, &sl) {
			t.Errorf("took lease %s as %d", n, ev.Lease)
		}
	}
}
