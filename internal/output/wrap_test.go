package output_test

import (
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/output"
)

// A word that fits on a line is never cut, wherever the previous words
// end (an age key in a note is copied by an SRE); only a word longer
// than a whole line is.
func TestWrapKeepsWords(t *testing.T) {
	key := "age1" + strings.Repeat("q", 58)
	for pad := range 60 {
		s := strings.Repeat("x", pad) + " " + key + " end"
		lines := output.Wrap(s, 80, "  ")
		if !strings.Contains(strings.Join(lines, "\n"), key) {
			t.Fatalf("pad %d: the key was cut:\n%s", pad, strings.Join(lines, "\n"))
		}
		for _, l := range lines {
			if len([]rune(l)) > 80 {
				t.Fatalf("pad %d: a line of %d runes", pad, len([]rune(l)))
			}
		}
	}
	long := strings.Repeat("y", 200)
	if lines := output.Wrap(long, 80, ""); len(lines) != 3 || strings.Join(lines, "") != long {
		t.Fatalf("a word longer than a line: %q", lines)
	}
}
