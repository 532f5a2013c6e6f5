package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// backup --timeout bounds the whole run: a snapshot upload held by the
// store (a real proxy in front of MinIO holds the first part; the stall
// timeout is far away) ends at the deadline with exit 1 (not the signals'
// 130), naming the step and the deadline, and leaves nothing: no manifest,
// no object, no multipart upload. A zero --timeout is a usage error.
func TestCLIBackupTimeout(t *testing.T) {
	t.Parallel()
	if code, _, errOut := runCtx(t, context.Background(), "backup", "--cluster-id", "c1", "--timeout", "0s"); code != exitUsage ||
		!strings.Contains(errOut, "--timeout must be positive") {
		t.Fatalf("backup --timeout 0s: exit %d, %s; want exit %d naming the flag", code, errOut, exitUsage)
	}

	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/big/", 1000, 8<<10) // ~8 MiB: a multipart upload with --compress none
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	p := testenv.StartFaultProxy(t, strings.TrimPrefix(m.Endpoint, "http://"))
	hold := p.Hold(regexp.MustCompile(`PUT /` + regexp.QuoteMeta(bucket+"/"+prefix+"/") + `[^ ]*snapshot[^ ]* HTTP/1`))
	defer hold.Drop()

	const timeout = 3 * time.Second
	args := concatArgs([]string{"backup", "--cluster-id", "tmo", "--compress", "none", "--timeout", timeout.String(), "--cos-stall-timeout", "5m"},
		clusterArgs(c),
		[]string{"--cos-endpoint", p.URL("http"), "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix,
			"--cos-credentials-dir", credsDir(t, m.AccessKey, m.SecretKey)})
	start := time.Now()
	code, out, errOut := runCtx(t, context.Background(), args...)
	took := time.Since(start)
	select {
	case <-hold.Hit():
	default:
		t.Fatalf("the snapshot upload was never held: exit %d\n%s\n%s", code, out, errOut)
	}
	if code != exitFailure {
		t.Fatalf("backup past its --timeout: exit %d, want %d\n%s\n%s", code, exitFailure, out, errOut)
	}
	t.Logf("backup past its deadline: exit %d after %v; stderr:\n%s", code, took, errOut)
	for _, want := range []string{"the overall deadline passed (--timeout 3s)", `backup of cluster tmo failed at step "upload snapshot"`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errOut)
		}
	}
	// The deadline, then the upload's abort (its own 30 s window, the
	// store being up) and the removal of the objects written: slack for
	// two busy cores.
	if bound := timeout + 30*time.Second + 15*time.Second; took > bound {
		t.Errorf("backup took %v past a %v deadline (bound %v)", took, timeout, bound)
	}
	st := testfix.Store(t, m, bucket)
	if keys := testfix.Keys(t, st, prefix+"/"); len(keys) != 0 {
		t.Errorf("a backup stopped by its deadline left %v", keys)
	}
	if ups, err := st.ListUploads(context.Background(), prefix+"/"); err != nil || len(ups) != 0 {
		t.Errorf("a backup stopped by its deadline left uploads %+v (%v)", ups, err)
	}
}
