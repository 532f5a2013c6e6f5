package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// Usage errors of the papercut fixes, decided before the store is
// contacted (port 9 on loopback is never dialled): journal find takes the
// key as its argument, etcdctl's way, and points an etcdctl habit (--key,
// which is etcd's TLS key flag) to it; time flags take RFC 3339 or a
// duration; a bad --initial-cluster names its entry.
func TestPapercutUsageErrors(t *testing.T) {
	t.Parallel()
	cos := []string{"--cos-endpoint", "http://127.0.0.1:9", "--bucket", "b", "--prefix", "p", "--cos-credentials-dir", credsDir(t, "a", "s")}
	find := concatArgs([]string{"journal", "find", "--cluster-id", "c1"}, cos)
	assertUsageErrors(t, find, []usageCase{
		{[]string{"--key", "/registry/pods/ns/x"}, "--key is etcd's TLS client key flag, not the key to look for: give the key as the argument"},
		{[]string{"--key=/registry/pods/ns/x"}, "journal find --cluster-id ID /registry/pods/NS/NAME"},
		{[]string{"/registry/pods/ns/x", "--key", "/registry/pods/ns/y"}, "or --exact-key K"},
		{nil, "give the key as the argument (etcdctl's way"},
		{[]string{"/a", "/b"}, `one key, not 2 (["/a" "/b"])`},
		{[]string{"/a", "--exact-key", "/a"}, "or one of --exact-key and --key-prefix"},
		{[]string{"--exact-key", "/a", "--key-prefix", "/a"}, "or one of --exact-key and --key-prefix"},
		{[]string{"--key-prefix", "/a", "--match-prefix"}, "--match-prefix makes the KEY argument a prefix"},
		{[]string{""}, "the key is empty"},
		{[]string{"/a", "--since"}, "flag needs an argument: --since"},
		{[]string{"/a", "--no-such"}, "flag provided but not defined: -no-such"},
		{[]string{"/a", "--since", "yesterday"}, `journal find: --since "yesterday": want RFC 3339 (2006-01-02T15:04:05Z) or a duration before now (2h, 15m, 1h30m)`},
		{[]string{"--since", "-2h", "/a"}, `--since "-2h": a duration is how long before now, so not negative`},
	})
	restore := concatArgs([]string{"restore", "--cluster-id", "c1", "--no-live", "--initial-cluster", "m0=https://127.0.0.1:9", "--data-dir-root", t.TempDir()}, cos)
	assertUsageErrors(t, restore, []usageCase{
		{[]string{"--to-time", "2h ago"}, `restore: --to-time "2h ago": want RFC 3339 (2006-01-02T15:04:05Z) or a duration before now`},
		// A bad --initial-cluster names the entry and the form.
		{[]string{"--initial-cluster", "m0=https://127.0.0.1:2380,m1=127.0.0.2:2380"},
			`--initial-cluster: entry 2 "m1=127.0.0.2:2380": peer URL "127.0.0.2:2380" has no scheme (https:// or http://); want name=https://host:2380[,name=https://host:2380...]`},
	})
}

// A time flag is RFC 3339 or a duration before now.
func TestParseTimeFlag(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2h":                          now.Add(-2 * time.Hour),
		"15m":                         now.Add(-15 * time.Minute),
		"1h30m":                       now.Add(-90 * time.Minute),
		" 90s ":                       now.Add(-90 * time.Second),
		"2026-01-02T15:04:05Z":        time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC),
		"2026-01-02T15:04:05.5+01:00": time.Date(2026, 1, 2, 14, 4, 5, 5e8, time.UTC),
	} {
		got, err := parseTimeFlag("c", "since", in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "2", "2d", "-1m", "2026-01-02", "now", "0s", "0", "0h0m"} {
		if _, err := parseTimeFlag("c", "since", in, now); err == nil || !strings.Contains(err.Error(), "--since") {
			t.Errorf("%q: want an error naming --since, got %v", in, err)
		}
	}
}

