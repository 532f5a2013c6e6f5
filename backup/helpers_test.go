package backup_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/testing/faults"
)

// runFaulty runs the backup opts through a store that wraps the rig's with
// the faults fs, and returns the wrapper (for its call counts) and Run's
// error.
func (r *rig) runFaulty(opts backup.Options, fs ...faults.Fault) (*faults.Store, error) {
	st := faults.Wrap(r.Store)
	for _, f := range fs {
		st.Inject(f)
	}
	opts.Store = st
	_, err := backup.Run(context.Background(), opts)
	return st, err
}

// assertStepError fails unless err is a *backup.Error at step whose
// message says want.
func assertStepError(tb testing.TB, err error, step, want string) {
	tb.Helper()
	var be *backup.Error
	if !errors.As(err, &be) || be.Step() != step || !strings.Contains(err.Error(), want) {
		tb.Fatalf("want an error at step %q saying %q, got %v", step, want, err)
	}
}
