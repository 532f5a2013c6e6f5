package testenv

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// KubeStartTimeout bounds a kube-apiserver start (it installs its
// bootstrap RBAC policy and every built-in API before /readyz is ok). On
// a 2-core machine running the whole suite, with several API servers
// starting at once, 90 s was seen to run out (a namespace restore's world
// starts two).
const KubeStartTimeout = 150 * time.Second

// KubeAdminUser is the user of KubeAPIServer.AdminToken (group system:masters).
const KubeAdminUser = "testenv-admin"

// KubeAPIServerBin returns the path of the kube-apiserver binary built by
// `scripts/test-servers.sh kube-apiserver`.
func KubeAPIServerBin(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(ServersDir(tb), "kube-apiserver-"+ServerVersion(tb, "KUBE_VERSION"))
	return requireExecutable(tb, "kube-apiserver", filepath.Join(dir, "kube-apiserver"))
}

// KubeAPIServer is a real kube-apiserver on loopback, backed by its own
// single-member etcd 3.5. No controller-manager, scheduler or kubelet runs:
// objects are stored and validated, admission and RBAC are enforced, but
// nothing reconciles them (a Pod is never scheduled; its status can be
// written through the status subresource).
//
// Authentication: a static token file (AdminToken, group system:masters)
// and service-account tokens (TokenRequest API, signed with a key made
// here). Authorization: RBAC only.
type KubeAPIServer struct {
	URL        string // https://127.0.0.1:port
	CAFile     string // PEM bundle that verifies the serving certificate
	CA         []byte // contents of CAFile
	AdminToken string // bearer token of KubeAdminUser, in system:masters
	CertDir    string // --cert-dir (the self-signed serving cert)
	LogFile    string
	// AuditLog is the API server's audit log (JSON lines, level Metadata,
	// one line per request at ResponseComplete): who called which verb on
	// which resource, and the response code. Tests compare what the tool
	// really calls with what the Roles grant.
	AuditLog string
	Etcd     *EtcdCluster

	bin  string   // the binary, for Restart
	args []string // its flags, for Restart

	procSlot
}

// StartKubeAPIServer starts a kube-apiserver with its own etcd and waits
// until /readyz answers ok. Everything is killed when tb's test ends.
func StartKubeAPIServer(tb testing.TB) *KubeAPIServer {
	tb.Helper()
	return StartKubeAPIServerWith(tb, KubeOptions{})
}

// KubeOptions configures StartKubeAPIServerWith.
type KubeOptions struct {
	// EtcdServers, when set, are the etcd client URLs (plain http) the
	// API server stores into, on an etcd the test started (a cluster whose
	// changes a journal watches, or a member started on a restored data
	// dir); KubeAPIServer.Etcd is then nil. Empty: a new single-member
	// etcd 3.5 of its own.
	EtcdServers []string
	// ExtraArgs are appended to the API server's flags; a flag given here
	// again overrides the default (e.g. --etcd-compaction-interval=2s,
	// --watch-cache=true).
	ExtraArgs []string
}

// StartKubeAPIServerWith starts a kube-apiserver as opts says and waits
// until /readyz answers ok. It is killed when tb's test ends, or by Stop.
func StartKubeAPIServerWith(tb testing.TB, opts KubeOptions) *KubeAPIServer {
	tb.Helper()
	bin := KubeAPIServerBin(tb)
	var etcd *EtcdCluster
	servers := opts.EtcdServers
	if len(servers) == 0 {
		etcd = StartEtcd(tb, EtcdOptions{Version: V35, Members: 1})
		servers = etcd.Endpoints()[:1]
	}
	dir := tb.TempDir()
	k := &KubeAPIServer{
		AdminToken: randHex(24),
		CertDir:    filepath.Join(dir, "certs"),
		LogFile:    filepath.Join(dir, "kube-apiserver.log"),
		Etcd:       etcd,
	}
	if err := os.MkdirAll(k.CertDir, 0o700); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	// Service-account signing key.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	saKey := filepath.Join(dir, "sa.key")
	saPub := filepath.Join(dir, "sa.pub")
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	if err := writePEM(saKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key), 0o600); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	if err := writePEM(saPub, "PUBLIC KEY", pubDER, 0o644); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	k.AuditLog = filepath.Join(dir, "audit.log")
	auditPolicy := filepath.Join(dir, "audit-policy.yaml")
	policy := "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\nrules:\n- level: Metadata\n"
	if err := os.WriteFile(auditPolicy, []byte(policy), 0o600); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tokens := filepath.Join(dir, "tokens.csv")
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", k.AdminToken, KubeAdminUser, "uid-"+KubeAdminUser)
	if err := os.WriteFile(tokens, []byte(line), 0o600); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	port := freePort(tb, "127.0.0.1")
	k.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	args := []string{
		"--etcd-servers=" + strings.Join(servers, ","),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + k.CertDir,
		"--token-auth-file=" + tokens,
		"--audit-policy-file=" + auditPolicy,
		"--audit-log-path=" + k.AuditLog,
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		// No controller-manager creates the "default" service account, so
		// the ServiceAccount admission plugin would reject every Pod.
		"--disable-admission-plugins=ServiceAccount",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--watch-cache=false",
		"--v=1",
	}
	args = append(args, opts.ExtraArgs...)
	k.bin, k.args = bin, args
	if err := k.start(); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(func() {
		k.close()
		if tb.Failed() {
			logTail(tb, "kube-apiserver "+k.URL, k.LogFile)
		}
	})
	if err := k.waitReady(KubeStartTimeout); err != nil {
		tb.Fatalf("testenv: kube-apiserver: %v", err)
	}
	return k
}