// The size flags and settings read sizes one way (internal/bytesize):
// journal's --segment-size and --memory-budget, --cos-min-throughput's
// size and the scratch limit agree on each form, KiB 1024-based and KB
// 1000-based.
func TestSizesOneParser(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"64KiB": 64 << 10, "64Ki": 64 << 10, "64KB": 64_000, "64k": 64_000, "4MiB": 4 << 20, "4MB": 4_000_000, "65536": 65536} {
		seg, err := parseSegmentSize(in)
		if err != nil || int64(seg) != want {
			t.Errorf("--segment-size %s: %d, %v; want %d", in, seg, err, want)
		}
		tp, err := cos.ParseThroughput(in + "/60s")
		if err != nil || tp.Bytes != want {
			t.Errorf("--cos-min-throughput %s/60s: %d, %v; want %d", in, tp.Bytes, err, want)
		}
		lim, err := restore.ParseScratchLimit(in)
		if err != nil || lim != want {
			t.Errorf("%s=%s: %d, %v; want %d", restore.EnvScratchLimit, in, lim, err, want)
		}
	}
	if _, err := parseSegmentSize("2GiB"); err == nil || !strings.Contains(err.Error(), "at most 1GiB") {
		t.Errorf("--segment-size 2GiB: %v", err)
	}
}

// Completion: `completion bash|zsh|fish` prints a script for the binary,
// and `--generate-bash-completion`, which the bash and zsh scripts call,
// lists what may come next (commands, subcommands, a command's flags;
// run on the built binary).
// A mistyped command or flag is answered with the closest name, and
// only when one is close.
func TestCompletionAndSuggestions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for shell, want := range map[string][]string{
		"bash": {"complete -o bashdefault -o default -o nospace -F _etcd_recovery_complete etcd-recovery", "--generate-bash-completion"},
		"zsh":  {"#compdef etcd-recovery", "compdef _etcd_recovery_complete etcd-recovery", "--generate-bash-completion"},
		"fish": {"complete -c etcd-recovery", "-l cluster-id", "__fish_seen_subcommand_from journal", "-a 'find'"},
	} {
		code, out, errOut := runCtx(t, ctx, "completion", shell)
		for _, w := range want {
			if code != 0 || !strings.Contains(out, w) {
				t.Errorf("completion %s: exit %d, no %q in:\n%s%s", shell, code, w, out, errOut)
			}
		}
	}
	assertUsageErrors(t, []string{"completion"}, []usageCase{{nil, "completion: name one shell: bash, zsh, fish"}, {[]string{"tcsh"}, `unknown shell "tcsh"`}})
	for _, tc := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"--generate-bash-completion"}, []string{"backup\n", "journal\n", "version\n", "completion\n"}, []string{"--cluster-id"}},
		{[]string{"journal", "--generate-bash-completion"}, []string{"find\n", "prove\n"}, []string{"backup\n"}},
		{[]string{"backup", "--clu", "--generate-bash-completion"}, []string{"--cluster-id\n", "--cluster\n"}, []string{"--to-revision\n"}},
		{[]string{"journal", "find", "--log", "--generate-bash-completion"}, []string{"--log-format\n", "--log-level\n"}, []string{"--cluster-id\n"}},
	} {
		// The real binary: urfave/cli reads the words typed from os.Args.
		out, _, code := testfix.RunTool(t, ctx, testfix.Tool(t), nil, tc.args...)
		for _, w := range tc.want {
			if code != 0 || !strings.Contains(out, w) {
				t.Errorf("%v: exit %d, no %q in:\n%s", tc.args, code, w, out)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out, n) {
				t.Errorf("%v: %q listed:\n%s", tc.args, n, out)
			}
		}
	}
	usageErrors(t, []usageCase{
		{[]string{"bakcup"}, `unknown command "bakcup" (did you mean "backup"?)`},
		{[]string{"jurnal"}, `unknown command "jurnal" (did you mean "journal"?)`},
		{[]string{"list", "--clster-id", "c1"}, "flag provided but not defined: -clster-id (did you mean --cluster-id?)"},
		{[]string{"--log-formt", "json", "list"}, "-log-formt (did you mean --log-format?)"},
		{[]string{"journal", "prove", "--no-recrd"}, "(did you mean --no-record?)"},
		{[]string{"restore", "--dryrun"}, "(did you mean --dry-run?)"},
	})
	for _, args := range [][]string{{"foo"}, {"list", "--zzz"}} {
		if _, _, errOut := runCtx(t, ctx, args...); strings.Contains(errOut, "did you mean") {
			t.Errorf("%v: a suggestion for a name like none: %s", args, errOut)
		}
	}
}

