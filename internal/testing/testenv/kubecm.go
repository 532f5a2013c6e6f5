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
	if err := cm.launch("kube-controller-manager on "+k.URL, func() (*proc, error) {
		return startProc("kube-controller-manager", bin, args, childEnv(), cm.LogFile)
	}); err != nil {
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
