package testfix

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// The benchmarks of backup, restore and drill share their scaffolding:
// sizes and rounds from the environment, MinIO's credentials as the tool
// reads them, and a large backup to measure.

// BenchInt is the number in the environment variable name, or def when it
// is unset.
func BenchInt(name string, def int) int {
	n := def
	if s := os.Getenv(name); s != "" {
		fmt.Sscan(s, &n)
	}
	return n
}

// BenchDuration is the duration in the environment variable name, or def
// when it is unset; a value that does not parse fails tb.
func BenchDuration(tb testing.TB, name string, def time.Duration) time.Duration {
	tb.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return d
}

// BenchSizesMB is the comma-separated list of sizes in the environment
// variable name, or def when it is unset.
func BenchSizesMB(name string, def ...int) []int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	var sizes []int
	for _, f := range strings.Split(s, ",") {
		var n int
		fmt.Sscan(f, &n)
		sizes = append(sizes, n)
	}
	return sizes
}

// COSEnv is the process environment with the COS_* variables that point
// the tool at bucket on MinIO (and at MinIO's CA when it serves HTTPS).
func COSEnv(mi *testenv.MinIO, bucket string) []string {
	return append(os.Environ(),
		"COS_ACCESS_KEY_ID="+mi.AccessKey, "COS_SECRET_ACCESS_KEY="+mi.SecretKey,
		"COS_ENDPOINT="+mi.Endpoint, "COS_REGION="+mi.Region, "COS_BUCKET="+bucket, "COS_CA_FILE="+mi.CAFile)
}

// CurlConfig writes a curl -K config holding MinIO's credentials into dir
// (so they are not on argv) and returns its path.
func CurlConfig(tb testing.TB, dir string, mi *testenv.MinIO) string {
	tb.Helper()
	f := filepath.Join(dir, "curl.cfg")
	if err := os.WriteFile(f, fmt.Appendf(nil, "user = \"%s:%s\"\n", mi.AccessKey, mi.SecretKey), 0o600); err != nil {
		tb.Fatal(err)
	}
	return f
}

// CredentialsDir writes MinIO's credentials as a --cos-credentials-dir
// (one file a key) under dir and returns its path.
func CredentialsDir(tb testing.TB, dir string, mi *testenv.MinIO) string {
	tb.Helper()
	credDir := filepath.Join(dir, "creds")
	if err := os.Mkdir(credDir, 0o700); err != nil {
		tb.Fatal(err)
	}
	for name, v := range map[string]string{"access_key_id": mi.AccessKey, "secret_access_key": mi.SecretKey} {
		if err := os.WriteFile(filepath.Join(credDir, name), []byte(v), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return credDir
}

// LargeBackup fills src with at least sizeMB MB and takes a scheduled
// backup of it as cluster id into st under layout.
func LargeBackup(tb testing.TB, src *testenv.EtcdCluster, st store.Store, layout catalog.Layout, id string, sizeMB int) *catalog.Manifest {
	tb.Helper()
	FillLarge(tb, src.Client(tb), int64(sizeMB)<<20)
	res, err := backup.Run(context.Background(), backup.Options{ClusterID: id, Kind: catalog.KindScheduled,
		Etcd: EtcdConfig(src), Store: st, Layout: layout})
	if err != nil {
		tb.Fatal(err)
	}
	return res.Manifest
}
