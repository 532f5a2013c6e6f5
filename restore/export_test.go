package restore

// SetAfterHealthy sets VerifyOptions' test hook: f runs once the members
// were judged healthy and before the data is read.
func SetAfterHealthy(o *VerifyOptions, f func()) { o.afterHealthy = f }
