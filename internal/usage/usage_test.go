package usage

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestIsThroughChain(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("restore of cluster c1 failed at step %q: %w", "validate", Wrap(fmt.Errorf("--backup: %w", fs.ErrInvalid)))
	if !Is(err) {
		t.Errorf("Is(%v) = false through a step error", err)
	}
	if !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("the cause of %v is lost", err)
	}
	if Is(errors.New("connection refused")) || Wrap(nil) != nil {
		t.Error("a plain error is an options error, or Wrap(nil) is not nil")
	}
	if got := Errorf("--cluster-id is required").Error(); got != "--cluster-id is required" {
		t.Errorf("message %q", got)
	}
}
