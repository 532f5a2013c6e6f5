package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
)

// SegmentInfo is one stored segment: its key and the revisions its key
// names, and, once written or read, what objectio measured (the stored
// and raw sizes and sha256s).
type SegmentInfo struct {
	Key      string           `json:"key"`
	FirstRev int64            `json:"firstRev"`
	LastRev  int64            `json:"lastRev"`
	Size     int64            `json:"size"` // stored bytes (from the listing or the write)
	Modified time.Time        `json:"modified,omitzero"`
	Written  objectio.Written `json:"written,omitzero"`
	// VersionID is the version a reader reads, on a versioned bucket
	// (chain.go: the key's earliest object version); Replaced how many
	// newer object versions were written over it, and Hidden whether a
	// delete marker is its key's current version.
	VersionID string `json:"versionID,omitempty"`
	Replaced  int    `json:"replaced,omitempty"`
	Hidden    bool   `json:"hidden,omitempty"`
}

// EncodeSegment is the raw bytes of a segment (Encode into memory): a
// segment is at most SegmentSize plus one revision, so it is held whole
// once, and its upload retried from these bytes.
func EncodeSegment(h Header, events []Event) ([]byte, error) {
	raw, _, err := encodeSegment(h, events)
	return raw, err
}

// encodeSegment is EncodeSegment with the trailer's sha256 (Decoder.Sum).
func encodeSegment(h Header, events []Event) ([]byte, string, error) {
	// Sized once: a buffer grown by doubling holds up to twice the
	// segment while it grows (the journal's largest allocation).
	size := 64 << 10
	for i := range events {
		size += int(eventCost(events[i].Key, events[i].Value))
	}
	b := bytes.NewBuffer(make([]byte, 0, size))
	sum, err := encode(b, h, events)
	if err != nil {
		return nil, "", err
	}
	return b.Bytes(), sum, nil
}

// WriteSegment encodes a segment and creates its object,
// layout.JournalSegmentKey(h.ClusterID, h.FirstRev, h.LastRev), through
// objectio (compressed, with recipients encrypted) create-only: a key
// already taken is a *SegmentError of ReasonConflict, nothing replaced.
func WriteSegment(ctx context.Context, st store.Store, layout catalog.Layout, enc objectio.Encoding, h Header, events []Event) (SegmentInfo, error) {
	raw, err := EncodeSegment(h, events)
	if err != nil {
		return SegmentInfo{}, err
	}
	return writeRaw(ctx, st, layout.JournalSegmentKey(h.ClusterID, h.FirstRev, h.LastRev), h, raw, enc, objectio.PutOptions{})
}

func writeRaw(ctx context.Context, st store.Store, key string, h Header, raw []byte, enc objectio.Encoding, put objectio.PutOptions) (SegmentInfo, error) {
	w, err := objectio.CreateWith(ctx, st, key, bytes.NewReader(raw), enc, put)
	info := SegmentInfo{Key: key, FirstRev: h.FirstRev, LastRev: h.LastRev, Size: w.StoredSize, Written: w}
	if err != nil {
		if errors.Is(err, store.ErrExists) {
			return info, &SegmentError{Key: key, Reason: ReasonConflict, Detail: "the key is taken (another journal writes this cluster?)", Err: err}
		}
		return info, &SegmentError{Key: key, Reason: ReasonStore, Detail: "writing", Err: err}
	}
	return info, nil
}

// SegmentReader streams one stored segment: its Decoder's checks, over
// the object's bytes decrypted (age, when the object is encrypted) and
// decompressed (zstd, when compressed), both recognised from the bytes.
type SegmentReader struct {
	*Decoder
	body   io.ReadCloser
	zstd   io.Closer // the decoder (its decompressor, when the segment is compressed)
	stored *objectio.HashCounter
	// version is the version read ("" : the current object).
	version string
}

// Close releases the object's stream and the decompressor (its
// goroutines and buffers: one left open per segment read would hold
// memory in proportion to the segments a replay reads).
func (r *SegmentReader) Close() error {
	if r.zstd != nil {
		r.zstd.Close()
		r.zstd = nil
	}
	return r.body.Close()
}

