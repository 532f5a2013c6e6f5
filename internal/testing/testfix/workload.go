package testfix

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Workload is a seeded random workload on an etcd cluster, of the kinds of
// writes a point-in-time restore must replay exactly: puts of new keys and
// overwrites, puts attached to leases, deletes, multi-op txns, prefix and
// range deletes, leases granted (each with an anchor key put at once, so
// that its grant has a revision a journal can place it by) and revoked
// (its keys deleted with it). Every lease is long (WorkloadLeaseTTL): none
// expires during a test. It records when each revision was committed and
// the revisions each lease lived between, so that a test can tell what the
// source held at a revision (LeasesAt) and how long ago a revision was
// written (CommittedAt).
type Workload struct {
	cli *clientv3.Client
	rng *rand.Rand
	// Prefix is where the keys go ("/w/" unless set before Start).
	Prefix string

	mu     sync.Mutex
	revs   []int64
	times  []time.Time
	leases []*WorkloadLease
	steps  int
	err    error
}

// WorkloadLease is a lease the workload granted: its id, its TTL, the
// revision of its anchor (its grant's place) and of its revoke (0: alive).
type WorkloadLease struct {
	ID      clientv3.LeaseID
	TTL     int64
	Anchor  int64
	Revoked int64
}

// WorkloadLeaseTTL is every workload lease's TTL: longer than any test.
const WorkloadLeaseTTL = 3600

// NewWorkload is a workload on cli drawing its choices from seed.
func NewWorkload(cli *clientv3.Client, seed uint64) *Workload {
	return &Workload{cli: cli, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), Prefix: "/w/"}
}

// Start runs a step every interval until stop, which waits for the step in
// flight and fails tb if a step failed. A step's context is bounded by 15 s.
func (w *Workload) Start(tb testing.TB, ctx context.Context, every time.Duration) (stop func()) {
	tb.Helper()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wctx.Err() == nil {
			if err := w.Step(wctx); err != nil {
				if wctx.Err() == nil {
					w.mu.Lock()
					w.err = err
					w.mu.Unlock()
				}
				return
			}
			select {
			case <-wctx.Done():
			case <-time.After(every):
			}
		}
	}()
	var once sync.Once
	halt := func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	tb.Cleanup(halt)
	return func() {
		tb.Helper()
		halt()
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.err != nil {
			tb.Fatalf("workload: %v", w.err)
		}
	}
}

func (w *Workload) key() string {
	return fmt.Sprintf("%s%02d/%02d", w.Prefix, w.rng.IntN(8), w.rng.IntN(16))
}

func (w *Workload) val() string { return strconv.FormatUint(w.rng.Uint64(), 36) }

// alive is the leases not revoked (w.mu held).
func (w *Workload) alive() []*WorkloadLease {
	var out []*WorkloadLease
	for _, l := range w.leases {
		if l.Revoked == 0 {
			out = append(out, l)
		}
	}
	return out
}

