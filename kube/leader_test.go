package kube_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// Namespaces of the leader election tests.
const (
	failoverNS = "kubx-etcd-27"
	fenceNS    = "kubx-etcd-28"
)

// takeoverBound is how long after the leader's death a follower holds the
// Lease at most: it saw the dead leader's last renewal at its next retry
// (RetryPeriod with client-go's jitter, x (1 + 1.2): 4.4 s), waits
// LeaseDuration from then, and acquires at its next retry (4.4 s):
// 23.8 s. A clean stop releases the Lease: the next retry (4.4 s).
const (
	maxRetry        = kube.DefaultRetryPeriod * 22 / 10
	takeoverBound   = kube.DefaultLeaseDuration + 2*maxRetry
	handoverBound   = maxRetry
	schedulingSlack = 3 * time.Second // a loaded 2-core test machine
)

// TestLeaderElection runs the leader election on one real kube-apiserver,
// the Roles of deploy/10-rbac.yaml applied and the journal's service
// account's token used: the journal's failover with the real binary, and
// the fence of a leader whose Lease is taken.
func TestLeaderElection(t *testing.T) {
	t.Parallel()
	k := testenv.StartKubeAPIServer(t)
	admin := k.Clientset(t, "")
	kubetest.CreateNamespaces(t, admin, failoverNS, fenceNS)
	a := kubetest.NewApplier(t, k)
	for _, n := range []string{failoverNS, fenceNS} {
		a.ApplyFile(t, kubetest.DeployPath(t, "10-rbac.yaml"), n)
	}
	t.Run("Failover", func(t *testing.T) { t.Parallel(); testFailover(t, k, admin) })
	t.Run("Fence", func(t *testing.T) { t.Parallel(); testFence(t, k, admin) })
}

// journalProc is one journal process of the real binary; listen is the
// address of its /metrics and probes.
type journalProc struct {
	name   string
	listen string
	cmd    *exec.Cmd
	mu     sync.Mutex
	errb   bytes.Buffer
	done   chan struct{}
	code   int
}

func (p *journalProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errb.Write(b)
}

func (p *journalProc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errb.String()
}

// probesAndLeader checks that the process's /livez and /healthz answer
// 200 and that its etcd_recovery_journal_leader, labelled with one of
// its identities (its name and a suffix), is leader, within 10 s (the
// gauge follows the election).
func (p *journalProc) probesAndLeader(t *testing.T, leader int) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string) {
		resp, err := c.Get("http://" + p.listen + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	want := regexp.MustCompile(fmt.Sprintf(`(?m)^%s\{identity="%s_[0-9a-f]+"\} %d$`, journal.NameJournalLeader, regexp.QuoteMeta(p.name), leader))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		lc, lb := get("/livez")
		hc, hb := get("/healthz")
		mc, mb := get("/metrics")
		if lc == http.StatusOK && hc == http.StatusOK && mc == http.StatusOK && want.MatchString(mb) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (%s): /livez %d %s, /healthz %d %s, /metrics %d without %s:\n%s", p.name, p.listen, lc, lb, hc, hb, mc, want, mb)
		}
	}
}

