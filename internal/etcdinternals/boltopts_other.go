//go:build !linux

package etcdinternals

import bolt "go.etcd.io/bbolt"

// Outside Linux etcd opens databases with bbolt's defaults (its options
// pointer is nil there), which are what a restore wants: nothing to tune.
// The binary must start on darwin and windows (SREs' laptops), so nothing
// here touches etcd's variable.
var etcdBoltOptions *bolt.Options
