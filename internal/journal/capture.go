package journal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
)

// Defaults of CaptureOptions.
const (
	DefaultSegmentInterval = 30 * time.Second
	DefaultSegmentSize     = 4 << 20
	DefaultUploadTimeout   = 2 * time.Minute
	DefaultFrozenAfter     = 5 * time.Minute
	DefaultFinalFlush      = 15 * time.Second
	DefaultStopCatchUp     = 5 * time.Second
	// ReceivedEvery is how often (at most) a segment records when the
	// journal received a revision, besides its first and last.
	ReceivedEvery      = 100 * time.Millisecond
	leaseLookupTimeout = 2 * time.Second
	leaseRetryTimeout  = time.Second
	leasePollEvery     = 5 * time.Second
	maxKnownLeases     = 100_000
	// maxPendingRevokes bounds the revokes waiting to be placed, which
	// every segment's header carries (about 60 bytes each).
	maxPendingRevokes = 4096
	// maxCatchUps bounds the catch-ups a segment carries (Header.CaughtUp);
	// past it they are merged into one, which only widens the window a
	// time maps to no revision in.
	maxCatchUps = 64
	// maxRevokeLookups bounds the lookups one seal makes again (of
	// leases whose lookup failed, or pending when the capture resumed):
	// the rest wait for the next seal.
	maxRevokeLookups = 64
	// maxLookupFailedRevokes bounds the pending revokes whose lookup
	// failed: while etcd does not answer lookups, every delete of a
	// leased key would become one.
	maxLookupFailedRevokes = 256
)

// CaptureOptions are a journal's capture of one cluster.
type CaptureOptions struct {
	Client     *clientv3.Client
	ClusterID  string
	BaseBackup string // the full backup the journal continues
	BaseRev    int64  // its revision
	Store      store.Store
	Layout     catalog.Layout
	Encoding   objectio.Encoding
	// Identities read the last segment on a resume, to check it is whole
	// and continues BaseBackup (its header); without them an encrypted
	// last segment is not read (write-only credentials and recipients
	// only) and the resume trusts the keys' chain.
	Identities *seal.Identities
	// A segment is written once it is SegmentInterval old or SegmentSize
	// (raw, encoded bytes, estimated) big, never empty, and always at a
	// revision's end.
	SegmentInterval time.Duration
	SegmentSize     int
	// Budget, shared by the captures of one process, bounds the bytes
	// they hold (budget.go); nil: no bound.
	Budget *Budget
	// UploadTimeout bounds one upload attempt; FrozenAfter bounds the
	// retries of one segment before Capture gives up naming the store
	// frozen; FinalFlush bounds the last segment's write once ctx ended.
	UploadTimeout time.Duration
	FrozenAfter   time.Duration
	FinalFlush    time.Duration
	// StopCatchUp bounds, once ctx ends (a graceful stop: SIGTERM, a
	// rollout, a lost lease's successor taking over cleanly), the wait for
	// the watch to deliver what the cluster had committed by then, so that
	// the final segment holds every write acknowledged before the stop
	// (DefaultStopCatchUp; negative: none). With FinalFlush and the Lease's
	// release it fits the Deployment's grace period (deploy/60-journal.yaml).
	// See catchUp.
	StopCatchUp time.Duration
	Now         func() time.Time
	Log         *slog.Logger
	// OnSegment, when set, is called (from the uploader) with each segment
	// once it is stored.
	OnSegment func(SegmentInfo)
	// Fence, when set, is called before each segment upload; an error stops the capture at once.
	Fence func() error
	// Metrics, when set, records what the capture does (journal
	// --listen: its lag, uploads and segments, and its loop's liveness).
	Metrics *Metrics
	// Lock, when its mode is explicit (governance or compliance: the
	// journal's --lock-mode), writes every segment with an object-lock
	// retention of that mode until retention.SegmentLockUntil(the upload
	// attempt's start, JournalRetention, Lock): the earliest time journal
	// retention could delete it, less Lock's margin, so that a leaked
	// write credential cannot delete the journal and the lock never
	// outlasts retention. The bucket must have object lock (checked when
	// Capture starts).
	Lock             retention.LockPolicy
	JournalRetention time.Duration
	// WatchStallTimeout bounds a watch's answer to a liveness probe (and
	// its creation) before it is taken as stalled and opened again
	// (DefaultWatchStallTimeout); OnStall, when set, is called with each
	// stall. See checkWatch.
	WatchStallTimeout time.Duration
	// WatchCatchUpTimeout bounds the silence of a watch whose member
	// answers ahead of it, a catch-up etcd is still reading
	// (DefaultWatchCatchUpTimeout). See checkWatch.
	WatchCatchUpTimeout time.Duration
	OnStall             func(WatchStall)
}