// holder is the Lease's holder identity ("" when there is none).
func holder(t *testing.T, ctx context.Context, admin kubernetes.Interface, namespace string) string {
	t.Helper()
	l, err := admin.CoordinationV1().Leases(namespace).Get(ctx, kube.DefaultLeaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// testFailover: three journal processes of the real binary, one at a
// time the leader, with the Deployment's arguments (--all replaced by
// the test's cluster), while a writer writes. The leader SIGKILLed: the
// follower takes over within takeoverBound and writes its first segment;
// the new leader SIGTERMed: a third process (the killed one restarted)
// takes over within handoverBound of its exit. At the end the segments
// chain from the base backup to the last revision written, with no gap
// and no overlap, and hold exactly etcd's events.
func testFailover(t *testing.T, k *testenv.KubeAPIServer, admin kubernetes.Interface) {
	ctx := testfix.Context(t, 3*time.Minute)
	kc := k.Kubeconfig(t, kubetest.SAToken(t, admin, failoverNS, "etcd-recovery"), failoverNS)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/registry/before/", 50, 64)
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}
	const id = "failover-1"
	tool := testfix.Tool(t)
	env := []string{"COS_ACCESS_KEY_ID=" + m.AccessKey, "COS_SECRET_ACCESS_KEY=" + m.SecretKey, "KUBECONFIG=" + kc}
	common := []string{"--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix}
	for _, ep := range c.Endpoints() {
		common = append(common, "--endpoints", ep)
	}
	if _, errOut, code := testfix.RunTool(t, ctx, tool, env, append([]string{"backup", "--cluster-id", id, "--v2", "off"}, common...)...); code != 0 {
		t.Fatalf("base backup: exit %d: %s", code, testfix.LastLines(errOut, 10))
	}
	entries, err := catalog.Inventory(ctx, st, layout, id)
	if err != nil || len(entries) != 1 {
		t.Fatalf("the base backup: %v %v", entries, err)
	}
	man, err := catalog.LoadManifest(ctx, st, layout, id, entries[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	base := man.Revision()

	// The Deployment's arguments, for one cluster.
	w := kubetest.Workload(t, "60-journal.yaml")
	deployArgs := w.Template.Spec.Containers[0].Args
	if w.Kind != "Deployment" || !slices.Contains(deployArgs, "--leader-elect") || !slices.Contains(deployArgs, "journal") || !slices.Contains(deployArgs, "--all") {
		t.Fatalf("deploy/60-journal.yaml: %s with args %q, want a Deployment running journal --all --leader-elect", w.Kind, deployArgs)
	}
	// Each process serves its /metrics and probes on a loopback port of
	// its own (the Deployment's --listen, if any, is per pod).
	var args []string
	for i := 0; i < len(deployArgs); i++ {
		switch a := deployArgs[i]; {
		case a == "--all":
			args = append(args, "--cluster-id", id)
		case a == "--listen":
			i++
		case strings.HasPrefix(a, "--listen="):
		default:
			args = append(args, a)
		}
	}
	args = append(append(args, common...), "--segment-interval", "1s")

	start := func(name string) *journalProc {
		t.Helper()
		p := &journalProc{name: name, done: make(chan struct{}), listen: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}
		p.cmd = exec.CommandContext(ctx, tool, append(slices.Clone(args), "--listen", p.listen)...)
		p.cmd.Env = append(testfix.ToolEnv(), append(env, "POD_NAME="+name)...)
		p.cmd.Stderr = p
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			err := p.cmd.Wait()
			var ee *exec.ExitError
			switch {
			case errors.As(err, &ee):
				p.code = ee.ExitCode()
			case err != nil:
				p.code = -2
			}
			close(p.done)
		}()
		t.Cleanup(func() {
			_ = p.cmd.Process.Kill()
			<-p.done
			if t.Failed() {
				t.Logf("%s stderr:\n%s", name, testfix.LastLines(p.stderr(), 30))
			}
		})
		return p
	}
	// waitHolder waits until the Lease's holder is one of p's identities,
	// and returns when.
	waitHolder := func(p *journalProc, within time.Duration) time.Time {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			if strings.HasPrefix(holder(t, ctx, admin, failoverNS), p.name+"_") {
				return time.Now()
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s does not hold the Lease %s after %s (holder %q)", p.name, within, kube.DefaultLeaseName, holder(t, ctx, admin, failoverNS))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	reach := func() *journal.Chain {
		t.Helper()
		ch, err := journal.ListSegments(ctx, st, layout, id, base)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Problem != nil {
			t.Fatalf("the journal's segments: %v", ch.Problem)
		}
		return ch
	}
	// waitReach waits until the journal reaches past rev (a new segment),
	// and returns when.
	waitReach := func(rev int64, within time.Duration) time.Time {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			if reach().Reach > rev {
				return time.Now()
			}
			if time.Now().After(deadline) {
				t.Fatalf("the journal still reaches %d after %s", rev, within)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	exited := func(p *journalProc, within time.Duration) time.Time {
		t.Helper()
		select {
		case <-p.done:
			return time.Now()
		case <-time.After(within):
			t.Fatalf("%s did not exit within %s", p.name, within)
		}
		return time.Time{}
	}

	// The writer: puts, overwrites, deletes and txns, until stopped.
	wctx, stopWriter := context.WithCancel(ctx)
	defer stopWriter()
	var lastRev int64
	writerDone := make(chan error, 1)
	go func() {
		var err error
		for i := 0; wctx.Err() == nil; i++ {
			var r int64
			switch i % 4 {
			case 0, 1:
				var resp *clientv3.PutResponse
				if resp, err = cli.Put(wctx, fmt.Sprintf("/registry/w/%03d", i%50), fmt.Sprint("v", i)); err == nil {
					r = resp.Header.Revision
				}
			case 2:
				var resp *clientv3.DeleteResponse
				if resp, err = cli.Delete(wctx, fmt.Sprintf("/registry/w/%03d", (i+25)%50)); err == nil {
					r = resp.Header.Revision
				}
			default:
				var resp *clientv3.TxnResponse
				if resp, err = cli.Txn(wctx).Then(clientv3.OpPut(fmt.Sprint("/registry/t/a", i), "x"), clientv3.OpPut(fmt.Sprint("/registry/t/b", i), "y")).Commit(); err == nil {
					r = resp.Header.Revision
				}
			}
			if err != nil {
				break
			}
			lastRev = r
			time.Sleep(20 * time.Millisecond)
		}
		if wctx.Err() != nil {
			err = nil
		}
		writerDone <- err
	}()

	// p1 leads, p2 follows.
	p1 := start("journal-a")
	waitHolder(p1, 30*time.Second)
	p2 := start("journal-b")
	waitReach(base, 20*time.Second)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p2.stderr(), "leader election: new leader observed"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("journal-b does not follow:\n%s", p2.stderr())
		}
	}
	if strings.Contains(p2.stderr(), "journal: capturing") {
		t.Fatalf("the follower captures while the leader holds the Lease:\n%s", p2.stderr())
	}
	// Both ready (the follower waits to take over); the leader gauge is
	// 1 on the leader only, with its identity.
	p1.probesAndLeader(t, 1)
	p2.probesAndLeader(t, 0)

	// SIGKILL the leader: no release, the follower waits the Lease out.
	killed := time.Now()
	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exited(p1, 10*time.Second)
	atKill := reach().Reach
	took := waitHolder(p2, takeoverBound+schedulingSlack)
	first := waitReach(atKill, 15*time.Second)
	t.Logf("leader SIGKILLed: journal-b holds the Lease %s later (bound %s), its first segment %s after the kill",
		took.Sub(killed).Round(time.Millisecond), takeoverBound, first.Sub(killed).Round(time.Millisecond))
	p2.probesAndLeader(t, 1)

	// Restart the killed one (a new identity), then SIGTERM the leader:
	// it writes what it holds, releases, and journal-a takes over at once.
	p3 := start("journal-a")
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p3.stderr(), "leader election: new leader observed"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted journal-a does not follow:\n%s", p3.stderr())
		}
	}
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped := exited(p2, 30*time.Second)
	if p2.code != 0 {
		t.Fatalf("journal-b stopped by SIGTERM: exit %d, want 0:\n%s", p2.code, testfix.LastLines(p2.stderr(), 20))
	}
	if !strings.Contains(p2.stderr(), "Lease released") {
		t.Fatalf("journal-b did not release the Lease:\n%s", testfix.LastLines(p2.stderr(), 20))
	}
	atStop := reach().Reach
	took = waitHolder(p3, handoverBound+schedulingSlack)
	first = waitReach(atStop, 15*time.Second)
	t.Logf("leader SIGTERMed: it exited, journal-a holds the Lease %s later (bound %s), its first segment %s after the exit",
		took.Sub(stopped).Round(time.Millisecond), handoverBound, first.Sub(stopped).Round(time.Millisecond))

	// Stop writing; the journal reaches the last revision; stop it.
	stopWriter()
	if err := <-writerDone; err != nil {
		t.Fatalf("writer: %v", err)
	}
	// The last revision written is the cluster's: a write in flight when
	// the writer was cancelled can land unacknowledged (seen under load:
	// the journal reached one revision past the writer's last ack).
	// It is read until it stops moving: a put whose call was cancelled
	// may still be committed after a first read (seen: the journal one
	// past it).
	for prev := int64(-1); ; time.Sleep(500 * time.Millisecond) {
		resp, err := cli.Get(ctx, "/registry/w/000")
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision < lastRev {
			t.Fatalf("etcd's revision %d is below the writer's last acknowledged %d", resp.Header.Revision, lastRev)
		}
		if resp.Header.Revision == prev {
			lastRev = prev
			break
		}
		prev = resp.Header.Revision
	}
	waitReachExactly := func(rev int64) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); reach().Reach != rev; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the journal reaches %d, the last revision written is %d", reach().Reach, rev)
			}
		}
	}
	waitReachExactly(lastRev)
	if err := p3.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited(p3, 30*time.Second)
	if p3.code != 0 {
		t.Fatalf("journal-a stopped by SIGTERM: exit %d:\n%s", p3.code, testfix.LastLines(p3.stderr(), 20))
	}

	// No gap, no overlap, no duplicate: one chain of every segment from
	// the base to the last revision written.
	ch := reach()
	if ch.Reach != lastRev || len(ch.All) != len(ch.Segments) {
		t.Fatalf("segments: %d chained up to %d, %d stored; want every one chained up to %d", len(ch.Segments), ch.Reach, len(ch.All), lastRev)
	}
	// Exactly etcd's events: the history from base+1, as a watch gives it.
	var want []journal.Event
	hctx, stopHistory := context.WithCancel(ctx)
	defer stopHistory()
	wch := cli.Watch(hctx, "", clientv3.WithPrefix(), clientv3.WithRev(base+1))
	for resp := range wch {
		want = testfix.AppendWatched(want, resp.Events)
		if n := len(want); n > 0 && want[n-1].Rev >= lastRev {
			break
		}
	}
	src := journal.NewSource(st, layout, id, nil)
	evs, err := src.Events(ctx, base+1, lastRev)
	if err != nil {
		t.Fatal(err)
	}
	var got []journal.Event
	for e, err := range evs {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if len(got) != len(want) {
		t.Fatalf("the journal holds %d events from revision %d to %d, etcd's history %d", len(got), base+1, lastRev, len(want))
	}
	for i := range want {
		if fmt.Sprintf("%+v", got[i]) != fmt.Sprintf("%+v", want[i]) {
			t.Fatalf("event %d: journal %+v, etcd %+v", i, got[i], want[i])
		}
	}
	t.Logf("%d events over revisions %d-%d in %d segments, written by 3 leaders in turn", len(got), base+1, lastRev, len(ch.Segments))
}

