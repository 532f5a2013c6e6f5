package kube_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// runJournalLeader runs the journal Deployment's command (journal
// --leader-elect) as the service account of kubeconfig kc, for one
// cluster, until it holds the namespace's Lease and renewed it once, then
// stops it (SIGTERM: it releases the Lease). The Lease's verbs are then
// in the audit log: get, create (the first campaign), update (renewal,
// release).
func runJournalLeader(t *testing.T, ctx context.Context, tool, kc, namespace, clusterID string, c *testenv.EtcdCluster, m *testenv.MinIO, cosFlags []string, admin kubernetes.Interface) {
	t.Helper()
	args := []string{"--log-format", "json", "journal", "--leader-elect", "--cluster-id", clusterID, "--segment-interval", "1s"}
	for _, ep := range c.Endpoints() {
		args = append(args, "--endpoints", ep)
	}
	if c.PKI != nil {
		args = append(args, "--cacert", c.PKI.CAFile, "--cert", c.PKI.ClientCertFile, "--key", c.PKI.ClientKeyFile)
	}
	cmd := exec.CommandContext(ctx, tool, append(args, cosFlags...)...)
	cmd.Env = append(testfix.ToolEnv(), "KUBECONFIG="+kc, "POD_NAME=journal-verbs",
		"COS_ACCESS_KEY_ID="+m.AccessKey, "COS_SECRET_ACCESS_KEY="+m.SecretKey)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		l, err := admin.CoordinationV1().Leases(namespace).Get(ctx, kube.DefaultLeaseName, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, "journal-verbs_") &&
			l.Spec.RenewTime != nil && l.Spec.AcquireTime != nil && l.Spec.RenewTime.After(l.Spec.AcquireTime.Time) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("journal --leader-elect exited (%v) before it renewed the Lease:\n%s", err, testfix.LastLines(errb.String(), 20))
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("journal --leader-elect does not hold and renew the Lease %s/%s after 30 s:\n%s", namespace, kube.DefaultLeaseName, testfix.LastLines(errb.String(), 20))
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil || !strings.Contains(errb.String(), "Lease released") {
			t.Fatalf("journal --leader-elect stopped by SIGTERM: %v, want exit 0 and the Lease released:\n%s", err, testfix.LastLines(errb.String(), 20))
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("journal --leader-elect did not stop within 30 s of SIGTERM:\n%s", testfix.LastLines(errb.String(), 20))
	}
}
