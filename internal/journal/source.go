package journal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
)

// Source is a cluster's journal as stored: the segments under
// layout.JournalPrefix(clusterID), read through OpenSegment (decrypted
// with ids, every check of the Decoder). It is restore's JournalSource
// (Leases, Events) for a point-in-time restore, and maps times to
// revisions (RevisionAt).
type Source struct {
	st        store.Store
	layout    catalog.Layout
	clusterID string
	ids       *seal.Identities
	sourceState
}

// NewSource is the journal of clusterID in st.
func NewSource(st store.Store, layout catalog.Layout, clusterID string, ids *seal.Identities) *Source {
	return &Source{st: st, layout: layout, clusterID: clusterID, ids: ids}
}

// ErrNoJournal is a cluster without a stored segment.
var ErrNoJournal = errors.New("no journal")

// Cover is the chain of stored segments holding revision from and the
// revisions after it: it starts at the segment holding from (a segment
// may start before it: a snapshot's revision is at or above its
// manifest's, so a replay may start inside the first segment) and
// continues while each segment starts where the last ended. Of several
// chains holding from, the one reaching furthest. Its Reach is the last
// revision reachable exactly from from, and its Problem the break after
// it, if any. No segment holding from is an error naming what the journal
// holds.
func (s *Source) Cover(ctx context.Context, from int64) (*Chain, error) {
	all, err := s.listing(ctx)
	if err != nil {
		return nil, err
	}
	if len(all.All) == 0 {
		return nil, fmt.Errorf("%w of cluster %s under %s", ErrNoJournal, s.clusterID, s.layout.JournalPrefix(s.clusterID))
	}
	var best *Chain
	for _, seg := range all.All {
		if seg.FirstRev > from || seg.LastRev < from {
			continue
		}
		c := &Chain{ClusterID: s.clusterID, BaseRev: seg.FirstRev - 1, Reach: seg.FirstRev - 1, All: all.All}
		c.chain()
		c.capAtConflict(from)
		if best == nil || c.Reach > best.Reach {
			best = c
		}
	}
	if best == nil {
		lo, hi := all.All[0].FirstRev, all.All[0].LastRev
		for _, seg := range all.All {
			lo, hi = min(lo, seg.FirstRev), max(hi, seg.LastRev)
		}
		return nil, fmt.Errorf("the journal of cluster %s holds no segment with revision %d (its segments hold revisions %d to %d, not all continuous)",
			s.clusterID, from, lo, hi)
	}
	return best, nil
}

// capAtConflict ends the chain before the first revision from from on
// that another stored segment holds too (a segment the chain passed over,
// or another holding from): two chains of segments hold those revisions,
// from two writers or a forged key that straddles the journal's own
// segments, and a replay cannot tell which is the cluster's history. The
// chain keeps what only it holds; its Problem names both segments.
func (c *Chain) capAtConflict(from int64) {
	in := map[string]bool{}
	for _, seg := range c.Segments {
		in[seg.Key] = true
	}
	for _, seg := range c.All {
		if in[seg.Key] || seg.LastRev < from || seg.FirstRev > c.Reach {
			continue
		}
		keep := c.Segments[:0:0]
		var holder string
		for _, mine := range c.Segments {
			if mine.FirstRev >= seg.FirstRev {
				break
			}
			keep = append(keep, mine)
			if mine.LastRev >= seg.FirstRev {
				holder = mine.Key
			}
		}
		if holder == "" && len(c.Segments) > 0 {
			holder = c.Segments[0].Key
		}
		c.Segments, c.Reach = keep, c.BaseRev
		if n := len(keep); n > 0 {
			c.Reach = min(keep[n-1].LastRev, seg.FirstRev-1)
		}
		c.Problem = &SegmentError{Key: seg.Key, Reason: ReasonOverlap,
			Detail: fmt.Sprintf("it holds revisions %d-%d, which %s holds too: two writers, or a segment that is not the journal's", seg.FirstRev, seg.LastRev, holder)}
		return
	}
}

