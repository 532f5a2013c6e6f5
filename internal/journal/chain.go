package journal

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// The chain is tamper-evident, and a reader reads the journal's own
// versions.
//
// Object lock protects versions, not keys: a credential that may write can
// PUT a newer version over a locked segment, or hide it under a delete
// marker, and a reader that takes the newest version replays the forgery.
// age gives no sender authentication (the recipients are public), so a
// forged segment decrypts and checks out on its own. Three things stop it:
//
//  1. Each segment names its predecessor: Header.Prev is the sha256 that
//     the segment before it in its chain records in its trailer (of its
//     raw header and events). Source.Events refuses, by name
//     (ReasonForged), a segment whose predecessor it read hashes to
//     something else: replacing any segment but the newest breaks the
//     chain at the next one, on every bucket.
//  2. On a versioned bucket the reader takes each segment's earliest
//     version, not its newest: the journal writes a segment once,
//     create-only, so every later version is an overwrite, by definition
//     not the journal's (the rule backups follow, prune.VersionedBackups).
//     A segment behind a delete marker is read behind it. Source.Replaced
//     lists what was passed over, for the caller to say so.
//  3. A proof names every segment it replayed by sha256 and version
//     (catalog.ProvenSegment); Source.Pin makes a replay refuse a segment
//     that hashes otherwise. A pin never chooses what is read (the
//     earliest version still is): a proof record is an object too, and a
//     forged one naming a forged version can only make a replay refuse,
//     never replay the forgery. A proven window is restored as proven,
//     the newest segment of it included.
//
// What is left: on a bucket without versioning, the newest segments after
// the last proof can be replaced together, consistently (the chain binds
// each to the one before, not to a key outside the bucket). Such a bucket
// gives no protection to anything in it, backups included; docs/journal.md
// says so.

// versionedListing lists the cluster's segments with their versions: on a
// versioned bucket every key with an object version, the earliest one
// chosen (VersionID), how many newer ones it has (Replaced) and whether a
// delete marker hides it (Hidden); on another, ListSegments' listing.
func (s *Source) listing(ctx context.Context) (*Chain, error) {
	// With ListOnce, listed once: a replay asks for its chain several
	// times (the plan, the leases, the events), and at a week of 30 s
	// segments a cluster's folder is about 20,000 keys (2 s to list on
	// loopback).
	s.mu.Lock()
	cached, once := s.listed, s.once
	s.mu.Unlock()
	if cached != nil {
		return &Chain{ClusterID: cached.ClusterID, BaseRev: cached.BaseRev, Reach: cached.Reach, Segments: cached.Segments, Problem: cached.Problem, All: cached.All}, nil
	}
	c, err := s.list(ctx)
	if err == nil && once {
		s.mu.Lock()
		s.listed = c
		s.mu.Unlock()
	}
	return c, err
}

func (s *Source) list(ctx context.Context) (*Chain, error) {
	v, on, err := s.versioning(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the journal of cluster %s: %w", s.clusterID, err)
	}
	if !on {
		c, err := ListSegments(ctx, s.st, s.layout, s.clusterID, 0)
		if err != nil {
			return nil, fmt.Errorf("listing the journal of cluster %s: %w", s.clusterID, err)
		}
		return c, nil
	}
	vers, err := v.ListVersions(ctx, s.layout.JournalPrefix(s.clusterID))
	if err != nil && !store.IsTransient(err) && ctx.Err() == nil {
		// No right to list versions (an optional permission, as for
		// backups): the current objects, said in the restore's warnings.
		s.mu.Lock()
		s.verOn, s.verErr = false, err
		s.mu.Unlock()
		return s.list(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("listing the journal of cluster %s: %w", s.clusterID, err)
	}
	byKey := map[string]*SegmentInfo{}
	var keys []string
	for _, ver := range vers {
		ki := s.layout.Classify(ver.Key)
		if ki.Kind != catalog.KeyJournal || ki.ClusterID != s.clusterID {
			continue
		}
		seg := byKey[ver.Key]
		if seg == nil {
			seg = &SegmentInfo{Key: ver.Key, FirstRev: ki.FirstRev, LastRev: ki.LastRev, Replaced: -1}
			byKey[ver.Key] = seg
			keys = append(keys, ver.Key)
		}
		if ver.IsLatest && ver.DeleteMarker {
			seg.Hidden = true
		}
		if ver.DeleteMarker {
			continue
		}
		// Newest first: the last object version seen is the earliest.
		seg.Replaced++
		seg.VersionID, seg.Size, seg.Modified = ver.VersionID, ver.Size, ver.LastModified
	}
	sort.Strings(keys)
	c := &Chain{ClusterID: s.clusterID}
	for _, k := range keys {
		if seg := byKey[k]; seg.Replaced >= 0 {
			c.All = append(c.All, *seg)
		}
	}
	c.chain()
	return c, nil
}

// versioning is whether the store keeps versions (asked once).
func (s *Source) versioning(ctx context.Context) (store.Versioner, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.verAsked {
		return s.ver, s.verOn, nil
	}
	v, on, err := catalog.Versioned(ctx, s.st)
	if err != nil && (store.IsTransient(err) || ctx.Err() != nil) {
		return nil, false, err
	}
	if err != nil {
		// No right to read the bucket's versioning: read as without.
		on, s.verErr = false, err
	}
	s.ver, s.verOn, s.verAsked = v, on, true
	return v, on, nil
}

// VersionsUnread is why the bucket's versions could not be read (no right
// to: the segments were read at their current versions), nil when they
// were or the bucket keeps none.
func (s *Source) VersionsUnread() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.verErr
}