// Step makes one write (a few steps change nothing: a delete of a missing
// key) and records its revision.
func (w *Workload) Step(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	w.mu.Lock()
	alive := w.alive()
	n := w.rng.IntN(100)
	w.steps++
	w.mu.Unlock()
	pick := func() (clientv3.LeaseID, bool) {
		if len(alive) == 0 {
			return 0, false
		}
		return alive[w.rng.IntN(len(alive))].ID, true
	}
	if n >= 84 && (n >= 88 || len(alive) < 2) {
		n = 0 // a revoke keeps a lease alive; the rest are puts
	}
	var rev int64
	switch {
	case n < 32:
		r, err := w.cli.Put(ctx, w.key(), w.val())
		if err != nil {
			return fmt.Errorf("put: %w", err)
		}
		rev = r.Header.Revision
	case n < 46:
		id, ok := pick()
		if !ok {
			return nil
		}
		r, err := w.cli.Put(ctx, w.key(), w.val(), clientv3.WithLease(id))
		if err != nil {
			return fmt.Errorf("put with lease %x: %w", id, err)
		}
		rev = r.Header.Revision
	case n < 58:
		r, err := w.cli.Delete(ctx, w.key())
		if err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		rev = r.Header.Revision
	case n < 74:
		var ops []clientv3.Op
		used := map[string]bool{}
		for range 2 + w.rng.IntN(4) {
			k := w.key()
			if used[k] {
				continue // a txn may not change a key twice
			}
			used[k] = true
			switch x := w.rng.IntN(3); {
			case x == 0:
				ops = append(ops, clientv3.OpDelete(k))
			case x == 1:
				if id, ok := pick(); ok {
					ops = append(ops, clientv3.OpPut(k, w.val(), clientv3.WithLease(id)))
					continue
				}
				fallthrough
			default:
				ops = append(ops, clientv3.OpPut(k, w.val()))
			}
		}
		r, err := w.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("txn: %w", err)
		}
		rev = r.Header.Revision
	case n < 77:
		var r *clientv3.DeleteResponse
		var err error
		if w.rng.IntN(2) == 0 {
			r, err = w.cli.Delete(ctx, fmt.Sprintf("%s%02d/", w.Prefix, w.rng.IntN(8)), clientv3.WithPrefix())
		} else {
			a, d := w.rng.IntN(8), w.rng.IntN(16)
			r, err = w.cli.Delete(ctx, fmt.Sprintf("%s%02d/%02d", w.Prefix, a, d), clientv3.WithRange(fmt.Sprintf("%s%02d/%02d", w.Prefix, a, d+1+w.rng.IntN(4))))
		}
		if err != nil {
			return fmt.Errorf("range delete: %w", err)
		}
		rev = r.Header.Revision
	case n < 84:
		g, err := w.cli.Grant(ctx, WorkloadLeaseTTL)
		if err != nil {
			return fmt.Errorf("grant: %w", err)
		}
		r, err := w.cli.Put(ctx, fmt.Sprintf("%slease/%x", w.Prefix, g.ID), "anchor", clientv3.WithLease(g.ID))
		if err != nil {
			return fmt.Errorf("the anchor of lease %x: %w", g.ID, err)
		}
		rev = r.Header.Revision
		w.mu.Lock()
		w.leases = append(w.leases, &WorkloadLease{ID: g.ID, TTL: WorkloadLeaseTTL, Anchor: rev})
		w.mu.Unlock()
	default:
		l := alive[w.rng.IntN(len(alive))]
		r, err := w.cli.Revoke(ctx, l.ID)
		if err != nil {
			return fmt.Errorf("revoke %x: %w", l.ID, err)
		}
		rev = r.Header.Revision
		w.mu.Lock()
		l.Revoked = rev
		w.mu.Unlock()
	}
	w.record(rev, time.Now())
	return nil
}

func (w *Workload) record(rev int64, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.revs); n == 0 || rev > w.revs[n-1] {
		w.revs = append(w.revs, rev)
		w.times = append(w.times, at)
	}
}

// Last is the newest revision the workload wrote and when (zero before
// its first write).
func (w *Workload) Last() (int64, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.revs) == 0 {
		return 0, time.Time{}
	}
	return w.revs[len(w.revs)-1], w.times[len(w.times)-1]
}

// Writes is how many revisions the workload wrote.
func (w *Workload) Writes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.revs)
}

// CommittedAt is when the workload's newest write at or below rev
// returned (zero when none).
func (w *Workload) CommittedAt(rev int64) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := sort.Search(len(w.revs), func(i int) bool { return w.revs[i] > rev })
	if i == 0 {
		return time.Time{}
	}
	return w.times[i-1]
}

// WritesAfter is how many of the workload's writes are above rev and
// committed before t.
func (w *Workload) WritesAfter(rev int64, t time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for i, r := range w.revs {
		if r > rev && w.times[i].Before(t) {
			n++
		}
	}
	return n
}

// LeasesAt is the workload's leases alive at rev (anchored at or below
// it, not revoked at or below it): id to TTL. Leases granted before the
// workload are not in it.
func (w *Workload) LeasesAt(rev int64) map[int64]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[int64]int64{}
	for _, l := range w.leases {
		if l.Anchor <= rev && (l.Revoked == 0 || l.Revoked > rev) {
			out[int64(l.ID)] = l.TTL
		}
	}
	return out
}

