//go:build !linux

package restore

import bolt "go.etcd.io/bbolt"

// dropResident is a no-op where madvise's semantics are not Linux's.
func dropResident(*bolt.DB) {}
