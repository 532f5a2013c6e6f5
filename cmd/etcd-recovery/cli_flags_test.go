package main

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// flagExceptions are flag names whose default may differ between commands,
// each with its reason. The usage text must still be the same.
var flagExceptions = map[string]string{
	// restore's --endpoints are the old cluster's: none given means no
	// survivor snapshot, so it has no etcdctl default.
	"endpoints": "restore: the old cluster's endpoints, no default",
	// backup's run holds a namespace's backups and drills: its usage text
	// names its own default.
	"timeout": "backup: 3h30m, inside the CronJob's 4 h activeDeadlineSeconds",
	// serve is the exporter, always served; journal serves its metrics
	// and probes only when asked (the Deployment's :9091).
	"listen": "journal: none unless given",
	// Each drill runs an etcd and needs twice the database in --temp-dir.
	"parallel": "drill: 1, backup, inspect and serve: 4, restore-all: 0 (from the pod's CPU and memory limits)",
}

type flagUse struct {
	cmd, usage, def, typ string
}

// walkFlags returns every visible flag of every command, by name.
func walkFlags(t *testing.T) map[string][]flagUse {
	t.Helper()
	app := newApp(io.Discard, io.Discard)
	byName := map[string][]flagUse{}
	var walk func(string, []*cli.Command)
	walk = func(parent string, cmds []*cli.Command) {
		for _, c := range cmds {
			name := strings.TrimSpace(parent + " " + c.Name)
			for _, f := range c.Flags {
				df, ok := f.(cli.DocGenerationFlag)
				if !ok {
					t.Fatalf("%s: flag %v has no usage", name, f.Names())
				}
				vf, _ := f.(cli.VisibleFlag)
				if vf != nil && !vf.IsVisible() {
					continue
				}
				u := flagUse{cmd: name, usage: df.GetUsage(), def: df.GetDefaultText(), typ: reflect.TypeOf(f).Elem().Name()}
				if u.def == "" {
					u.def = df.GetValue()
				}
				u.typ = strings.TrimSuffix(strings.TrimSuffix(u.typ, "Flag"), "Slice")
				byName[f.Names()[0]] = append(byName[f.Names()[0]], u)
			}
			walk(name, c.Subcommands)
		}
	}
	walk("", app.Commands)
	return byName
}

// A flag name means one thing: the same usage text, default and kind of
// value on every command that has it (TestFlagMeanings failed on the old
// code: --timeout had four meanings, --parallel three defaults, --force,
// --all, --backup and --cluster two meanings each).
func TestFlagMeanings(t *testing.T) {
	t.Parallel()
	byName := walkFlags(t)
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var inventory strings.Builder
	for _, n := range names {
		uses := byName[n]
		cmds := []string{}
		for _, u := range uses {
			cmds = append(cmds, u.cmd)
		}
		fmt.Fprintf(&inventory, "--%-28s %-60s default %q: %s\n", n, strings.Join(cmds, ", "), uses[0].def, uses[0].usage)
		for _, u := range uses[1:] {
			if u.usage != uses[0].usage {
				t.Errorf("--%s means two things:\n  %s: %s\n  %s: %s", n, uses[0].cmd, uses[0].usage, u.cmd, u.usage)
			}
			if u.typ != uses[0].typ {
				t.Errorf("--%s takes a %s on %s but a %s on %s", n, uses[0].typ, uses[0].cmd, u.typ, u.cmd)
			}
			if _, ok := flagExceptions[n]; !ok && u.def != uses[0].def {
				t.Errorf("--%s defaults to %q on %s but %q on %s", n, uses[0].def, uses[0].cmd, u.def, u.cmd)
			}
		}
	}
	for n := range flagExceptions {
		if len(byName[n]) < 2 {
			t.Errorf("flagExceptions names --%s, which is on one command only: remove it", n)
		}
	}
	t.Logf("flag inventory:\n%s", inventory.String())
}

// Hidden flags are exactly the deprecated spellings, and each still works:
// it sets the new flag and says so on stderr.
func TestDeprecatedFlags(t *testing.T) {
	t.Parallel()
	app := newApp(io.Discard, io.Discard)
	hidden := map[string]bool{}
	var walk func(string, []*cli.Command)
	walk = func(parent string, cmds []*cli.Command) {
		for _, c := range cmds {
			name := strings.TrimSpace(parent + " " + c.Name)
			for _, f := range c.Flags {
				if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
					hidden[name+" --"+f.Names()[0]] = true
				}
			}
			walk(name, c.Subcommands)
		}
	}
	walk("", app.Commands)
	for _, d := range deprecatedFlags {
		if !hidden[d.cmd+" --"+d.old] {
			t.Errorf("%s --%s: not a hidden flag", d.cmd, d.old)
		}
		delete(hidden, d.cmd+" --"+d.old)
	}
	for h := range hidden {
		t.Errorf("%s: hidden, but not a deprecated spelling", h)
	}
	// Each old spelling reaches the new flag's check: a bad value is named
	// by the new name, after the deprecation note.
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "--timeout", "0s"}, "--probe-timeout"},
		{[]string{"restore", "verify", "--endpoints", "http://127.0.0.1:1", "--timeout", "0s"}, "--verify-timeout"},
		{[]string{"restore", "--cluster-id", "c1", "--initial-cluster", "a=http://127.0.0.1:1", "--parallel", "-1"}, "--parallel-data-dirs"},
		{[]string{"inspect", "--timeout", "1s", "--probe-timeout", "1s"}, "pass only --probe-timeout"},
	}
	for _, tc := range cases {
		code, _, errOut := runCtx(t, context.Background(), tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 4 naming %s", tc.args, code, errOut, tc.want)
		}
		if !strings.Contains(tc.want, "pass only") && !strings.Contains(errOut, "is deprecated, use "+tc.want) {
			t.Errorf("%v: no deprecation note on stderr: %q", tc.args, errOut)
		}
	}
}

