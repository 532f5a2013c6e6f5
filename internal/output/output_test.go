package output

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// RenderAll writes each section's title, table, notes and footer in
// order, and -o json the data once.
func TestRenderAll(t *testing.T) {
	t.Parallel()
	ts := []Table{
		{Title: "Heading\n\n", Header: []string{"NAME", "DETAIL"}, Rows: [][]string{{"a", "why a"}}, Long: []string{"DETAIL"}},
		{Title: "text only\n"},
		{Header: []string{"X"}, Rows: [][]string{{"x1"}}, Footer: "after x\n"},
	}
	var b bytes.Buffer
	if err := RenderAll(&b, FormatTable, ts, nil); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	order := []string{"Heading\n\n", "NAME", "a: why a\n", "text only\n", "x1", "after x\n"}
	at := 0
	for _, s := range order {
		i := strings.Index(out[at:], s)
		if i < 0 {
			t.Fatalf("%q missing or out of order in:\n%s", s, out)
		}
		at += i + len(s)
	}
	if strings.Count(out, "┌") != 2 {
		t.Errorf("want 2 tables (a text-only section draws none):\n%s", out)
	}
	b.Reset()
	data := map[string]int{"rows": 2}
	if err := RenderAll(&b, FormatJSON, ts, data); err != nil {
		t.Fatal(err)
	}
	var got map[string]int
	if err := json.Unmarshal(b.Bytes(), &got); err != nil || got["rows"] != 2 {
		t.Errorf("json %q: %v", b.String(), err)
	}
}

// -o yaml is the same data as -o json: the JSON field names (tags), the
// same values, omitted fields omitted, for Render and RenderAll alike.
func TestRenderYAMLSameDataAsJSON(t *testing.T) {
	t.Parallel()
	type inner struct {
		Rev  int64  `json:"revision"`
		Gone string `json:"gone,omitempty"`
	}
	data := struct {
		ClusterID string   `json:"clusterID"`
		Sizes     []int64  `json:"sizes"`
		Inner     inner    `json:"inner"`
		Nil       *string  `json:"nil,omitempty"`
		Keys      []string `json:"keys"`
	}{"c1", []int64{1, 1 << 40}, inner{Rev: 42}, nil, []string{"/registry/a: b", "yes"}}
	var j, y, yAll bytes.Buffer
	if err := Render(&j, FormatJSON, Table{}, data); err != nil {
		t.Fatal(err)
	}
	if err := Render(&y, FormatYAML, Table{Header: []string{"X"}, Rows: [][]string{{"x"}}}, data); err != nil {
		t.Fatal(err)
	}
	if err := RenderAll(&yAll, FormatYAML, []Table{{Title: "heading\n"}}, data); err != nil {
		t.Fatal(err)
	}
	if y.String() != yAll.String() {
		t.Errorf("Render and RenderAll differ:\n%s\n%s", y.String(), yAll.String())
	}
	for _, s := range []string{"┌", "heading", "gone", "nil:"} {
		if strings.Contains(y.String(), s) {
			t.Errorf("yaml holds %q:\n%s", s, y.String())
		}
	}
	var fromJSON, fromYAML any
	if err := json.Unmarshal(j.Bytes(), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(y.Bytes(), &fromYAML); err != nil {
		t.Fatalf("yaml %q: %v", y.String(), err)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) {
		t.Errorf("yaml is not json's data:\njson %v\nyaml %v", fromJSON, fromYAML)
	}
	if !strings.Contains(y.String(), "clusterID: c1\n") || !strings.Contains(y.String(), "revision: 42") {
		t.Errorf("yaml does not use json's names:\n%s", y.String())
	}
	if f, err := ParseFormat("yaml"); err != nil || f != FormatYAML || !f.Data() {
		t.Errorf("ParseFormat(yaml) = %q, %v", f, err)
	}
}

// With a total, the progress line shows it, the percentage and the time
// left at the rate so far; without, the count and the rate; off a
// terminal nothing; at most one line per 200 ms.
func TestProgressTotalPercentETA(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	p := NewProgressTo(&b, "download b1", true)
	start := p.start
	now := start
	p.now = func() time.Time { return now }
	p.SetTotal(400 << 20)
	now = start.Add(10 * time.Second)
	p.Update(100 << 20) // 10 MiB/s, 300 MiB left: 30 s
	if want := "\rdownload b1: 100.0 MiB / 400.0 MiB (25%), 10.0 MiB/s, ETA 30s   "; b.String() != want {
		t.Errorf("line %q\nwant %q", b.String(), want)
	}
	b.Reset()
	now = now.Add(100 * time.Millisecond)
	p.Update(101 << 20)
	if b.Len() != 0 {
		t.Errorf("a second line within 200 ms: %q", b.String())
	}
	now = start.Add(100 * time.Second)
	p.Update(200 << 20) // 2 MiB/s, 200 MiB left: 100 s
	if !strings.Contains(b.String(), "(50%), 2.0 MiB/s, ETA 1m40s") {
		t.Errorf("line %q", b.String())
	}
	b.Reset()
	now = now.Add(time.Second)
	p.Update(400 << 20)
	p.Done()
	if !strings.Contains(b.String(), "(100%)") || !strings.Contains(b.String(), "ETA 0s") || !strings.HasSuffix(b.String(), "\n") {
		t.Errorf("done: %q", b.String())
	}
	b.Reset()
	q := NewProgressTo(&b, "backup c1", true)
	q.now = func() time.Time { return q.start.Add(2 * time.Second) }
	q.Update(4 << 20)
	if !strings.Contains(b.String(), "backup c1: 4.0 MiB (2.0 MiB/s)") || strings.Contains(b.String(), "ETA") {
		t.Errorf("no total: %q", b.String())
	}
	b.Reset()
	off := NewProgressTo(&b, "x", false)
	off.SetTotal(10)
	off.Update(5)
	off.Done()
	if b.Len() != 0 {
		t.Errorf("off a terminal: %q", b.String())
	}
	for d, want := range map[time.Duration]string{45 * time.Second: "45s", 64 * time.Second: "1m04s", 2*time.Hour + 3*time.Minute: "2h03m"} {
		if got := ETA(d); got != want {
			t.Errorf("ETA(%v) = %q, want %q", d, got, want)
		}
	}
}