// Pin names segments exactly, as a proof recorded them: a replay refuses
// a pinned segment, by name (ReasonForged), when its trailer's sha256 is
// not every sha256 pinned for it. The version read is still the listing's
// (the earliest on a versioned bucket), whatever a pin says.
func (s *Source) Pin(segs []catalog.ProvenSegment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pins == nil {
		s.pins = map[string][]catalog.ProvenSegment{}
	}
	for _, p := range segs {
		if !slices.Contains(s.pins[p.Key], p) {
			s.pins[p.Key] = append(s.pins[p.Key], p)
		}
	}
}

// Read are the segments Events read whole, named exactly (key, trailer
// sha256, version), in the order read: what a proof records.
func (s *Source) Read() []catalog.ProvenSegment {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]catalog.ProvenSegment(nil), s.read...)
}

// Replaced are the segments a replay read whose journal version is not
// the key's current one: overwritten by a newer version (passed over) or
// hidden by a delete marker (read behind it). Empty on a bucket without
// versioning, and when nothing was tampered with.
func (s *Source) Replaced() []SegmentInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SegmentInfo(nil), s.replaced...)
}

// open opens a listed segment at the listing's version (the earliest on a
// versioned bucket), else the current object.
func (s *Source) open(ctx context.Context, seg SegmentInfo) (*SegmentReader, error) {
	return openSegmentVersion(ctx, s.st, s.layout, seg.Key, seg.VersionID, s.ids, s.want())
}

// done records a segment read whole (its trailer checked) and checks it
// against its pin.
func (s *Source) done(seg SegmentInfo, r *SegmentReader) error {
	return s.checkRead(seg, r, true)
}

// checkRead checks a segment read whole against its pins, and with record
// notes it as done does.
func (s *Source) checkRead(seg SegmentInfo, r *SegmentReader, record bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := r.Sum()
	for _, pin := range s.pins[seg.Key] {
		if pin.SHA256 != sum {
			return &SegmentError{Key: seg.Key, Reason: ReasonForged,
				Detail: fmt.Sprintf("a journal proof recorded it as sha256 %s (version %q), the stored segment (version %q) hashes to %s: replaced after it was proven, or the proof record is not the journal's", pin.SHA256, pin.VersionID, r.version, sum)}
		}
	}
	if record && !slices.ContainsFunc(s.read, func(p catalog.ProvenSegment) bool { return p.Key == seg.Key }) {
		s.read = append(s.read, catalog.ProvenSegment{Key: seg.Key, SHA256: sum, VersionID: r.version})
		if seg.Replaced > 0 || seg.Hidden {
			seg.VersionID = r.version
			s.replaced = append(s.replaced, seg)
		}
	}
	return nil
}

// checkPrev refuses a segment whose header names a predecessor other than
// the segment read before it (prevSum, its trailer's sha256; "" when
// unknown).
func checkPrev(key, prevKey, prevSum string, h Header) error {
	if prevSum == "" || h.Prev == "" || h.Prev == prevSum {
		return nil
	}
	return &SegmentError{Key: key, Reason: ReasonForged,
		Detail: fmt.Sprintf("it names the segment before it by sha256 %s, but %s hashes to %s: one of the two was replaced", h.Prev, prevKey, prevSum)}
}

// sourceState is Source's mutable part (chain.go).
type sourceState struct {
	mu       sync.Mutex
	verAsked bool
	ver      store.Versioner
	verOn    bool
	verErr   error
	pins     map[string][]catalog.ProvenSegment
	read     []catalog.ProvenSegment
	replaced []SegmentInfo
	listed   *Chain
	once     bool
	unplaced Unplaced
}

// ListOnce makes the Source list the cluster's segments once, at its first
// use, and answer from that listing after: one replay's consistent view
// (a restore, a proof, a drill), not a journal that goes on growing.
func (s *Source) ListOnce() *Source {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.once = true
	return s
}

// verifyWhole reads seg whole (its trailer checked), checks its pins and,
// with prevSum, that it names the segment before it (prevKey); it returns
// its header and its trailer's sha256. For segments read for their
// headers only (the lease records of the segments after a replay's).
func (s *Source) verifyWhole(ctx context.Context, seg SegmentInfo, prevKey, prevSum string) (Header, string, error) {
	r, err := s.open(ctx, seg)
	if err != nil {
		return Header{}, "", err
	}
	defer r.Close()
	h := r.Header()
	if err := checkPrev(seg.Key, prevKey, prevSum, h); err != nil {
		return h, "", err
	}
	if err := drain(r); err != nil {
		return h, "", err
	}
	return h, r.Sum(), s.checkRead(seg, r, false)
}
