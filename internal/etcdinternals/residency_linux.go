package etcdinternals

import (
	"os"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// DropResident tells the kernel that the pages of db's memory map read so
// far are not needed any more (MADV_DONTNEED). The map is read-only and
// shared with the file, so nothing is lost: a page read again is mapped
// again from the page cache. Without this, every page a walk of the
// database touches stays in the process's resident set until the
// database is closed, and a walk of a 1 GiB database costs 1 GiB of RSS.
// It does nothing when [Enabled] is false.
//
// The caller must hold a transaction, so that bbolt cannot remap.
func DropResident(db *bolt.DB) {
	if !Enabled() {
		return
	}
	st, err := os.Stat(db.Path())
	if err != nil || st.Size() == 0 {
		return
	}
	length := (uintptr(st.Size()) + uintptr(os.Getpagesize()) - 1) &^ (uintptr(os.Getpagesize()) - 1)
	// bbolt maps at least the file's size, rounded up to whole pages.
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, db.Info().Data, length, syscall.MADV_DONTNEED)
}