// covering is the chain's segments holding revisions from to to, or an
// error naming the last revision reachable when it stops before to.
func (s *Source) covering(ctx context.Context, from, to int64) ([]SegmentInfo, error) {
	c, err := s.Cover(ctx, from)
	if err != nil {
		return nil, err
	}
	if c.Reach < to {
		return nil, &ReachError{ClusterID: s.clusterID, Reach: c.Reach, To: to, Problem: c.Problem}
	}
	var segs []SegmentInfo
	for _, seg := range c.Segments {
		if seg.LastRev < from {
			continue
		}
		segs = append(segs, seg)
		if seg.LastRev >= to {
			break
		}
	}
	return segs, nil
}

// ReachError is a journal that does not reach the revision asked for.
type ReachError struct {
	ClusterID string
	Reach, To int64
	// Problem is the break in the chain after Reach, nil when the
	// segments simply end there.
	Problem *SegmentError
}

func (e *ReachError) Error() string {
	s := fmt.Sprintf("the journal of cluster %s reaches revision %d only, not %d", e.ClusterID, e.Reach, e.To)
	if e.Problem != nil {
		s += ": " + e.Problem.Error()
	}
	return s
}

func (e *ReachError) Unwrap() error {
	if e.Problem == nil {
		return nil
	}
	return e.Problem
}

// Segments are the segments a replay of revisions from to to reads, in
// order (Cover), or a *ReachError when the journal stops before to.
func (s *Source) Segments(ctx context.Context, from, to int64) ([]SegmentInfo, error) {
	return s.covering(ctx, from, to)
}

func (s *Source) want() Want { return Want{ClusterID: s.clusterID} }

// Leases are the leases recorded in the headers of the segments holding
// revisions from to to, and of the segments after them that a revoke
// not placed yet needs (a revoke is recorded once the capture has passed
// the revision at which it found the lease gone, in the segment holding
// its revision or a later one): always the next one, then on while the
// last header read leaves a revoke pending (Header.Revoking) after a
// delete at or before to. The records seen at or before to (Rev <= to),
// once each, the first record of an ID with its Revoked the latest one
// at or before to. A revoke record of a lease without an earlier record
// (one of the snapshot's) is returned revoked, or not at all when
// revoked after to. A revoke still pending where the journal ends, past
// MaxLeaseReadOn segments or past a segment whose bytes are refused, is
// not returned (UnplacedRevokes names it): the lease may have lived on
// past to, with its keys, and a lease left alive on no key ends with its
// TTL, while one removed under its keys would keep them for good. A store
// that does not answer fails Leases.
func (s *Source) Leases(ctx context.Context, from, to int64) ([]Lease, error) {
	segs, err := s.covering(ctx, from, to)
	if err != nil {
		return nil, err
	}
	var after []SegmentInfo
	if c, err := s.Cover(ctx, from); err == nil && len(segs) > 0 {
		lastKey := segs[len(segs)-1].Key
		for i, seg := range c.Segments {
			if seg.Key == lastKey {
				after = c.Segments[i+1:]
				break
			}
		}
	}
	byID := map[int64]int{}
	var out []Lease
	headers := make([]Header, 0, len(segs)+1)
	for _, seg := range segs {
		r, err := s.open(ctx, seg)
		if err != nil {
			return nil, err
		}
		headers = append(headers, r.Header())
		r.Close()
	}
	why := "the journal ends before they are placed"
	if len(after) > 0 {
		// The segments after the window are not replayed, only their
		// lease records are read: each is read whole and checked as the
		// replay checks its segments (its trailer, its pins, and the one
		// before it named by sha256, read whole too).
		prev := segs[len(segs)-1]
		_, sum, err := s.verifyWhole(ctx, prev, "", "")
		if err != nil {
			return nil, err
		}
		for i, seg := range after {
			if i > 0 && !revokePendingAt(headers[len(headers)-1], to) {
				why = ""
				break
			}
			if i > MaxLeaseReadOn {
				why = fmt.Sprintf("they are not placed within %d segments past the replay's last", MaxLeaseReadOn+1)
				break
			}
			h, next, err := s.verifyWhole(ctx, seg, prev.Key, sum)
			if err != nil {
				if i == 0 || ctx.Err() != nil || IsReason(err, ReasonStore) {
					return nil, err
				}
				// Read on for a pending revoke only: a segment past
				// the one after the window whose bytes are refused
				// (damaged, forged) leaves the revoke unplaced (its
				// lease kept, as where the journal ends), never a
				// restore refused for revisions it does not replay. A
				// store that did not answer fails the read: a retry
				// may place it.
				why = err.Error()
				break
			}
			headers = append(headers, h)
			prev, sum = seg, next
		}
	}
	s.noteUnplaced(headers[len(headers)-1], to, why)
	for _, h := range headers {
		for _, l := range h.Leases {
			if l.Rev > to || l.Revoked > to {
				continue
			}
			if i, ok := byID[l.ID]; ok {
				if l.Revoked != 0 {
					out[i].Revoked = max(out[i].Revoked, l.Revoked)
				}
				if out[i].TTLUnknown && !l.TTLUnknown && l.TTL > 0 {
					out[i].TTL, out[i].TTLUnknown = l.TTL, false
				}
				continue
			}
			byID[l.ID] = len(out)
			out = append(out, l)
		}
	}
	return out, nil
}

