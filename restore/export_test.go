package restore

import "context"

// SetAfterMemberWritten sets a hook that runs after each member's data dir
// is written (inside the write step, before the next one starts when
// Parallel is 1).
func SetAfterMemberWritten(o *Options, f func(ctx context.Context, m Member)) {
	o.afterMemberWritten = f
}