// ETCDCTL_ENDPOINTS exported for etcdctl must not count as --endpoints
// where the flag does not apply (restore --via etcd-operator); a flag
// given on the command line still does.
func TestRestoreViaOperatorIgnoresEnvEndpoints(t *testing.T) {
	if !fromEnvOnly([]string{"https://a:2379", "https://b:2379"}, "https://a:2379, https://b:2379") {
		t.Error("the environment's endpoints were not recognised")
	}
	if fromEnvOnly([]string{"https://c:2379"}, "https://a:2379") {
		t.Error("a command-line --endpoints was taken for the environment's")
	}
	if fromEnvOnly([]string{"https://a:2379"}, "") {
		t.Error("no environment variable, yet from the environment")
	}
	t.Setenv("ETCDCTL_ENDPOINTS", "https://10.0.0.9:2379")
	code, _, stderr := runCtx(t, context.Background(), "restore", "--via", "etcd-operator", "--cluster", "etcd-a",
		"--kubeconfig", "/nonexistent/kubeconfig", "--cos-endpoint", "http://127.0.0.1:1", "--bucket", "b")
	if strings.Contains(stderr, "does not apply") || !strings.Contains(stderr, "ignoring ETCDCTL_ENDPOINTS") {
		t.Errorf("exit %d: the exported ETCDCTL_ENDPOINTS was refused or not logged: %s", code, stderr)
	}
}

// statedDefault is a default a usage text or a command's description
// states: "default 3h30m", "defaults to 1", "(default: 4", optionally
// for one command only ("backup: default 3h30m").
var (
	statedDefault    = regexp.MustCompile(`(?:\b([a-z]+): )?\bdefaults?(?: to| is|:)? ([0-9][0-9A-Za-z.]*)`)
	describedDefault = regexp.MustCompile(`--([a-z0-9-]+) defaults? to ([0-9][0-9A-Za-z.]*)`)
)

// The help is true about defaults: where a flag's usage text, or its
// command's description, states a default, the flag's value is that
// default (drill --help said --parallel defaults to 4, from the shared
// flag's value, while the drill ran 1 at a time). A flag without a value
// (a default computed at run time, such as --start-timeout's) is not
// checked.
func TestUsageStatesTrueDefaults(t *testing.T) {
	t.Parallel()
	app := newApp(io.Discard, io.Discard)
	checked := 0
	same := func(stated, value string) bool {
		if a, err := time.ParseDuration(stated); err == nil {
			b, err := time.ParseDuration(value)
			return err == nil && a == b
		}
		return strings.Trim(value, `"`) == stated
	}
	var walk func(string, []*cli.Command)
	walk = func(parent string, cmds []*cli.Command) {
		for _, c := range cmds {
			name := strings.TrimSpace(parent + " " + c.Name)
			values := map[string]string{}
			for _, f := range c.Flags {
				if df, ok := f.(cli.DocGenerationFlag); ok && df.TakesValue() {
					for _, n := range f.Names() {
						values[n] = df.GetValue()
					}
				}
			}
			for _, f := range c.Flags {
				df, ok := f.(cli.DocGenerationFlag)
				if !ok || !df.TakesValue() {
					continue
				}
				value := df.GetValue()
				if value == "" || value == `""` || value == "0" || value == "0s" {
					continue
				}
				u := df.GetUsage()
				for _, ix := range statedDefault.FindAllStringSubmatchIndex(u, -1) {
					m := []string{u[ix[0]:ix[1]], "", u[ix[4]:ix[5]]}
					if ix[2] >= 0 {
						m[1] = u[ix[2]:ix[3]]
					}
					// "the journal's default 30 s segment interval" is
					// another thing's default; "backup: default 3h30m"
					// is one command's.
					if strings.HasSuffix(u[:ix[0]], "'s ") || m[1] != "" && m[1] != strings.Fields(name)[0] {
						continue
					}
					checked++
					if !same(m[2], value) {
						t.Errorf("%s --%s: the usage says %q, the value is %s", name, f.Names()[0], m[0], value)
					}
				}
			}
			for _, m := range describedDefault.FindAllStringSubmatch(c.Description+" "+c.Usage, -1) {
				value, ok := values[m[1]]
				checked++
				if !ok || !same(m[2], value) {
					t.Errorf("%s: the description says %q; --%s's value is %q", name, m[0], m[1], value)
				}
			}
			walk(name, c.Subcommands)
		}
	}
	walk("", app.Commands)
	if checked < 2 {
		t.Fatalf("only %d stated defaults found: the patterns no longer match the help", checked)
	}
	t.Logf("%d stated defaults checked", checked)
}
