package etcdinternals

import (
	_ "unsafe" // for go:linkname

	bolt "go.etcd.io/bbolt"
	_ "go.etcd.io/etcd/server/v3/mvcc/backend" // the variable below lives there
)

// etcdBoltOptions is the bbolt configuration etcd's backend package opens
// every database with, and so the one etcdutl's restore code uses. On
// Linux it asks for MAP_POPULATE, which faults the whole database into
// the process when it is opened, and for NoFreelistSync, which makes every
// later open walk every page to rebuild the freelist. A server wants both;
// a restore, which opens each member's database four times and touches a
// handful of pages each time, wants neither: they are what made a restore
// of a 529 MiB database peak at 1.7 GiB of RSS.
//
// The variable is unexported in go.etcd.io/etcd/server/v3/mvcc/backend
// (config_linux.go), so it is reached by name. If etcd renames it, the
// link fails: the build breaks loudly rather than the tuning silently
// stopping. Other platforms (boltopts_other.go) do not reach it at all:
// there it is nil (config_default.go, config_windows.go).
//
//go:linkname etcdBoltOptions go.etcd.io/etcd/server/v3/mvcc/backend.boltOpenOptions
var etcdBoltOptions *bolt.Options

func init() {
	// This process never serves an etcd database: it only writes data
	// dirs for etcd to start on.
	if Enabled() {
		TuneBoltOptions(etcdBoltOptions)
	}
}