// MaxLeaseReadOn bounds the segments Source.Leases reads past the one
// after a replay's window while a revoke is pending: a revoke placed
// later than that (a catch-up longer than 32 segments, a lease whose
// lookups kept failing) is not applied, and its lease is kept, on no
// key, until its TTL ends. Each segment read on is read whole, as a
// replayed one.
const MaxLeaseReadOn = 32

// Unplaced are the revokes the last Leases left unplaced: pending after a
// delete at or before the replay's revision where it stopped reading on,
// and why it stopped. Their leases are kept by the replay.
type Unplaced struct {
	Leases []int64
	Why    string
}

// UnplacedRevokes are the revokes the last Leases call left unplaced
// (none when it placed all): a restore reports them.
func (s *Source) UnplacedRevokes() Unplaced {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Unplaced{Leases: slices.Clone(s.unplaced.Leases), Why: s.unplaced.Why}
}

func (s *Source) noteUnplaced(h Header, to int64, why string) {
	var u Unplaced
	if why != "" {
		for _, r := range h.Revoking {
			if r.Last <= to {
				u.Leases = append(u.Leases, r.ID)
			}
		}
		if len(u.Leases) > 0 {
			u.Why = why
		}
	}
	s.mu.Lock()
	s.unplaced = u
	s.mu.Unlock()
}

// revokePendingAt reports whether h leaves a revoke pending after a
// delete at or before to: where it is placed decides whether the lease
// was alive at to.
func revokePendingAt(h Header, to int64) bool {
	for _, r := range h.Revoking {
		if r.Last <= to {
			return true
		}
	}
	return false
}

// Events yields every event of revisions from to to, in revision and sub
// order, decoding the segments holding them one after the other, each
// verified as it streams and as continuing the one before (Continues:
// the bases they name may differ; a refused segment is an error yielded,
// by name). A journal that does not reach to is refused before anything is
// yielded (*ReachError).
func (s *Source) Events(ctx context.Context, from, to int64) (iter.Seq2[Event, error], error) {
	segs, err := s.covering(ctx, from, to)
	if err != nil {
		return nil, err
	}
	return func(yield func(Event, error) bool) {
		var prev *Header
		var prevKey, prevSum string
		for _, seg := range segs {
			r, err := s.open(ctx, seg)
			if err != nil {
				yield(Event{}, err)
				return
			}
			h := r.Header()
			if err := Continues(seg.Key, prev, h); err != nil {
				r.Close()
				yield(Event{}, err)
				return
			}
			if err := checkPrev(seg.Key, prevKey, prevSum, h); err != nil {
				r.Close()
				yield(Event{}, err)
				return
			}
			prev = &h
			for {
				ev, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					r.Close()
					yield(Event{}, err)
					return
				}
				if ev.Rev < from {
					continue
				}
				if ev.Rev > to {
					// The rest is read too: nothing of a segment is
					// good before its trailer's sha256 checked out, the
					// events already yielded included (a replay throws
					// its scratch away on this error).
					err := drain(r)
					if err == nil {
						err = s.done(seg, r)
					}
					r.Close()
					if err != nil {
						yield(Event{}, err)
					}
					return
				}
				if !yield(ev, nil) {
					r.Close()
					return
				}
			}
			err = s.done(seg, r)
			prevKey, prevSum = seg.Key, r.Sum()
			r.Close()
			if err != nil {
				yield(Event{}, err)
				return
			}
		}
	}, nil
}

