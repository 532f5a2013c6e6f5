package main

import (
	"context"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// The names the layout keeps beside the cluster folders ("restore", the
// ownership record) are refused as cluster ids by every command that takes
// one, with exit 4, before anything is contacted (the COS and etcd
// endpoints are loopback port 9, never dialled).
func TestReservedClusterIDsRefused(t *testing.T) {
	t.Parallel()
	creds := credsDir(t, "test-access-key", "test-secret-key")
	cos := []string{"--cos-endpoint", "http://127.0.0.1:9", "--bucket", "b", "--prefix", "etcd-backups", "--cos-credentials-dir", creds}
	const name = "20260101T000000.000Z-manual"
	reserved := catalog.ReservedClusterIDs()
	if len(reserved) < 2 {
		t.Fatalf("reserved names %v: want at least the staged folder and the ownership record", reserved)
	}
	for _, id := range reserved {
		for _, args := range [][]string{
			{"backup", "--cluster-id", id, "--endpoints", "http://127.0.0.1:9"},
			{"list", "--cluster-id", id},
			{"prune", "--cluster-id", id},
			{"delete", "--cluster-id", id, "--backup", name},
			{"delete", "--cluster-id", id, "--all-backups", "--ignore-etcdcluster"},
			{"inspect", "--endpoints", "http://127.0.0.1:9", "--cluster-id", id},
			{"drill", "--cluster-id", id, "--endpoints", "http://127.0.0.1:9"},
			{"restore", "--cluster-id", id, "--no-live", "--initial-cluster", "m0=https://127.0.0.1:9", "--data-dir-root", t.TempDir()},
			{"restore", "v2", "--cluster-id", id, "--endpoints", "http://127.0.0.1:9"},
			{"restore", "verify", "--endpoints", "http://127.0.0.1:9", "--cluster-id", id, "--backup", name},
			{"restore", "--via", "etcd-operator", "--cluster", id, "--namespace", "kubx-etcd-01"},
		} {
			code, out, errOut := runCtx(t, context.Background(), concatArgs(args, cos)...)
			if code != exitUsage || !strings.Contains(errOut, `invalid cluster id "`+id+`"`) || !strings.Contains(errOut, "reserved") {
				t.Errorf("%q: exit %d, stderr %q, stdout %.200q; want exit %d refusing the reserved id %q", args, code, errOut, out, exitUsage, id)
			}
		}
	}
}
