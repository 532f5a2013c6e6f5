package journal_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Helpers of the journal's benchmarks (journal_bench_test.go).

// envInts reads a comma-separated list of integers from name, def when
// unset.
func envInts(tb testing.TB, name string, def []int) []int {
	tb.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			tb.Fatalf("%s=%q: %v", name, s, err)
		}
		out = append(out, n)
	}
	return out
}

// envDurations reads a comma-separated list of durations from name.
func envDurations(tb testing.TB, name string, def []time.Duration) []time.Duration {
	tb.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	var out []time.Duration
	for f := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			tb.Fatalf("%s=%q: %v", name, s, err)
		}
		out = append(out, d)
	}
	return out
}

func benchQuick() bool { return os.Getenv("BENCH_JOURNAL_QUICK") == "1" }

// k8sObject is a Kubernetes-like object of about 1 KiB: a pod's JSON as
// the apiserver stores it (no protobuf), with a uid, a resourceVersion,
// timestamps and container IDs (64 hex digits, incompressible) that change
// from one write to the next, as status updates do.
func k8sObject(rnd *rand.Rand, ns, name string, rv int64) []byte {
	id := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return hex.EncodeToString(b)
	}
	now := time.Unix(1_790_000_000+rv, 0).UTC().Format(time.RFC3339)
	return fmt.Appendf(nil, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"namespace":%q,"uid":"%s-%s-%s-%s-%s","resourceVersion":"%d","creationTimestamp":"2026-11-01T10:00:00Z","labels":{"app":"web","pod-template-hash":"6d4cf56db6","tier":"frontend"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-6d4cf56db6","uid":"0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0","controller":true,"blockOwnerDeletion":true}]},"spec":{"containers":[{"name":"web","image":"registry.example.com/team/web:1.27.3","ports":[{"containerPort":8080,"protocol":"TCP"}],"resources":{"limits":{"cpu":"500m","memory":"256Mi"},"requests":{"cpu":"100m","memory":"128Mi"}},"terminationMessagePath":"/dev/termination-log","imagePullPolicy":"IfNotPresent"}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","nodeName":"10.240.%d.%d","schedulerName":"default-scheduler"},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":%q}],"hostIP":"10.240.%d.%d","podIP":"172.30.%d.%d","startTime":%q,"containerStatuses":[{"name":"web","state":{"running":{"startedAt":%q}},"ready":true,"restartCount":%d,"image":"registry.example.com/team/web:1.27.3","imageID":"registry.example.com/team/web@sha256:%s","containerID":"containerd://%s"}]}}`,
		name, ns, id(4), id(2), id(2), id(2), id(6), rv, rnd.IntN(256), rnd.IntN(256), now, rnd.IntN(256), rnd.IntN(256),
		rnd.IntN(256), rnd.IntN(256), now, now, rv%7, id(32), id(32))
}

// k8sKey is the i-th of keys Kubernetes-like keys.
func k8sKey(i, keys int) (key, ns, name string) {
	i %= keys
	ns, name = fmt.Sprintf("tenant-%03d", i%97), fmt.Sprintf("web-6d4cf56db6-%05d", i)
	return "/registry/pods/" + ns + "/" + name, ns, name
}

// written is one write: its revision and when its Put returned.
type written struct {
	rev int64
	at  time.Time
}

