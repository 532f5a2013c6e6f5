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

// newestSegments is the newest segment (highest last revision) of each
// cluster in a listing of the root.
func newestSegments(layout catalog.Layout, objs []store.ObjectInfo) map[string]journal.SegmentInfo {
	out := map[string]journal.SegmentInfo{}
	for _, o := range objs {
		ki := layout.Classify(o.Key)
		if ki.Kind != catalog.KeyJournal {
			continue
		}
		if cur, ok := out[ki.ClusterID]; !ok || ki.LastRev > cur.LastRev {
			out[ki.ClusterID] = journal.SegmentInfo{Key: o.Key, FirstRev: ki.FirstRev, LastRev: ki.LastRev, Size: o.Size, Modified: o.LastModified}
		}
	}
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
		if st.JournalKey == seg.Key && !st.JournalReceived.IsZero() {
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
