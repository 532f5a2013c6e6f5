package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestMain(m *testing.M) { testfix.Main(m) }

// credsDir writes a mounted-secret style credentials directory, so CLI tests
// pass credentials the way the CronJob does, never in argv.
func credsDir(tb testing.TB, id, secret string) string {
	tb.Helper()
	dir := tb.TempDir()
	for name, v := range map[string]string{"access_key_id": id, "secret_access_key": secret} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// cosArgs are the COS flags for a MinIO bucket with credentials from a dir.
func cosArgs(tb testing.TB, m *testenv.MinIO, bucket, prefix string) []string {
	tb.Helper()
	return []string{"--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix,
		"--cos-credentials-dir", credsDir(tb, m.AccessKey, m.SecretKey)}
}

// etcdArgs are etcdctl-style flags for a test cluster.
func clusterArgs(c *testenv.EtcdCluster) []string {
	args := []string{}
	for _, ep := range c.Endpoints() {
		args = append(args, "--endpoints", ep)
	}
	if c.PKI != nil {
		args = append(args, "--cacert", c.PKI.CAFile, "--cert", c.PKI.ClientCertFile, "--key", c.PKI.ClientKeyFile)
	}
	return args
}

// runCLI runs the command in-process and returns its exit code and output.
func runCtx(tb testing.TB, ctx context.Context, args ...string) (int, string, string) {
	tb.Helper()
	var stdout, stderr bytes.Buffer
	code := run(ctx, append([]string{"etcd-recovery"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func concatArgs(groups ...[]string) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// usageCase is a command line's arguments and what its usage error says.
type usageCase struct {
	args []string
	want string
}

// assertUsageErrors runs the command line cmd followed by each case's
// arguments and expects a usage error (exit 4) whose stderr says want.
func assertUsageErrors(tb testing.TB, cmd []string, cases []usageCase) {
	tb.Helper()
	for _, tc := range cases {
		code, _, stderr := runCtx(tb, context.Background(), append(append([]string{}, cmd...), tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			tb.Errorf("%s %v: exit %d, stderr %q; want %d and %q", cmd[0], tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}

// cliRig is one test's bucket and prefix on the shared MinIO
// (testfix.StoreRig) and the --cos flags that point the tool at them.
type cliRig struct {
	*testfix.StoreRig
	cos []string
}

func newCLIRig(tb testing.TB) *cliRig {
	tb.Helper()
	r := testfix.NewStoreRig(tb)
	return &cliRig{StoreRig: r, cos: cosArgs(tb, r.MinIO, r.Bucket, r.Layout.Prefix)}
}