// Next is the Decoder's Next, with an error of the store reported as
// ReasonStore rather than damage.
func (r *SegmentReader) Next() (Event, error) {
	ev, err := r.Decoder.Next()
	var se *SegmentError
	if err != nil && err != io.EOF && errors.As(err, &se) && se.Err != nil {
		switch {
		case store.IsStoreError(se.Err), errors.Is(se.Err, context.Canceled), errors.Is(se.Err, context.DeadlineExceeded):
			se.Reason = ReasonStore
		}
	}
	return ev, err
}

// Stored is the stored bytes' size and sha256 read so far (all of them
// once Next returned io.EOF).
func (r *SegmentReader) Stored() (int64, string) { return r.stored.N(), r.stored.Sum() }

// OpenSegment opens the segment key for streaming. The revisions its key
// names are checked against its header, and want's other fields when set;
// ids decrypt an encrypted segment. A missing object is ReasonMissing, an
// unreadable store ReasonStore; every refusal is a *SegmentError.
func OpenSegment(ctx context.Context, st store.Store, layout catalog.Layout, key string, ids *seal.Identities, want Want) (*SegmentReader, error) {
	return openSegmentVersion(ctx, st, layout, key, "", ids, want)
}

// openSegmentVersion is OpenSegment of one version of key (version "":
// the current object), through store.Versioner.
func openSegmentVersion(ctx context.Context, st store.Store, layout catalog.Layout, key, version string, ids *seal.Identities, want Want) (*SegmentReader, error) {
	ki := layout.Classify(key)
	if ki.Kind != catalog.KeyJournal {
		return nil, &SegmentError{Key: key, Reason: ReasonFormat, Detail: "not a journal segment's key"}
	}
	if want.ClusterID != "" && ki.ClusterID != want.ClusterID {
		return nil, &SegmentError{Key: key, Reason: ReasonCluster, Detail: fmt.Sprintf("its key is under cluster %q, not %q", ki.ClusterID, want.ClusterID)}
	}
	want.FirstRev, want.LastRev = ki.FirstRev, ki.LastRev
	var body io.ReadCloser
	var err error
	if v, ok := st.(store.Versioner); ok && version != "" {
		body, err = v.GetVersion(ctx, key, version)
	} else {
		version = ""
		body, err = st.Get(ctx, key)
	}
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, &SegmentError{Key: key, Reason: ReasonMissing, Err: err}
		}
		return nil, &SegmentError{Key: key, Reason: ReasonStore, Detail: "reading", Err: err}
	}
	r := &SegmentReader{body: body, stored: objectio.NewHashCounter(), version: version}
	fail := func(reason Reason, detail string, err error) (*SegmentReader, error) {
		r.Close()
		if store.IsStoreError(err) {
			reason = ReasonStore
		}
		return nil, &SegmentError{Key: key, Reason: reason, Detail: detail, Err: err}
	}
	src, err := objectio.DecodeSniffed(io.TeeReader(body, r.stored), ids)
	if err != nil {
		var de *objectio.DecodeError
		if errors.As(err, &de) {
			return fail(ReasonDamaged, de.Step, de.Err)
		}
		return fail(ReasonDamaged, "reading", err)
	}
	r.zstd = src
	d, err := NewDecoder(src, key, want)
	if err != nil {
		var se *SegmentError
		if errors.As(err, &se) && se.Err != nil && store.IsStoreError(se.Err) {
			se.Reason = ReasonStore
		}
		r.Close()
		return nil, err
	}
	r.Decoder = d
	return r, nil
}

// ReadSegment reads a whole segment (OpenSegment, every event) and
// returns its header and events once every check passed.
func ReadSegment(ctx context.Context, st store.Store, layout catalog.Layout, key string, ids *seal.Identities, want Want) (Header, []Event, error) {
	r, err := OpenSegment(ctx, st, layout, key, ids, want)
	if err != nil {
		return Header{}, nil, err
	}
	defer r.Close()
	events := make([]Event, 0, min(r.Header().Events, 1<<16))
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return r.Header(), events, nil
		}
		if err != nil {
			return r.Header(), nil, err
		}
		events = append(events, ev)
	}
}

