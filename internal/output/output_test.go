package output

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
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
