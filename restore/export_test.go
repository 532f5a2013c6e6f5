package restore

import "context"

// SetAfterHealthy sets VerifyOptions' test hook: f runs once the members
// were judged healthy and before the data is read.
func SetAfterHealthy(o *VerifyOptions, f func()) { o.afterHealthy = f }

// WithMemberWritten is ctx with a failpoint after each member's data dir
// is written, inside the write step.
func WithMemberWritten(ctx context.Context, f func(context.Context, Member)) context.Context {
	return context.WithValue(ctx, memberWrittenKey{}, f)
}
