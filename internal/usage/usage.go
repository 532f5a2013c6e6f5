// Package usage marks an error in what the caller asked for (a command's
// options: a missing or malformed value, two options that exclude each
// other) as opposed to a failure of the work itself. Each domain package
// validates its own options and returns such an error before it contacts
// anything; the CLI maps it, wherever it sits in the cause chain (a
// package's step error wraps it), to exit 4.
package usage

import (
	"errors"
	"fmt"
)

// Error is an options error. Its message is the cause's.
type Error struct{ Err error }

func (e Error) Error() string { return e.Err.Error() }

func (e Error) Unwrap() error { return e.Err }

// Errorf is an options error with a formatted message (%w keeps a cause).
func Errorf(format string, a ...any) error { return Error{fmt.Errorf(format, a...)} }

// Wrap marks err as an options error; nil stays nil.
func Wrap(err error) error {
	if err == nil || Is(err) {
		return err
	}
	return Error{err}
}

// Is reports whether err, or an error it wraps, is an options error.
func Is(err error) bool {
	var e Error
	return errors.As(err, &e)
}
