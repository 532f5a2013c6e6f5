package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/lease/leasepb"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// exactPoint is the source as it was at revision Rev, recorded before any
// compaction passed it: the full dump, HashKV at Rev from one member with
// that member's compact revision, and the leases (ID to granted TTL).
type exactPoint struct {
	Rev        int64
	Dump       map[string]string
	Hash       uint32
	CompactRev int64
	Leases     map[int64]int64
	Note       string
}

// journalProc is the journal running as a process of the real binary, so
// that it can be SIGKILLed.
type journalProc struct {
	tool string
	args []string
	log  string
	cmd  *exec.Cmd
}

func (j *journalProc) start(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(j.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	j.cmd = exec.Command(j.tool, j.args...)
	j.cmd.Env = testfix.ToolEnv()
	j.cmd.Stdout, j.cmd.Stderr = f, f
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cmd := j.cmd
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
}

// kill SIGKILLs the journal and waits for it.
func (j *journalProc) kill(t *testing.T) {
	t.Helper()
	if err := j.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j.cmd.Wait()
}

// stop SIGTERMs the journal and returns its exit code, within 60 s.
func (j *journalProc) stop(t *testing.T) int {
	t.Helper()
	if err := j.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { j.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		j.cmd.Process.Kill()
		<-done
		t.Fatalf("the journal did not stop within 60 s of SIGTERM:\n%s", j.tail())
	}
	return j.cmd.ProcessState.ExitCode()
}

func (j *journalProc) tail() string {
	b, _ := os.ReadFile(j.log)
	return testfix.LastLines(string(b), 40)
}

// exactSeed is the workload's seed: ETCD_RECOVERY_SEED replays one.
func exactSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("ETCD_RECOVERY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ETCD_RECOVERY_SEED=%q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// Exactness of the journal and point-in-time restore, on real etcd 3.5 and
// 3.6: a 3-member TLS cluster runs a seeded random workload (~1,500
// revisions: puts, overwrites, deletes, multi-op txns, range deletes,
// leases granted with short TTLs that expire during the run and long ones
// kept alive, revoked, keys attached) while the journal runs as a process
// of the binary (1 s segments) writing to MinIO through a fault proxy.
// During it: compactions (at revisions the journal has stored), a
// defragment, a leader move, a member restart, the journal SIGKILLed and
// restarted, and the store frozen for 70 s (the journal must name it and
// go on without a gap). At 20 random revisions R, recorded as the workload
// passes them (before any compaction passes R), and at the newest
// revision after all of it, `restore --to-revision R`
// (no bump, no compaction mark, so the restored member serves R itself)
// gives a member whose full dump (value, create and mod revision,
// version, lease of every key) and HashKV at R (after compacting at the
// source's compact revision) equal the source's, and whose lease bucket
// holds exactly the source's leases at R with their granted TTLs (but a
// lease the journal recorded ttlUnknown, which must have ended while the
// journal was down before it learned it: journal.UnknownLeaseTTL).
//
// Every lease keeps an anchor key until it is revoked or expires: a lease
// revoked while holding no key leaves no revision, so no journal can place
// it (docs/restore-internals.md#exactness).
func TestPointInTimeRestoreExact(t *testing.T) {
	t.Parallel()
	seed := exactSeed(t)
	t.Logf("seed %d (ETCD_RECOVERY_SEED=%d replays the workload's choices)", seed, seed)
	m := testenv.SharedMinIO(t)
	tool := testfix.Tool(t)
	for i, v := range []testenv.Version{testenv.V35, testenv.V36} {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			exactRun(t, m, tool, v, seed+uint64(i))
		})
	}
}

