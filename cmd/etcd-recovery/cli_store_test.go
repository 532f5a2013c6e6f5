package main

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/usage"
)

// locate runs the store flags' parsing (storeOpts.location) on args, as a
// command's Action would.
func locate(t *testing.T, args ...string) (string, store.Config, error) {
	t.Helper()
	o := &storeOpts{}
	var (
		raw string
		cfg store.Config
		err error
	)
	app := &cli.App{Name: "x", Writer: io.Discard, ErrWriter: io.Discard, Flags: o.flags(),
		Action: func(c *cli.Context) error { raw, cfg, err = o.location(c); return nil }}
	if rerr := app.Run(append([]string{"x"}, args...)); rerr != nil {
		t.Fatalf("flags %v: %v", args, rerr)
	}
	return raw, cfg, err
}

// sameLocation compares the location fields of two Configs (a Config
// holds a func: not comparable with ==).
func sameLocation(a, b store.Config) bool {
	return a.URL() == b.URL() && a.Kind == b.Kind && a.Bucket == b.Bucket && a.Prefix == b.Prefix && a.Endpoint == b.Endpoint &&
		a.Region == b.Region && a.CAFile == b.CAFile
}

// clearStoreEnv unsets the store flags' variables for the test (a COS_*
// variable of the machine running the tests would be a flag given).
func clearStoreEnv(t *testing.T) {
	t.Helper()
	unsetenv(t, envStore)
	for _, f := range locationFlags {
		unsetenv(t, f.env)
	}
}

// unsetenv unsets k for the test (t.Setenv restores it after): an empty
// variable is still a flag given.
func unsetenv(t *testing.T, k string) {
	t.Setenv(k, "")
	os.Unsetenv(k)
}

// The COS flags mean the store URL they are written as: each form opens
// the same Config, and --store given that URL opens it too.
func TestStoreFlagsRoundTrip(t *testing.T) {
	clearStoreEnv(t)
	for _, tc := range []struct {
		args []string
		url  string
		want store.Config
	}{
		{[]string{"--bucket", "b"}, "cos://b?region=us-standard", store.Config{Kind: "cos", Bucket: "b", Region: "us-standard"}},
		{[]string{"--bucket", "b", "--prefix", "etcd/prod", "--cos-endpoint", "https://s3.example:9000", "--cos-region", "eu-de", "--cos-ca-file", "/etc/ca.pem"},
			"cos://b/etcd/prod?ca-file=%2Fetc%2Fca.pem&endpoint=https%3A%2F%2Fs3.example%3A9000&region=eu-de",
			store.Config{Kind: "cos", Bucket: "b", Prefix: "etcd/prod", Endpoint: "https://s3.example:9000", Region: "eu-de", CAFile: "/etc/ca.pem"}},
		{[]string{"--bucket", "b", "--cos-endpoint", "s3.example"}, "cos://b?endpoint=s3.example&region=us-standard",
			store.Config{Kind: "cos", Bucket: "b", Endpoint: "s3.example", Region: "us-standard"}},
	} {
		raw, cfg, err := locate(t, tc.args...)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if raw != tc.url || !sameLocation(cfg, tc.want) {
			t.Errorf("%v: URL %q, %+v; want %q, %+v", tc.args, raw, cfg, tc.url, tc.want)
		}
		// The same location given as --store, and as its variable.
		for _, args := range [][]string{{"--store", raw}, {}} {
			if len(args) == 0 {
				t.Setenv(envStore, raw)
			}
			got, cfg2, err := locate(t, args...)
			unsetenv(t, envStore)
			if err != nil || got != raw || !sameLocation(cfg2, tc.want) {
				t.Errorf("--store %q (%v): %q, %+v, %v; want %+v", raw, args, got, cfg2, err, tc.want)
			}
		}
	}
	// s3:// is the same backend; the flags are cos://.
	_, cfg, err := locate(t, "--store", "s3://b/p?endpoint=https://h:9000")
	if err != nil || cfg.Kind != "s3" || cfg.Bucket != "b" || cfg.Prefix != "p" || cfg.Endpoint != "https://h:9000" || cfg.Region != "" {
		t.Errorf("--store s3://...: %+v, %v", cfg, err)
	}
}

