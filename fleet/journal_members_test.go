package fleet_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// journal --all when every member pod of an EtcdCluster is replaced (new
// pods, new addresses; a real kube-apiserver and a real 3-member etcd
// 3.5 with TLS): the journal reconnects to the members the rediscovery
// finds and goes on exactly, instead of watching the dead address
// forever (clientv3 never learns new members by itself). Before, only
// member m0 had a pod; it is killed and its pod replaced by pods of m1
// and m2.
func TestJournalAllMembersReplaced(t *testing.T) {
	t.Parallel()
	const jns = "kubx-etcd-08"
	ctx := testfix.Context(t, 2*time.Minute)
	w := kubetest.StartRBACWorld(t, jns)
	k, admin, dyn, a := w.K, w.Admin, w.Dyn, w.A
	c := kubetest.AddEtcdCluster(t, admin, dyn, jns, "rp", testenv.EtcdOptions{IP: "127.0.8.10", Members: 3})
	kubetest.PerClusterAccess(t, a, jns, "rp")
	cli := c.Etcd.Client(t)
	testenv.PutKeys(t, cli, "/registry/k", 20, 64)
	// Only m0 has a pod at first.
	for _, p := range []string{"rp-0001", "rp-0002"} {
		if err := admin.CoreV1().Pods(jns).Delete(ctx, p, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rig := testfix.NewStoreRig(t)
	st, layout := rig.Store, rig.Layout
	sa, err := kube.New(kube.Config{Rest: k.RestConfig(kubetest.SAToken(t, admin, jns, "etcd-recovery")), Namespace: jns})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testfix.SyncBuffer{}
	jctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- fleet.JournalAll(jctx, fleet.JournalAllOptions{
			Kube: sa, Store: st, Layout: layout, Rediscover: time.Second, DialTimeout: 2 * time.Second, NoEvents: true,
			Capture: journal.CaptureOptions{SegmentInterval: 300 * time.Millisecond, WatchStallTimeout: time.Second},
			Backup:  backup.Options{V2: backup.V2Off, ProbeTimeout: 2 * time.Second},
			Log:     slog.New(slog.NewTextHandler(logs, nil)),
		})
	}()
	defer func() {
		stop()
		<-done
	}()
	r, err := cli.Put(ctx, "/registry/before", "x")
	if err != nil {
		t.Fatal(err)
	}
	waitReach(t, ctx, st, layout, "rp", r.Header.Revision, logs)

	// The pods replaced: m0 gone, m1 and m2 under new pods.
	c.Etcd.Members[0].Kill()
	if err := admin.CoreV1().Pods(jns).Delete(ctx, "rp-0000", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, mem := range c.Etcd.Members[1:] {
		kubetest.MemberPod(t, ctx, admin, jns, "rp", fmt.Sprintf("rp-new-%d", i), mem.ClientURL)
	}
	// m0 may have led: the first puts wait for an election (retried).
	var last int64
	for i := range 20 {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			r, err := cli.Put(ctx, fmt.Sprintf("/registry/after/%d", i), "y")
			if err == nil {
				last = r.Header.Revision
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("put after m0 was killed: %v", err)
			}
		}
	}
	waitReach(t, ctx, st, layout, "rp", last, logs)
	if !strings.Contains(logs.String(), "members changed: reconnecting") {
		t.Errorf("no reconnect logged:\n%s", testfix.LastLines(logs.String(), 20))
	}
	if gaps, err := catalog.ReadJournalGaps(ctx, st, layout, "rp"); err != nil || len(gaps) != 1 {
		t.Errorf("gap records %+v %v: want only the first one (no base backup at first), none for the replaced pods", gaps, err)
	}
}