func (o *CaptureOptions) defaults() error {
	switch {
	case o.Client == nil:
		return errors.New("journal: capture needs an etcd client")
	case o.Store == nil:
		return errors.New("journal: capture needs a store")
	case catalog.ValidateClusterID(o.ClusterID) != nil:
		return fmt.Errorf("journal: cluster id: %w", catalog.ValidateClusterID(o.ClusterID))
	case o.BaseBackup == "" || o.BaseRev < 1:
		return errors.New("journal: capture needs its base backup and its revision")
	case o.SegmentInterval < 0 || o.SegmentSize < 0:
		return errors.New("journal: negative segment interval or size")
	}
	o.SegmentInterval = cmp.Or(o.SegmentInterval, DefaultSegmentInterval)
	o.SegmentSize = cmp.Or(o.SegmentSize, DefaultSegmentSize)
	o.UploadTimeout = cmp.Or(o.UploadTimeout, DefaultUploadTimeout)
	o.FrozenAfter = cmp.Or(o.FrozenAfter, DefaultFrozenAfter)
	o.FinalFlush = cmp.Or(o.FinalFlush, DefaultFinalFlush)
	o.StopCatchUp = cmp.Or(o.StopCatchUp, DefaultStopCatchUp)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// GapError is a journal that cannot continue exactly: revisions From to
// To were not captured (To 0: up to now, unknown), because the watch was
// compacted past or cancelled, or a restart found the stored segments not
// continuing the base. What was captured before it is stored; the caller
// takes a full backup and journals from it.
type GapError struct {
	ClusterID string
	From, To  int64
	Reason    string
	Err       error
}

func (e *GapError) Error() string {
	to := "now"
	if e.To > 0 {
		to = fmt.Sprint(e.To)
	}
	s := fmt.Sprintf("journal of cluster %s: gap: revisions %d to %s not captured: %s", e.ClusterID, e.From, to, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *GapError) Unwrap() error { return e.Err }

// Capture journals a cluster until ctx ends (then it writes what it holds,
// within FinalFlush, and returns nil) or a gap (*GapError, after writing
// what it holds) or a store that stays frozen or refuses (*SegmentError).
//
// It watches the whole keyspace from BaseRev+1, or, when segments
// continue the base (Continuation: from the one holding BaseRev+1, so the
// base may lie inside a chain another base started), from the last one's
// LastRev+1: a restart resumes exactly, and one that cannot (the stored
// segments break, or the last is damaged or another cluster's) is a
// GapError. Every watch event becomes an
// Event (Sub: its index within its revision; etcd's watch never splits a
// revision across responses without WithFragment, so a response ends at
// a revision's end and segments are cut only there). A lease first seen
// on a put gets its granted TTL from what pollLeases learned (every lease
// of the cluster listed every 5 s, or SegmentInterval when shorter,
// whatever the watch's position), else it is looked up (TimeToLive; a
// failed lookup is retried once, then recorded TTLUnknown, as is a lease
// gone by then and never polled).
// The watch asks for each event's previous key-value (WithPrevKV): a
// delete of a key that held lease L, with L found gone, starts a revoke,
// recorded (Lease.Revoked) once the capture has passed the revision at
// which it found L gone, at the last revision up to it that deleted a key
// of L: the revoke or expiry, which deletes all its keys in one revision.
// The record lands in that segment or a later one; until then every
// segment sealed carries the revoke as pending (Header.Revoking), a
// capture resumed after it goes on with it, and Source.Leases reads on
// past the revisions it replays until it is placed. A lease revoked or
// expired while it held no key leaves no revision and is not recorded.
// The cost of WithPrevKV: etcd reads each event's previous revision of
// the key (one index and bbolt lookup) and sends it, about doubling the
// watch's bytes for overwrites; segments do not store it.
//
// Memory: one segment buffered while the previous one uploads; while that
// upload lasts the watch is not read (etcd holds the events, and a watch
// that falls behind its compaction is a GapError), so a store slower than
// the cluster gets segments cut by size, never an unbounded buffer. An
// upload is retried with backoff for FrozenAfter; a create that finds its
// key taken on the first attempt is another writer (ReasonConflict).
// Fence, when set, is asked before every upload attempt and before the
// final flush: a refusal stops Capture at once (nothing more written, the
// upload in flight aborted) with a *SegmentError of ReasonFenced.
func Capture(ctx context.Context, o CaptureOptions) error {
	if err := o.defaults(); err != nil {
		return err
	}
	if o.Lock.Mode.Explicit() {
		lctx, cancel := context.WithTimeout(ctx, o.UploadTimeout)
		info, err := catalog.LockConfigOf(lctx, o.Store)
		cancel()
		switch {
		case err != nil:
			return fmt.Errorf("journal of cluster %s: lock mode %s: reading the bucket's object-lock configuration: %w", o.ClusterID, o.Lock.Mode, err)
		case !info.Enabled:
			return fmt.Errorf("journal of cluster %s: lock mode %s: %s has no object lock, segments cannot be locked", o.ClusterID, o.Lock.Mode, catalog.BucketName(o.Store))
		}
	}
	listed, err := ListSegments(ctx, o.Store, o.Layout, o.ClusterID, o.BaseRev)
	if err != nil {
		return fmt.Errorf("journal of cluster %s: listing its segments: %w", o.ClusterID, err)
	}
	chain := Continuation(o.ClusterID, listed.All, o.BaseRev)
	if chain.Problem != nil {
		return &GapError{ClusterID: o.ClusterID, From: chain.Reach + 1, Reason: "the stored segments do not continue each other", Err: chain.Problem}
	}
	var storedID, prevSum string
	var pendingRevokes []PendingRevoke
	if n := len(chain.Segments); n > 0 {
		last := chain.Segments[n-1]
		h, sum, replaced, err := readWhole(ctx, o.Store, o.Layout, last.Key, o.Identities, Want{ClusterID: o.ClusterID})
		if replaced > 0 {
			o.Log.Error("journal: the last stored segment was written over after the journal wrote it; continuing from the journal's own (earliest) version", "cluster", o.ClusterID, "key", last.Key, "newerVersions", replaced)
		}
		switch {
		case err == nil:
			storedID, prevSum, pendingRevokes = h.EtcdClusterID, sum, h.Revoking
			if h.BaseBackup != o.BaseBackup {
				// Continuation: the base lies inside the chain (its first
				// base pruned by retention); the new segments name it.
				o.Log.Info("journal: continuing a chain started from another backup", "cluster", o.ClusterID, "chainBase", h.BaseBackup, "base", o.BaseBackup, "baseRev", o.BaseRev)
			}
		case o.Identities == nil && errors.Is(err, seal.ErrNoIdentity):
			o.Log.Warn("journal: the last segment is encrypted and no identity was given: resuming on its key's revisions alone (a lease revoke it left pending is not recorded; a restore keeps that lease, on no key, until its TTL ends)", "key", last.Key)
		case IsReason(err, ReasonStore):
			return err
		default:
			return &GapError{ClusterID: o.ClusterID, From: chain.Reach + 1, Reason: "the last stored segment cannot be continued", Err: err}
		}
	}
	c := &capture{o: o, next: chain.Reach + 1, known: map[int64]bool{}, written: map[string]bool{}, prevSum: prevSum}
	c.resumeRevokes(pendingRevokes)
	if err := c.checkStart(ctx, chain.Reach, len(chain.Segments), storedID); err != nil {
		return err
	}
	c.warnEtcdBugs(ctx)
	o.Metrics.captureRunning(o.ClusterID, true, chain.Reach)
	defer o.Metrics.captureRunning(o.ClusterID, false, 0)
	pctx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	go c.pollLeases(pctx)
	c.o.Log.Info("journal: capturing", "cluster", o.ClusterID, "base", o.BaseBackup, "fromRev", c.next, "segments", len(chain.Segments))
	return c.run(ctx)
}

type pending struct {
	h   Header
	raw []byte
	// held is what the segment holds of the Budget, given back once it
	// is stored (or given up).
	held int64
	// events is how many events it holds (for the metrics).
	events int
	// final: the last segment before the capture ends, stored without an
	// upload slot (within FinalFlush, not behind every other cluster's).
	final bool
}

type capture struct {
	o    CaptureOptions
	next int64 // the next revision expected

	// sealedHeld is what the capture's sealed segments not yet stored
	// (or given up) hold of the Budget: a capture with any is not one
	// "holding nothing", which alone may take a message past the limit.
	sealedHeld atomic.Int64

	events   []Event
	size     int64
	started  time.Time // when the buffer's first event arrived
	received map[int64]int64
	lastRecv int64 // unix ms of the last recorded receive
	leases   []Lease
	known    map[int64]bool
	curRev   int64
	curSub   int64
	lastMs   int64 // when the buffer's last revision was received (unix ms)
	// prevRev and prevMs are the revision before the buffer's last and
	// when its last event was received: lastMs again after the last
	// revision is dropped (dropAfter).
	prevRev, prevMs int64
	pauses          int // watches paused for the store
	stopWatch       context.CancelFunc
	upc             chan pending
	errc            chan error

	// revoking are leases found gone on a delete of one of their keys,
	// until the capture passes the revision at which they were found
	// gone (settleRevokes); revoked, those recorded (bounded as known).
	revoking map[int64]*revoke
	// openFrom is the revision the current watch was opened at, until its
	// first answer (0 after it); catchUps the catch-ups not sealed whole
	// yet (Header.CaughtUp), the last one open until the watch syncs.
	openFrom int64
	catchUps []CatchUp
	// openLin receives, once, the cluster's revision read linearizably
	// when the current watch opened (0: the read failed): the watch's
	// own member may be behind the cluster.
	openLin chan int64
	revoked map[int64]bool
	// ttlPending index leases whose lookups failed (settleLeases).
	ttlPending []int
	// granted are the granted TTLs pollLeases learned, by lease ID: a
	// lease that expired before the watch reached its put (a paused or
	// lagging watch) still gets its TTL.
	grantedMu sync.Mutex
	granted   map[int64]int64
	// wd is the current watch's liveness (watchdog.go).
	wd watchdog
	// etcdID is the journaled cluster's etcd ID (lineage.go), recorded in
	// every segment; lineage, a break found by a probe.
	etcdID  string
	lineage error
	// closes counts the watches closed by the client in a row (no event
	// delivered since): their backoff.
	closes int
	// written are the keys of the last segments this capture stored
	// (writtenOrder, oldest first); overlapChecked when the store was last
	// listed for another writer's (checkOverlap).
	written        map[string]bool
	writtenOrder   []writtenSeg
	overlapChecked time.Time
	// prevSum is the last sealed segment's trailer sha256: the next
	// segment's Header.Prev (chain.go).
	prevSum string
	// partial is the buffer's last revision while the watch may still
	// deliver more of it (a fragment others continue, rawwatch.go): the
	// buffer is not sealed until it is whole. 0: none.
	partial int64
	// credit is Budget taken for events not buffered yet (budget.go);
	// budgetWaits counts the waits for it.
	credit      int64
	budgetWaits int
}

func (c *capture) run(ctx context.Context) error {
	defer c.release()
	upCtx, upCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer upCancel()
	c.upc = make(chan pending)
	c.errc = make(chan error, 1)
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		for p := range c.upc {
			err := c.uploadInSlot(upCtx, p)
			c.givePending(p)
			if err == nil {
				err = c.checkOverlap(upCtx, p)
			}
			if err != nil {
				c.errc <- err
				for p := range c.upc { // drop the rest: Capture is failing
					c.givePending(p)
				}
				return
			}
		}
	}()
	// finish hands over what is buffered, within FinalFlush, waits for the
	// uploader, and returns its error or cause.
	finish := func(cause error) error {
		timer := time.NewTimer(c.o.FinalFlush)
		defer timer.Stop()
		// A revision delivered in part is not stored: the next start
		// watches it whole.
		c.dropPartial()
		if len(c.events) > 0 {
			// Fenced: no final flush; the in-flight upload is aborted.
			if err := c.fenced(c.o.Layout.JournalSegmentKey(c.o.ClusterID, c.events[0].Rev, c.events[len(c.events)-1].Rev)); err != nil {
				upCancel()
				close(c.upc)
				<-upDone
				return err
			}
			// No lookups here, within FinalFlush: a revoke that waits
			// for one stays pending in the header, for the next start.
			p, err := c.seal(false)
			if err != nil {
				close(c.upc)
				return err
			}
			p.final = true
			select {
			case c.upc <- p:
			case err := <-c.errc:
				c.givePending(p)
				close(c.upc)
				return err
			case <-timer.C:
				upCancel()
				close(c.upc)
				return c.frozen(p)
			}
		}
		close(c.upc)
		select {
		case <-upDone:
		case <-timer.C:
			upCancel()
			<-upDone
		}
		select {
		case err := <-c.errc:
			return err
		default:
		}
		return cause
	}
	// fail returns the uploader's error.
	fail := func(err error) error {
		close(c.upc)
		return err
	}

	// The watch outlives ctx (wctx): a graceful stop first catches up.
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer wcancel()
	wch := c.watch(wctx)
	defer c.stopWatch()
	tick := time.NewTicker(min(c.o.SegmentInterval/4, time.Second))
	defer tick.Stop()
	for {
		c.o.Metrics.beat(c.o.ClusterID, false)
		select {
		case <-ctx.Done():
			return finish(c.catchUp(wctx, wch))
		case err := <-c.errc:
			return fail(err)
		case <-tick.C:
			if c.checkWatch() || wch == nil {
				wch = c.rewatch(wctx)
			}
			if c.lineage != nil {
				// Nothing received after the probe's start is kept: it
				// may be the new history's, or another cluster's.
				c.trimAfter(c.wd.probeReach)
				return finish(c.lineage)
			}
			if len(c.events) == 0 || c.partial != 0 || ((c.o.Now().Sub(c.started) < c.o.SegmentInterval || c.revokesAhead()) && !c.o.Budget.pressed()) {
				continue
			}
			paused, err := c.handOff(ctx)
			switch {
			case errors.Is(err, errStopping):
				return finish(nil)
			case err != nil:
				return fail(err)
			case paused:
				wch = c.watch(wctx)
			}
		case resp, ok := <-wch:
			if ok && ctx.Err() == nil && resp.CloseErr != nil {
				// Closed on the client's side, not by etcd: the stream
				// broke (a member gone, a message over the receive
				// limit). etcd still holds every revision: watched again
				// from the next one after a backoff (a stall), never a
				// gap.
				now := c.o.Now()
				c.closes++
				c.stalled(now, fmt.Sprintf("the watch's stream broke: %v", resp.err()))
				// Its created notification reset the stall count:
				// the closes back off on their own.
				if at := now.Add(min(200*time.Millisecond<<min(c.closes-1, 8), maxRewatchBackoff)); at.After(c.wd.retryAt) {
					c.wd.retryAt = at
				}
				wch = nil
				continue
			}
			if ok && len(resp.Events) > 0 {
				c.closes = 0
			}
			if ok {
				c.watchResponded(resp.WatchResponse)
				if err := c.checkResponse(resp.WatchResponse); err != nil {
					return finish(err)
				}
				if c.openFrom != 0 && resp.Header.Revision > 0 {
					c.noteCatchUp(resp.Header.Revision)
				}
				c.pollOpenRead()
			}
			if !ok {
				if ctx.Err() != nil {
					return finish(nil)
				}
				return finish(&GapError{ClusterID: c.o.ClusterID, From: c.from(), Reason: "the watch ended"})
			}
			if resp.CompactRevision != 0 {
				return finish(&GapError{ClusterID: c.o.ClusterID, From: c.from(), To: resp.CompactRevision - 1, Reason: fmt.Sprintf("the watch was compacted past (compacted at revision %d)", resp.CompactRevision), Err: resp.err()})
			}
			if resp.Canceled {
				if ctx.Err() != nil {
					return finish(nil)
				}
				return finish(&GapError{ClusterID: c.o.ClusterID, From: c.from(), To: resp.Header.Revision, Reason: "the watch was cancelled", Err: resp.err()})
			}
			// A response holds whole revisions, a fragment perhaps not
			// (Partial: its last revision may go on in the next one); a
			// segment is cut at the first revision's end past
			// SegmentSize, even inside a response (a watch catching up
			// sends up to 1,000 revisions at once), never inside a
			// revision.
			evs := resp.Events
			cont := c.resolvePartial(evs)
			for len(evs) > 0 {
				seal, wait := c.reserve(evs, cont)
				if wait > 0 {
					// No memory left in the process's budget: this
					// message is dropped (not buffered: the next watch
					// delivers it again) and the watch stopped while
					// waiting, so that nothing is held meanwhile.
					c.stopWatch()
					c.wd.wctx = nil
					c.dropCredit()
					if err := c.waitBudget(ctx, wait); err != nil {
						return finish(nil) // stopping while waiting for memory: the final flush
					}
					wch = c.watch(wctx)
					break
				}
				if !seal {
					var err error
					if evs, err = c.add(ctx, evs); err != nil {
						return finish(err)
					}
					c.o.Metrics.reachedRev(c.o.ClusterID, c.next-1)
					cont = false
					if len(evs) == 0 {
						c.notePartial(resp)
					} else {
						c.partial = 0 // cut before a new revision: the buffer is whole
					}
					whole := len(evs) > 0 || c.partial == 0 // cut before a new revision, or a response's end
					if !whole || (c.size < int64(c.o.SegmentSize) && c.o.Now().Sub(c.started) < c.o.SegmentInterval) ||
						(len(evs) == 0 && c.revokesAhead() && !c.o.Budget.pressed()) {
						break
					}
				}
				// Full, due, or no budget left for the rest: hand it over.
				paused, err := c.handOff(ctx)
				if errors.Is(err, errStopping) {
					return finish(nil)
				}
				if err != nil {
					return fail(err)
				}
				if paused {
					// The new watch delivers the rest of this response
					// again, from the next revision.
					wch = c.watch(wctx)
					break
				}
			}
			c.noteSynced(resp.Header.Revision)
		}
	}
}

var errStopping = errors.New("stopping")

// catchUp runs once ctx has ended, before the final flush: what the
// cluster had committed by then is journaled too. The watch delivers
// events a moment after etcd acknowledges them, so without it a write
// acknowledged just before SIGTERM would be in no segment until the next
// start (TestCaptureStopCatchesUp). It reads the cluster's revision, asks
// the watch for a progress notification (an idle watch answers at once),
// and consumes the watch until it has delivered that revision, within
// StopCatchUp (wctx outlives ctx). A cluster that does not answer, a
// watch that ends, or the bound reached: it logs how far it got and
// returns nil; the next start continues from the stored segments, since
// etcd still has the rest.
func (c *capture) catchUp(wctx context.Context, wch watchChan) error {
	if c.o.StopCatchUp < 0 {
		return nil
	}
	if c.o.Fence != nil && c.o.Fence() != nil {
		return nil // fenced: nothing more is written (finish refuses)
	}
	start := c.o.Now()
	bctx, cancel := context.WithTimeout(wctx, c.o.StopCatchUp)
	defer cancel()
	r, err := c.o.Client.Get(bctx, probeKey, clientv3.WithCountOnly())
	if err != nil {
		c.o.Log.Warn("journal: stopping without catching up: the cluster's revision could not be read", "cluster", c.o.ClusterID, "nextRev", c.next, "err", err)
		return nil
	}
	target := r.Header.Revision
	c.o.Metrics.clusterRevision(c.o.ClusterID, target)
	behind := func(why string) error {
		c.o.Log.Warn("journal: stopping before catching up; the next start continues from the stored segments", "cluster", c.o.ClusterID,
			"reason", why, "reachedRev", c.next-1, "clusterRev", target, "took", c.o.Now().Sub(start).Round(time.Millisecond))
		return nil
	}
	caughtUp := func() error {
		c.o.Log.Info("journal: caught up before stopping", "cluster", c.o.ClusterID, "clusterRev", target, "reachedRev", c.next-1,
			"took", c.o.Now().Sub(start).Round(time.Millisecond))
		return nil
	}
	if c.next > target && c.partial == 0 {
		return caughtUp()
	}
	if wch == nil {
		// Between watches (its stream broke, a backoff): one more, for
		// the catch-up, within the same bound.
		wch = c.watch(wctx)
	}
	if c.wd.wctx != nil && c.wd.raw != nil {
		// On the watch's own stream, as the watchdog's probe.
		_ = c.wd.raw.requestProgress()
	}
	for c.next <= target || c.partial != 0 {
		select {
		case <-bctx.Done():
			return behind(fmt.Sprintf("the watch did not deliver the cluster's revision within %s", c.o.StopCatchUp))
		case resp, ok := <-wch:
			switch {
			case !ok:
				return behind("the watch ended")
			case resp.Canceled || resp.CompactRevision != 0:
				return behind(fmt.Sprintf("the watch was cancelled (compacted at %d): %v", resp.CompactRevision, resp.err()))
			}
			c.watchResponded(resp.WatchResponse)
			if err := c.checkResponse(resp.WatchResponse); err != nil {
				return err // another history: nothing of it is buffered
			}
			// As in the loop: a watch's first answer, and its catch-up
			// closing, are recorded here too.
			if c.openFrom != 0 && resp.Header.Revision > 0 {
				c.noteCatchUp(resp.Header.Revision)
			}
			c.pollOpenRead()
			if resp.IsProgressNotify() && resp.Header.Revision >= target && c.partial == 0 {
				c.noteSynced(resp.Header.Revision)
				return caughtUp() // every event up to it delivered
			}
			cont := c.resolvePartial(resp.Events)
			for evs := resp.Events; len(evs) > 0; {
				seal, wait := c.reserve(evs, cont)
				if wait > 0 {
					return behind("no memory left in the journal's budget")
				}
				if !seal {
					if evs, err = c.add(bctx, evs); err != nil {
						return err
					}
					c.o.Metrics.reachedRev(c.o.ClusterID, c.next-1)
					cont = false
				}
				if len(evs) == 0 {
					c.notePartial(resp)
					break
				}
				c.partial = 0 // cut before a new revision: the buffer is whole
				// The buffer is full: hand it over as in the loop.
				paused, err := c.handOff(bctx)
				switch {
				case errors.Is(err, errStopping):
					return behind("the store is behind (the last segment handed over within the final flush)")
				case err != nil:
					return err
				case paused:
					return behind("the store is behind")
				}
			}
			c.noteSynced(resp.Header.Revision)
		}
	}
	return caughtUp()
}

// handOff seals the buffer and hands it to the uploader. When the uploader
// is busy (the store is slower than the cluster) it stops the watch while
// it waits, since clientv3 would buffer the events unboundedly, and
// reports paused: the caller watches again from the next revision. When
// ctx ends while it waits it still hands the segment over (errStopping:
// the caller finishes) within FinalFlush.
func (c *capture) handOff(ctx context.Context) (paused bool, err error) {
	p, err := c.seal(true)
	if err != nil {
		return false, err
	}
	select {
	case c.upc <- p: // the uploader was idle
		return false, nil
	default:
	}
	c.stopWatch()
	c.dropCredit() // the rest of the message is delivered again by the next watch
	c.pauses++
	c.o.Log.Debug("journal: store behind; watch paused", "cluster", c.o.ClusterID, "nextRev", c.next)
	select {
	case c.upc <- p:
		return true, nil
	case err := <-c.errc:
		c.givePending(p)
		return true, err
	case <-ctx.Done():
	}
	timer := time.NewTimer(c.o.FinalFlush)
	defer timer.Stop()
	select {
	case c.upc <- p:
		return true, errStopping
	case err := <-c.errc:
		c.givePending(p)
		return true, err
	case <-timer.C:
		return true, c.frozen(p)
	}
}

// givePending gives back what a sealed segment held of the Budget, once
// it is stored or given up.
func (c *capture) givePending(p pending) {
	c.o.Budget.give(p.held)
	c.sealedHeld.Add(-p.held)
}

func (c *capture) frozen(p pending) error {
	c.givePending(p)
	return &SegmentError{Key: c.o.Layout.JournalSegmentKey(c.o.ClusterID, p.h.FirstRev, p.h.LastRev), Reason: ReasonStore,
		Detail: fmt.Sprintf("not handed to the store within %s of the journal stopping (store frozen)", c.o.FinalFlush)}
}

// watch watches the whole keyspace from the next revision, until
// stopWatch or ctx ends, on a gRPC stream of its own (watchCtx); its
// creation is notified (the first sign it is alive, checkWatch).
func (c *capture) watch(ctx context.Context) watchChan {
	c.dropPartial()
	wctx, cancel := c.watchCtx(ctx)
	c.stopWatch = cancel
	wch, rw := openRawWatch(wctx, c.o.Client, c.next)
	c.wd.raw = rw
	c.openFrom = c.from()
	c.openLin = nil
	if cli := c.o.Client; cli != nil {
		ch := make(chan int64, 1)
		c.openLin = ch
		go func() {
			// Until it answers: a failed read (no quorum within the
			// bound) says nothing, and the catch-up stays open.
			for {
				rctx, cancel := context.WithTimeout(wctx, openReadTimeout)
				r, err := cli.Get(rctx, probeKey, clientv3.WithCountOnly())
				cancel()
				if err == nil {
					ch <- r.Header.Revision
					return
				}
				select {
				case <-wctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}()
	}
	return wch
}

// openReadTimeout bounds the linearizable read of the cluster's revision
// made when a watch opens (capture.openLin).
const openReadTimeout = 2 * time.Second

// noteCatchUp records, at a watch's first answer, an open catch-up from
// the revision the watch opened at: the revisions etcd had committed by
// then are received from now on, behind any committed meanwhile, until
// the watch has delivered every revision up to a response's own revision
// and up to the cluster's revision read when it opened (noteSynced closes
// it, or drops it when there was nothing to catch up). The answer's own
// revision is its member's, which may be behind the cluster. A catch-up
// that continues the one before is merged into it.
func (c *capture) noteCatchUp(head int64) {
	from := c.openFrom
	c.openFrom = 0
	if from == 0 {
		return
	}
	if n := len(c.catchUps); n > 0 && from <= c.catchUps[n-1].To+1 {
		last := &c.catchUps[n-1]
		last.To, last.Open = max(last.To, head), true
		return
	}
	c.catchUps = append(c.catchUps, CatchUp{From: from, To: max(head, from-1), Open: true})
	if len(c.catchUps) > maxCatchUps {
		all := CatchUp{From: c.catchUps[0].From}
		for _, v := range c.catchUps {
			all.To, all.At, all.Open = max(all.To, v.To), max(all.At, v.At), all.Open || v.Open
		}
		c.catchUps = []CatchUp{all}
	}
}

// noteSynced closes the open catch-up once the watch has delivered every
// revision up to a response's header revision (head: its member's
// revision when it sent the response) and up to the cluster's revision
// read when the watch opened: everything to there was committed by now,
// and what comes after is received live. One that caught nothing up (the
// cluster had not moved) is dropped.
func (c *capture) noteSynced(head int64) {
	n := len(c.catchUps)
	if n == 0 || !c.catchUps[n-1].Open || head <= 0 || c.openFrom != 0 || c.openLin != nil {
		return // the cluster's revision not read yet
	}
	u := &c.catchUps[n-1]
	u.To = max(u.To, head)
	c.closeCatchUp(c.o.Now().UnixMilli())
}

// pollOpenRead takes the cluster's revision read when the watch opened,
// once it has come, before a response's events are added: judged against
// what the watch had delivered by then, a catch-up with nothing to catch
// up is dropped, and one delivered whole is closed (at the last
// revision's receive time), before a live revision after it could be
// taken for part of it.
func (c *capture) pollOpenRead() {
	if c.openLin == nil || c.openFrom != 0 {
		return
	}
	select {
	case v := <-c.openLin:
		c.openLin = nil
		if n := len(c.catchUps); n > 0 && c.catchUps[n-1].Open {
			u := &c.catchUps[n-1]
			u.To = max(u.To, v)
			c.closeCatchUp(c.lastMs)
		}
	default:
	}
}

// closeCatchUp closes the open catch-up at at (unix ms) once the watch has
// delivered every revision to its To, or drops it when that is before its
// From (nothing to catch up).
func (c *capture) closeCatchUp(at int64) {
	n := len(c.catchUps)
	u := &c.catchUps[n-1]
	if c.next-1 < u.To {
		return
	}
	if u.To < u.From {
		c.catchUps = c.catchUps[:n-1]
		return
	}
	u.At, u.Open = max(at, 1), false
}

// sealCatchUps are the catch-ups of a segment of revisions first to last;
// those that go on past it stay for the next.
func (c *capture) sealCatchUps(first, last int64) []CatchUp {
	var in, rest []CatchUp
	for _, u := range c.catchUps {
		if u.From <= last && (u.Open || u.To >= first) {
			if u.Open {
				u.To = max(u.To, u.From) // etcd's revision as last seen; at least From, delivered
			}
			in = append(in, u)
		}
		if u.Open || u.To > last {
			rest = append(rest, u)
		}
	}
	c.catchUps = rest
	return in
}

// from is the first revision not journaled whole yet: the next one, or
// the revision a fragment left open (dropped if the watch ends now).
func (c *capture) from() int64 {
	if c.partial != 0 {
		return c.partial
	}
	return c.next
}

// dropCredit gives back the budget taken for a message that will not be
// buffered (the watch stopped: the next one delivers it again), so that an
// idle or waiting capture holds none.
func (c *capture) dropCredit() {
	c.o.Budget.give(c.credit)
	c.credit = 0
}

// resolvePartial looks at a message's first event: when the buffer's last
// revision was left open by a fragment (partial) and this message does
// not continue it, the buffer is whole after all. It reports whether the
// message continues the buffer's revision (its events must be taken
// whatever the budget says: the buffer cannot be sealed before them).
func (c *capture) resolvePartial(evs []*clientv3.Event) (cont bool) {
	if c.partial == 0 || len(evs) == 0 {
		return false
	}
	if evs[0].Kv.ModRevision == c.partial {
		return true
	}
	c.partial = 0
	return false
}

// notePartial notes whether the buffer's last revision may go on in the
// watch's next message (a fragment that others continue), once the
// message's events are all buffered.
func (c *capture) notePartial(resp watchResp) {
	if n := len(resp.Events); n > 0 {
		c.partial = 0
		if resp.Partial {
			c.partial = resp.Events[n-1].Kv.ModRevision
		}
	}
}

// dropPartial drops the buffered events of a revision that a fragment
// left incomplete when its watch ended before the rest came: the next
// watch delivers the whole revision again, from it.
func (c *capture) dropPartial() {
	rev := c.partial
	if rev == 0 {
		return
	}
	c.partial = 0
	for _, l := range c.leases {
		if l.Rev >= rev {
			delete(c.known, l.ID) // recorded again with the revision
		}
	}
	n := c.dropAfter(rev - 1)
	c.next = rev
	c.o.Log.Debug("journal: a revision the watch delivered in part is watched again", "cluster", c.o.ClusterID, "rev", rev, "dropped", n)
}

// add buffers events of a watch response up to the end of the first
// revision that takes the buffer past SegmentSize, and returns the rest.
func (c *capture) add(ctx context.Context, evs []*clientv3.Event) ([]*clientv3.Event, error) {
	now := c.o.Now()
	ms := now.UnixMilli()
	if len(c.events) == 0 {
		c.started = now
		c.received = map[int64]int64{evs[0].Kv.ModRevision: ms}
		c.lastRecv = ms
	}
	for i, ev := range evs {
		kv := ev.Kv
		rev := kv.ModRevision
		switch {
		case rev == c.curRev && len(c.events) > 0 && c.events[len(c.events)-1].Rev == rev:
			c.curSub++
		case rev == c.next:
			if len(c.events) > 0 && c.size >= int64(c.o.SegmentSize) {
				return evs[i:], nil // cut here, at the previous revision's end
			}
			if len(c.events) > 0 {
				c.prevRev, c.prevMs = c.curRev, c.lastMs
			}
			c.curRev, c.curSub = rev, 0
			c.next = rev + 1
			c.settleRevokes(rev-1, false)
			if ms-c.lastRecv >= ReceivedEvery.Milliseconds() {
				// The revision before, received at lastMs, too: a revision
				// left out (within ReceivedEvery of the one recorded
				// before it) would otherwise take that one's time until
				// the next recorded, seconds later.
				if prev := rev - 1; len(c.events) > 0 && prev >= c.events[0].Rev && c.received[prev] == 0 {
					c.received[prev] = c.lastMs
				}
				c.received[rev] = ms
				c.lastRecv = ms
			}
		default:
			return nil, &GapError{ClusterID: c.o.ClusterID, From: c.from(), To: rev - 1, Reason: fmt.Sprintf("the watch delivered revision %d after %d", rev, c.next-1)}
		}
		e := Event{Rev: rev, Sub: c.curSub, Key: kv.Key}
		if ev.Type == mvccpb.DELETE {
			e.Type = Delete
			if ev.PrevKv != nil && ev.PrevKv.Lease != 0 {
				c.leaseKeyDeleted(ctx, ev.PrevKv.Lease, rev)
			}
		} else {
			e.Type, e.Value, e.CreateRev, e.Version, e.Lease = Put, kv.Value, kv.CreateRevision, kv.Version, kv.Lease
			if kv.Lease != 0 && !c.known[kv.Lease] {
				c.lease(ctx, kv.Lease, rev)
			}
		}
		c.events = append(c.events, e)
		cost := eventCost(e.Key, e.Value)
		c.size += cost
		c.credit -= cost
		c.lastMs = ms
	}
	return nil, nil
}

func (c *capture) lease(ctx context.Context, id, rev int64) {
	if len(c.known) >= maxKnownLeases {
		clear(c.known)
	}
	c.known[id] = true
	l := Lease{ID: id, Rev: rev}
	c.grantedMu.Lock()
	ttl, ok := c.granted[id]
	c.grantedMu.Unlock()
	if ok {
		l.TTL = ttl
		c.leases = append(c.leases, l)
		return
	}
	resp, err := c.timeToLive(ctx, id)
	switch {
	case err != nil:
		// Looked up again when the segment is sealed (settleLeases).
		l.TTLUnknown = true
		c.ttlPending = append(c.ttlPending, len(c.leases))
		c.o.Log.Warn("journal: lease lookup failed twice; again when its segment is sealed", "cluster", c.o.ClusterID, "lease", fmt.Sprintf("%x", id), "err", err)
	case resp.TTL > 0 || resp.GrantedTTL > 0:
		l.TTL = resp.GrantedTTL
	default: // gone already: the deletes of its keys follow
		l.TTLUnknown = true
		c.o.Log.Info("journal: lease gone before its TTL was learned; recorded unknown (a replay gives it UnknownLeaseTTL)", "cluster", c.o.ClusterID, "lease", fmt.Sprintf("%x", id), "rev", rev)
	}
	c.leases = append(c.leases, l)
}

// settleLeases fills in, before a segment is sealed, the TTLs whose
// lookups failed: from what pollLeases learned meanwhile, else one more
// lookup (none after one fails: the cluster is not answering, and the
// seal waits leaseRetryTimeout at most); still unknown, the record says
// so (TTLUnknown).
func (c *capture) settleLeases(ctx context.Context) {
	answering := true
	for _, i := range c.ttlPending {
		l := &c.leases[i]
		c.grantedMu.Lock()
		ttl, ok := c.granted[l.ID]
		c.grantedMu.Unlock()
		if !ok && answering {
			lctx, cancel := context.WithTimeout(ctx, leaseRetryTimeout)
			resp, err := c.o.Client.TimeToLive(lctx, clientv3.LeaseID(l.ID))
			cancel()
			answering = err == nil
			if err == nil && resp.GrantedTTL > 0 {
				ttl, ok = resp.GrantedTTL, true
			}
		}
		if ok {
			l.TTL, l.TTLUnknown = ttl, false
			continue
		}
		c.o.Log.Warn("journal: lease TTL still unknown at the segment's end; recorded unknown (a replay gives it UnknownLeaseTTL)", "cluster", c.o.ClusterID, "lease", fmt.Sprintf("%x", l.ID))
	}
	c.ttlPending = c.ttlPending[:0]
}

// pollLeases learns the granted TTL of every lease of the cluster, every
// leasePollEvery (at most SegmentInterval), independently of the watch:
// Leases, then TimeToLive of each new one. A lease living longer than
// that is known even when it expires before the watch reaches its keys.
// Failures are retried at the next poll; at most maxKnownLeases are kept.
func (c *capture) pollLeases(ctx context.Context) {
	every := min(leasePollEvery, c.o.SegmentInterval)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, leaseLookupTimeout)
		resp, err := c.o.Client.Leases(lctx)
		cancel()
		if err == nil {
			for _, l := range resp.Leases {
				c.grantedMu.Lock()
				_, ok := c.granted[int64(l.ID)]
				c.grantedMu.Unlock()
				if ok {
					continue
				}
				lctx, cancel := context.WithTimeout(ctx, leaseLookupTimeout)
				ttl, err := c.o.Client.TimeToLive(lctx, l.ID)
				cancel()
				if err != nil || ttl.GrantedTTL <= 0 {
					continue
				}
				c.grantedMu.Lock()
				if c.granted == nil || len(c.granted) >= maxKnownLeases {
					c.granted = map[int64]int64{}
				}
				c.granted[int64(l.ID)] = ttl.GrantedTTL
				c.grantedMu.Unlock()
			}
		} else if ctx.Err() == nil {
			c.o.Log.Debug("journal: listing leases failed; again at the next poll", "cluster", c.o.ClusterID, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// timeToLive looks a lease up, retrying once with a shorter deadline.
func (c *capture) timeToLive(ctx context.Context, id int64) (*clientv3.LeaseTimeToLiveResponse, error) {
	lctx, cancel := context.WithTimeout(ctx, leaseLookupTimeout)
	resp, err := c.o.Client.TimeToLive(lctx, clientv3.LeaseID(id))
	cancel()
	if err == nil || ctx.Err() != nil {
		return resp, err
	}
	lctx, cancel = context.WithTimeout(ctx, leaseRetryTimeout)
	defer cancel()
	return c.o.Client.TimeToLive(lctx, clientv3.LeaseID(id))
}

// revoke is a lease found gone on a delete of one of its keys.
type revoke struct {
	seenGone int64 // the cluster's revision when it was found gone; -1: to look up again
	last     int64 // the last revision seen deleting one of its keys
	prev     int64 // the one before last's revision, if any: where a dropped partial revision leaves it
	sealed   int64 // the Last the latest sealed header carried: where a longer trim leaves it
	// resumed: carried by the stored segment the capture resumed after,
	// not placed before a lookup of this process finds the lease gone.
	resumed bool
}

// leaseKeyDeleted notes the delete at rev of a key that held lease id:
// while the lease lives (or its lookup fails) nothing is recorded; once
// it is found gone, its revoke is pending until settleRevokes.
func (c *capture) leaseKeyDeleted(ctx context.Context, id, rev int64) {
	if r := c.revoking[id]; r != nil {
		if rev != r.last {
			r.prev = r.last
		}
		r.last = rev
		return
	}
	if c.revoked[id] {
		return
	}
	if c.revoking == nil {
		c.revoking = map[int64]*revoke{}
	}
	if len(c.revoking) >= maxPendingRevokes {
		// Every header carries them: bounded. Unrecorded, the lease is
		// kept by a restore, on no key, until its TTL ends.
		c.o.Log.Warn("journal: too many lease revokes pending; this one is not recorded", "cluster", c.o.ClusterID, "lease", fmt.Sprintf("%x", id), "rev", rev, "pending", len(c.revoking))
		return
	}
	if c.lookupFailed() >= maxLookupFailedRevokes {
		// etcd has not been answering lookups: none is made (each would
		// hold the watch for seconds) until the seals' drain them.
		c.o.Log.Warn("journal: too many lease lookups waiting to be made again; this delete of a leased key is not looked up", "cluster", c.o.ClusterID, "lease", fmt.Sprintf("%x", id), "rev", rev)
		return
	}
	resp, err := c.timeToLive(ctx, id)
	var gone int64
	state := leaseExpiring
	if err == nil {
		if state = leaseStateOf(resp); state == leaseGone {
			gone, err = c.goneAt(ctx, resp, rev)
		}
	}
	switch {
	case err != nil:
		// Looked up again when the segment is sealed (settleRevokes).
		c.o.Log.Warn("journal: lease lookup after a delete of its key failed; again when its segment is sealed", "cluster", c.o.ClusterID, "lease", fmt.Sprintf("%x", id), "rev", rev, "err", err)
		c.revoking[id] = &revoke{seenGone: -1, last: rev}
	case state == leaseAlive:
		// An explicit delete.
	case state == leaseExpiring:
		// Expired, its revoke not applied yet: looked up again.
		c.revoking[id] = &revoke{seenGone: -1, last: rev}
	default:
		c.revoking[id] = &revoke{seenGone: gone, last: rev}
	}
}

// What a lease lookup (TimeToLive) says of a lease.
const (
	leaseAlive    = iota
	leaseGone     // not found: revoked, or expired and its revoke applied
	leaseExpiring // expired (TTL 0 or less, its granted TTL known), its revoke not applied yet
)

// leaseStateOf reads a lookup. etcd answers a lease it does not hold
// with TTL -1 and no granted TTL; one past its expiry whose revoke is
// not applied yet (the revoke rate limit, the expiry loop) with what
// remains of it, rounded, 0 or -1, and its granted TTL: taken as gone,
// its revoke would be placed before its deletes.
func leaseStateOf(resp *clientv3.LeaseTimeToLiveResponse) int {
	switch {
	case resp.TTL == -1 && resp.GrantedTTL == 0:
		return leaseGone
	case resp.TTL <= 0:
		return leaseExpiring
	}
	return leaseAlive
}

// lookupFailed counts the pending revokes waiting for a lookup again.
func (c *capture) lookupFailed() int {
	n := 0
	for _, r := range c.revoking {
		if r.seenGone < 0 {
			n++
		}
	}
	return n
}

// goneAt is the revision at which a lookup found a lease gone: at least
// the cluster's revision read linearizably after it. The lookup's own
// header may be lower: it is the revision of the member that took the
// call (a follower may lag), and etcd's lessor drops a revoked lease
// before the revoke's deletes are committed to the key-value store. A
// linearizable read waits for every entry applied before it, the
// revoke's among them; understated, a revoke would be placed at an
// earlier explicit delete of one of its keys, and a restore between the
// two would take the lease from under its other keys.
func (c *capture) goneAt(ctx context.Context, resp *clientv3.LeaseTimeToLiveResponse, rev int64) (int64, error) {
	lctx, cancel := context.WithTimeout(ctx, leaseLookupTimeout)
	defer cancel()
	g, err := c.o.Client.Get(lctx, probeKey, clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	gone := max(rev, g.Header.Revision)
	if resp.ResponseHeader != nil {
		gone = max(gone, resp.Revision)
	}
	return gone, nil
}

// revokesAhead reports whether a lease found gone waits for the watch to
// reach the revision it was found gone at: its revoke is recorded once
// the capture holds every revision up to there (a later delete of one of
// its keys may be the revoke's own). The buffer is held meanwhile, not
// sealed, for one SegmentInterval more at most, so that the revoke is
// usually placed in the segment holding its deletes. Past the hold (and
// under memory pressure, or cut by size) the segment carries it as
// pending in its header: a capture killed after storing it resumes with
// it (resumeRevokes). Before, a revoke pending at a seal lived only in
// memory, and a killed capture never recorded it (the restore kept the
// lease, on no key: TestPointInTimeRestoreExact saw one).
func (c *capture) revokesAhead() bool {
	if len(c.revoking) == 0 || len(c.events) == 0 || c.o.Now().Sub(c.started) >= 2*c.o.SegmentInterval {
		return false
	}
	for _, r := range c.revoking {
		// Only for a revoke whose deletes are in the buffer: one whose
		// deletes are stored already is in their segment's header.
		if r.seenGone > c.next-1 && r.last >= c.events[0].Rev {
			return true
		}
	}
	return false
}

// settleRevokes records the pending revokes found gone at or before done,
// the last revision fully captured: no key of theirs can be deleted after.
// With recheck (a seal), the leases whose lookup failed are looked up
// again (none after one fails, maxRevokeLookups at most;
// leaseRetryTimeout each): gone, they are pending as the others; alive,
// their deletes were explicit.
func (c *capture) settleRevokes(done int64, recheck bool) {
	answering := true
	lookups := 0
	for id, r := range c.revoking {
		if (r.seenGone < 0 || r.resumed) && recheck && answering && lookups < maxRevokeLookups {
			lookups++
			lctx, cancel := context.WithTimeout(context.Background(), leaseRetryTimeout)
			resp, err := c.o.Client.TimeToLive(lctx, clientv3.LeaseID(id))
			cancel()
			var gone int64
			state := leaseExpiring
			if err == nil {
				if state = leaseStateOf(resp); state == leaseGone {
					gone, err = c.goneAt(context.Background(), resp, r.last)
				}
			}
			switch {
			case err != nil:
				answering = false
			case state == leaseAlive:
				if r.resumed {
					c.o.Log.Warn("journal: a lease revoke the last segment left pending is of a live lease; dropped", "cluster", c.o.ClusterID, "lease", fmt.Sprintf("%x", id), "last", r.last)
				}
				delete(c.revoking, id)
				continue
			case state == leaseGone:
				// A resumed revision past the cluster's (a wrong header)
				// would never be reached: the cluster's then.
				r.resumed = false
				if r.seenGone < 0 || r.seenGone > gone {
					r.seenGone = gone
				}
			}
		}
		if r.seenGone < 0 || r.resumed || r.seenGone > done {
			continue
		}
		c.leases = append(c.leases, Lease{ID: id, Rev: r.last, Revoked: r.last, TTLUnknown: true})
		delete(c.revoking, id)
		if c.revoked == nil || len(c.revoked) >= maxKnownLeases {
			c.revoked = map[int64]bool{}
		}
		c.revoked[id] = true
	}
}

// resumeRevokes goes on with the revokes the last stored segment left
// pending (Header.Revoking), at the revisions it found them gone at: each
// is looked up at the next seal before it is placed (resumed), and a
// lease found alive is dropped (a header naming a live lease, wrong or
// forged, would take it from under its keys in every restore after). One
// whose lookup had failed is looked up as if this process had.
func (c *capture) resumeRevokes(rs []PendingRevoke) {
	if len(rs) == 0 {
		return
	}
	c.revoking = make(map[int64]*revoke, len(rs))
	for _, r := range rs {
		c.revoking[r.ID] = &revoke{seenGone: r.SeenGone, last: r.Last, sealed: r.Last, resumed: true}
	}
	c.o.Log.Info("journal: going on with the lease revokes the last segment left pending", "cluster", c.o.ClusterID, "leases", len(rs))
}

// pendingRevokes are the revokes not placed at the seal of a segment
// ending at last, for its header, in lease order.
func (c *capture) pendingRevokes(last int64) []PendingRevoke {
	var out []PendingRevoke
	for id, r := range c.revoking {
		l := r.last
		if l > last {
			// Its last delete was in a revision dropped from the buffer
			// (received again, or a lineage trim): the one before, else
			// what the latest header carried.
			l = r.prev
			if l > last || l < 1 {
				l = r.sealed
			}
		}
		if l < 1 || l > last {
			continue
		}
		r.sealed = l
		gone := r.seenGone
		if gone <= last {
			// Passed but not placed: resumed, its lookup not made yet
			// (or failed). The next start looks it up as a failed one.
			gone = -1
		}
		out = append(out, PendingRevoke{ID: id, Last: l, SeenGone: gone})
	}
	slices.SortFunc(out, func(a, b PendingRevoke) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// seal encodes the buffer into a segment and empties it. The revokes
// still pending go into its header: stored with the deletes they follow,
// so that neither a capture killed after the upload nor a replay that
// stops at the segment loses them.
func (c *capture) seal(recheck bool) (pending, error) {
	first, last := c.events[0].Rev, c.events[len(c.events)-1].Rev
	c.settleRevokes(last, recheck)
	c.settleLeases(context.Background())
	c.received[last] = c.lastMs
	h := Header{
		ClusterID: c.o.ClusterID, BaseBackup: c.o.BaseBackup, BaseRev: c.o.BaseRev,
		FirstRev: first, LastRev: last, Received: c.received, Leases: c.leases, EtcdClusterID: c.etcdID, Prev: c.prevSum,
		Revoking: c.pendingRevokes(last), CaughtUp: c.sealCatchUps(first, last),
	}
	raw, sum, err := encodeSegment(h, c.events)
	held, events := c.size, len(c.events)
	c.events, c.size, c.received, c.leases = nil, 0, nil, nil
	if err != nil {
		c.o.Budget.give(held)
		return pending{}, err
	}
	c.prevSum = sum
	h.Format, h.Events = formatOf(h), 0
	c.sealedHeld.Add(held)
	return pending{h: h, raw: raw, held: held, events: events}, nil
}

// uploadInSlot is upload in one of the Budget's upload slots.
func (c *capture) uploadInSlot(ctx context.Context, p pending) error {
	if p.final {
		return c.upload(ctx, p)
	}
	c.o.Metrics.beat(c.o.ClusterID, true) // waiting for a slot: bounded by the other uploads
	done, err := c.o.Budget.upload(ctx)
	c.o.Metrics.beat(c.o.ClusterID, false)
	if err != nil {
		return &SegmentError{Key: c.o.Layout.JournalSegmentKey(c.o.ClusterID, p.h.FirstRev, p.h.LastRev), Reason: ReasonStore, Detail: "waiting for an upload slot", Err: err}
	}
	defer done()
	return c.upload(ctx, p)
}

// upload writes one segment, retrying with a jittered backoff (Backoff)
// for FrozenAfter.
func (c *capture) upload(ctx context.Context, p pending) error {
	key := c.o.Layout.JournalSegmentKey(c.o.ClusterID, p.h.FirstRev, p.h.LastRev)
	began := time.Now()
	// Jittered: every cluster's journal retries at its own moments.
	backoff := NewBackoff(200*time.Millisecond, 10*time.Second)
	c.o.Metrics.uploadStarted(c.o.ClusterID)
	for attempt := 1; ; attempt++ {
		if err := c.fenced(key); err != nil {
			c.o.Metrics.uploadEnded(c.o.ClusterID, nil, 0)
			return err
		}
		actx, cancel := context.WithTimeout(ctx, c.o.UploadTimeout)
		var put objectio.PutOptions
		if until := retention.SegmentLockUntil(c.o.Now(), c.o.JournalRetention, c.o.Lock); !until.IsZero() {
			put.Retention = &store.Retention{Mode: c.o.Lock.Mode.StoreMode(), Until: until}
		}
		info, err := writeRaw(actx, c.o.Store, key, p.h, p.raw, c.o.Encoding, put)
		cancel()
		if err == nil || (attempt > 1 && IsReason(err, ReasonConflict)) {
			if err != nil {
				// An earlier attempt stored it and only its answer was lost.
				c.o.Log.Warn("journal: segment found stored on a retry; taken as written", "key", key, "attempt", attempt)
			}
			c.o.Log.Debug("journal: segment written", "key", key, "bytes", info.Size, "attempts", attempt)
			c.o.Metrics.uploadEnded(c.o.ClusterID, &info, p.events)
			if c.o.OnSegment != nil {
				c.o.OnSegment(info)
			}
			return nil
		}
		c.o.Metrics.uploadFailed(c.o.ClusterID)
		if IsReason(err, ReasonConflict) {
			c.o.Metrics.uploadEnded(c.o.ClusterID, nil, 0)
			return err
		}
		elapsed := time.Since(began)
		if ctx.Err() != nil || elapsed >= c.o.FrozenAfter {
			c.o.Metrics.uploadEnded(c.o.ClusterID, nil, 0)
			return &SegmentError{Key: key, Reason: ReasonStore, Detail: fmt.Sprintf("not written after %d attempts over %s (store frozen or refusing)", attempt, elapsed.Round(time.Millisecond)), Err: errors.Unwrap(err)}
		}
		wait := backoff.Next()
		c.o.Log.Warn("journal: segment upload failed; retrying", "key", key, "attempt", attempt, "retryIn", wait, "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
}

// ReasonFenced is a segment not written because CaptureOptions.Fence
// refused it: this journal may no longer own the cluster (its leadership
// was lost or not renewed in time), so another writer may.
const ReasonFenced Reason = "fenced"

// fenced asks Fence before a write of key.
func (c *capture) fenced(key string) error {
	if c.o.Fence == nil {
		return nil
	}
	if err := c.o.Fence(); err != nil {
		return &SegmentError{Key: key, Reason: ReasonFenced,
			Detail: fmt.Sprintf("not written: the journal of cluster %s stopped at once, another writer may own the cluster", c.o.ClusterID), Err: err}
	}
	return nil
}

// trimAfter drops the buffered events after revision rev (a lineage
// break found by a probe that started when the watch had delivered rev:
// what came after may be the new history's).
func (c *capture) trimAfter(rev int64) {
	if n := c.dropAfter(rev); n > 0 {
		c.o.Log.Warn("journal: events received after the cluster was found to have gone back are not stored", "cluster", c.o.ClusterID,
			"from", rev+1, "dropped", n)
	}
}

// dropAfter drops the buffered events after revision rev, with their
// receive times and lease records, and returns how many it dropped.
func (c *capture) dropAfter(rev int64) int {
	n := len(c.events)
	for n > 0 && c.events[n-1].Rev > rev {
		n--
	}
	dropped := len(c.events) - n
	if dropped == 0 {
		return 0
	}
	var freed int64
	for _, e := range c.events[n:] {
		freed += eventCost(e.Key, e.Value)
	}
	c.size -= freed
	c.o.Budget.give(freed)
	c.events = c.events[:n]
	if n > 0 {
		c.curRev, c.curSub = c.events[n-1].Rev, c.events[n-1].Sub
	}
	for r := range c.received {
		if r > rev {
			delete(c.received, r)
		}
	}
	// The receive times of what is left: the last revision's own (the
	// seal records it), and the latest recorded.
	c.lastRecv = 0
	for _, ms := range c.received {
		c.lastRecv = max(c.lastRecv, ms)
	}
	if n > 0 {
		if c.events[n-1].Rev == c.prevRev {
			c.lastMs = c.prevMs
		} else if at, ok := c.received[c.events[n-1].Rev]; ok {
			c.lastMs = at
		}
		// Else a trim of several revisions (a lineage break): lastMs
		// stays the dropped one's, later than the last kept revision's
		// (a time between maps to the revision before: older, never a
		// revision received after the time).
	}
	pending := map[int]bool{}
	for _, i := range c.ttlPending {
		pending[i] = true
	}
	leases, ttl := c.leases[:0], c.ttlPending[:0]
	for i, l := range c.leases {
		if l.Rev <= rev {
			if pending[i] {
				ttl = append(ttl, len(leases)) // still looked up again at the seal
			}
			leases = append(leases, l)
		}
	}
	c.leases, c.ttlPending = leases, ttl
	return dropped
}
