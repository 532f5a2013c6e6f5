package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
)

// The journal lag: for every cluster with a journal (stored segments),
// its newest stored segment's last revision and when the journal received
// it, from the same listing of the root as the backups (no listing of
// its own) and one read of that segment's header when the newest
// segment changed since the last refresh (an unchanged one keeps its
// time). A header that cannot be read (an encrypted segment no mounted
// identity opens, a damaged one, a store error) gives the segment's
// stored time instead, later than the receive time by the upload:
// alerting on it errs towards no page for at most that long.

// Journal metric names.
const (
	NameJournalLastRevision = "etcd_recovery_journal_last_revision"
	NameJournalLastReceived = "etcd_recovery_journal_last_received_timestamp_seconds"
)

var (
	descJournalLastRevision = prometheus.NewDesc(NameJournalLastRevision,
		"etcd revision of the newest journaled revision in the store (the last revision of the newest journal segment); only for clusters with a journal.", cl, nil)
	descJournalLastReceived = prometheus.NewDesc(NameJournalLastReceived,
		"Time (unix seconds) the journal received its newest stored revision (the segment's header; its stored time when the header cannot be read): time() minus this is the journal lag, the RPO of a restore right now. Only for clusters with a journal.", cl, nil)
)

// newestSegments is, for each cluster in a listing of the root, the last
// segment of its journal's real end: from the newest segment (highest
// last revision) back along the segments continuing each other, the chain
// stops before the first revision another stored segment holds too (two
// writers' overlapping segments: a replay cannot pass there, so neither
// can the lag). Without an overlap it is the newest segment.
func newestSegments(layout catalog.Layout, objs []store.ObjectInfo) map[string]journal.SegmentInfo {
	byCluster := map[string][]journal.SegmentInfo{}
	for _, o := range objs {
		ki := layout.Classify(o.Key)
		if ki.Kind != catalog.KeyJournal {
			continue
		}
		byCluster[ki.ClusterID] = append(byCluster[ki.ClusterID], journal.SegmentInfo{Key: o.Key, FirstRev: ki.FirstRev, LastRev: ki.LastRev, Size: o.Size, Modified: o.LastModified})
	}
	out := map[string]journal.SegmentInfo{}
	for id, segs := range byCluster {
		out[id] = realEnd(segs)
	}
	return out
}

// realEnd is the last segment of the chain that ends at the newest of segs,
// cut before an overlap (see newestSegments).
func realEnd(segs []journal.SegmentInfo) journal.SegmentInfo {
	newest := segs[0]
	for _, s := range segs {
		if s.LastRev > newest.LastRev || (s.LastRev == newest.LastRev && s.FirstRev < newest.FirstRev) {
			newest = s
		}
	}
	// The chain back from the newest: each segment ending where the next
	// begins.
	chain := []journal.SegmentInfo{newest}
	in := map[string]bool{newest.Key: true}
	for {
		first := chain[0].FirstRev
		found := false
		for _, s := range segs {
			if !in[s.Key] && s.LastRev == first-1 {
				chain, in[s.Key], found = append([]journal.SegmentInfo{s}, chain...), true, true
				break
			}
		}
		if !found {
			break
		}
	}
	// The first revision of the chain another segment holds too.
	conflict := int64(-1)
	for _, s := range segs {
		if in[s.Key] || s.LastRev < chain[0].FirstRev || s.FirstRev > newest.LastRev {
			continue
		}
		if start := max(s.FirstRev, chain[0].FirstRev); conflict < 0 || start < conflict {
			conflict = start
		}
	}
	if conflict < 0 {
		return newest
	}
	// The segment holding the revision before it (the chain's, or the
	// earliest other), cut there.
	end := conflict - 1
	var holder *journal.SegmentInfo
	for i := range segs {
		s := &segs[i]
		if s.FirstRev <= end && end <= s.LastRev && (holder == nil || in[s.Key] && !in[holder.Key] || s.FirstRev < holder.FirstRev) {
			holder = s
		}
	}
	if holder == nil {
		out := chain[0]
		out.LastRev = out.FirstRev - 1
		return out
	}
	out := *holder
	out.LastRev = end
	return out
}

// checkJournals fills each cluster's journal state from the listing's
// newest segments (sr.journal), reading the header of a segment not seen
// at the last refresh.
func (e *Exporter) checkJournals(ctx context.Context, next map[string]*ClusterState, sr *storeRead) {
	var ids *seal.Identities
	if e.opts.Identities != nil {
		ids, _ = e.opts.Identities() // no identity: the stored time
	}
	type read struct {
		id     string
		st     *ClusterState
		seg    journal.SegmentInfo
		newest *journal.Header
	}
	var reads []*read
	for id, st := range next {
		seg, ok := sr.journal[id]
		if !ok {
			st.JournalKey, st.JournalLastRev, st.JournalReceived = "", 0, time.Time{}
			continue
		}
		if st.JournalKey == seg.Key && st.JournalLastRev == seg.LastRev && !st.JournalReceived.IsZero() {
			continue
		}
		reads = append(reads, &read{id: id, st: st, seg: seg})
	}
	// The headers, ReadParallel at a time, each bounded; one not read (or
	// not started before the refresh's deadline) gives the stored time.
	fanout.ForEach(ctx, len(reads), e.opts.ReadParallel, func(ctx context.Context, i int) {
		r := reads[i]
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		sr, err := journal.OpenSegment(rctx, e.opts.Store, e.opts.Layout, r.seg.Key, ids, journal.Want{ClusterID: r.id})
		if err != nil {
			e.opts.Log.Debug("journal: the newest segment's header could not be read; its stored time is used", "cluster", r.id, "key", r.seg.Key, "err", err)
			return
		}
		h := sr.Header()
		sr.Close()
		if h.LastRev > r.seg.LastRev {
			h.LastRev = r.seg.LastRev // the real end, inside the segment (realEnd)
		}
		r.newest = &h
	})
	for _, r := range reads {
		w := journal.ComputeWindow(r.id, nil, []journal.SegmentInfo{r.seg}, r.newest)
		r.st.JournalKey, r.st.JournalLastRev, r.st.JournalReceived = r.seg.Key, w.LastRev, w.LastReceived
	}
}

// collectJournal sends a cluster's journal gauges (only with a journal).
func collectJournal(gauge func(*prometheus.Desc, float64, ...string), c ClusterState) {
	if c.JournalKey == "" {
		return
	}
	gauge(descJournalLastRevision, float64(c.JournalLastRev), c.Cluster)
	if !c.JournalReceived.IsZero() {
		gauge(descJournalLastReceived, unixSeconds(c.JournalReceived), c.Cluster)
	}
}
