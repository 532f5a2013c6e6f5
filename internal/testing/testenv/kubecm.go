package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// KubeControllerManagerBin returns the path of the kube-controller-manager
// binary built by `scripts/test-servers.sh kube-controller-manager`.
func KubeControllerManagerBin(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(ServersDir(tb), "kube-controller-manager-"+ServerVersion(tb, "KUBE_VERSION"))
	return requireExecutable(tb, "kube-controller-manager", filepath.Join(dir, "kube-controller-manager"))
}

// KubeControllerManager is a real kube-controller-manager on a
// KubeAPIServer, running only the controllers a test asked for (by default
// the namespace controller, which empties and finalizes a deleted
// namespace, and the garbage collector, which deletes the dependents of a
// missing owner). It serves nothing (--secure-port=0) and elects no
// leader; it talks to the API server as KubeAdminUser.
type KubeControllerManager struct {
	API         *KubeAPIServer
	Controllers []string
	LogFile     string

	bin  string
	args []string

	procSlot
}

// StartKubeControllerManager starts a kube-controller-manager on k running
// controllers (default: namespace and garbagecollector). It is killed when
// tb's test ends (its log tail is printed if the test failed). Opt-in: no
// other test server starts one.
func StartKubeControllerManager(tb testing.TB, k *KubeAPIServer, controllers ...string) *KubeControllerManager {
	tb.Helper()
	bin := KubeControllerManagerBin(tb)
	if len(controllers) == 0 {
		controllers = []string{"namespace", "garbagecollector"}
	}
	dir := tb.TempDir()
	cm := &KubeControllerManager{API: k, Controllers: controllers, LogFile: filepath.Join(dir, "kube-controller-manager.log")}
	kubeconfig := k.Kubeconfig(tb, "", "")
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + strings.Join(controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		// The garbage collector's and the namespace controller's
		// discovery of the API (CRDs included) is refreshed this often.
		"--concurrent-namespace-syncs=5",
		"--concurrent-gc-syncs=20",
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--v=2",
	}
	cm.bin, cm.args = bin, args
	if err := cm.start(); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(func() {
		cm.close()
		if tb.Failed() {
			logTail(tb, "kube-controller-manager on "+k.URL, cm.LogFile)
		}
	})
	return cm
}

func (cm *KubeControllerManager) start() error {
	return cm.launch("kube-controller-manager on "+cm.API.URL, func() (*proc, error) {
		return startProc("kube-controller-manager", cm.bin, cm.args, childEnv(), cm.LogFile)
	})
}

// Start starts a stopped controller-manager again, with the same flags.
// Its controllers start afresh: the garbage collector rebuilds its graph
// (and forgets the owners it had found absent) from the API server's
// lists. Wait for GarbageCollectorSynced with WaitSynced.
func (cm *KubeControllerManager) Start(tb testing.TB) {
	tb.Helper()
	if err := cm.start(); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
}

// WaitSynced waits until the garbage collector of the controller-manager's
// current run has synced (GarbageCollectorSynced logged after its last
// start).
func (cm *KubeControllerManager) WaitSynced(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(cm.LogFile)
		if i := bytes.LastIndex(b, []byte("==== testenv ")); i >= 0 && bytes.Contains(b[i:], []byte(GarbageCollectorSynced)) {
			return
		}
		if p := cm.current(); !p.running() {
			tb.Fatalf("testenv: kube-controller-manager on %s: %s before its garbage collector synced", cm.API.URL, p.exitError())
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testenv: kube-controller-manager on %s: its garbage collector did not sync within %v", cm.API.URL, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Running reports whether the controller-manager process is alive.
func (cm *KubeControllerManager) Running() bool { return cm.current().running() }

// Stop sends SIGTERM and waits for the controller-manager to exit.
func (cm *KubeControllerManager) Stop() { cm.current().stop() }

// WaitLog waits until the controller-manager's log holds substr (e.g.
// GarbageCollectorSynced), failing tb after timeout or if the process exits.
func (cm *KubeControllerManager) WaitLog(tb testing.TB, substr string, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(cm.LogFile)
		if bytes.Contains(b, []byte(substr)) {
			return
		}
		if p := cm.current(); !p.running() {
			tb.Fatalf("testenv: kube-controller-manager on %s: %s before its log said %q", cm.API.URL, p.exitError(), substr)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testenv: kube-controller-manager on %s: its log did not say %q within %v", cm.API.URL, substr, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// GarbageCollectorSynced is what the garbage collector logs once its
// informers of every resource (CRDs included) have synced: from then on, a
// dependent whose owner is missing is deleted.
const GarbageCollectorSynced = "Garbage collector: all resource monitors have synced"
