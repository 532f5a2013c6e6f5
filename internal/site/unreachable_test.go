package site_test

import (
	"context"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/site"
	"github.com/armada/etcd-recovery/internal/store"
	_ "github.com/armada/etcd-recovery/internal/store/all"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// openCOS opens a real cos store of endpoint and bucket with the MinIO's
// keys (caFile "": the system roots only).
func openCOS(tb testing.TB, m *testenv.MinIO, endpoint, bucket, caFile string) store.Store {
	tb.Helper()
	env := map[string]string{"COS_ACCESS_KEY_ID": m.AccessKey, "COS_SECRET_ACCESS_KEY": m.SecretKey}
	cfg := store.Config{Kind: "s3", Bucket: bucket, Endpoint: endpoint, Region: "us-east-1", CAFile: caFile}
	st, err := store.OpenURL(context.Background(), cfg.URL(), store.Config{Getenv: func(k string) string { return env[k] }, MaxRetries: 5})
	if err != nil {
		tb.Fatalf("open %s: %v", endpoint, err)
	}
	return st
}

// A primary that cannot be resolved or whose certificate does not verify
// is a setting to fix, not an outage: --site auto must not read the second
// site instead (a typo in the endpoint would otherwise restore every
// cluster from older copies). A refused connection is an outage.
func TestUnreachableIsNotAMisconfiguration(t *testing.T) {
	t.Parallel()
	m := testenv.StartMinIOTLS(t)
	bucket := m.NewBucket(t)
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	ctx := context.Background()
	cases := []struct {
		name        string
		st          store.Store
		unreachable bool
	}{
		{"verified", openCOS(t, m, m.Endpoint, bucket, m.CAFile), false},
		{"dns name not found", openCOS(t, m, "https://primary.etcd-recovery-test.invalid", bucket, m.CAFile), false},
		{"certificate not trusted", openCOS(t, m, m.Endpoint, bucket, ""), false},
		{"connection refused", openCOS(t, m, "https://127.0.0.1:1", bucket, m.CAFile), true},
	}
	for _, c := range cases {
		start := time.Now()
		err := site.Check(ctx, c.st, layout, 10*time.Second)
		t.Logf("%s: %v (%v)", c.name, err, time.Since(start).Round(time.Millisecond))
		if c.name == "verified" {
			if err != nil {
				t.Fatalf("check of a reachable primary: %v", err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: the check passed", c.name)
			continue
		}
		if got := site.Unreachable(err); got != c.unreachable {
			t.Errorf("%s: Unreachable(%v) = %v, want %v", c.name, err, got, c.unreachable)
		}
	}
}
