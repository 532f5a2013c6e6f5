package main

import (
	"context"
	"strings"
	"testing"
)

// Usage mistakes are exit 4 with the bad value named, decided before
// anything is contacted: every case here runs with a COS endpoint and etcd
// endpoints that are never dialled (port 9, below the ephemeral range, on
// loopback), so a case that reached the network would fail with another
// code or message, not hang.
func TestCLIUsageErrors(t *testing.T) {
	t.Parallel()
	creds := credsDir(t, "test-access-key", "test-secret-key")
	cos := func(prefix string) []string {
		return []string{"--cos-endpoint", "http://127.0.0.1:9", "--bucket", "b", "--prefix", prefix, "--cos-credentials-dir", creds}
	}
	good := cos("etcd-backups")
	withCOS := func(args []string, c []string) []string { return concatArgs(args, c) }
	const name = "20260101T000000.000Z-manual"
	restoreArgs := []string{"restore", "--cluster-id", "c1", "--no-live", "--initial-cluster", "m0=https://127.0.0.1:9", "--data-dir-root", t.TempDir()}
	type tc struct {
		args []string
		want []string // substrings of stderr
	}
	cases := []tc{
		// Unknown commands are usage errors, not exit 3 (inspect's UNREACHABLE).
		{[]string{"foo"}, []string{`unknown command "foo"`}},
		{[]string{"--log-level", "debug", "bakcup"}, []string{`unknown command "bakcup"`}},
		{[]string{"help", "foo"}, []string{`unknown command "foo"`}},
		// Stray positional arguments, for every command and subcommand.
		{withCOS([]string{"list", "c1", "--cluster-id", "c1"}, good), []string{"list", `unexpected argument "c1"`}},
		{withCOS([]string{"list", "--cluster-id", "c1", "extra"}, good), []string{"list", `unexpected argument "extra"`}},
		{[]string{"inspect", "--endpoints", "http://127.0.0.1:9", "extra"}, []string{"inspect", `unexpected argument "extra"`}},
		{withCOS([]string{"backup", "--cluster-id", "c1", "--endpoints", "http://127.0.0.1:9", "now"}, good), []string{"backup", `unexpected argument "now"`}},
		{withCOS([]string{"prune", "--cluster-id", "c1", "c2"}, good), []string{"prune", `unexpected argument "c2"`}},
		{withCOS([]string{"delete", "--cluster-id", "c1", "--backup", name, name}, good), []string{"delete", `unexpected argument "` + name + `"`}},
		{withCOS(append(append([]string{}, restoreArgs...), "stray"), good), []string{"restore", `unexpected argument "stray"`, "subcommands: v2, verify"}},
		{withCOS([]string{"restore", "v2", "--cluster-id", "c1", "--endpoints", "http://127.0.0.1:9", "x"}, good), []string{"restore v2", `unexpected argument "x"`}},
		{[]string{"restore", "verify", "--endpoints", "http://127.0.0.1:9", "x"}, []string{"restore verify", `unexpected argument "x"`}},
		// Endpoints: http(s)://host:port only (or etcdctl's bare host:port).
		{[]string{"inspect", "--endpoints", "foo://127.0.0.1:9"}, []string{`--endpoints "foo://127.0.0.1:9"`, `unknown scheme "foo"`}},
		{[]string{"inspect", "--endpoints", "http://[::1"}, []string{`--endpoints "http://[::1"`}},
		{[]string{"inspect", "--endpoints", "https://127.0.0.1"}, []string{`--endpoints "https://127.0.0.1"`, "no host:port"}},
		{[]string{"inspect", "--endpoints", "https://127.0.0.1:9/v3/kv"}, []string{"a path is not allowed"}},
		{withCOS([]string{"backup", "--cluster-id", "c1", "--endpoints", "http//127.0.0.1:9"}, good), []string{`--endpoints "http//127.0.0.1:9"`}},
		{withCOS([]string{"backup", "--cluster-id", "c1", "--endpoints", "foo://127.0.0.1:9"}, good), []string{`unknown scheme "foo"`}},
		{withCOS([]string{"restore", "v2", "--cluster-id", "c1", "--endpoints", "foo://127.0.0.1:9"}, good), []string{`unknown scheme "foo"`}},
		{[]string{"restore", "verify", "--endpoints", "foo://127.0.0.1:9"}, []string{`unknown scheme "foo"`}},
		{withCOS(append(append([]string{}, restoreArgs...), "--endpoints", "foo://127.0.0.1:9"), good), []string{`unknown scheme "foo"`}},
		// COS endpoints: a URL (or a bare host) or nothing.
		{withCOS([]string{"list", "--cluster-id", "c1"}, []string{"--cos-endpoint", "not a url", "--bucket", "b", "--cos-credentials-dir", creds}), []string{`--cos-endpoint "not a url"`}},
		{withCOS([]string{"list", "--cluster-id", "c1"}, []string{"--cos-endpoint", "ftp://127.0.0.1:9", "--bucket", "b", "--cos-credentials-dir", creds}), []string{`--cos-endpoint "ftp://127.0.0.1:9"`, `unknown scheme "ftp"`}},
		{withCOS([]string{"list", "--cluster-id", "c1"}, []string{"--cos-endpoint", "http//127.0.0.1:9", "--bucket", "b", "--cos-credentials-dir", creds}), []string{`--cos-endpoint "http//127.0.0.1:9"`}},
		{withCOS([]string{"list", "--cluster-id", "c1"}, []string{"--cos-endpoint", "http://127.0.0.1:9/bucket", "--bucket", "b", "--cos-credentials-dir", creds}), []string{"a path is not allowed"}},
		{withCOS([]string{"list", "--cluster-id", "c1"}, []string{"--cos-endpoint", "http://127.0.0.1:99999", "--bucket", "b", "--cos-credentials-dir", creds}), []string{`--cos-endpoint "http://127.0.0.1:99999"`}},
		// A password in a URL is never echoed.
		{withCOS([]string{"list", "--cluster-id", "c1"}, []string{"--cos-endpoint", "https://key:s3cret-pw@127.0.0.1:9", "--bucket", "b", "--cos-credentials-dir", creds}), []string{`--cos-endpoint "https://REDACTED@127.0.0.1:9"`, "user info"}},
		{[]string{"inspect", "--endpoints", "https://root:s3cret-pw@127.0.0.1:9"}, []string{`--endpoints "https://REDACTED@127.0.0.1:9"`, "user info"}},
		// The store's stall bound must be positive.
		{withCOS([]string{"list", "--cluster-id", "c1", "--cos-stall-timeout", "0"}, good), []string{"--cos-stall-timeout 0s: must be positive"}},
		{withCOS([]string{"backup", "--cluster-id", "c1", "--endpoints", "http://127.0.0.1:9", "--cos-stall-timeout", "-1s"}, good), []string{"--cos-stall-timeout -1s"}},
		{withCOS([]string{"list", "--cluster-id", "c1", "--cos-max-retries", "-1"}, good), []string{"--cos-max-retries -1"}},
		// Cluster ids are one key segment.
		{withCOS([]string{"list", "--cluster-id", "."}, good), []string{`invalid cluster id "."`}},
		{withCOS([]string{"list", "--cluster-id", ".."}, good), []string{`invalid cluster id ".."`}},
		{withCOS([]string{"list", "--cluster-id", "a/b"}, good), []string{`invalid cluster id "a/b"`}},
	}
	// Prefixes that would write keys that cannot be listed back, or that a
	// store maps onto another prefix's keys, for every command that takes one.
	for _, p := range []string{"a//b", ".", "..", "a/./b", "a/../b", "a b", "//"} {
		for _, args := range [][]string{
			{"backup", "--cluster-id", "c1", "--endpoints", "http://127.0.0.1:9"},
			{"list", "--cluster-id", "c1"},
			{"prune", "--cluster-id", "c1"},
			{"prune", "--all-cluster-ids"},
			{"delete", "--cluster-id", "c1", "--backup", name},
			{"inspect", "--endpoints", "http://127.0.0.1:9", "--cluster-id", "c1"},
			restoreArgs,
			{"restore", "v2", "--cluster-id", "c1", "--endpoints", "http://127.0.0.1:9"},
			{"restore", "verify", "--endpoints", "http://127.0.0.1:9", "--cluster-id", "c1", "--backup", name},
		} {
			cases = append(cases, tc{withCOS(append([]string{}, args...), cos(p)), []string{"--prefix", `"` + p + `"`}})
		}
	}
	for _, c := range cases {
		ctx, cancel := context.WithCancel(context.Background())
		code, out, errOut := runCtx(t, ctx, c.args...)
		cancel()
		ok := code == exitUsage
		for _, w := range c.want {
			ok = ok && strings.Contains(errOut, w)
		}
		if strings.Contains(out+errOut, "s3cret-pw") {
			t.Errorf("%q: a password is echoed: %q", c.args, errOut)
		}
		if !ok {
			t.Errorf("%q: exit %d, stderr %q, stdout %.200q; want exit %d with %q", c.args, code, errOut, out, exitUsage, c.want)
		}
	}
}
