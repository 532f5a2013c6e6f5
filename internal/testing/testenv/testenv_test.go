package testenv_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestFreePortUnique(t *testing.T) {
	t.Parallel()
	seen := map[int]bool{}
	for range 200 {
		p := testenv.FreePort(t)
		if seen[p] {
			t.Fatalf("FreePort returned %d twice", p)
		}
		seen[p] = true
	}
}

func TestPKIDistinctCAs(t *testing.T) {
	t.Parallel()
	a, b := testenv.NewPKI(t), testenv.NewPKI(t)
	if a.CA.Equal(b.CA) || a.CAFile == b.CAFile {
		t.Fatal("two NewPKI calls made the same CA")
	}
	if a.ClientTLS().Certificates[0].Leaf.Subject.CommonName != testenv.ClientCommonName {
		t.Fatalf("client cert CN = %q", a.ClientTLS().Certificates[0].Leaf.Subject.CommonName)
	}
}

func TestPrefix(t *testing.T) {
	t.Parallel()
	a, b := testenv.Prefix(t), testenv.Prefix(t)
	if a == b || !strings.HasPrefix(a, "TestPrefix-") || strings.ContainsAny(a, "/ ") {
		t.Fatalf("Prefix: %q, %q", a, b)
	}
}

// TestEtcdTLSCluster starts a 3-member mutual-TLS cluster on every version.
func TestEtcdTLSCluster(t *testing.T) {
	t.Parallel()
	eachVersion(t, func(t *testing.T, v testenv.Version) {
		c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, TLS: true, EnableV2: v.HasV2()})
		for _, ep := range c.Endpoints() {
			if !strings.HasPrefix(ep, "https://127.0.0.1:") {
				t.Fatalf("endpoint %q", ep)
			}
		}
		cli := c.Client(t)

		want := testenv.PutKeys(t, cli, "/test/keys/", 300, 64)
		resp, err := cli.Get(ctx(t), "/test/keys/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != len(want) {
			t.Fatalf("got %d keys, want %d", len(resp.Kvs), len(want))
		}
		seen := map[string]bool{}
		for _, kv := range resp.Kvs {
			if want[string(kv.Key)] != string(kv.Value) {
				t.Fatalf("key %s = %q, want %q", kv.Key, kv.Value, want[string(kv.Key)])
			}
			if seen[string(kv.Value)] {
				t.Fatalf("value %q repeated", kv.Value)
			}
			seen[string(kv.Value)] = true
		}

		ml, err := cli.MemberList(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(ml.Members) != 3 {
			t.Fatalf("MemberList: %d members, want 3", len(ml.Members))
		}
		st, err := cli.Status(ctx(t), c.Endpoints()[0])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(st.Version, string(v)+".") {
			t.Fatalf("server version %s, want %s.x", st.Version, v)
		}

		if v.HasV2() {
			v2 := testenv.PutV2Keys(t, c, 40)
			if len(v2) != 40 {
				t.Fatalf("PutV2Keys returned %d keys", len(v2))
			}
			var withTTL string
			for k := range v2 {
				if strings.HasSuffix(k, "/k00000") {
					withTTL = k
				}
			}
			n := testenv.GetV2Key(t, c, withTTL)
			if n.Value != v2[withTTL] || n.TTL <= 0 || n.TTL > testenv.V2KeyTTL {
				t.Fatalf("v2 %s = %+v, want value %q with a TTL", withTTL, n, v2[withTTL])
			}
			// And through plain net/http, on another member.
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c.TLS()}}
			defer hc.CloseIdleConnections()
			var other string
			for k := range v2 {
				if k != withTTL {
					other = k
					break
				}
			}
			r, err := hc.Get(c.Members[2].ClientURL + "/v2/keys" + other)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"value":"`+v2[other]+`"`)) {
				t.Fatalf("GET v2 %s: %s %s", other, r.Status, body)
			}
		}
	})
}

func TestVersionHasV2(t *testing.T) {
	t.Parallel()
	if testenv.V36.HasV2() || !testenv.V35.HasV2() || !testenv.V34.HasV2() {
		t.Fatal("HasV2 is wrong")
	}
}

// TestEtcdMutualTLSEnforced checks that the cluster rejects clients without
// a client certificate and clients that do not trust its CA.
func TestEtcdMutualTLSEnforced(t *testing.T) {
	t.Parallel()
	eachVersion(t, testMutualTLSEnforced)
}

func testMutualTLSEnforced(t *testing.T, v testenv.Version) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, Members: 1, TLS: true})
	if _, err := c.Client(t).Put(ctx(t), "k", "v"); err != nil {
		t.Fatalf("client with the right cert: %v", err)
	}
	other := testenv.NewPKI(t)

	wrongCert := other.ClientTLS() // a client cert from another CA
	wrongCert.RootCAs = c.PKI.CAPool()
	// The three subtests run concurrently without taking -parallel slots
	// (the gRPC check has to wait out its deadline).
	var wg sync.WaitGroup
	defer wg.Wait()
	for name, cfg := range map[string]*tls.Config{
		"no client cert":            {RootCAs: c.PKI.CAPool()},
		"trusts other CA":           other.ClientTLS(),
		"client cert from other CA": wrongCert,
	} {
		wg.Go(func() {
			t.Run(name, func(t *testing.T) {
				// Plain HTTPS first: the handshake itself must fail.
				hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
				defer hc.CloseIdleConnections()
				if r, err := hc.Get(c.Endpoints()[0] + "/version"); err == nil {
					r.Body.Close()
					t.Errorf("GET /version succeeded (%s), want a TLS failure", r.Status)
				} else {
					t.Logf("HTTPS: %v", err)
				}
				cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), TLS: cfg, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
				if err != nil {
					return // refused already: fine
				}
				defer cli.Close()
				cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				if _, err := cli.Get(cctx, "k"); err == nil {
					t.Errorf("Get succeeded, want a TLS failure")
				}
			})
		})
	}
}

// TestEtcdKillRestart kills a member, writes while it is down, restarts it
// and checks it catches up; then freezes one and thaws it.
func TestEtcdKillRestart(t *testing.T) {
	t.Parallel()
	eachVersion(t, func(t *testing.T, v testenv.Version) {
		c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v})
		cli := c.Client(t)
		m := c.Leader(t)
		pid := m.PID()
		m.Kill()
		if m.Running() {
			t.Fatal("killed member still running")
		}
		if l := c.Leader(t); l == m {
			t.Fatal("killed member is still the leader")
		}
		want := testenv.PutKeys(t, cli, "/down/", 50, 16)
		m.Start(t)
		if m.PID() == pid || !m.Running() {
			t.Fatalf("restart: pid %d -> %d, running %v", pid, m.PID(), m.Running())
		}
		c.WaitHealthy(t)
		resp, err := m.Client(t).Get(ctx(t), "/down/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != len(want) {
			t.Fatalf("restarted member has %d keys, want %d", len(resp.Kvs), len(want))
		}

		// Freeze a follower: writes go on with the other two.
		leader := c.Leader(t)
		f := c.Members[(indexOf(c, leader)+1)%3]
		f.Freeze()
		// Through the leader: a client balancing over all endpoints may
		// send the request to the frozen member and hang until its deadline.
		testenv.PutKeys(t, leader.Client(t), "/frozen/", 10, 16)
		f.Thaw()
		c.WaitHealthy(t)

		s := c.Members[0]
		s.Stop()
		if s.Running() {
			t.Fatal("stopped member still running")
		}
		s.Start(t)
		c.WaitHealthy(t)
	})
}

// eachVersion runs f as a parallel subtest for every etcd version.
func eachVersion(t *testing.T, f func(t *testing.T, v testenv.Version)) {
	t.Helper()
	for _, v := range testenv.AllVersions {
		t.Run(string(v), func(t *testing.T) {
			t.Parallel()
			f(t, v)
		})
	}
}

func indexOf(c *testenv.EtcdCluster, m *testenv.EtcdMember) int {
	for i, x := range c.Members {
		if x == m {
			return i
		}
	}
	return -1
}

// TestStartEtcdMemberOnRestoredDataDir snapshots a cluster, restores the
// snapshot with etcdutl and starts a member on the restored data dir.
func TestStartEtcdMemberOnRestoredDataDir(t *testing.T) {
	t.Parallel()
	const v = testenv.V36
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, Members: 1, TLS: true})
	cli := c.Client(t)
	want := testenv.PutKeys(t, cli, "/restore/", 100, 32)

	dir := t.TempDir()
	snap := filepath.Join(dir, "snap.db")
	rc, err := cli.Snapshot(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, snap, data)

	peer := fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t))
	client := fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t))
	dataDir := filepath.Join(dir, "restored.etcd")
	out, err := exec.Command(testenv.EtcdutlBin(t, v), "snapshot", "restore", snap,
		"--data-dir", dataDir, "--name", "r0",
		"--initial-cluster", "r0="+peer, "--initial-cluster-token", "restored",
		"--initial-advertise-peer-urls", peer).CombinedOutput()
	if err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	m := testenv.StartEtcdMember(t, testenv.MemberSpec{
		Version: v, Name: "r0", DataDir: dataDir, ClientURL: client, PeerURL: peer,
		InitialCluster: "r0=" + peer, InitialClusterToken: "restored", PKI: c.PKI,
	})
	m.WaitReady(t)
	resp, err := m.Client(t).Get(ctx(t), "/restore/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != len(want) {
		t.Fatalf("restored member has %d keys, want %d", len(resp.Kvs), len(want))
	}
	for _, kv := range resp.Kvs {
		if want[string(kv.Key)] != string(kv.Value) {
			t.Fatalf("restored %s = %q, want %q", kv.Key, kv.Value, want[string(kv.Key)])
		}
	}
}

func TestMinIOKillRestart(t *testing.T) {
	t.Parallel()
	m := testenv.StartMinIO(t)
	bucket := m.NewBucket(t)
	key := testenv.Prefix(t) + "/object"
	body := []byte("hello from testenv " + bucket)
	if _, err := m.S3(t).PutObject(&s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
		t.Fatal(err)
	}
	getObject(t, m, bucket, key, body)

	m.Kill()
	if m.Running() {
		t.Fatal("killed MinIO still running")
	}
	m.Start(t)
	getObject(t, m, bucket, key, body)

	m.Freeze()
	m.Thaw()
	getObject(t, m, bucket, key, body)
}

func TestSharedMinIO(t *testing.T) {
	t.Parallel()
	for i := range 2 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			m := testenv.SharedMinIO(t)
			if m != testenv.SharedMinIO(t) {
				t.Fatal("SharedMinIO returned two servers")
			}
			bucket := m.NewBucket(t)
			key := testenv.Prefix(t) + "/obj"
			body := []byte(key)
			if _, err := m.S3(t).PutObject(&s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
				t.Fatal(err)
			}
			getObject(t, m, bucket, key, body)
		})
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func getObject(t *testing.T, m *testenv.MinIO, bucket, key string, want []byte) {
	t.Helper()
	out, err := m.S3(t).GetObject(&s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("GetObject %s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	got, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("GetObject %s/%s = %q, want %q", bucket, key, got, want)
	}
}

// TestEtcdOtherLoopbackIP runs a TLS member on 127.0.0.2: the generated PKI
// must cover that IP.
func TestEtcdOtherLoopbackIP(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V36, Members: 1, TLS: true, IP: "127.0.0.2", QuotaBackendBytes: 64 << 20})
	if !strings.HasPrefix(c.Endpoints()[0], "https://127.0.0.2:") {
		t.Fatalf("endpoint %s", c.Endpoints()[0])
	}
	if _, err := c.Client(t).Put(ctx(t), "k", "v"); err != nil {
		t.Fatal(err)
	}
}
