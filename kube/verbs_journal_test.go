package kube_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/podrun"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// journalPodName is the journal pod of the verbs test: the leader
// election's identity is it plus a random suffix.
const journalPodName = "etcd-recovery-journal-5f7d8c9b6-vrbs1"

// runJournalDeployment runs what deploy/60-journal.yaml's pod runs, as a
// kubelet would start it (podrun.Translate: its args `--log-format json
// journal --all --leader-elect`, the shipped ConfigMap pointing at the
// test's bucket and prefix, the namespace's cos-credentials secret as
// files, the pod's name and namespace, its service account's token, which
// is etcd-recovery's) as a process on the host (podrun.Spec.HostCommand),
// with --segment-interval 1s added (the test's only knob). It runs until
// it holds and renewed the namespace's Lease, wrote at least one segment
// for every cluster of clusters (a writer puts into each meanwhile:
// discovery, client TLS and capture), and recorded the gap of gapCluster
// (no full backup: an Event JournalGap, a full backup and its Event
// BackupSucceeded); then SIGTERM: exit 0, the Lease released. The audit
// log then holds the journal's verbs: leases get, create, update;
// etcdclusters and pods list; the client-TLS secrets get; events create.
func runJournalDeployment(t *testing.T, ctx context.Context, k *testenv.KubeAPIServer, admin kubernetes.Interface, m *testenv.MinIO,
	bucket, prefix string, clusters []kubetest.Cluster, gapCluster string) {
	t.Helper()
	w := kubetest.JournalWorkload(t)
	cm := kubetest.ShippedConfigMapWith(t, "runJournalDeployment", kubetest.COSConfig(m, bucket, prefix))
	secret, err := admin.CoreV1().Secrets(verbsNS).Get(ctx, kube.COSSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := podrun.Translate(w, "", journalPodName, kubetest.PodCluster(t, k, admin, verbsNS, cm, secret))
	if err != nil {
		t.Fatalf("60-journal.yaml: a kubelet could not start the pod: %v", err)
	}
	if !slices.Contains(spec.Args, "journal") || !slices.Contains(spec.Args, "--all") || !slices.Contains(spec.Args, "--leader-elect") {
		t.Fatalf("60-journal.yaml runs %q, want journal --all --leader-elect", spec.Args)
	}
	spec.Args = append(spec.Args, "--segment-interval", "1s")
	// Its --listen (the pod's own :9091) on a port of its own: this host
	// is shared.
	if i := slices.Index(spec.Args, "--listen"); i >= 0 && i+1 < len(spec.Args) {
		spec.Args[i+1] = "127.0.0.1:0"
	}
	cmd, err := spec.HostCommand(ctx, testfix.Tool(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	errb := &testfix.SyncBuffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exited := false
	defer func() {
		if !exited {
			_ = cmd.Process.Kill()
			<-done
		}
	}()

	// A writer: every cluster changes while the journal runs.
	wctx, stopWriter := context.WithCancel(ctx)
	var clis []*clientv3.Client
	for _, c := range clusters {
		clis = append(clis, c.Etcd.Client(t))
	}
	writerDone := make(chan error, 1)
	go func() {
		var err error
		for i := 0; wctx.Err() == nil && err == nil; i++ {
			for _, cli := range clis {
				if _, err = cli.Put(wctx, fmt.Sprintf("/registry/journal/%03d", i%20), fmt.Sprint(i)); err != nil {
					break
				}
			}
			select {
			case <-wctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		if wctx.Err() != nil {
			err = nil
		}
		writerDone <- err
	}()
	defer func() {
		stopWriter()
		if err := <-writerDone; err != nil {
			t.Errorf("writer: %v", err)
		}
	}()

	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}
	kadmin, err := kube.New(kube.Config{Rest: k.RestConfig(""), Namespace: verbsNS})
	if err != nil {
		t.Fatal(err)
	}
	// What is still missing, "" when everything is there.
	missing := func() string {
		l, err := admin.CoordinationV1().Leases(verbsNS).Get(ctx, kube.DefaultLeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || !strings.HasPrefix(*l.Spec.HolderIdentity, journalPodName+"_") ||
			l.Spec.RenewTime == nil || l.Spec.AcquireTime == nil || !l.Spec.RenewTime.After(l.Spec.AcquireTime.Time) {
			return fmt.Sprintf("the Lease %s/%s held and renewed by %s (%v)", verbsNS, kube.DefaultLeaseName, journalPodName, err)
		}
		for _, c := range clusters {
			ch, err := journal.ListSegments(ctx, st, layout, c.Name, 0)
			if err != nil || len(ch.All) == 0 {
				return fmt.Sprintf("a segment of %s (%v)", c.Name, err)
			}
		}
		evs, err := kadmin.Events(ctx, kube.Cluster{Namespace: verbsNS, Name: gapCluster})
		if err != nil {
			return fmt.Sprintf("the events of %s: %v", gapCluster, err)
		}
		var gap, backedUp bool
		for _, ev := range evs {
			gap = gap || ev.Reason == fleet.ReasonJournalGap && ev.Type == corev1.EventTypeWarning
			backedUp = backedUp || ev.Reason == kube.ReasonBackupSucceeded
		}
		if !gap || !backedUp {
			return fmt.Sprintf("the Events %s and %s on %s (%d events)", fleet.ReasonJournalGap, kube.ReasonBackupSucceeded, gapCluster, len(evs))
		}
		return ""
	}
	start := time.Now()
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		what := missing()
		if what == "" {
			break
		}
		select {
		case err := <-done:
			exited = true
			t.Fatalf("journal --all --leader-elect exited (%v) before %s:\n%s", err, what, testfix.LastLines(errb.String(), 20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("journal --all --leader-elect: no %s after 45 s:\n%s", what, testfix.LastLines(errb.String(), 20))
		}
	}
	t.Logf("journal --all --leader-elect: the Lease, a segment of each of %d clusters and %s's gap healed in %s",
		len(clusters), gapCluster, time.Since(start).Round(100*time.Millisecond))
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		exited = true
		if err != nil || !strings.Contains(errb.String(), "Lease released") {
			t.Fatalf("journal --all --leader-elect stopped by SIGTERM: %v, want exit 0 and the Lease released:\n%s", err, testfix.LastLines(errb.String(), 20))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("journal --all --leader-elect did not stop within 30 s of SIGTERM:\n%s", testfix.LastLines(errb.String(), 20))
	}
	if strings.Contains(errb.String(), m.SecretKey) {
		t.Errorf("the COS secret key in the journal's log")
	}
}
