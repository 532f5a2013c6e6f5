package catalog

import "time"

// DrillResult is a backup's drill summary as list, prune and restore show
// it in JSON: {passed, at, failed, mode, error}. Nil: never drilled.
type DrillResult struct {
	// Passed is true only when the drill passed and its record was read:
	// the backup is proven restorable.
	Passed bool `json:"passed"`
	// At is when the drill finished (absent when the record is unreadable).
	At *time.Time `json:"at,omitempty"`
	// Failed is the failing check ("<check>: <detail>") of a failed drill.
	Failed string `json:"failed,omitempty"`
	// Mode is the comparison the drill made: CompareSource or CompareSelf.
	Mode string `json:"mode,omitempty"`
	// Error says why the record could not be read or parsed (no proof).
	Error string `json:"error,omitempty"`
	// Drilled is what the drill restored: DrilledStored (the stored
	// objects, decrypted when Encrypted) or DrilledLocalPlaintext (the
	// plaintext copy the backup streamed). Empty for records older than it.
	Drilled   string `json:"drilled,omitempty"`
	Encrypted bool   `json:"encrypted,omitempty"`
}

// Result is the summary as DrillResult; nil for nil.
func (s *DrillSummary) Result() *DrillResult {
	if s == nil {
		return nil
	}
	r := &DrillResult{Passed: s.Proven(), Failed: s.Failed, Mode: s.Mode, Error: s.Err, Drilled: s.Drilled, Encrypted: s.Encrypted}
	if !s.At.IsZero() {
		at := s.At.UTC()
		r.At = &at
	}
	return r
}

// DrillState is one word for the drill: passed, FAILED, unreadable or
// never.
func (s *DrillSummary) DrillState() string {
	switch {
	case s == nil:
		return "never"
	case s.Err != "":
		return "unreadable"
	case s.Passed:
		return "passed"
	}
	return "FAILED"
}