func exactRun(t *testing.T, m *testenv.MinIO, tool string, v testenv.Version, seed uint64) {
	ctx := testfix.Context(t, 6*time.Minute)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, Members: 3, TLS: true})
	m0 := c.Members[0] // never restarted: the member hashes and leases are read from
	cli := m0.Client(t)
	op := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 15*time.Second) }

	// Before the backup: keys, and a lease with keys the journal never
	// sees granted (the snapshot's), revoked during the run.
	testenv.PutKeys(t, cli, "/x/00/", 10, 16)
	octx, cancel := op()
	baseLease, err := cli.Grant(octx, 900)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"/lease/base", "/x/01/based"} {
		octx, cancel := op()
		_, err := cli.Put(octx, k, "b", clientv3.WithLease(baseLease.ID))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	cos := cosArgs(t, m, bucket, prefix)
	const id = "exact"
	baseRev := exactRev(t, ctx, cli)
	backupCLI(t, ctx, c, cos, id)
	if r := exactRev(t, ctx, cli); r != baseRev {
		t.Fatalf("the revision moved during the backup: %d to %d", baseRev, r)
	}

	// The journal reaches MinIO through a proxy that can freeze it.
	u, err := url.Parse(m.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartFaultProxy(t, u.Host)
	pcos := slices.Clone(cos)
	pcos[1] = proxy.URL("http")
	j := &journalProc{tool: tool, log: filepath.Join(t.TempDir(), "journal.log"),
		args: concatArgs([]string{"journal", "--cluster-id", id, "--segment-interval", "1s"}, clusterArgs(c), pcos)}
	j.start(t)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(j.log)
			var lines []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "lease") || strings.Contains(l, "rror") {
					lines = append(lines, l)
				}
			}
			t.Logf("the journal's log, lines on leases and errors:\n%s", strings.Join(lines, "\n"))
		}
	})
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}
	reach := func() int64 {
		t.Helper()
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		ch, err := journal.ListSegments(lctx, st, layout, id, baseRev)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Problem != nil {
			t.Fatalf("the journal's chain breaks: %v\n%s", ch.Problem, j.tail())
		}
		return ch.Reach
	}
	waitReach := func(rev int64, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for reach() < rev {
			if time.Now().After(deadline) {
				t.Fatalf("the journal reaches %d, not %d, after %s:\n%s", reach(), rev, within, j.tail())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// The workload's model: keys under /x/, live leases with anchors.
	type liveLease struct {
		id      clientv3.LeaseID
		ttl     int64
		expires time.Time // zero: kept alive by the test
	}
	var leases []liveLease
	key := func() string { return fmt.Sprintf("/x/%02d/%02d", rng.IntN(10), rng.IntN(20)) }
	val := func() string { return strconv.FormatUint(rng.Uint64(), 36) }
	pickLease := func() (clientv3.LeaseID, bool) {
		now := time.Now()
		var ok []clientv3.LeaseID
		for _, l := range leases {
			if l.expires.IsZero() || now.Before(l.expires.Add(-time.Second)) {
				ok = append(ok, l.id)
			}
		}
		if len(ok) == 0 {
			return 0, false
		}
		return ok[rng.IntN(len(ok))], true
	}
	leaseGone := func(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }
	var rev int64 = baseRev
	step := func() {
		t.Helper()
		octx, cancel := op()
		defer cancel()
		var r int64
		var err error
		switch n := rng.IntN(100); {
		case n < 30:
			var resp *clientv3.PutResponse
			if resp, err = cli.Put(octx, key(), val()); err == nil {
				r = resp.Header.Revision
			}
		case n < 42:
			l, ok := pickLease()
			if !ok {
				return
			}
			var resp *clientv3.PutResponse
			if resp, err = cli.Put(octx, key(), val(), clientv3.WithLease(l)); err == nil {
				r = resp.Header.Revision
			}
		case n < 52:
			var resp *clientv3.DeleteResponse
			if resp, err = cli.Delete(octx, key()); err == nil {
				r = resp.Header.Revision
			}
		case n < 66:
			var ops []clientv3.Op
			used := map[string]bool{}
			for range 2 + rng.IntN(4) {
				k := key()
				if used[k] {
					continue // a txn may not change a key twice
				}
				used[k] = true
				switch x := rng.IntN(3); {
				case x == 0:
					ops = append(ops, clientv3.OpDelete(k))
				case x == 1:
					if l, ok := pickLease(); ok {
						ops = append(ops, clientv3.OpPut(k, val(), clientv3.WithLease(l)))
						continue
					}
					fallthrough
				default:
					ops = append(ops, clientv3.OpPut(k, val()))
				}
			}
			var resp *clientv3.TxnResponse
			if resp, err = cli.Txn(octx).Then(ops...).Commit(); err == nil {
				r = resp.Header.Revision
			}
		case n < 69:
			var resp *clientv3.DeleteResponse
			if rng.IntN(2) == 0 {
				resp, err = cli.Delete(octx, fmt.Sprintf("/x/%02d/", rng.IntN(10)), clientv3.WithPrefix())
			} else {
				a := rng.IntN(20)
				resp, err = cli.Delete(octx, fmt.Sprintf("/x/%02d/%02d", rng.IntN(10), a), clientv3.WithRange(fmt.Sprintf("/x/%02d/%02d", rng.IntN(10), a+rng.IntN(5))))
			}
			if err == nil {
				r = resp.Header.Revision
			}
		case n < 76:
			ttl := int64(2 + rng.IntN(4))
			long := rng.IntN(3) == 0
			if long {
				ttl = int64(300 + rng.IntN(300))
			}
			g, gerr := cli.Grant(octx, ttl)
			if gerr != nil {
				t.Fatalf("grant: %v", gerr)
			}
			resp, perr := cli.Put(octx, fmt.Sprintf("/lease/%x", g.ID), "anchor", clientv3.WithLease(g.ID))
			if perr != nil {
				t.Fatalf("anchor of lease %x: %v", g.ID, perr)
			}
			l := liveLease{id: g.ID, ttl: ttl}
			if !long {
				l.expires = time.Now().Add(time.Duration(ttl) * time.Second)
			}
			leases = append(leases, l)
			r = resp.Header.Revision
		case n < 79:
			if len(leases) == 0 {
				return
			}
			i := rng.IntN(len(leases))
			l := leases[i]
			leases = slices.Delete(leases, i, i+1)
			var resp *clientv3.LeaseRevokeResponse
			if resp, err = cli.Revoke(octx, l.id); err == nil {
				r = resp.Header.Revision
			}
		default:
			for _, l := range leases {
				if l.expires.IsZero() {
					if _, err := cli.KeepAliveOnce(octx, l.id); err != nil {
						t.Fatalf("keepalive of lease %x: %v", l.id, err)
					}
					break
				}
			}
			var resp *clientv3.PutResponse
			if resp, err = cli.Put(octx, key(), val()); err == nil {
				r = resp.Header.Revision
			}
		}
		if err != nil && !leaseGone(err) {
			t.Fatalf("workload (seed %d): %v", seed, err)
		}
		rev = max(rev, r)
		// Forget leases past their expiry.
		leases = slices.DeleteFunc(leases, func(l liveLease) bool {
			return !l.expires.IsZero() && time.Now().After(l.expires.Add(2*time.Second))
		})
	}

	// record reads the source at the revision it is at now; false when
	// the revision moved meanwhile (a lease expired).
	record := func(note string) (exactPoint, bool) {
		t.Helper()
		at := exactRev(t, ctx, cli)
		p := exactPoint{Rev: at, Note: note, Leases: map[int64]int64{}}
		p.Dump = pitrDump(t, cli, at)
		for try := 0; ; try++ {
			octx, cancel := op()
			h, err := cli.HashKV(octx, m0.ClientURL, at)
			cancel()
			if err == nil {
				p.Hash, p.CompactRev = h.Hash, h.CompactRevision
				break
			}
			if try > 20 {
				t.Fatalf("HashKV at %d: %v", at, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		octx, cancel := op()
		defer cancel()
		ls, err := cli.Leases(octx)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls.Leases {
			ttl, err := cli.TimeToLive(octx, l.ID)
			if err != nil {
				t.Fatal(err)
			}
			if ttl.TTL == -1 {
				return p, false
			}
			p.Leases[int64(l.ID)] = ttl.GrantedTTL
		}
		return p, exactRev(t, ctx, cli) == at
	}

	const total = 1500
	var targets []int64
	for range 20 {
		targets = append(targets, baseRev+1+rng.Int64N(total-20))
	}
	slices.Sort(targets)
	var points []exactPoint
	sample := func() {
		t.Helper()
		for len(targets) > 0 && rev >= targets[0] {
			if p, ok := record("random"); ok {
				points = append(points, p)
				targets = targets[1:]
				for len(targets) > 0 && targets[0] <= p.Rev {
					targets = targets[1:]
					targets = append(targets, p.Rev+1+rng.Int64N(20)) // keep 20
				}
			} else {
				return // again after the next step
			}
		}
	}
	compact := func() {
		t.Helper()
		waitReach(rev-20, 30*time.Second) // compact only what the journal stored
		at := min(reach(), rev-1)
		if at <= baseRev {
			return
		}
		octx, cancel := op()
		defer cancel()
		if _, err := cli.Compact(octx, at); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("compact at %d: %v", at, err)
		}
		t.Logf("compacted at %d", at)
	}
	type fault struct {
		at   int64
		name string
		do   func()
	}
	var frozenUntil time.Time
	faults := []fault{
		{200, "compaction", compact},
		{300, "defragment", func() {
			octx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if _, err := cli.Defragment(octx, c.Members[1].ClientURL); err != nil {
				t.Fatalf("defragment: %v", err)
			}
		}},
		{380, "revoke the snapshot's lease", func() {
			octx, cancel := op()
			defer cancel()
			if _, err := cli.Revoke(octx, baseLease.ID); err != nil {
				t.Fatalf("revoke: %v", err)
			}
		}},
		{400, "leader move", func() { exactMoveLeader(t, ctx, c) }},
		{500, "journal SIGKILL", func() { j.kill(t) }},
		{560, "journal restart", func() { j.start(t) }},
		{700, "member stop", func() { c.Members[2].Stop() }},
		{760, "member start", func() { c.Members[2].Start(t); c.Members[2].WaitReady(t) }},
		{850, "compaction", compact},
		{900, "store frozen", func() {
			proxy.SetTrickle(testenv.ToServer, 1, 5*time.Second)
			proxy.SetTrickle(testenv.ToClient, 1, 5*time.Second)
			// 70 s: the store's stall detector names a put without
			// progress for 60 s; the journal must say so and go on.
			frozenUntil = time.Now().Add(70 * time.Second)
		}},
		{1300, "compaction", compact},
	}
	began := time.Now()
	for rev < baseRev+total {
		step()
		sample()
		if len(faults) > 0 && rev >= baseRev+faults[0].at && (frozenUntil.IsZero() || faults[0].name != "compaction") {
			t.Logf("at revision %d: %s", rev, faults[0].name)
			faults[0].do()
			faults = faults[1:]
		}
		if !frozenUntil.IsZero() {
			if time.Now().After(frozenUntil) {
				proxy.SetTrickle(testenv.ToServer, 0, 0)
				proxy.SetTrickle(testenv.ToClient, 0, 0)
				t.Logf("at revision %d: store thawed", rev)
				frozenUntil = time.Time{}
			} else {
				time.Sleep(150 * time.Millisecond) // a slower workload while frozen
			}
		}
	}
	for !frozenUntil.IsZero() && time.Now().Before(frozenUntil) {
		time.Sleep(100 * time.Millisecond)
	}
	proxy.SetTrickle(testenv.ToServer, 0, 0)
	proxy.SetTrickle(testenv.ToClient, 0, 0)
	if len(faults) > 0 {
		t.Fatalf("faults not injected: %v", faults[0].name)
	}
	// The newest revision after every fault.
	var newest exactPoint
	for ok := false; !ok; {
		newest, ok = record("newest")
	}
	t.Logf("workload: %d revisions in %s; %d points recorded", newest.Rev-baseRev, time.Since(began).Round(time.Second), len(points))
	waitReach(newest.Rev, 90*time.Second)
	if code := j.stop(t); code != 0 {
		t.Fatalf("journal: exit %d:\n%s", code, j.tail())
	}
	// The journal named the frozen store, and went on without a gap
	// (reach, below: the chain from the backup is whole).
	b, err := os.ReadFile(j.log)
	if err != nil {
		t.Fatal(err)
	}
	var warns []string
	named := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			warns = append(warns, l)
			named = named || strings.Contains(l, "stalled")
		}
	}
	t.Logf("the journal's warnings (%d): %s", len(warns), strings.Join(warns[:min(len(warns), 5)], "\n"))
	if !named {
		t.Errorf("the journal's log does not name the frozen store (a warning saying stalled):\n%s", j.tail())
	}
	if got := reach(); got < newest.Rev {
		t.Fatalf("the journal reaches %d, the newest revision is %d", got, newest.Rev)
	}
	if len(points) != 20 {
		t.Fatalf("%d random points recorded, want 20", len(points))
	}
	points = append(points, newest)

	// The leases the journal could not learn the TTL of (recorded
	// ttlUnknown): only leases that ended while the journal was down or
	// before it reached them (the SIGKILL), never one still alive.
	_, hs, err := journal.NewSource(st, layout, id, nil).Headers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unknown := map[int64]bool{}
	for _, h := range hs {
		for _, l := range h.Leases {
			if l.Revoked == 0 && l.TTLUnknown {
				unknown[l.ID] = true
			}
		}
	}
	for id := range unknown {
		if _, alive := newest.Leases[id]; alive {
			t.Errorf("lease %x is alive at the end, yet the journal recorded its TTL unknown", id)
		}
	}
	t.Logf("%d leases with their TTL recorded unknown (ended while the journal was down)", len(unknown))

	// Every point restored and compared.
	for i, p := range points {
		exactCompare(t, ctx, v, cos, id, p, i, unknown)
	}
}

func exactRev(t *testing.T, ctx context.Context, cli *clientv3.Client) int64 {
	t.Helper()
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	r, err := cli.Get(octx, "nothing")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

// exactMoveLeader moves the leadership to another member.
func exactMoveLeader(t *testing.T, ctx context.Context, c *testenv.EtcdCluster) {
	t.Helper()
	leader := c.Leader(t)
	lcli := leader.Client(t)
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var to uint64
	for _, m := range c.Members {
		if m == leader {
			continue
		}
		st, err := lcli.Status(octx, m.ClientURL)
		if err != nil {
			t.Fatal(err)
		}
		to = st.Header.MemberId
		break
	}
	if _, err := lcli.MoveLeader(octx, to); err != nil {
		t.Fatalf("move leader: %v", err)
	}
	if c.Leader(t) == leader {
		t.Fatal("the leader did not move")
	}
}

// exactCompare restores point p (restore --to-revision, no bump, no
// compaction mark), checks its lease bucket offline, then starts a member
// on it and compares the dump and HashKV at p.Rev.
func exactCompare(t *testing.T, ctx context.Context, v testenv.Version, cos []string, id string, p exactPoint, i int, unknown map[int64]bool) {
	t.Helper()
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	client := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	root := filepath.Join(t.TempDir(), "data")
	args := concatArgs([]string{"restore", "--cluster-id", id, "--initial-cluster", "r0=" + peer, "--data-dir-root", root,
		"--to-revision", fmt.Sprint(p.Rev), "--bump-revision", "0", "--mark-compacted=false", "-o", "json"}, cos)
	code, out, errOut := runCtx(t, ctx, args...)
	if code != 0 {
		t.Fatalf("point %d (%s, revision %d): restore: exit %d\n%s\n%s", i, p.Note, p.Rev, code, out, errOut)
	}
	var res restore.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Members) != 1 || res.Replay == nil || res.Replay.ToRevision != p.Rev {
		t.Fatalf("point %d: restore -o json: %v\n%s", i, err, out)
	}
	dir := res.Members[0].DataDir
	// The same lease IDs; the same granted TTLs, but for a lease whose TTL
	// the journal recorded unknown: journal.UnknownLeaseTTL.
	gotLeases := exactLeaseBucket(t, filepath.Join(dir, "member", "snap", "db"))
	var leaseDiffs []string
	for lid, ttl := range p.Leases {
		got, ok := gotLeases[lid]
		switch {
		case !ok:
			leaseDiffs = append(leaseDiffs, fmt.Sprintf("%x (TTL %d) missing", lid, ttl))
		case got != ttl && !(unknown[lid] && got == journal.UnknownLeaseTTL):
			leaseDiffs = append(leaseDiffs, fmt.Sprintf("%x: TTL %d, the source's %d", lid, got, ttl))
		}
	}
	for lid, ttl := range gotLeases {
		if _, ok := p.Leases[lid]; !ok {
			leaseDiffs = append(leaseDiffs, fmt.Sprintf("%x (TTL %d) not the source's", lid, ttl))
		}
	}
	if len(leaseDiffs) > 0 {
		slices.Sort(leaseDiffs)
		t.Errorf("point %d (%s, revision %d): the restored leases differ from the source's %d: %s", i, p.Note, p.Rev, len(p.Leases), strings.Join(leaseDiffs, "; "))
	}
	mem := testenv.StartEtcdMember(t, testenv.MemberSpec{Version: v, Name: "r0", DataDir: dir, ClientURL: client, PeerURL: peer, InitialClusterToken: res.Token})
	defer mem.Kill()
	mem.WaitReady(t)
	ncli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ncli.Close()
	got := pitrDump(t, ncli, p.Rev)
	var diffs []string
	for k, v := range p.Dump {
		if got[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: got %q, want %q", k, got[k], v))
		}
	}
	for k := range got {
		if _, ok := p.Dump[k]; !ok {
			diffs = append(diffs, k+": not in the source")
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		t.Fatalf("point %d (%s, revision %d): the restored dump differs from the source's in %d of %d keys: %s", i, p.Note, p.Rev, len(diffs), len(p.Dump),
			strings.Join(diffs[:min(5, len(diffs))], "; "))
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if p.CompactRev > 0 {
		if _, err := ncli.Compact(octx, p.CompactRev); err != nil {
			t.Fatalf("point %d: compact the restored member at %d: %v", i, p.CompactRev, err)
		}
	}
	h, err := ncli.HashKV(octx, client, p.Rev)
	if err != nil {
		t.Fatalf("point %d: HashKV of the restored member at %d: %v", i, p.Rev, err)
	}
	if h.Hash != p.Hash || h.CompactRevision != p.CompactRev {
		t.Fatalf("point %d (%s, revision %d): restored HashKV %d (compacted at %d), the source's %d (compacted at %d)", i, p.Note, p.Rev, h.Hash, h.CompactRevision, p.Hash, p.CompactRev)
	}
	t.Logf("point %d (%s): revision %d exact: %d keys, %d leases, hash %d (compacted at %d), %d events replayed", i, p.Note, p.Rev, len(p.Dump), len(p.Leases), p.Hash, p.CompactRev, res.Replay.Events)
}

// exactLeaseBucket is the lease bucket of a bbolt file: ID to TTL.
func exactLeaseBucket(t *testing.T, path string) map[int64]int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[int64]int64{}
	if err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("lease"))
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, v []byte) error {
			var l leasepb.Lease
			if err := l.Unmarshal(v); err != nil {
				return err
			}
			out[l.ID] = l.TTL
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