// --store with a flag it replaces is a usage error naming both (and their
// variables), whether each comes from argv or the environment.
func TestStoreFlagConflicts(t *testing.T) {
	clearStoreEnv(t)
	for _, f := range locationFlags {
		for _, fromEnv := range []bool{false, true} {
			args := []string{"--store", "cos://b/p?endpoint=https://h"}
			if fromEnv {
				t.Setenv(f.env, "x")
			} else {
				args = append(args, "--"+f.flag, "x")
			}
			_, _, err := locate(t, args...)
			unsetenv(t, f.env)
			if !usage.Is(err) || !strings.Contains(err.Error(), "--store ("+envStore+") and --"+f.flag+" ("+f.env+")") {
				t.Errorf("--store with --%s (from the environment: %v): %v; want a usage error naming both", f.flag, fromEnv, err)
			}
		}
	}
	// The settings that are not the location go with --store.
	if _, _, err := locate(t, "--store", "cos://b", "--cos-credentials-dir", "/d", "--cos-max-retries", "2", "--cos-stall-timeout", "1m",
		"--cos-min-throughput", "off"); err != nil {
		t.Errorf("--store with the client settings: %v", err)
	}
}

func TestStoreFlagErrors(t *testing.T) {
	clearStoreEnv(t)
	const secret = "s3cr3tValue"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "gcs://b"}, `--store: store URL "gcs://b": unknown scheme "gcs" (known: cos, s3)`},
		{[]string{"--store", "cos://ak:" + secret + "@b"}, "--store: store URL \"cos://…\": user info: credentials never go in a store URL"},
		{[]string{"--store", "cos://b?secret_access_key=" + secret}, `parameter "secret_access_key": credentials never go in a store URL`},
		{[]string{"--store", "cos://b?lock-mode=compliance"}, `unknown parameter "lock-mode"`},
		{[]string{"--store", "cos://b?endpoint=https://ak:" + secret + "@h"}, "user info"},
		{[]string{"--store", "cos://b/a//b"}, "--store's prefix: "},
		{[]string{"--store", "cos://b?endpoint=ftp://h"}, `--store's endpoint= "ftp://h": unknown scheme "ftp"`},
		{[]string{"--bucket", "b", "--cos-endpoint", "ftp://h"}, `--cos-endpoint "ftp://h": unknown scheme "ftp"`},
		{[]string{"--bucket", "b/c"}, `--bucket "b/c": not a bucket name`},
		{[]string{"--bucket", "b:80"}, `--bucket "b:80": not a bucket name`},
		{[]string{"--bucket", "a b"}, `--bucket "a b", --prefix "": store URL`},
		{[]string{"--bucket", "b", "--prefix", "a//b"}, "--prefix: "},
	} {
		_, _, err := locate(t, tc.args...)
		if !usage.Is(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want a usage error with %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%v: %v: repeats the secret", tc.args, err)
		}
	}
}

// A command opens a real MinIO store from --store, credentials from a
// mounted directory: what the COS flags' form wrote, the URL's form reads.
func TestCLIStoreURL(t *testing.T) {
	t.Parallel()
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	creds := credsDir(t, m.AccessKey, m.SecretKey)
	url := store.Config{Kind: "s3", Bucket: bucket, Prefix: "etcd", Endpoint: m.Endpoint, Region: m.Region, CAFile: m.CAFile}.URL()
	for _, args := range [][]string{
		cosArgs(t, m, bucket, "etcd"),
		{"--store", url, "--cos-credentials-dir", creds},
	} {
		code, out, errOut := runCtx(t, t.Context(), concatArgs([]string{"list", "--cluster-id", "c1", "-o", "json"}, args)...)
		if code != 0 {
			t.Fatalf("list %v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	// Credentials in the URL: refused before anything is contacted, the
	// secret not repeated.
	code, _, errOut := runCtx(t, t.Context(), "list", "--cluster-id", "c1", "--store", strings.Replace(url, "s3://", "s3://"+m.AccessKey+":"+m.SecretKey+"@", 1))
	if code != 4 || !strings.Contains(errOut, "credentials never go in a store URL") || strings.Contains(errOut, m.SecretKey) {
		t.Errorf("list --store with user info: exit %d\n%s", code, errOut)
	}
}
