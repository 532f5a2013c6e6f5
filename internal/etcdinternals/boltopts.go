package etcdinternals

import (
	bolt "go.etcd.io/bbolt"
)

// restoreBoltOptions are the options restores open databases with: pages
// are read on demand, and the freelist is written at each commit so that
// the next open reads it instead of walking the database. etcd itself
// reads a synced freelist as well as it rebuilds one.
var restoreBoltOptions = bolt.Options{NoFreelistSync: false, MmapFlags: 0}

// RestoreBoltOptions returns the bbolt options a restore opens databases
// with (a copy: callers set timeouts and sync flags on it).
func RestoreBoltOptions() bolt.Options { return restoreBoltOptions }

// TuneBoltOptions makes the bbolt options etcd's backend package opens
// every database with (and so etcdutl's restore code) the restore's
// options. etcd's variable is a pointer that only Linux sets
// (config_linux.go: MAP_POPULATE and NoFreelistSync); on darwin and
// windows it is nil, and etcd then opens databases with bbolt's defaults,
// which are already what a restore wants. A nil pointer is left alone: it
// is never dereferenced. It reports whether the options were changed.
//
// The process does this once at start (init), unless [Enabled] is false.
func TuneBoltOptions(etcdOpts *bolt.Options) bool {
	if etcdOpts == nil {
		return false
	}
	*etcdOpts = restoreBoltOptions
	return true
}

// EtcdBoltOptions is etcd's own bbolt options variable (nil outside
// Linux), as this process uses it: tuned unless [Enabled] is false.
func EtcdBoltOptions() *bolt.Options { return etcdBoltOptions }