// readWhole reads a whole segment (every check) for its header and its
// trailer's sha256 (Decoder.Sum), without keeping its events: on a
// versioned bucket its earliest version, the journal's (chain.go), and
// replaced says how many versions were written over it.
func readWhole(ctx context.Context, st store.Store, layout catalog.Layout, key string, ids *seal.Identities, want Want) (h Header, sum string, replaced int, err error) {
	version := ""
	if v, on, verr := catalog.Versioned(ctx, st); verr == nil && on {
		vers, lerr := v.ListVersions(ctx, key)
		if lerr != nil && (store.IsTransient(lerr) || ctx.Err() != nil) {
			return Header{}, "", 0, &SegmentError{Key: key, Reason: ReasonStore, Detail: "listing its versions", Err: lerr}
		}
		for _, ver := range vers {
			if ver.Key == key && !ver.DeleteMarker {
				version = ver.VersionID // newest first: the last is the earliest
				replaced++
			}
		}
		replaced = max(replaced-1, 0)
	}
	h, sum, err = readVersion(ctx, st, layout, key, version, ids, want)
	return h, sum, replaced, err
}

func readVersion(ctx context.Context, st store.Store, layout catalog.Layout, key, version string, ids *seal.Identities, want Want) (Header, string, error) {
	r, err := openSegmentVersion(ctx, st, layout, key, version, ids, want)
	if err != nil {
		return Header{}, "", err
	}
	defer r.Close()
	if err := drain(r); err != nil {
		return r.Header(), "", err
	}
	return r.Header(), r.Sum(), nil
}

// Chain is a cluster's segments continuing a base backup: from BaseRev+1,
// each FirstRev the previous LastRev+1. Reach is the last revision
// reachable exactly (BaseRev when no segment continues it), and Problem
// the first break in the chain after it, by name (a gap or an overlap),
// nil when the segments simply end there.
type Chain struct {
	ClusterID string        `json:"clusterID"`
	BaseRev   int64         `json:"baseRev"`
	Segments  []SegmentInfo `json:"segments"`
	Reach     int64         `json:"reach"`
	Problem   *SegmentError `json:"-"`
	// All is every segment of the cluster in the store, in key (revision)
	// order, those of other bases included.
	All []SegmentInfo `json:"-"`
}

// ListSegments lists a cluster's segments and chains them from baseRev+1
// by the revisions their keys name (no object is read: headers are
// checked when a segment is read). A segment ending at or before the
// chain's next revision belongs to an earlier base and is passed over;
// one starting before it and reaching past it, other than at baseRev+1
// (where an earlier base's segment may straddle a newer backup), is an
// overlap; one starting after it a gap. A store that cannot be listed is
// an error.
func ListSegments(ctx context.Context, st store.Store, layout catalog.Layout, clusterID string, baseRev int64) (*Chain, error) {
	objs, err := st.List(ctx, layout.JournalPrefix(clusterID))
	if err != nil {
		return nil, err
	}
	c := &Chain{ClusterID: clusterID, BaseRev: baseRev, Reach: baseRev}
	for _, o := range objs {
		ki := layout.Classify(o.Key)
		if ki.Kind != catalog.KeyJournal || ki.ClusterID != clusterID {
			continue
		}
		c.All = append(c.All, SegmentInfo{Key: o.Key, FirstRev: ki.FirstRev, LastRev: ki.LastRev, Size: o.Size, Modified: o.LastModified})
	}
	c.chain()
	return c, nil
}

func (c *Chain) chain() {
	next := c.BaseRev + 1
	var prev string
	// Keys sort by FirstRev, then LastRev.
	for i := 0; i < len(c.All); i++ {
		s := c.All[i]
		switch {
		case s.LastRev < next:
			continue
		case s.FirstRev < next:
			if next == c.BaseRev+1 {
				continue // an earlier base's segment across this base's revision
			}
			c.Problem = &SegmentError{Key: s.Key, Reason: ReasonOverlap, Detail: fmt.Sprintf("it holds revisions %d-%d, %s already holds through %d", s.FirstRev, s.LastRev, prev, next-1)}
			return
		case s.FirstRev > next:
			c.Problem = &SegmentError{Key: s.Key, Reason: ReasonGap, Detail: fmt.Sprintf("revisions %d-%d are in no segment (missing)", next, s.FirstRev-1)}
			return
		}
		// s.FirstRev == next: a second segment starting there overlaps.
		if i+1 < len(c.All) && c.All[i+1].FirstRev == s.FirstRev {
			c.Problem = &SegmentError{Key: c.All[i+1].Key, Reason: ReasonOverlap, Detail: fmt.Sprintf("it starts at revision %d, as %s does", s.FirstRev, s.Key)}
			return
		}
		c.Segments = append(c.Segments, s)
		c.Reach, next, prev = s.LastRev, s.LastRev+1, s.Key
	}
}