// pacedWriter writes Kubernetes-like objects into one cluster at rate
// writes/s for d (a token bucket: write i is due at start + i/rate; a
// writer behind schedule writes at once), spread over workers, each
// write a Put of one of keys keys (the first pass creates them, then
// overwrites). It returns every write's revision and return time, sorted
// by revision, and the rate achieved, or the first write's error.
func pacedWriter(ctx context.Context, cli *clientv3.Client, rate int, d time.Duration, keys int) ([]written, float64, error) {
	workers := min(max(2, rate/40), 128)
	total := int(math.Round(float64(rate) * d.Seconds()))
	start := time.Now()
	var (
		mu   sync.Mutex
		out  = make([]written, 0, total)
		werr error
		wg   sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), uint64(rate)))
			for i := w; i < total; i += workers {
				if due := start.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second))); time.Until(due) > 0 {
					select {
					case <-time.After(time.Until(due)):
					case <-ctx.Done():
						return
					}
				}
				key, ns, name := k8sKey(i, keys)
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				resp, err := cli.Put(pctx, key, string(k8sObject(rnd, ns, name, int64(i))))
				cancel()
				at := time.Now()
				mu.Lock()
				if err != nil {
					werr = err
					mu.Unlock()
					return
				}
				out = append(out, written{rev: resp.Header.Revision, at: at})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if werr != nil {
		return nil, 0, fmt.Errorf("paced writer: %w", werr)
	}
	elapsed := time.Since(start)
	slices.SortFunc(out, func(a, b written) int { return int(a.rev - b.rev) })
	return out, float64(len(out)) / elapsed.Seconds(), nil
}

// stored is one segment as the journal reported it stored.
type stored struct {
	first, last, bytes int64
	at                 time.Time
}

// commitLatencies is, for every write, the time from its Put's return to
// the store of the segment holding its revision; it fails tb when a
// write's revision is in no segment.
func commitLatencies(tb testing.TB, ws []written, segs []stored) []time.Duration {
	tb.Helper()
	slices.SortFunc(segs, func(a, b stored) int { return int(a.first - b.first) })
	lat := make([]time.Duration, 0, len(ws))
	for _, w := range ws {
		i, _ := slices.BinarySearchFunc(segs, w.rev, func(s stored, rev int64) int {
			switch {
			case s.last < rev:
				return -1
			case s.first > rev:
				return 1
			}
			return 0
		})
		if i >= len(segs) || segs[i].first > w.rev || segs[i].last < w.rev {
			tb.Fatalf("revision %d is in no stored segment (%d segments)", w.rev, len(segs))
		}
		lat = append(lat, segs[i].at.Sub(w.at))
	}
	return lat
}

// percentile p (0..100) of sorted-in-place d.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(p / 100 * float64(len(d)-1))
	return d[i]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// startBenchEtcd starts a 1-member etcd 3.5 holding the default
// namespace; it returns it, a client and the revision of that write.
func startBenchEtcd(b *testing.B, ctx context.Context) (*testenv.EtcdCluster, *clientv3.Client, int64) {
	b.Helper()
	c, cli := startEtcd(b, testenv.V35)
	r, err := cli.Put(ctx, "/registry/namespaces/default", "{}")
	if err != nil {
		b.Fatal(err)
	}
	return c, cli, r.Header.Revision
}

// journalBenchConfig is journalbench's configuration: clusters captured
// into rig's bucket, segments cut every interval, sharing budget bytes
// (0: none).
func journalBenchConfig(rig *testfix.StoreRig, interval time.Duration, clusters []map[string]any, budget int64) []byte {
	cfg, _ := json.Marshal(map[string]any{
		"Endpoint": rig.MinIO.Endpoint, "Region": rig.MinIO.Region, "Bucket": rig.Bucket, "CAFile": rig.MinIO.CAFile,
		"AccessKey": rig.MinIO.AccessKey, "SecretKey": rig.MinIO.SecretKey, "Prefix": rig.Layout.Prefix,
		"SegmentInterval": interval, "Clusters": clusters, "Budget": budget,
	})
	return cfg
}

// startJournalBench starts journalbench (bin) on cfg: its stdout is
// stdout, its stderr kept in errOut; the caller kills it.
func startJournalBench(b *testing.B, bin string, cfg []byte) (cmd *exec.Cmd, stdout io.ReadCloser, errOut *testfix.SyncBuffer) {
	b.Helper()
	cfgPath := filepath.Join(b.TempDir(), "config.json")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		b.Fatal(err)
	}
	cmd = exec.Command(bin, cfgPath)
	cmd.Env = testfix.ToolEnv()
	errOut = new(testfix.SyncBuffer)
	cmd.Stderr = errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return cmd, stdout, errOut
}
