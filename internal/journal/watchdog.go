package journal

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// Watch liveness (see capture.checkWatch).
const (
	// DefaultWatchStallTimeout is how long a watch has to answer a
	// liveness probe (or to be created) before it is taken as stalled.
	DefaultWatchStallTimeout = 5 * time.Second
	// WatchProbeEvery is the longest a watch stays silent before it is
	// probed (at most SegmentInterval).
	WatchProbeEvery = 10 * time.Second
	// maxRewatchBackoff caps the wait between watches when no member
	// answers.
	maxRewatchBackoff = 30 * time.Second
	// DefaultWatchCatchUpTimeout is how long a watch whose member answers,
	// and holds revisions the watch has not delivered yet, may stay silent
	// before it is taken as stalled all the same (see checkWatch).
	DefaultWatchCatchUpTimeout = time.Minute
)

// WatchStall is a capture's watch found stalled: it did not answer a
// liveness probe (or was not created) within the stall timeout. The
// capture watches again from AwaitedRev, exactly.
type WatchStall struct {
	ClusterID string
	// MemberID is the etcd member whose stream answered last (0: none
	// answered on this watch).
	MemberID uint64
	// AwaitedRev is the next revision the capture expects.
	AwaitedRev int64
	// Silent is how long the watch had sent nothing.
	Silent time.Duration
	// Stalls counts the stalls of this capture so far, this one included;
	// Consecutive those since a watch last answered.
	Stalls, Consecutive int
	// Reason says what did not answer.
	Reason string
}

func (s WatchStall) String() string {
	return fmt.Sprintf("journal of cluster %s: watch stalled at revision %d after %s silent: %s (stall %d)",
		s.ClusterID, s.AwaitedRev, s.Silent.Round(time.Millisecond), s.Reason, s.Stalls)
}

// watchdog is the liveness state of the capture's current watch.
type watchdog struct {
	n       int // watches opened: each gets its own gRPC stream
	wctx    context.Context
	raw     *rawWatch // the watch's stream (progress requests)
	opened  time.Time
	last    time.Time // the last response on this watch
	created bool
	member  uint64
	// A probe in flight: started at probeAt (zero: none); want is the
	// cluster's revision read (linearizably) when it started: 0 not
	// known yet, -1 the read failed; seen the highest revision the watch
	// has shown since (events or a progress notification).
	probeAt time.Time
	want    *atomic.Int64
	// probeID is the etcd cluster ID the probe read; probeReach the
	// last revision the watch had delivered when the probe started.
	probeID    *atomic.Uint64
	probeReach int64
	// memberRev is what the watch's own member answered during the probe
	// (its revision; -1: it did not answer, or the watch had no member
	// yet); probeDone is set once the probe's reads are over.
	memberRev *atomic.Int64
	probeDone *atomic.Bool
	// catchUpSince is when the watch was first found silent while its
	// member answers ahead of it (zero: not catching up); synced, that
	// the watch has shown the cluster's revision since it was opened
	// (a progress notification, which etcd sends a synced watch only, or
	// a probe passed): from then on a silence is no catch-up.
	catchUpSince time.Time
	synced       bool
	// Across watches: the catch-up stalls in a row at catchUpRev (each
	// doubles the next wait, see catchUpWait), and the client URL each
	// member last answered on (memberURL).
	catchUpStalls int
	catchUpRev    int64
	memberURLs    sync.Map // uint64 → string
	seen          int64
	answered      bool // any response since probeAt
	stalls        int
	consecutive   int
	retryAt       time.Time // no watch until then (backoff): wch is nil
}

// watchStallTimeout and probeEvery are the capture's liveness bounds.
func (c *capture) watchStallTimeout() time.Duration {
	if c.o.WatchStallTimeout > 0 {
		return c.o.WatchStallTimeout
	}
	return DefaultWatchStallTimeout
}

func (c *capture) probeEvery() time.Duration { return min(c.o.SegmentInterval, WatchProbeEvery) }

func (c *capture) watchCatchUpTimeout() time.Duration {
	if c.o.WatchCatchUpTimeout > 0 {
		return c.o.WatchCatchUpTimeout
	}
	return DefaultWatchCatchUpTimeout
}

// catchUpWait is how long this watch's catch-up is waited for: the
// catch-up timeout, doubled for each catch-up stall in a row at the same
// revision (at most 8 times it): a catch-up longer than the timeout is
// asked for again with more time, not forever with the same.
func (c *capture) catchUpWait() time.Duration {
	n := 0
	if c.wd.catchUpRev == c.next {
		n = min(c.wd.catchUpStalls, 3)
	}
	return c.watchCatchUpTimeout() << n
}