// Headers yields the header of every stored segment of the cluster, in
// key (revision) order, each with its key: what RevisionAt and journal
// find read first.
func (s *Source) Headers(ctx context.Context) ([]SegmentInfo, []Header, error) {
	all, err := s.listing(ctx)
	if err != nil {
		return nil, nil, err
	}
	if len(all.All) == 0 {
		return nil, nil, fmt.Errorf("%w of cluster %s under %s", ErrNoJournal, s.clusterID, s.layout.JournalPrefix(s.clusterID))
	}
	hs := make([]Header, 0, len(all.All))
	for _, seg := range all.All {
		r, err := s.open(ctx, seg)
		if err != nil {
			return nil, nil, err
		}
		hs = append(hs, r.Header())
		r.Close()
	}
	return all.All, hs, nil
}

// Open opens one of the cluster's segments (OpenSegment, its cluster
// checked).
func (s *Source) Open(ctx context.Context, key string) (*SegmentReader, error) {
	return OpenSegment(ctx, s.st, s.layout, key, s.ids, s.want())
}

// RevisionAt maps a time to a revision through the headers' Received
// times: the last recorded revision received at or before t (PointAt's
// Revision). Between recorded revisions (ReceivedEvery apart at most while
// revisions come), a revision received up to ReceivedEvery before t may be
// left out; none received after t is included. A time before the
// journal's first received revision, or in a gap of its chain, is an
// error; a time after its end is not (PointAt says so).
func (s *Source) RevisionAt(ctx context.Context, t time.Time) (int64, error) {
	p, err := s.PointAt(ctx, t)
	return p.Revision, err
}

// Point is what a time maps to in a cluster's journal (Source.PointAt).
type Point struct {
	// Revision is the last recorded revision received at or before the
	// time.
	Revision int64
	// PastEnd: Revision is the journal's last stored revision, received
	// more than ReceivedEvery before the time. Whether the cluster changed
	// between the two is in no segment: its journal stopped, lags, or has
	// not stored its newest segment yet, or the cluster was idle.
	PastEnd bool
	// LastRev and LastReceived are the journal's last stored revision and
	// when it was received, and EtcdClusterID the etcd cluster ID its
	// segment names (set with PastEnd).
	LastRev       int64
	LastReceived  time.Time
	EtcdClusterID string
}

// TimeGapError is a time that falls in a gap of the journal's chain: the
// journal holds revisions up to Before, received at BeforeAt, and the next
// stored segment starts at After, received later than the time. The state
// at the time, somewhere between the two, is in no segment.
type TimeGapError struct {
	ClusterID string
	Time      time.Time
	Before    int64
	BeforeAt  time.Time
	After     int64
	Segment   string // the segment after the gap
}

func (e *TimeGapError) Error() string {
	return fmt.Sprintf("%s falls in a gap of the journal of cluster %s: it holds revisions up to %d (received %s), then none until %d (segment %s); "+
		"the cluster's state then is in no segment", e.Time.UTC().Format(time.RFC3339Nano), e.ClusterID, e.Before,
		e.BeforeAt.UTC().Format(time.RFC3339Nano), e.After, e.Segment)
}

