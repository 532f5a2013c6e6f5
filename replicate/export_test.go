package replicate

import "context"

// TestCopier is a copier for the tests: its full passes, one at a time,
// and the size of its map of verified keys.
type TestCopier struct{ c *copier }

// NewTestCopier is newCopier for the tests.
func NewTestCopier(ctx context.Context, o Options) (*TestCopier, error) {
	c, err := newCopier(ctx, o)
	if err != nil {
		return nil, err
	}
	return &TestCopier{c: c}, nil
}

// FullPass is one full pass (without the status record).
func (tc *TestCopier) FullPass(ctx context.Context) Pass { return tc.c.fullPass(ctx) }

// Verified is how many keys the copier remembers as verified.
func (tc *TestCopier) Verified() int {
	tc.c.mu.Lock()
	defer tc.c.mu.Unlock()
	return len(tc.c.verified)
}