// watchCtx is the context of a new watch: its own gRPC stream (clientv3
// shares one stream among the watches whose contexts carry the same
// metadata), so that a watch opened after a stall does not ride the
// stalled stream, and the client's balancer picks a member again.
func (c *capture) watchCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	c.wd.n++
	wctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, "etcd-recovery-journal-watch", strconv.Itoa(c.wd.n)))
	now := c.o.Now()
	c.wd.wctx, c.wd.opened, c.wd.last, c.wd.created, c.wd.member, c.wd.retryAt = wctx, now, now, false, 0, time.Time{}
	c.wd.probeAt, c.wd.seen, c.wd.answered, c.wd.want = time.Time{}, 0, false, nil
	c.wd.catchUpSince, c.wd.synced = time.Time{}, false
	return wctx, cancel
}

// watchResponded notes a response of the current watch.
func (c *capture) watchResponded(resp clientv3.WatchResponse) {
	c.o.Metrics.clusterRevision(c.o.ClusterID, resp.Header.Revision)
	c.wd.last = c.o.Now()
	c.wd.created = true
	c.wd.consecutive = 0
	if resp.Header.MemberId != 0 {
		c.wd.member = resp.Header.MemberId
	}
	if resp.IsProgressNotify() {
		c.wd.synced = true
	}
	if !c.wd.probeAt.IsZero() {
		c.wd.answered = true
		if resp.IsProgressNotify() {
			c.wd.seen = max(c.wd.seen, resp.Header.Revision)
		}
	}
}

