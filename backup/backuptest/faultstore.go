// Package backuptest injects exact object-store faults into the tests of
// backup, restore and the CLI. It is internal/store/faults (a generic
// fault-injecting wrapper over any store.Store) under its historical names:
// see that package for what each fault does.
//
//	fs := backuptest.Wrap(testfix.Store(t, m, bucket))
//	fs.Inject(backuptest.Fault{Op: backuptest.OpPut, KeySuffix: backup.SnapshotObjectZstd,
//		Kind: backuptest.Stall, After: 1 << 20, Delay: 2 * time.Second, Times: 1})
//	opts.Store = fs
package backuptest

import (
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/faults"
)

// The fault wrapper's types (see internal/store/faults).
type (
	Op          = faults.Op
	Kind        = faults.Kind
	Fault       = faults.Fault
	Call        = faults.Call
	FaultStore  = faults.Store
	StatusError = faults.StatusError
)

// The operations.
const (
	OpPut         = faults.OpPut
	OpGet         = faults.OpGet
	OpList        = faults.OpList
	OpDelete      = faults.OpDelete
	OpListUploads = faults.OpListUploads
	OpAbortUpload = faults.OpAbortUpload
)

// The faults.
const (
	Stall       = faults.Stall
	Reset       = faults.Reset
	ServerError = faults.ServerError
	NotFound    = faults.NotFound
	Slow        = faults.Slow
	Vanish      = faults.Vanish
	Hook        = faults.Hook
)

// Wrap returns a FaultStore around inner with no faults.
func Wrap(inner store.Store) *FaultStore { return faults.Wrap(inner) }

// ResetError returns a "connection reset by peer" error as net/http
// returns it.
func ResetError() error { return faults.ResetError() }