// testFence: a leader whose Lease another holder takes (as a follower
// would after the leader's renewals stopped reaching the API server)
// sees its fence refuse within a retry, and RunAsLeader ends in a
// LeadershipError without clearing the new holder.
func testFence(t *testing.T, k *testenv.KubeAPIServer, admin kubernetes.Interface) {
	ctx := testfix.Context(t, time.Minute)
	sa, err := kube.New(kube.Config{Rest: k.RestConfig(kubetest.SAToken(t, admin, fenceNS, "etcd-recovery")), Namespace: fenceNS})
	if err != nil {
		t.Fatal(err)
	}
	o := kube.LeaderOptions{Client: sa, Identity: "fence-test", LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second,
		RetryPeriod: 250 * time.Millisecond, Log: testfix.Logger(t)}
	type result struct {
		refusedAt time.Time
		fenceErr  error
	}
	started := make(chan func() error, 1)
	res := make(chan result, 1)
	done := make(chan error, 1)
	go func() {
		done <- kube.RunAsLeader(ctx, o, func(rctx context.Context, fence func() error) error {
			started <- fence
			for {
				if err := fence(); err != nil {
					res <- result{time.Now(), err}
					<-rctx.Done() // ended by the lost leadership
					return err
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}()
	var fence func() error
	select {
	case fence = <-started:
	case err := <-done:
		t.Fatalf("RunAsLeader: %v before leading", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no leadership within 20 s of an empty Lease")
	}
	if err := fence(); err != nil {
		t.Fatalf("the leader's fence refuses: %v", err)
	}
	// Take the Lease over, as a follower would (retried while the
	// leader's renewals change it under us).
	intruder, dur := "intruder", int32(60)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := admin.CoordinationV1().Leases(fenceNS).Get(ctx, kube.DefaultLeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "fence-test" {
			return fmt.Errorf("Lease %s held by %v, want fence-test", kube.DefaultLeaseName, l.Spec.HolderIdentity)
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &intruder, LeaseDurationSeconds: &dur, AcquireTime: &now, RenewTime: &now}
		_, err = admin.CoordinationV1().Leases(fenceNS).Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	select {
	case r := <-res:
		// It refuses by its next renewal, at the latest when the renew
		// deadline passed since its last one.
		if d := r.refusedAt.Sub(taken); d > o.RenewDeadline+schedulingSlack {
			t.Errorf("the fence refused %s after the Lease was taken, want within the renew deadline %s", d, o.RenewDeadline)
		}
		if !errors.Is(r.fenceErr, kube.ErrNotLeader) {
			t.Errorf("fence: %v, want ErrNotLeader", r.fenceErr)
		}
		t.Logf("fence refused %s after the takeover: %v", r.refusedAt.Sub(taken).Round(time.Millisecond), r.fenceErr)
	case <-time.After(o.RenewDeadline + 10*time.Second):
		t.Fatal("the fence still accepts after the Lease was taken")
	}
	select {
	case err := <-done:
		var le *kube.LeadershipError
		if !errors.As(err, &le) || le.Identity != "fence-test" || !strings.Contains(err.Error(), fenceNS+"/"+kube.DefaultLeaseName) {
			t.Fatalf("RunAsLeader: %v, want a LeadershipError naming the Lease", err)
		}
		t.Log(err)
	case <-time.After(o.RenewDeadline + 10*time.Second):
		t.Fatal("RunAsLeader did not end after the Lease was taken")
	}
	if h := holder(t, ctx, admin, fenceNS); h != intruder {
		t.Fatalf("the Lease's holder after the lost leader stopped: %q, want %q (never released over)", h, intruder)
	}
}
