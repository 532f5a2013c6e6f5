package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// backup then list through the CLI, with JSON that matches the table, and
// no secret anywhere in the output, even at debug level.
func TestCLIBackupAndList(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, EnableV2: true})
	testenv.PutKeys(t, c.Client(t), "/registry/", 300, 128)
	testenv.PutV2Keys(t, c, 12)
	cr := newCLIRig(t)
	m, cos := cr.MinIO, cr.cos
	ctx := context.Background()

	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"--log-level", "debug", "backup", "--cluster-id", "cli1", "--kind", "scheduled", "-o", "json"}, clusterArgs(c), cos)...)
	if code != 0 {
		t.Fatalf("backup exit %d\n%s\n%s", code, out, errOut)
	}
	var man catalog.Manifest
	if err := json.Unmarshal([]byte(out), &man); err != nil {
		t.Fatalf("backup -o json: %v\n%s", err, out)
	}
	if man.ClusterID != "cli1" || man.Kind != catalog.KindScheduled || man.V2 == nil || man.V2.Keys != 12 {
		t.Errorf("manifest: %+v", man)
	}
	for _, s := range []string{m.SecretKey} {
		if strings.Contains(out+errOut, s) {
			t.Fatalf("a secret appears in the output")
		}
	}
	if !strings.Contains(errOut, "level=INFO") || !strings.Contains(errOut, "cluster=cli1") {
		t.Errorf("logs are not key=value with the cluster: %s", errOut)
	}

	code, table, errOut := runCtx(t, ctx, concatArgs([]string{"list", "--cluster-id", "cli1", "-o", "wide"}, cos)...)
	if code != 0 {
		t.Fatalf("list exit %d: %s", code, errOut)
	}
	code, js, _ := runCtx(t, ctx, concatArgs([]string{"list", "--cluster-id", "cli1", "-o", "json"}, cos)...)
	if code != 0 {
		t.Fatal("list -o json failed")
	}
	var rows []struct {
		Name, Status string
		Revision     int64
		V2Keys       *int
	}
	if err := json.Unmarshal([]byte(js), &rows); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, js)
	}
	if len(rows) != 1 || rows[0].Name != man.Name || rows[0].Status != "committed" || rows[0].Revision != man.RevisionBefore || rows[0].V2Keys == nil || *rows[0].V2Keys != 12 {
		t.Fatalf("list json %+v, want the backup %s", rows, man.Name)
	}
	for _, want := range []string{man.Name, "committed", "scheduled", man.Source.Name} {
		if !strings.Contains(table, want) {
			t.Errorf("list table lacks %q:\n%s", want, table)
		}
	}
}

// Bad flags are usage errors (exit 4) that say what is wrong; wrong
// credentials are a failure (exit 1) that names the cause, not the secret.
func TestCLIErrors(t *testing.T) {
	t.Parallel()
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	ctx := context.Background()
	cos := cosArgs(t, m, bucket, testenv.Prefix(t))
	usage := []struct {
		args []string
		want string
	}{
		{[]string{"backup"}, "--cluster-id is required"},
		{[]string{"backup", "--cluster-id", "../escape"}, "invalid cluster id"},
		{[]string{"backup", "--cluster-id", "x", "--kind", "pre-restore"}, "--kind"},
		{[]string{"backup", "--cluster-id", "x", "--compress", "gzip"}, "compression"},
		{[]string{"backup", "--cluster-id", "x", "--v2", "maybe"}, "--v2"},
		{[]string{"backup", "--cluster-id", "x", "--cert", "/c.pem"}, "--cert and --key"},
		{[]string{"list"}, "--cluster-id is required"},
		{[]string{"list", "--cluster-id", "x", "-o", "xml"}, "output format"},
		{[]string{"backup", "--no-such-flag"}, "no-such-flag"},
	}
	for _, u := range usage {
		code, _, errOut := runCtx(t, ctx, concatArgs(u.args, cos)...)
		if code != exitUsage || !strings.Contains(errOut, u.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", u.args, code, errOut, exitUsage, u.want)
		}
	}
	// No credentials at all: a usage error that names the variables.
	code, _, errOut := runCtx(t, ctx, "list", "--cluster-id", "x", "--cos-endpoint", m.Endpoint, "--bucket", bucket)
	if os.Getenv("COS_ACCESS_KEY_ID") == "" && (code != exitUsage || !strings.Contains(errOut, "COS_ACCESS_KEY_ID")) {
		t.Errorf("no credentials: exit %d %q", code, errOut)
	}
	// Wrong secret: exit 1, clear cause, no secret.
	const wrong = "wrong-secret-4f1d2c3b"
	bad := []string{"--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--cos-credentials-dir", credsDir(t, m.AccessKey, wrong)}
	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"list", "--cluster-id", "x"}, bad)...)
	if code != exitFailure || !strings.Contains(errOut, "credentials are wrong") {
		t.Errorf("wrong secret: exit %d %q", code, errOut)
	}
	if strings.Contains(out+errOut, wrong) || strings.Contains(out+errOut, m.SecretKey) {
		t.Errorf("a secret leaked: %q", out+errOut)
	}
	// Already cancelled: exit 130.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if code, _, errOut := runCtx(t, cctx, concatArgs([]string{"list", "--cluster-id", "x"}, cos)...); code != exitCanceled {
		t.Errorf("cancelled: exit %d %q", code, errOut)
	}
}

// SIGINT to the real binary mid-stream: exit 130, no manifest, the
// multipart upload aborted, and secrets absent from argv (they are read
// from the mounted directory).
func TestCLIInterruptMidStream(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/big/", 6000, 8<<10) // ~48 MiB
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	args := concatArgs([]string{"--log-level", "debug", "backup", "--cluster-id", "sigint", "--compress", "none"}, clusterArgs(c), cosArgs(t, m, bucket, prefix))
	for _, a := range args {
		if strings.Contains(a, m.SecretKey) {
			t.Fatal("the secret would be in argv")
		}
	}
	// stderr is drained throughout (a full pipe would stall the child).
	r := startTool(t, args...)
	// Mid-stream means the snapshot's multipart upload exists: wait for
	// that condition, not for a time.
	st := testfix.Store(t, m, bucket)
	waitUpload(t, st, prefix+"/", r, 2*time.Minute)
	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(2 * time.Minute); code != exitCanceled {
		t.Fatalf("want exit %d after SIGINT, got %d (-1: still running, -2: no exit status)\n%s", exitCanceled, code, r.output())
	}
	if keys := testfix.Keys(t, st, prefix+"/"); len(keys) != 0 {
		t.Errorf("an interrupted backup left %v", keys)
	}
	ups, err := st.ListUploads(context.Background(), prefix+"/")
	if err != nil || len(ups) != 0 {
		t.Errorf("an interrupted backup left uploads %+v (%v)", ups, err)
	}
}
