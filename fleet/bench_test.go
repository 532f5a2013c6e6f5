package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// BenchmarkBackupAll50 runs the real CLI, `backup --all`, over 50
// EtcdClusters (each a real single-member etcd 3.5 with TLS on its own
// loopback IP, 500 keys of 1 KiB) against MinIO, at --parallel 1, 4 and 8,
// with the backup service account's token. It reports the wall time per
// run and the tool's peak RSS.
//
//	go test -run '^$' -bench BackupAll50 -benchtime 1x -timeout 30m ./kube/
func BenchmarkBackupAll50(b *testing.B) {
	const n = 50
	k := testenv.StartKubeAPIServer(b)
	admin := k.Clientset(b, "")
	kubetest.CreateNamespaces(b, admin, ns)
	kubetest.InstallCRDs(b, k)
	a := kubetest.NewApplier(b, k)
	a.ApplyFile(b, kubetest.DeployPath(b, "10-rbac.yaml"), ns)
	m := testenv.SharedMinIO(b)
	bucket := m.NewBucket(b)
	prefix := testenv.Prefix(b)
	kubetest.CreateCOSSecret(b, admin, ns, m)
	dyn := k.Dynamic(b, "")
	start := time.Now()
	var rawTotal int64
	for i := range n {
		name := fmt.Sprintf("etcd-b%02d", i)
		fc := kubetest.AddEtcdCluster(b, admin, dyn, ns, name, testenv.EtcdOptions{IP: fmt.Sprintf("127.0.4.%d", 10+i), Members: 1})
		kubetest.PerClusterAccess(b, a, ns, name)
		testenv.PutKeys(b, fc.Etcd.Client(b), "/registry/k", 500, 1024)
		rawTotal += 500 * 1024
	}
	b.Logf("%d clusters started and filled in %v", n, time.Since(start).Round(time.Millisecond))
	token := kubetest.SAToken(b, admin, ns, "etcd-recovery")
	kc := k.Kubeconfig(b, token, ns)
	tool := testfix.Tool(b)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COS_") && !strings.HasPrefix(kv, "ETCDCTL_") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	for _, p := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("parallel-%d", p), func(b *testing.B) {
			var maxRSS int64
			var total time.Duration
			for range b.N {
				cmd := exec.CommandContext(context.Background(), tool, "--log-level", "warn", "backup", "--all", "--kind", "manual", "--parallel", fmt.Sprint(p),
					"--no-events", "--kubeconfig", kc, "--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket,
					"--prefix", prefix, "-o", "json")
				cmd.Env = env
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				d, rss, err := testfix.RunMeasured(cmd)
				if err != nil {
					b.Fatalf("backup --all: %v\n%s", err, stderr.String())
				}
				total += d
				maxRSS = max(maxRSS, rss)
				var rep fleet.BackupAllReport
				if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || len(rep.Clusters) != n || len(rep.Failed) != 0 {
					b.Fatalf("report: %v, %d clusters, failed %v", err, len(rep.Clusters), rep.Failed)
				}
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/run")
			b.ReportMetric(float64(maxRSS)/(1<<20), "peak-RSS-MiB")
			b.ReportMetric(float64(n)/(total.Seconds()/float64(b.N)), "clusters/s")
		})
	}
}
