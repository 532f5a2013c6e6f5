//go:build !linux && !darwin

package restore

// canWrite has no side-effect-free check here: the real run finds out.
func canWrite(string) error { return nil }