// The global flags work after the command as before it (a Job's args
// written `backup --log-format json` logged text and failed before): the
// value is used (a bad one is refused naming the flag), the innermost one
// wins, and a command logs in the format given after it.
func TestGlobalFlagsAfterCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cos := []string{"--cos-endpoint", "http://127.0.0.1:9", "--bucket", "b", "--prefix", "p", "--cos-credentials-dir", credsDir(t, "a", "s"), "--cos-max-retries", "0"}
	usageErrors(t, []usageCase{
		{concatArgs([]string{"list", "--cluster-id", "c1", "--log-format", "xml"}, cos), `--log-format "xml": want text or json`},
		{concatArgs([]string{"journal", "find", "--cluster-id", "c1", "--log-level", "loud"}, cos, []string{"/k"}), "--log-level"},
		{concatArgs([]string{"journal", "find", "--cluster-id", "c1"}, cos, []string{"/k", "--log-format", "xml"}), `--log-format "xml"`},
		{concatArgs([]string{"--log-format", "json", "list", "--cluster-id", "c1", "--log-format", "xml"}, cos), `--log-format "xml"`},
	})
	if code, _, errOut := runCtx(t, ctx, concatArgs([]string{"--log-format", "xml", "version", "--log-format", "text"})...); code != 0 {
		t.Errorf("--log-format xml before the command, text after it: exit %d (the innermost should win)\n%s", code, errOut)
	}
	// A group-readable identity file is accepted with a warning, logged
	// before the store is contacted: in JSON when --log-format json
	// follows the command, before or after the key.
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	idFile := filepath.Join(t.TempDir(), "identity")
	if err := os.WriteFile(idFile, []byte(id.String()+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		concatArgs([]string{"journal", "find", "--log-format", "json", "--cluster-id", "c1", "--identity-file", idFile}, cos, []string{"/k"}),
		concatArgs([]string{"journal", "find", "--cluster-id", "c1", "--identity-file", idFile}, cos, []string{"/k", "--log-format", "json"}),
		concatArgs([]string{"journal", "--log-format", "json", "find", "--cluster-id", "c1", "--identity-file", idFile}, cos, []string{"/k"}),
	} {
		_, _, errOut := runCtx(t, ctx, args...)
		if !strings.Contains(errOut, `{"time":`) || !strings.Contains(errOut, `"msg":"identity file accepted with a remark"`) {
			t.Errorf("%v: no JSON log line on stderr:\n%s", args, errOut)
		}
	}
}

// One name for "don't record" (--no-record; journal prove's --dry-run is
// its deprecated spelling) and one meaning of --all (every EtcdCluster
// of the namespace): drill's and journal prove's bucket-wide form is
// --all-cluster-ids, and their old --all without a namespace still works
// as it, with a deprecation note.
func TestNoRecordAndAllOneMeaning(t *testing.T) {
	t.Parallel()
	if os.Getenv("POD_NAMESPACE") != "" {
		t.Skip("POD_NAMESPACE is set: --all has its namespace")
	}
	ctx := context.Background()
	store := []string{"--cos-endpoint", "http://127.0.0.1:1", "--bucket", "b", "--cos-credentials-dir", credsDir(t, "a", "s"), "--cos-max-retries", "0"}
	for _, tc := range []struct {
		args       []string
		code       int
		want, note string
	}{
		{[]string{"drill", "--all", "--namespace", "ns", "--all-cluster-ids"}, exitUsage, "drill: --all (every EtcdCluster of the namespace) and --all-cluster-ids", ""},
		{[]string{"drill", "--all-cluster-ids", "--cluster-id", "c1"}, exitUsage, "exclusive", ""},
		{[]string{"drill", "--all", "--cluster-id", "c1"}, exitUsage, "exclusive", "drill: --all without --namespace or --kubeconfig is deprecated, use --all-cluster-ids"},
		{[]string{"journal", "prove", "--all", "--cluster-id", "c1"}, exitUsage, "exclusive", "journal prove: --all without --namespace or --kubeconfig is deprecated, use --all-cluster-ids"},
		{[]string{"journal", "prove", "--cluster-id", "c1", "--dry-run", "--no-record"}, exitUsage, "pass only --no-record", ""},
		{[]string{"journal", "prove", "--cluster-id", "c1", "--dry-run"}, exitFailure, "", "journal prove: --dry-run is deprecated, use --no-record"},
	} {
		code, _, errOut := runCtx(t, ctx, concatArgs(tc.args, store)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, tc.note) {
			t.Errorf("%v: exit %d, stderr %q; want %d with %q and %q", tc.args, code, errOut, tc.code, tc.want, tc.note)
		}
		if tc.note == "" && strings.Contains(errOut, "deprecated") {
			t.Errorf("%v: a deprecation note for the current spelling: %s", tc.args, errOut)
		}
	}
	// Every command that takes --all means the namespace's EtcdClusters
	// by it (one usage text), and every "don't record" is --no-record.
	byName := walkFlags(t)
	for _, u := range byName["all"] {
		if u.usage != allFlagUsage {
			t.Errorf("%s --all: %q", u.cmd, u.usage)
		}
	}
	var noRecord []string
	for _, u := range byName["no-record"] {
		noRecord = append(noRecord, u.cmd)
	}
	if strings.Join(noRecord, ",") != "drill,journal prove" {
		t.Errorf("--no-record on %v, want drill and journal prove", noRecord)
	}
	for _, u := range byName["dry-run"] {
		if u.cmd == "journal prove" || u.cmd == "drill" {
			t.Errorf("%s has a visible --dry-run", u.cmd)
		}
	}
}

