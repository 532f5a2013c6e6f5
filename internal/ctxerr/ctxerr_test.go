package ctxerr

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"
)

func TestWrapKeepsChain(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, cause := os.Open("/nonexistent/ctxerr-test")
	if cause == nil {
		t.Fatal("opening a missing file succeeded")
	}
	err := Wrap(ctx, cause)
	if want := "context canceled (" + cause.Error() + ")"; err.Error() != want {
		t.Errorf("message = %q, want %q", err, want)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("errors.Is(%v, context.Canceled) = false", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(%v, fs.ErrNotExist) = false: the cause's chain is lost", err)
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != "/nonexistent/ctxerr-test" {
		t.Errorf("errors.As(%v, *fs.PathError) did not find the cause", err)
	}
}

func TestWrapDeadline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	cause := errors.New("read: connection reset")
	err := Wrap(ctx, cause)
	if err.Error() != "context deadline exceeded (read: connection reset)" {
		t.Errorf("message = %q", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, cause) {
		t.Errorf("errors.Is does not see both in %v", err)
	}
}

func TestWrapUnchanged(t *testing.T) {
	t.Parallel()
	cause := errors.New("boom")
	if err := Wrap(context.Background(), cause); err != cause {
		t.Errorf("live context: Wrap = %v, want the cause itself", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Wrap(ctx, nil); err != nil {
		t.Errorf("nil error: Wrap = %v, want nil", err)
	}
	// Already the context's error: not wrapped twice.
	already := errors.Join(errors.New("step"), context.Canceled)
	if err := Wrap(ctx, already); err != already {
		t.Errorf("error wrapping ctx.Err(): Wrap = %v, want it unchanged", err)
	}
	// Another context's end (a per-call timeout) is a cause like any other.
	other := errors.Join(errors.New("call"), context.DeadlineExceeded)
	err := Wrap(ctx, other)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("per-call timeout under a cancelled run: %v does not unwrap to both", err)
	}
}
