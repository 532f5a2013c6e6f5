//go:build !linux

package etcdinternals

import bolt "go.etcd.io/bbolt"

// DropResident is a no-op where madvise's semantics are not Linux's.
func DropResident(*bolt.DB) {}