// checkWatch is the watch's liveness check, run on every tick. A watch
// silent for probeEvery is probed: the cluster's revision is read
// (linearizably, through any member) while the watch's stream is asked
// for a progress notification (clientv3 RequestProgress). The watch is
// alive once it has shown that revision (events up to it, or a progress
// notification at or past it; when the read failed, any response), and
// stalled when it has not within the stall timeout: its member is
// frozen, dead without the connection breaking, or partitioned (it
// answers progress requests at its own, old revision). A new watch that
// is not created within the stall timeout is stalled too (no member
// answers). It reports whether the watch stalled; the stall is logged and
// reported (OnStall), and the caller watches again (rewatch).
func (c *capture) checkWatch() bool {
	if c.wd.wctx == nil || !c.wd.retryAt.IsZero() {
		return false
	}
	now := c.o.Now()
	timeout := c.watchStallTimeout()
	switch {
	case !c.wd.created:
		if now.Sub(c.wd.opened) < timeout {
			return false
		}
		reason := fmt.Sprintf("no member created the watch within %s", timeout)
		if c.wd.consecutive+1 > max(1, len(c.o.Client.Endpoints())) {
			reason = fmt.Sprintf("no member answers (%d watches in a row not created)", c.wd.consecutive+1)
		}
		c.stalled(now, reason)
		return true
	case c.wd.probeAt.IsZero():
		if now.Sub(c.wd.last) >= c.probeEvery() {
			c.probe(now, timeout)
		}
		return false
	}
	want := c.wd.want.Load()
	if err := c.checkProbe(c.wd.probeReach, want, c.wd.probeID.Load()); err != nil {
		c.lineage = err
		return false
	}
	seen := max(c.wd.seen, c.next-1)
	// Alive: it showed the cluster's revision, or (the read failed) it
	// answered; or it delivered revisions past where it stood when the
	// probe began: a long catch-up of large values is slow, not stalled
	// (a partitioned member answers at its old revision, a frozen one
	// not at all; neither delivers new revisions).
	if (want > 0 && seen >= want) || (want < 0 && c.wd.answered) || c.next-1 > c.wd.probeReach {
		if !c.wd.catchUpSince.IsZero() {
			c.o.Log.Info("journal: the watch's catch-up arrived", "cluster", c.o.ClusterID, "member", fmt.Sprintf("%x", c.wd.member),
				"silent", now.Sub(c.wd.catchUpSince).Round(time.Millisecond), "reachedRev", c.next-1)
		}
		if want > 0 && seen >= want {
			c.wd.synced = true
		}
		if c.next > c.wd.catchUpRev {
			c.wd.catchUpStalls = 0
		}
		c.wd.probeAt, c.wd.catchUpSince = time.Time{}, time.Time{}
		return false
	}
	// Past the timeout, the probe's reads are waited for (each has a
	// deadline: half a timeout more at most).
	if now.Sub(c.wd.probeAt) < timeout || !c.wd.probeDone.Load() {
		return false
	}
	// Silent since it was opened, and its member answers at a revision
	// the watch has not delivered: etcd is still reading the catch-up (it
	// sends a watch that starts behind nothing until it has read every
	// revision up to its own, and answers no progress request until
	// then: a large catch-up on a loaded member takes seconds). That is
	// slow, not stalled; the member is probed again each timeout, up to
	// catchUpWait. A frozen member does not answer, a partitioned one
	// answers at its old revision once its catch-up is sent, a dead
	// connection breaks at the client's keepalive; and a watch that has
	// once shown the cluster's revision is no longer catching up: its
	// silence is a stall at the stall timeout, as before.
	mrev, wait := c.wd.memberRev.Load(), c.catchUpWait()
	if !c.wd.answered && !c.wd.synced && mrev > c.wd.probeReach {
		if c.wd.catchUpSince.IsZero() {
			c.wd.catchUpSince = c.wd.probeAt
			c.o.Log.Info("journal: the watch is silent while its member answers ahead of it: a catch-up, waited for", "cluster", c.o.ClusterID,
				"member", fmt.Sprintf("%x", c.wd.member), "memberRev", mrev, "reachedRev", c.wd.probeReach, "upTo", wait)
		}
		if now.Sub(c.wd.catchUpSince) < wait {
			c.probe(now, timeout)
			return false
		}
	}
	var reason string
	switch {
	case !c.wd.catchUpSince.IsZero() && mrev > c.wd.probeReach:
		if c.wd.catchUpRev != c.next {
			c.wd.catchUpRev, c.wd.catchUpStalls = c.next, 0
		}
		c.wd.catchUpStalls++
		reason = fmt.Sprintf("it answers at revision %d, but its watch delivered nothing past %d for %s (a catch-up longer than %s, or a stuck stream)",
			mrev, c.wd.probeReach, now.Sub(c.wd.catchUpSince).Round(time.Millisecond), wait)
	case want > 0 && c.wd.answered:
		reason = fmt.Sprintf("its member answers at revision %d, the cluster is at %d (partitioned or behind)", seen, want)
	case want > 0:
		reason = fmt.Sprintf("no progress notification within %s while the cluster is at revision %d (member frozen or unreachable)", timeout, want)
	default:
		reason = fmt.Sprintf("no progress notification within %s, and the cluster's revision could not be read (no member answers)", timeout)
	}
	if c.wd.member != 0 {
		reason = fmt.Sprintf("member %x: %s", c.wd.member, reason)
	}
	c.stalled(now, reason)
	return true
}

// probe starts a liveness probe of the current watch.
func (c *capture) probe(now time.Time, timeout time.Duration) {
	// Each probe its own want: a late answer to an earlier probe (or
	// watch) never counts for this one.
	c.wd.probeAt, c.wd.seen, c.wd.answered, c.wd.want = now, 0, false, new(atomic.Int64)
	c.wd.probeID, c.wd.probeReach = new(atomic.Uint64), c.from()-1
	c.wd.memberRev, c.wd.probeDone = new(atomic.Int64), new(atomic.Bool)
	wctx, want, wantID, rw := c.wd.wctx, c.wd.want, c.wd.probeID, c.wd.raw
	cli, m, id, member, reach := c.o.Client, c.o.Metrics, c.o.ClusterID, c.wd.member, c.wd.probeReach
	mrev, done, urls, log := c.wd.memberRev, c.wd.probeDone, &c.wd.memberURLs, c.o.Log
	// The cluster's revision and the watch's own member are read side by
	// side, each within the timeout: a member still reading a catch-up
	// holds its applies, so a linearizable read that lands on it waits,
	// and must not take the member's answer down with it. The member is
	// asked once the read finds the watch behind, or when the read has
	// not answered within half the timeout; a watch level with the
	// cluster (a quiet one) costs no more than the read.
	ask := make(chan bool, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		gctx, cancel := context.WithTimeout(wctx, timeout)
		defer cancel()
		r, err := cli.Get(gctx, probeKey, clientv3.WithCountOnly())
		if err != nil {
			want.CompareAndSwap(0, -1)
			ask <- true
			return
		}
		// The cluster's revision, read linearizably: the lag shows even
		// while the watch is silent or stalled.
		m.clusterRevision(id, r.Header.Revision)
		wantID.Store(r.Header.ClusterId)
		want.CompareAndSwap(0, r.Header.Revision)
		ask <- r.Header.Revision > reach
	})
	wg.Go(func() {
		select {
		case yes := <-ask:
			if !yes {
				return
			}
		case <-time.After(timeout / 2):
		case <-wctx.Done():
			return
		}
		mctx, cancel := context.WithTimeout(wctx, timeout)
		defer cancel()
		rev := memberRevision(mctx, cli, member, urls)
		if rev < 0 && wctx.Err() == nil {
			log.Debug("journal: the watch's member did not answer a status request", "cluster", id, "member", fmt.Sprintf("%x", member))
		}
		mrev.Store(rev)
	})
	go func() {
		wg.Wait()
		done.Store(true)
	}()
	if rw != nil {
		_ = rw.requestProgress() // answered on the watch, or not: checkWatch judges
	}
}

