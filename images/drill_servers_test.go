package images_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// The etcd servers a restore drill runs, as drill.Run finds them
// (etcd-<minor> in $PATH), and the labels that name their versions.
const (
	drillEtcd35  = "/usr/local/bin/etcd-3.5"
	drillEtcd36  = "/usr/local/bin/etcd-3.6"
	labelDrill35 = "io.etcd.drill.etcd-3.5.version"
	labelDrill36 = "io.etcd.drill.etcd-3.6.version"
)

// TestImageDrillServers: each drill server in the image is the version
// scripts/test-servers.env names, found by its etcd-<minor> name on the
// image's PATH, and serves as the image's user (65532) with a read-only
// root, no capabilities and its data dir on a scratch mount: it starts on
// loopback ports, answers health, and takes a write and a read.
func TestImageDrillServers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, versionKey string
	}{
		{"etcd-3.5", drillEtcd35, "ETCD35_VERSION"},
		{"etcd-3.6", drillEtcd36, "ETCD36_VERSION"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want := strings.TrimPrefix(testenv.ServerVersion(t, tc.versionKey), "v")
			client, peer := testenv.FreePort(t), testenv.FreePort(t)
			// The server in the background; the shell waits for its health
			// (polling the condition, bounded), writes and reads a key, and
			// stops it. id -u proves who ran it.
			script := fmt.Sprintf(`set -e
command -v %[1]s
%[1]s --version | head -1
id -u
%[1]s --name drill --data-dir /scratch/drill.etcd --listen-client-urls http://127.0.0.1:%[2]d --advertise-client-urls http://127.0.0.1:%[2]d \
  --listen-peer-urls http://127.0.0.1:%[3]d --initial-advertise-peer-urls http://127.0.0.1:%[3]d --initial-cluster drill=http://127.0.0.1:%[3]d \
  >/scratch/etcd.log 2>&1 &
pid=$!
ok=
for i in $(seq 1 300); do
  if etcdctl --endpoints http://127.0.0.1:%[2]d --dial-timeout 1s --command-timeout 1s endpoint health >/dev/null 2>&1; then ok=1; break; fi
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
[ -n "$ok" ] || { echo "etcd did not become healthy"; tail -20 /scratch/etcd.log; exit 1; }
etcdctl --endpoints http://127.0.0.1:%[2]d put drill-key drill-value >/dev/null
etcdctl --endpoints http://127.0.0.1:%[2]d get drill-key --print-value-only
kill $pid; wait $pid || true`, tc.name, client, peer)
			out := mustRun(t, []string{"--entrypoint", "/bin/sh", "--tmpfs", "/scratch:rw,size=256m,mode=1777"}, "-c", script)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) < 4 {
				t.Fatalf("%s in the image:\n%s", tc.name, out)
			}
			if lines[0] != tc.path {
				t.Errorf("%s resolves to %q on the image's PATH, want %s", tc.name, lines[0], tc.path)
			}
			if lines[1] != "etcd Version: "+want {
				t.Errorf("%s --version: %q, want etcd Version: %s", tc.name, lines[1], want)
			}
			if lines[2] != fmt.Sprint(wantUID) {
				t.Errorf("%s ran as uid %s, want %d", tc.name, lines[2], wantUID)
			}
			if lines[3] != "drill-value" {
				t.Errorf("%s in the image did not serve a write and a read:\n%s", tc.name, out)
			}
		})
	}
}
