package testenv

import "testing"

// MatrixPKIOptions configures NewMatrixPKI.
type MatrixPKIOptions struct {
	// ServerExpired makes the server/peer certificate one that expired an
	// hour ago (valid from two days ago).
	ServerExpired bool
}

// MatrixPKI is the fault matrix's PKI: NewPKI's, optionally with an expired
// server certificate; PKI.IssueClient issues more client certificates from
// the same CA (an expired one).
type MatrixPKI struct {
	*PKI
}

// NewMatrixPKI makes a CA, a server/peer certificate for loopback (expired
// with ServerExpired) and a valid client certificate, as NewPKI does.
func NewMatrixPKI(tb testing.TB, opts MatrixPKIOptions) *MatrixPKI {
	tb.Helper()
	p, err := newPKI(tb.TempDir(), pkiOptions{serverExpired: opts.ServerExpired})
	if err != nil {
		tb.Fatalf("testenv: creating PKI: %v", err)
	}
	return &MatrixPKI{p}
}
