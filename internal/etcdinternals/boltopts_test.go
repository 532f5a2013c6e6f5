package etcdinternals

import (
	"testing"

	bolt "go.etcd.io/bbolt"
)

// etcd's bbolt options pointer is nil outside Linux (config_default.go,
// config_windows.go). Tuning must leave a nil pointer alone instead of
// writing through it, which panicked in init on darwin and windows.
func TestTuneBoltOptionsNilIsNoOp(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("tuning a nil options pointer panicked: %v", r)
		}
	}()
	if TuneBoltOptions(nil) {
		t.Fatal("TuneBoltOptions(nil) reported a change")
	}
}

// On Linux etcd's options ask for MAP_POPULATE and NoFreelistSync; tuning
// replaces them with the restore's.
func TestTuneBoltOptionsLinuxValues(t *testing.T) {
	o := &bolt.Options{MmapFlags: 0x8000, NoFreelistSync: true}
	if !TuneBoltOptions(o) {
		t.Fatal("TuneBoltOptions reported no change")
	}
	if o.MmapFlags != restoreBoltOptions.MmapFlags || o.NoFreelistSync != restoreBoltOptions.NoFreelistSync {
		t.Fatalf("options MmapFlags=%#x NoFreelistSync=%t, want %#x %t", o.MmapFlags, o.NoFreelistSync,
			restoreBoltOptions.MmapFlags, restoreBoltOptions.NoFreelistSync)
	}
}
