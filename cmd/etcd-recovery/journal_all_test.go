package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/restore"
)

// `journal --all` end to end, the binary as the Deployment runs it
// (without --leader-elect: one process), against a real kube-apiserver
// with deploy/'s CRDs and RBAC (the etcd-recovery service account's
// token), two EtcdClusters backed by real etcd 3.5 members with client
// TLS (found through their pods and operator secrets), and MinIO. Both
// are backed up (backup --all), then journaled while a workload runs on
// both (puts, overwrites, deletes, txns, a leased key); the source's
// dump at a revision R of the first is recorded. A last write on each
// cluster, then SIGTERM at once: exit 0, and both journals reach that
// last write (the final flush), chained from their backups without a
// problem. `restore --to-revision R` of the first then gives a member
// whose full dump (value, create and mod revision, version, lease) equals
// the source's at R, key by key.
func TestJournalAllCLI(t *testing.T) {
	t.Parallel()
	const ns = "kubx-etcd-09"
	ctx := testfix.Context(t, 2*time.Minute)
	k := testenv.StartKubeAPIServer(t)
	admin := k.Clientset(t, "")
	dyn := k.Dynamic(t, "")
	kubetest.CreateNamespaces(t, admin, ns)
	kubetest.InstallCRDs(t, k)
	a := kubetest.NewApplier(t, k)
	a.ApplyFile(t, kubetest.DeployPath(t, "10-rbac.yaml"), ns)
	var clusters []kubetest.Cluster
	var clis []*clientv3.Client
	for i := range 2 {
		name := fmt.Sprintf("etcd-j%d", i)
		c := kubetest.AddEtcdCluster(t, admin, dyn, ns, name, testenv.EtcdOptions{Version: testenv.V35, IP: fmt.Sprintf("127.0.41.%d", 10+i), Members: 1})
		kubetest.PerClusterAccess(t, a, ns, name)
		cli := c.Etcd.Client(t)
		testenv.PutKeys(t, cli, "/registry/base/", 30, 64)
		clusters = append(clusters, c)
		clis = append(clis, cli)
	}
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	cos := cosArgs(t, m, bucket, prefix)
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}
	tool := testfix.Tool(t)
	env := []string{"KUBECONFIG=" + k.Kubeconfig(t, kubetest.SAToken(t, admin, ns, "etcd-recovery"), ns)}

	// The CronJob's backups: the journals' bases.
	if out, errOut, code := testfix.RunTool(t, ctx, tool, env, concatArgs([]string{"backup", "--all", "--v2", "off", "--dial-timeout", "2s"}, cos)...); code != 0 {
		t.Fatalf("backup --all: exit %d\n%s\n%s", code, testfix.LastLines(out, 10), testfix.LastLines(errOut, 10))
	}
	bases := map[string]int64{}
	for _, c := range clusters {
		b, _, err := fleet.JournalBase(ctx, st, layout, c.Name, nil)
		if err != nil {
			t.Fatalf("%s: the base backup: %v", c.Name, err)
		}
		bases[c.Name] = b.Rev
	}

	// A journal without --leader-elect beside the Deployment's leader (its
	// Lease held and fresh) refuses to write, naming the holder; one whose
	// holder's renewals stopped (expired) starts: the journal --all below.
	holder, dur := "etcd-recovery-journal-7d9f-abcde", int32(15)
	kl := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: kube.DefaultLeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	if kl, err := admin.CoordinationV1().Leases(ns).Create(ctx, kl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	} else {
		for _, args := range [][]string{
			concatArgs([]string{"journal", "--cluster-id", clusters[0].Name}, clusterArgs(clusters[0].Etcd), cos),
			concatArgs([]string{"journal", "--all"}, cos),
		} {
			out, errOut, code := testfix.RunTool(t, ctx, tool, env, args...)
			if code != 1 || !strings.Contains(errOut, holder) || !strings.Contains(errOut, "--ignore-leader-lease") || !strings.Contains(errOut, ns+"/"+kube.DefaultLeaseName) {
				t.Fatalf("%s beside a held Lease: exit %d, want 1 naming the holder\n%s\n%s", strings.Join(args[:3], " "), code, out, testfix.LastLines(errOut, 10))
			}
		}
		kl.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-time.Minute)}
		if _, err := admin.CoordinationV1().Leases(ns).Update(ctx, kl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.CommandContext(ctx, tool, concatArgs([]string{"--log-format", "json", "journal", "--all", "--segment-interval", "1s", "--dial-timeout", "2s"}, cos)...)
	cmd.Env = append(testfix.ToolEnv(), env...)
	errb := &testfix.SyncBuffer{}
	cmd.Stderr = errb
	done := testfix.StartExit(t, cmd)
	exited := false
	defer func() {
		if !exited {
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("journal --all stderr:\n%s", testfix.LastLines(errb.String(), 30))
		}
	}()

	// The workload, on both clusters, over more than one segment; R is a
	// revision of the first in its middle.
	lease, err := clis[0].Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	var r int64
	var want map[string]string
	for round := range 4 {
		for i, cli := range clis {
			testenv.PutKeys(t, cli, fmt.Sprintf("/registry/w%d/", round), 5, 32)
			if _, err := cli.Put(ctx, "/registry/base/key000001", fmt.Sprint("over-", round)); err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Txn(ctx).Then(clientv3.OpPut("/registry/txn/a", fmt.Sprint(round)), clientv3.OpDelete(fmt.Sprintf("/registry/base/key%06d", round+2)),
				clientv3.OpPut("/registry/txn/b", fmt.Sprint(round))).Commit(); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				if _, err := cli.Put(ctx, fmt.Sprint("/registry/leased/", round), "l", clientv3.WithLease(lease.ID)); err != nil {
					t.Fatal(err)
				}
			}
			if round > 0 {
				// A range delete of the previous round's keys.
				if _, err := cli.Delete(ctx, fmt.Sprintf("/registry/w%d/", round-1), clientv3.WithPrefix()); err != nil {
					t.Fatal(err)
				}
			}
		}
		if round == 1 {
			resp, err := clis[0].Get(ctx, "/")
			if err != nil {
				t.Fatal(err)
			}
			r = resp.Header.Revision
			want = pitrDump(t, clis[0], r)
		}
		time.Sleep(600 * time.Millisecond)
	}
	// The last writes, then SIGTERM at once: they are in no segment yet.
	last := map[string]int64{}
	for i, cli := range clis {
		resp, err := cli.Put(ctx, "/registry/last", "before-sigterm")
		if err != nil {
			t.Fatal(err)
		}
		last[clusters[i].Name] = resp.Header.Revision
	}
	select {
	case code := <-done:
		exited = true
		t.Fatalf("journal --all exited %d before SIGTERM", code)
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		exited = true
		if code != 0 {
			t.Fatalf("journal --all after SIGTERM: exit %d, want 0", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("journal --all did not exit within 30 s of SIGTERM")
	}
	for _, c := range clusters {
		b, ch, err := fleet.JournalBase(ctx, st, layout, c.Name, nil)
		if err != nil || ch.Problem != nil {
			t.Fatalf("%s: the journal: %+v %v", c.Name, ch, err)
		}
		if b.Rev != bases[c.Name] || len(ch.Segments) == 0 || ch.Reach < last[c.Name] {
			t.Fatalf("%s: the journal from the backup at %d (the base chosen: %d) reaches %d in %d segments, want the last write before SIGTERM, %d",
				c.Name, bases[c.Name], b.Rev, ch.Reach, len(ch.Segments), last[c.Name])
		}
		t.Logf("%s: journaled from %d to %d in %d segments", c.Name, b.Rev, ch.Reach, len(ch.Segments))
	}
	if strings.Contains(errb.String(), m.SecretKey) {
		t.Error("the COS secret key in the journal's log")
	}

	// The first cluster, restored to R.
	id := clusters[0].Name
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	client := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"restore", "--cluster-id", id, "--initial-cluster", "r0=" + peer,
		"--data-dir-root", filepath.Join(t.TempDir(), "data"), "--to-revision", fmt.Sprint(r), "-o", "json"}, cos)...)
	if code != 0 {
		t.Fatalf("restore --to-revision %d: exit %d\n%s\n%s", r, code, out, errOut)
	}
	var res restore.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("restore -o json: %v\n%s", err, out)
	}
	if res.Replay == nil || res.Replay.ToRevision != r || res.Replay.Events == 0 || len(res.Members) != 1 {
		t.Fatalf("restore result: %+v", res)
	}
	got := pitrDump(t, startRestored(t, res, client, peer), 0)
	checkDump(t, fmt.Sprintf("%s restored to %d", id, r), want, got)
	if len(want) < 30 {
		t.Fatalf("the source at %d has %d keys only", r, len(want))
	}
}
