package journal_test

import (
	"testing"

	"github.com/armada/etcd-recovery/internal/journal"
)

func TestCompactionBug(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"3.4.23": true, "3.4.33": true, "3.4.34": false, "3.5.0": true, "3.5.15": true, "3.5.16": false, "3.5.35": false,
		"3.6.0": false, "3.6.16": false, "3.3.27": true, "v3.5.9": true, "3.5.15-rc.0": true, "": false, "garbage": false, "4.0.0": false, "3.5.": false, "3.5.-": false,
	} {
		if got := journal.CompactionBug(v); got != want {
			t.Errorf("CompactionBug(%q) = %t, want %t", v, got, want)
		}
	}
}