// memberRevision is the revision etcd member id answers at, asked with
// Status (answered by the member itself, not through raft), -1 when it
// does not answer within ctx or is no member: on the URL it last answered
// on (urls), else on each of the client's endpoints and the member's
// client URLs (a membership read answered locally: it does not wait for
// a member busy applying), side by side.
func memberRevision(ctx context.Context, cli *clientv3.Client, id uint64, urls *sync.Map) int64 {
	if id == 0 {
		return -1
	}
	status := func(u string) int64 {
		st, err := cli.Status(ctx, u)
		if err != nil || st.Header == nil || st.Header.MemberId != id {
			return -1
		}
		urls.Store(id, u)
		return st.Header.Revision
	}
	if u, ok := urls.Load(id); ok {
		if rev := status(u.(string)); rev >= 0 {
			return rev
		}
	}
	cands := cli.Endpoints()
	if ml, err := pb.NewClusterClient(cli.ActiveConnection()).MemberList(ctx, &pb.MemberListRequest{Linearizable: false}); err == nil {
		for _, mb := range ml.Members {
			if mb.ID == id {
				cands = append(cands, mb.ClientURLs...)
			}
		}
	}
	var found atomic.Int64
	found.Store(-1)
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for _, u := range cands {
		if seen[u] {
			continue
		}
		seen[u] = true
		wg.Go(func() {
			if rev := status(u); rev >= 0 {
				found.Store(rev)
			}
		})
	}
	wg.Wait()
	return found.Load()
}

// stalled records a stall, ends the watch, and schedules the next one:
// at once after a watch that answered, with backoff (the stall timeout
// doubling, at most maxRewatchBackoff) while none does, keeping what is
// buffered (the interval still writes it).
func (c *capture) stalled(now time.Time, reason string) {
	c.wd.stalls++
	c.wd.consecutive++
	s := WatchStall{
		ClusterID: c.o.ClusterID, MemberID: c.wd.member, AwaitedRev: c.next,
		Silent: now.Sub(c.wd.last), Stalls: c.wd.stalls, Consecutive: c.wd.consecutive, Reason: reason,
	}
	c.stopWatch()
	c.dropCredit()
	c.wd.wctx = nil
	var backoff time.Duration
	// Each member may be tried once at once (the balancer may pick the
	// stalled one again); past that no member answers: back off.
	if tried := len(c.o.Client.Endpoints()); c.wd.consecutive > tried {
		backoff = min(c.watchStallTimeout()<<min(c.wd.consecutive-tried-1, 8), maxRewatchBackoff)
	}
	c.wd.retryAt = now.Add(backoff)
	c.o.Log.Warn("journal: watch stalled; watching again from the awaited revision", "cluster", c.o.ClusterID,
		"member", fmt.Sprintf("%x", s.MemberID), "awaitedRev", s.AwaitedRev, "silent", s.Silent.Round(time.Millisecond),
		"reason", reason, "stalls", s.Stalls, "consecutive", s.Consecutive, "retryIn", backoff, "buffered", len(c.events))
	if c.o.OnStall != nil {
		c.o.OnStall(s)
	}
}

// rewatch opens the watch again once the backoff after a stall is over;
// nil until then (a nil channel never delivers).
func (c *capture) rewatch(ctx context.Context) watchChan {
	if c.o.Now().Before(c.wd.retryAt) {
		return nil
	}
	return c.watch(ctx)
}
