package podrun

import (
	"strings"
	"testing"
)

// TestExpandVars: $(VAR) in args is the container env's value (the last
// definition winning), $$ a literal $, and a reference the env does not
// define (or an unterminated one) an error naming it.
func TestExpandVars(t *testing.T) {
	t.Parallel()
	env := []EnvVar{{"POD_NAMESPACE", "old"}, {"POD_NAMESPACE", "kubx-etcd-07"}, {"N", "4"}}
	for in, want := range map[string]string{
		"$(POD_NAMESPACE)":         "kubx-etcd-07",
		"ns=$(POD_NAMESPACE)/$(N)": "ns=kubx-etcd-07/4",
		"$$(N)":                    "$(N)",
		"a$b$":                     "a$b$",
		"plain":                    "plain",
	} {
		got, err := expandVars(in, env)
		if err != nil || got != want {
			t.Errorf("expandVars(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, name := range map[string]string{"$(NOPE)": "NOPE", "x$(N": "unterminated"} {
		if got, err := expandVars(in, env); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("expandVars(%q) = %q, %v; want an error naming %s", in, got, err, name)
		}
	}
}