// PointAt maps t to a revision as RevisionAt does, and says whether the
// journal shows the cluster's state at t: a t in a gap of the chain (the
// revision found ends a segment, and the next stored segment does not
// continue it) is a *TimeGapError; a t after the journal's last stored
// revision (plus ReceivedEvery) is PastEnd, for the caller to decide
// (a cluster idle since, or changes in no segment).
//
// It lists the segments once and reads headers by binary search on their
// first receive time (segments in revision order were received in that
// order), then the header found and the next: about log2(n) + 2 headers,
// 17 for a week of 30 s segments (20,160), where reading every header took
// one request each.
func (s *Source) PointAt(ctx context.Context, t time.Time) (Point, error) {
	all, err := s.listing(ctx)
	if err != nil {
		return Point{}, err
	}
	segs := all.All
	if len(segs) == 0 {
		return Point{}, fmt.Errorf("%w of cluster %s under %s", ErrNoJournal, s.clusterID, s.layout.JournalPrefix(s.clusterID))
	}
	cache := map[int]Header{}
	header := func(i int) (Header, error) {
		if h, ok := cache[i]; ok {
			return h, nil
		}
		r, err := s.open(ctx, segs[i])
		if err != nil {
			return Header{}, err
		}
		h := r.Header()
		r.Close()
		cache[i] = h
		return h, nil
	}
	ms := t.UnixMilli()
	found := -1
	for lo, hi := 0, len(segs)-1; lo <= hi; {
		mid := lo + (hi-lo)/2
		h, err := header(mid)
		if err != nil {
			return Point{}, err
		}
		if first, ok := firstReceived(h); ok && first <= ms {
			found, lo = mid, mid+1
		} else {
			hi = mid - 1
		}
	}
	var hs []Header
	for i := max(found, 0); i <= min(found+1, len(segs)-1); i++ {
		h, err := header(i)
		if err != nil {
			return Point{}, err
		}
		hs = append(hs, h)
	}
	rev, err := RevisionAt(hs, t)
	if err != nil {
		return Point{}, err
	}
	// The revision after rev was received after t. When it is one of a
	// catch-up (its segment says so), it was committed before it was
	// received, behind a backlog: a t before the catch-up closed (the
	// watch delivered every revision up to a response's own) is in a
	// window the journal did not watch (which of them etcd had committed
	// by t is unknown), and a t after it holds all of it.
	holding := func(r int64) int {
		at := -1
		for i := max(found, 0); i < len(segs) && segs[i].FirstRev <= r; i++ {
			if r <= segs[i].LastRev {
				at = i
			}
		}
		return at
	}
	for range maxCatchUps + 1 {
		j := holding(rev + 1)
		if j < 0 {
			break
		}
		h, err := header(j)
		if err != nil {
			return Point{}, err
		}
		u, ok := catchUpOf(h, rev+1)
		if !ok {
			break
		}
		if u.Open || ms < u.At {
			var beforeAt time.Time
			if i := holding(rev); i >= 0 {
				if hb, err := header(i); err == nil {
					beforeAt = receivedAt(hb, rev)
				}
			}
			return Point{}, &CatchUpError{ClusterID: s.clusterID, Time: t, Before: rev, BeforeAt: beforeAt, CatchUp: u}
		}
		if holding(u.To) < 0 {
			return Point{}, fmt.Errorf("the journal of cluster %s caught up to revision %d by %s, after %s, but its stored segments end before it: "+
				"the state then is in no stored segment", s.clusterID, u.To, time.UnixMilli(u.At).UTC().Format(time.RFC3339Nano), t.UTC().Format(time.RFC3339Nano))
		}
		rev = u.To
	}
	p := Point{Revision: rev}
	at := holding(rev)
	if at < 0 || rev != segs[at].LastRev {
		return p, nil // a later revision of its own segment was received after t
	}
	h, err := header(at)
	if err != nil {
		return Point{}, err
	}
	if at == len(segs)-1 {
		last := receivedAt(h, rev)
		if !last.IsZero() && t.After(last.Add(ReceivedEvery)) {
			p.PastEnd, p.LastRev, p.LastReceived, p.EtcdClusterID = true, rev, last, h.EtcdClusterID
		}
		return p, nil
	}
	if next := segs[at+1]; next.FirstRev > rev+1 {
		return p, &TimeGapError{ClusterID: s.clusterID, Time: t, Before: rev, BeforeAt: receivedAt(h, rev), After: next.FirstRev, Segment: next.Key}
	}
	return p, nil
}

