package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/store"
)

// Journal gaps (a gap is never silent: each is recorded and alerted on): the gap records of each
// cluster's journal (<prefix>/_journal/<cluster>/gaps/<from>.json, written
// create-only by the journal, catalog.JournalGap), counted from the same
// listing of the root as the backups (no listing of their own); the
// newest record (the highest first revision not captured) is read only
// when it is not the one read at the last refresh. A record that cannot
// be read gives its stored time (written when the gap was found).

// Journal gap metric names.
const (
	NameJournalGaps         = "etcd_recovery_journal_gaps"
	NameJournalGapTimestamp = "etcd_recovery_journal_gap_timestamp_seconds"
)

var (
	descJournalGaps = prometheus.NewDesc(NameJournalGaps,
		"Number of gap records in the cluster's journal: each is a hole in the point-in-time window (revisions no segment holds, healed by a full backup taken at once). Only for clusters with a journal or a gap record.", cl, nil)
	descJournalGapTimestamp = prometheus.NewDesc(NameJournalGapTimestamp,
		"Time (unix seconds) the newest gap in the cluster's journal was found (its record's time; the record's stored time when it cannot be read); absent without a gap record.", cl, nil)
)

// gapListing is a cluster's gap records in a listing of the root: how many,
// and the newest (highest first revision not captured).
type gapListing struct {
	count  int
	newest store.ObjectInfo
	from   int64
}

// journalGapKeys are each cluster's gap records in a listing of the root.
func journalGapKeys(layout catalog.Layout, objs []store.ObjectInfo) map[string]gapListing {
	out := map[string]gapListing{}
	for _, o := range objs {
		ki := layout.Classify(o.Key)
		if ki.Kind != catalog.KeyJournalGap {
			continue
		}
		g := out[ki.ClusterID]
		g.count++
		if g.count == 1 || ki.FirstRev > g.from {
			g.newest, g.from = o, ki.FirstRev
		}
		out[ki.ClusterID] = g
	}
	return out
}

// readGapTime reads a gap record's time.
func readGapTime(ctx context.Context, st store.Store, key string) (time.Time, error) {
	g, err := catalog.ReadJournalGap(ctx, st, key)
	if err != nil {
		return time.Time{}, err
	}
	if g.Time.IsZero() {
		return time.Time{}, fmt.Errorf("gap record %s has no time", key)
	}
	return g.Time, nil
}

// checkJournalGaps fills each cluster's gap count and newest gap time from
// the listing (sr.gaps), reading the newest record when it changed since
// the last refresh.
func (e *Exporter) checkJournalGaps(ctx context.Context, next map[string]*ClusterState, sr *storeRead) {
	type read struct {
		st *ClusterState
		g  gapListing
	}
	var reads []*read
	for id, st := range next {
		g, ok := sr.gaps[id]
		st.JournalGaps = g.count
		if !ok {
			st.JournalGapKey, st.JournalGapTime = "", time.Time{}
			continue
		}
		if st.JournalGapKey == g.newest.Key && !st.JournalGapTime.IsZero() {
			continue
		}
		reads = append(reads, &read{st: st, g: g})
	}
	fanout.ForEach(ctx, len(reads), e.opts.ReadParallel, func(ctx context.Context, i int) {
		r := reads[i]
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		t, err := readGapTime(rctx, e.opts.Store, r.g.newest.Key)
		if err != nil {
			e.opts.Log.Debug("journal: the newest gap record could not be read; its stored time is used", "cluster", r.st.Cluster, "key", r.g.newest.Key, "err", err)
			t = r.g.newest.LastModified
		}
		r.st.JournalGapKey, r.st.JournalGapTime = r.g.newest.Key, t
	})
	for _, r := range reads {
		if r.st.JournalGapKey != r.g.newest.Key {
			// Not started before the refresh's deadline: the stored time.
			r.st.JournalGapKey, r.st.JournalGapTime = r.g.newest.Key, r.g.newest.LastModified
		}
	}
}

// collectJournalGaps sends a cluster's gap gauges (with a journal or a gap
// record).
func collectJournalGaps(gauge func(*prometheus.Desc, float64, ...string), c ClusterState) {
	if c.JournalKey == "" && c.JournalGaps == 0 {
		return
	}
	gauge(descJournalGaps, float64(c.JournalGaps), c.Cluster)
	if c.JournalGaps > 0 && !c.JournalGapTime.IsZero() {
		gauge(descJournalGapTimestamp, unixSeconds(c.JournalGapTime), c.Cluster)
	}
}