// Counts is how many leases were granted and revoked at or below rev.
func (w *Workload) Counts(rev int64) (granted, revoked int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.leases {
		if l.Anchor <= rev {
			granted++
		}
		if l.Revoked != 0 && l.Revoked <= rev {
			revoked++
		}
	}
	return granted, revoked
}

// Dump is every key of cli at rev (0: the newest) with its value, create
// and mod revision, version and lease, as the exact point-in-time tests
// compare them.
func Dump(tb testing.TB, ctx context.Context, cli *clientv3.Client, rev int64) map[string]string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		tb.Fatalf("dump at %d: %v", rev, err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = fmt.Sprintf("value=%q create=%d mod=%d version=%d lease=%x", kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return out
}

// Leases is cli's leases: id to granted TTL.
func Leases(tb testing.TB, ctx context.Context, cli *clientv3.Client) map[int64]int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ls, err := cli.Leases(ctx)
	if err != nil {
		tb.Fatalf("leases: %v", err)
	}
	out := map[int64]int64{}
	for _, l := range ls.Leases {
		ttl, err := cli.TimeToLive(ctx, l.ID)
		if err != nil {
			tb.Fatalf("lease %x: %v", l.ID, err)
		}
		out[int64(l.ID)] = ttl.GrantedTTL
	}
	return out
}

// KeyDiffs names, unsorted, each key whose value in got is not want's
// ("k: got …, want …") and each key of got that want lacks ("k: not in
// the source"); none when the dumps are equal.
func KeyDiffs(want, got map[string]string) []string {
	var diffs []string
	for k, v := range want {
		if got[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: got %q, want %q", k, got[k], v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, k+": not in the source")
		}
	}
	return diffs
}

// SameKeyspace fails tb unless got is want key by key (Dump's form) and
// gotLeases are wantLeases (id to granted TTL); what names the restore.
func SameKeyspace(tb testing.TB, what string, want, got map[string]string, wantLeases, gotLeases map[int64]int64) {
	tb.Helper()
	diffs := KeyDiffs(want, got)
	for id, ttl := range wantLeases {
		if g, ok := gotLeases[id]; !ok || g != ttl {
			diffs = append(diffs, fmt.Sprintf("lease %x: granted TTL %d (present %v), want %d", id, g, ok, ttl))
		}
	}
	for id := range gotLeases {
		if _, ok := wantLeases[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("lease %x: not the source's", id))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		tb.Fatalf("%s differs from the source in %d keys or leases (of %d keys, %d leases): %s", what, len(diffs), len(want), len(wantLeases),
			strings.Join(diffs[:min(6, len(diffs))], "; "))
	}
}

// StartRestoredMember starts an etcd 3.5 member r0 on a restore's one data
// dir (dataDir, with the restore's cluster token) at client and peer, waits
// until it is ready and returns a client of it (closed at the test's end).
func StartRestoredMember(tb testing.TB, dataDir, token, client, peer string) *clientv3.Client {
	tb.Helper()
	mem := testenv.StartEtcdMember(tb, testenv.MemberSpec{Version: testenv.V35, Name: "r0", DataDir: dataDir,
		ClientURL: client, PeerURL: peer, InitialClusterToken: token})
	mem.WaitReady(tb)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// Txns records a workload's transactions: Do takes what a
// cli.Txn(ctx)….Commit() returns, fails the test on an error and keeps
// the revision of the last one in Rev.
type Txns struct {
	tb  testing.TB
	Rev int64
}

// NewTxns is a Txns of the test tb.
func NewTxns(tb testing.TB) *Txns { return &Txns{tb: tb} }

// Do records one transaction's commit.
func (x *Txns) Do(r *clientv3.TxnResponse, err error) {
	x.tb.Helper()
	if err != nil {
		x.tb.Fatalf("workload: %v", err)
	}
	x.Rev = r.Header.Revision
}
