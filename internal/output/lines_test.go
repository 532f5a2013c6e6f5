package output

import (
	"bytes"
	"strings"
	"testing"
)

// Lines go below the Notes, wrapped to Width by default and whole with
// -o wide; JSON is the data alone.
func TestRenderLines(t *testing.T) {
	t.Parallel()
	long := "VERDICT: " + strings.Repeat("word ", 40) + "end"
	tb := Table{Header: []string{"A"}, Rows: [][]string{{"x"}}, Notes: []string{"a note"}, Lines: []string{long, "NEXT STEP: none"}}
	for _, f := range []Format{FormatTable, FormatWide} {
		var b bytes.Buffer
		if err := Render(&b, f, tb, nil); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		note, verdict, next := strings.Index(out, "a note"), strings.Index(out, "VERDICT:"), strings.Index(out, "NEXT STEP: none")
		if note < 0 || verdict < note || next < verdict {
			t.Errorf("%s: want the note, then the lines in order:\n%s", f, out)
		}
		whole := strings.Contains(out, long)
		for _, l := range strings.Split(out, "\n") {
			if f == FormatTable && len(l) > Width {
				t.Errorf("%s: line of %d > %d: %q", f, len(l), Width, l)
			}
		}
		if whole != (f == FormatWide) {
			t.Errorf("%s: the long line whole = %v:\n%s", f, whole, out)
		}
	}
	var b bytes.Buffer
	if err := RenderAll(&b, FormatJSON, []Table{tb}, map[string]int{"n": 1}); err != nil || strings.Contains(b.String(), "VERDICT") {
		t.Errorf("json: %v %s", err, b.String())
	}
}
