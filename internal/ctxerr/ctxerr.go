// Package ctxerr wraps an error with the end of the context it happened
// under, keeping the whole cause chain: errors.Is and errors.As see both the
// context's error and the cause.
package ctxerr

import (
	"context"
	"errors"
	"fmt"
)

// Wrap returns err unchanged when it is nil, when ctx has not ended, or when
// err already wraps ctx.Err(). Otherwise it returns an error that reads
// "<ctx.Err()> (<err>)", e.g. "context canceled (dial tcp ...: connection
// refused)", and unwraps to both: errors.Is(w, context.Canceled) and
// errors.Is(w, cause) hold, and errors.As finds a typed cause.
func Wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cerr := ctx.Err()
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w (%w)", cerr, err)
}
