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

// SetCountByScan makes the verify count the keys on leases by the key
// scan alone (VerifyOptions.countByScan).
func SetCountByScan(o *VerifyOptions) { o.countByScan = true }

// SetBetweenCounts sets the hook that runs between the index count's two
// counts of the live keys, with the attempt's number; an error it returns
// is the index count's.
func SetBetweenCounts(o *VerifyOptions, f func(attempt int) error) { o.betweenCounts = f }
