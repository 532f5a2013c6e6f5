package catalog_test

import (
	"sort"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// New names are unique per call, sort by time first, and parse; old names
// (no suffix) still parse to the same time and kind.
func TestNewBackupNameUniqueAndParseable(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 3, 15, 0, 123e6, time.UTC)
	seen := map[string]bool{}
	for _, k := range catalog.Kinds {
		for i := 0; i < 200; i++ {
			n := catalog.NewBackupName(at, k)
			if seen[n] {
				t.Fatalf("NewBackupName returned %s twice", n)
			}
			seen[n] = true
			gt, gk, err := catalog.ParseBackupName(n)
			if err != nil || !gt.Equal(at) || gk != k {
				t.Fatalf("ParseBackupName(%q) = %v %q %v", n, gt, gk, err)
			}
		}
		old := catalog.BackupName(at, k)
		if gt, gk, err := catalog.ParseBackupName(old); err != nil || !gt.Equal(at) || gk != k {
			t.Fatalf("old name %q: %v %q %v", old, gt, gk, err)
		}
	}
	// Lexical order is time order, with and without suffix.
	names := []string{
		catalog.NewBackupName(at.Add(time.Millisecond), catalog.KindScheduled),
		catalog.BackupName(at, catalog.KindPreRestore),
		catalog.NewBackupName(at.Add(-time.Hour), catalog.KindUpdate),
		catalog.NewBackupName(at.Add(time.Second), catalog.KindManual),
	}
	sort.Strings(names)
	var last time.Time
	for _, n := range names {
		ti, _, err := catalog.ParseBackupName(n)
		if err != nil || ti.Before(last) {
			t.Fatalf("names %v: lexical order is not time order", names)
		}
		last = ti
	}
	for _, bad := range []string{
		"20261122T031500.123Z-scheduled-0a1b2c3", "20261122T031500.123Z-scheduled-0A1B2C3D",
		"20261122T031500.123Z-scheduled-0a1b2c3d-", "20261122T031500.123Z-nosuch-0a1b2c3d",
		"20261122T031500.123Z-0a1b2c3d", "20261122T031500.123Z-scheduled-0a1b2c3d0",
	} {
		if _, _, err := catalog.ParseBackupName(bad); err == nil {
			t.Errorf("ParseBackupName(%q) accepted a malformed name", bad)
		}
	}
	l := catalog.Layout{Prefix: "p"}
	name := catalog.NewBackupName(at, catalog.KindPreRestore)
	pk, ok := l.ParseKey(l.Key("c1", name, catalog.ManifestObject))
	if !ok || pk.Name != name || pk.Kind != catalog.KindPreRestore || !pk.Time.Equal(at) {
		t.Fatalf("ParseKey of a new name: %+v %v", pk, ok)
	}
}