func (k *KubeAPIServer) start() error {
	return k.launch("kube-apiserver "+k.URL, func() (*proc, error) {
		return startProc("kube-apiserver", k.bin, k.args, childEnv(), k.LogFile)
	})
}

// Restart stops the API server (SIGTERM, as Stop) and starts it again with
// the same flags, port, certificates and tokens, then waits until /readyz
// answers ok. Its clients' connections break once; they reconnect.
func (k *KubeAPIServer) Restart(tb testing.TB) {
	tb.Helper()
	k.Stop()
	k.Start(tb)
}

// Start starts a stopped API server again (as Restart) and waits until
// /readyz answers ok.
func (k *KubeAPIServer) Start(tb testing.TB) {
	tb.Helper()
	if err := k.start(); err != nil {
		tb.Fatalf("testenv: restart: %v", err)
	}
	if err := k.waitReady(KubeStartTimeout); err != nil {
		tb.Fatalf("testenv: kube-apiserver restarted: %v", err)
	}
}

// waitReady waits for the serving certificate, then for /readyz to answer
// 200 to the admin token.
func (k *KubeAPIServer) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	certFile := filepath.Join(k.CertDir, "apiserver.crt")
	var last error
	for time.Now().Before(deadline) {
		if k.proc.exited() {
			return fmt.Errorf("exited: %s", k.proc.exitError())
		}
		if k.CA == nil {
			b, err := os.ReadFile(certFile)
			if err != nil || len(b) == 0 {
				last = fmt.Errorf("no serving certificate yet in %s", k.CertDir)
				time.Sleep(200 * time.Millisecond)
				continue
			}
			if blk, _ := pem.Decode(b); blk == nil {
				last = fmt.Errorf("serving certificate %s not written yet", certFile)
				time.Sleep(200 * time.Millisecond)
				continue
			}
			k.CA, k.CAFile = b, certFile
		}
		if last = k.readyz(); last == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %v: %v", timeout, last)
}

func (k *KubeAPIServer) readyz() error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(k.CA) {
		return fmt.Errorf("no certificate in %s", k.CAFile)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, k.URL+"/readyz?verbose", nil)
	req.Header.Set("Authorization", "Bearer "+k.AdminToken)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// The checks that fail ("[-]etcd failed: ..."), so a start that
		// times out says which one held it.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
		var failed []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "[-]") {
				failed = append(failed, l)
			}
		}
		return fmt.Errorf("/readyz: %s %s", resp.Status, strings.Join(failed, "; "))
	}
	return nil
}

// RestConfig returns a client configuration for bearer token (AdminToken
// when empty) that verifies the server with CA.
func (k *KubeAPIServer) RestConfig(token string) *rest.Config {
	if token == "" {
		token = k.AdminToken
	}
	return &rest.Config{
		Host:            k.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), k.CA...)},
		QPS:             200,
		Burst:           400,
		Timeout:         30 * time.Second,
	}
}

// Clientset returns a typed client for token (AdminToken when empty).
func (k *KubeAPIServer) Clientset(tb testing.TB, token string) *kubernetes.Clientset {
	tb.Helper()
	cs, err := kubernetes.NewForConfig(k.RestConfig(token))
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return cs
}

// Dynamic returns a dynamic client for token (AdminToken when empty).
func (k *KubeAPIServer) Dynamic(tb testing.TB, token string) *dynamic.DynamicClient {
	tb.Helper()
	dc, err := dynamic.NewForConfig(k.RestConfig(token))
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return dc
}

// Kubeconfig writes a kubeconfig for token (AdminToken when empty) into a
// temp file and returns its path, for tools that take --kubeconfig.
func (k *KubeAPIServer) Kubeconfig(tb testing.TB, token, namespace string) string {
	tb.Helper()
	if token == "" {
		token = k.AdminToken
	}
	if namespace == "" {
		namespace = "default"
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: u
  user:
    token: %s
contexts:
- name: testenv
  context: {cluster: testenv, user: u, namespace: %s}
current-context: testenv
`, k.URL, k.CAFile, token, namespace)
	path := filepath.Join(tb.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return path
}

// Running reports whether the kube-apiserver process is alive.
func (k *KubeAPIServer) Running() bool { return k.current().running() }

// Kill SIGKILLs the API server (a crash, a node lost) and waits for it to
// be gone; Start starts it again.
func (k *KubeAPIServer) Kill() { k.current().kill() }

// Stop sends SIGTERM and waits for the API server to exit (SIGKILL after
// 20 s), so that it writes nothing more into its etcd.
func (k *KubeAPIServer) Stop() { k.current().stop() }