// catchUpOf is the catch-up of header h that revision r belongs to.
func catchUpOf(h Header, r int64) (CatchUp, bool) {
	for _, u := range h.CaughtUp {
		if u.From <= r && (u.Open || r <= u.To) {
			return u, true
		}
	}
	return CatchUp{}, false
}

// CatchUpError is a time in a window the journal did not watch: it
// received revision Before (at BeforeAt) and then, after its watch opened
// again (a start, a restart, a stall), the revisions CatchUp.From to
// CatchUp.To in a catch-up that began at CatchUp.At, after the time.
// etcd had committed them by CatchUp.At; which of them by the time is in
// no record.
type CatchUpError struct {
	ClusterID string
	Time      time.Time
	Before    int64
	BeforeAt  time.Time
	CatchUp   CatchUp
}

func (e *CatchUpError) Error() string {
	if e.CatchUp.Open {
		return fmt.Sprintf("%s is in a window the journal of cluster %s did not watch: it received revision %d at %s, and the revisions from %d only in a catch-up "+
			"after its watch opened again (a restart, a leader change or a stall), behind a backlog, that had not caught up by then; which of them etcd had by %s is unknown. "+
			"Restore to a revision with --to-revision (journal find lists the changes), or to a later time",
			e.Time.UTC().Format(time.RFC3339Nano), e.ClusterID, e.Before, e.BeforeAt.UTC().Format(time.RFC3339Nano), e.CatchUp.From, e.Time.UTC().Format(time.RFC3339Nano))
	}
	at := time.UnixMilli(e.CatchUp.At).UTC().Format(time.RFC3339Nano)
	return fmt.Sprintf("%s is in a window the journal of cluster %s did not watch: it received revision %d at %s, and revisions %d to %d only in a catch-up "+
		"after its watch opened again, caught up at %s (a restart, a leader change or a stall), etcd having committed them by then; which of them it had by %s is unknown. "+
		"Restore to a revision with --to-revision (journal find lists the changes), or to a time from %s on",
		e.Time.UTC().Format(time.RFC3339Nano), e.ClusterID, e.Before, e.BeforeAt.UTC().Format(time.RFC3339Nano), e.CatchUp.From, e.CatchUp.To,
		at, e.Time.UTC().Format(time.RFC3339Nano), at)
}

// firstReceived is the earliest receive time a header records.
func firstReceived(h Header) (int64, bool) {
	var first int64
	ok := false
	for _, at := range h.Received {
		if !ok || at < first {
			first, ok = at, true
		}
	}
	return first, ok
}

// RevisionAt is Source.RevisionAt over headers already read.
func RevisionAt(hs []Header, t time.Time) (int64, error) {
	ms := t.UnixMilli()
	var best, first int64
	var firstAt int64
	for _, h := range hs {
		for rev, at := range h.Received {
			if first == 0 || at < firstAt || (at == firstAt && rev < first) {
				first, firstAt = rev, at
			}
			if at <= ms && rev > best {
				best = rev
			}
		}
	}
	if first == 0 {
		return 0, errors.New("the journal's segments record no receive time")
	}
	if best == 0 {
		return 0, fmt.Errorf("%s is before the journal's first revision %d (received %s)", t.UTC().Format(time.RFC3339Nano), first,
			time.UnixMilli(firstAt).UTC().Format(time.RFC3339Nano))
	}
	return best, nil
}

// receivedAt is when revision rev was received, to within ReceivedEvery:
// the time of the last recorded revision of h at or before rev (zero
// when none is recorded).
func receivedAt(h Header, rev int64) time.Time {
	var best, at int64 = -1, 0
	for r, ms := range h.Received {
		if r <= rev && r > best {
			best, at = r, ms
		}
	}
	if best < 0 {
		return time.Time{}
	}
	return time.UnixMilli(at).UTC()
}

// drain reads a segment to its end, so that its trailer is checked.
func drain(r *SegmentReader) error {
	for {
		if _, err := r.Next(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}
