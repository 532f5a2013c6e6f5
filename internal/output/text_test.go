package output

import (
	"errors"
	"testing"
)

func TestPlural(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n    int
		want string
	}{{0, "members"}, {1, "member"}, {2, "members"}, {-1, "members"}} {
		if got := Plural(c.n, "member", "members"); got != c.want {
			t.Errorf("Plural(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want string
	}{
		{errors.New("plain"), "plain"},
		{errors.Join(errors.New("a"), errors.New("b")), "a; b"},
		{errors.New("x\ny\nz"), "x; y; z"},
	} {
		if got := OneLine(c.err); got != c.want {
			t.Errorf("OneLine(%q) = %q, want %q", c.err.Error(), got, c.want)
		}
	}
}