// usageErrors runs each case's command line alone and expects a usage
// error (exit 4) whose stderr says want.
func usageErrors(tb testing.TB, cases []usageCase) {
	tb.Helper()
	for _, tc := range cases {
		code, _, stderr := runCtx(tb, context.Background(), tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			tb.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}

// After "--", every word is the key, wherever the "--" stands (the flag
// package takes one before the key; one after it reaches takeArgs), and
// --help after the key shows the help and runs nothing. Nothing here
// reaches the store (port 9 is never dialled: a usage error comes first,
// or the help).
func TestJournalFindDoubleDashAndHelp(t *testing.T) {
	t.Parallel()
	cos := []string{"--cos-endpoint", "http://127.0.0.1:9", "--bucket", "b", "--prefix", "p", "--cos-credentials-dir", credsDir(t, "a", "s"), "--cos-max-retries", "0"}
	find := concatArgs([]string{"journal", "find", "--cluster-id", "c1"}, cos)
	assertUsageErrors(t, find, []usageCase{
		{[]string{"--", "--match-prefix", "/registry/pods"}, `one key, not 2 (["--match-prefix" "/registry/pods"])`},
		{[]string{"/a", "--", "--match-prefix"}, `one key, not 2 (["/a" "--match-prefix"])`},
	})
	// "-- --log-level" is the key --log-level: not a flag missing its
	// value; the run goes on to the store (and fails there, not as usage).
	code, _, errOut := runCtx(t, context.Background(), concatArgs(find, []string{"--", "--log-level"})...)
	if code == exitUsage || strings.Contains(errOut, "flag needs an argument") {
		t.Errorf("journal find -- --log-level: exit %d, want the key --log-level searched:\n%s", code, errOut)
	}
	for _, h := range []string{"--help", "-h"} {
		code, out, errOut := runCtx(t, context.Background(), concatArgs(find, []string{"/registry/pods/ns/x", h})...)
		if code != 0 || !strings.Contains(out+errOut, "journal find") || !strings.Contains(out+errOut, "--match-prefix") || strings.Contains(errOut, "cos:") {
			t.Errorf("journal find KEY %s: exit %d, want the command's help and nothing run:\n%s\n%s", h, code, out, errOut)
		}
	}
}

// prune's --all is the old spelling of --all-cluster-ids (bucket-wide):
// where a namespace is in effect, where every other --all means that
// namespace's EtcdClusters, it is refused rather than run bucket-wide.
func TestPruneOldAllInANamespace(t *testing.T) {
	t.Parallel()
	cos := []string{"--cos-endpoint", "http://127.0.0.1:9", "--bucket", "b", "--prefix", "p", "--cos-credentials-dir", credsDir(t, "a", "s"), "--cos-max-retries", "0"}
	assertUsageErrors(t, []string{"prune"}, []usageCase{
		{concatArgs([]string{"--all", "--namespace", "kubx-etcd-01"}, cos), "--all is the old spelling of --all-cluster-ids (every cluster id under --prefix"},
	})
}
