package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
)

// A second site (catalog.ReplicaStatus): when the exporter's bucket is a
// second site, the copier's status record <prefix>/_replica/status.json
// tells how far behind the primary it is, with nothing but that bucket
// (serve --store-only in the DR region). The record is read on every
// refresh and, between refreshes, every Options.ReplicaInterval (30 s by
// default: one GET of a small object), so that the lag is seen within
// the copier's own period and not the listing's 5 min.
//
// A record that is missing (with Options.SecondSite) or damaged is
// exported as such: status_valid 0 and every timestamp 0, so that the lag
// alert (time() minus a timestamp) fires, never goes quiet. A record that
// cannot be read (a store failure) keeps the last one read, which ages:
// the alert fires on its age. Without Options.SecondSite and without a
// record, nothing is exported (a primary bucket).

// Second site metric names.
const (
	NameSecondSiteStatusValid     = "etcd_recovery_second_site_status_valid"
	NameSecondSiteStatusUpdated   = "etcd_recovery_second_site_status_updated_timestamp_seconds"
	NameSecondSiteSynced          = "etcd_recovery_second_site_synced_timestamp_seconds"
	NameSecondSiteJournalSynced   = "etcd_recovery_second_site_journal_synced_timestamp_seconds"
	NameSecondSitePendingObjects  = "etcd_recovery_second_site_pending_objects"
	NameSecondSitePendingBytes    = "etcd_recovery_second_site_pending_bytes"
	NameSecondSiteVerifyFailures  = "etcd_recovery_second_site_verify_failures"
	NameSecondSiteCopiedObjects   = "etcd_recovery_second_site_copied_objects_total"
	NameSecondSiteCopiedBytes     = "etcd_recovery_second_site_copied_bytes_total"
	NameSecondSiteStatusReadTotal = "etcd_recovery_second_site_status_reads_total"
)

// DefaultReplicaInterval is the time between reads of a second site's
// status record (besides each refresh).
const DefaultReplicaInterval = 30 * time.Second

// replicaReadTimeout bounds one read of the status record.
const replicaReadTimeout = 10 * time.Second

var (
	descSecondSiteStatusValid = prometheus.NewDesc(NameSecondSiteStatusValid,
		"1 when the second site's copier status record (<prefix>/_replica/status.json) was read and is one, 0 when it is missing (serve --second-site) or damaged: then every second-site timestamp is 0 and the lag alert fires. Absent on a primary bucket (no record, no --second-site).", nil, nil)
	descSecondSiteStatusUpdated = prometheus.NewDesc(NameSecondSiteStatusUpdated,
		"Time (unix seconds) the copier last wrote its status record (every 30 s and after each full pass); 0 when the record is missing or damaged. time() minus this grows when the copier stops.", nil, nil)
	descSecondSiteSynced = prometheus.NewDesc(NameSecondSiteSynced,
		"Time (unix seconds) of the copier's last full pass: every object complete on the primary when it listed the whole prefix then is on the second site, verified; 0 before the first full pass, or when the record is missing or damaged.", nil, nil)
	descSecondSiteJournalSynced = prometheus.NewDesc(NameSecondSiteJournalSynced,
		"Time (unix seconds) up to which the cluster's journal is on the second site: every segment stored on the primary when the copier listed it then was copied and verified; 0 before the first. time() minus this bounds the journal writes the second site misses.", cl, nil)
	descSecondSitePendingObjects = prometheus.NewDesc(NameSecondSitePendingObjects,
		"Objects seen on the primary and not yet on the second site when the copier last wrote its status.", nil, nil)
	descSecondSitePendingBytes = prometheus.NewDesc(NameSecondSitePendingBytes,
		"Stored bytes of the objects pending (etcd_recovery_second_site_pending_objects).", nil, nil)
	descSecondSiteVerifyFailures = prometheus.NewDesc(NameSecondSiteVerifyFailures,
		"Copies that failed verification and are not resolved (the status record's failures, at most 100): a sha256 that is not the source's, or an object already on the second site with other bytes, kept and never overwritten.", nil, nil)
	descSecondSiteCopiedObjects = prometheus.NewDesc(NameSecondSiteCopiedObjects,
		"Objects the copier copied to the second site since it started (it restarts at 0 with the copier).", nil, nil)
	descSecondSiteCopiedBytes = prometheus.NewDesc(NameSecondSiteCopiedBytes,
		"Bytes the copier copied to the second site since it started.", nil, nil)
	descSecondSiteStatusReads = prometheus.NewDesc(NameSecondSiteStatusReadTotal,
		"Reads of the second site's status record by result: ok, missing, damaged, error (a store failure: the last record read is kept).", []string{"result"}, nil)
)

// Results of a status record read (the result label).
const (
	replicaOK      = "ok"
	replicaMissing = "missing"
	replicaDamaged = "damaged"
	replicaError   = "error"
)

// ReplicaResults are the result label values of
// etcd_recovery_second_site_status_reads_total.
var ReplicaResults = []string{replicaOK, replicaMissing, replicaDamaged, replicaError}

// ReplicaState is what the exporter knows of a second site's copier.
type ReplicaState struct {
	// Valid: Status is the record read; else Problem says why there is
	// none (missing, damaged).
	Valid   bool                  `json:"valid"`
	Problem string                `json:"problem,omitempty"`
	Status  catalog.ReplicaStatus `json:"status"`
	// ReadAt is when it was read (the exporter's clock).
	ReadAt time.Time `json:"readAt"`
}

// Replica is the second site's state (nil: not a second site, or never
// read).
func (e *Exporter) Replica() *ReplicaState {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.replica
}

// readReplica reads the status record once, bounded, and replaces the
// exporter's state with what it found; a store failure keeps the state and
// is returned.
func (e *Exporter) readReplica(ctx context.Context) error {
	e.replicaMu.Lock()
	defer e.replicaMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, replicaReadTimeout)
	defer cancel()
	s, err := catalog.ReadReplicaStatus(ctx, e.opts.Store, e.opts.Layout)
	now := e.opts.Now()
	var next *ReplicaState
	result := replicaOK
	switch {
	case err == nil:
		next = &ReplicaState{Valid: true, Status: s, ReadAt: now}
	case errors.Is(err, store.ErrNotFound):
		result = replicaMissing
		if e.opts.SecondSite {
			next = &ReplicaState{Problem: "missing: no copier has written " + e.opts.Layout.ReplicaStatusKey(), ReadAt: now}
		}
	case errors.Is(err, objectio.ErrDamagedRecord):
		result = replicaDamaged
		next = &ReplicaState{Problem: "damaged: " + err.Error(), ReadAt: now}
	default:
		e.mu.Lock()
		e.replicaReads[replicaError]++
		e.mu.Unlock()
		return fmt.Errorf("read the second site's status: %w", err)
	}
	if next != nil && !next.Valid {
		e.opts.Log.Warn("second site: no valid copier status record (the lag alert fires)", "key", e.opts.Layout.ReplicaStatusKey(), "problem", next.Problem)
	}
	e.mu.Lock()
	e.replica = next
	e.replicaReads[result]++
	e.mu.Unlock()
	return nil
}

// runReplica reads the status record every ReplicaInterval until ctx
// ends, while the bucket is (or is told to be) a second site.
func (e *Exporter) runReplica(ctx context.Context) {
	t := time.NewTicker(e.opts.ReplicaInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !e.opts.SecondSite && e.Replica() == nil {
			continue // a primary bucket: the refresh looks for a record
		}
		if err := e.readReplica(ctx); err != nil && ctx.Err() == nil {
			e.mu.Lock()
			e.errs[StepReadReplica]++
			e.mu.Unlock()
			e.opts.Log.Warn("second site: status record not read (the last one read is kept)", "error", err.Error())
		}
	}
}

// collectReplica sends the second site's gauges (none without a state).
func collectReplica(gauge func(*prometheus.Desc, float64, ...string), r *ReplicaState) {
	if r == nil {
		return
	}
	gauge(descSecondSiteStatusValid, b2f(r.Valid))
	if !r.Valid {
		gauge(descSecondSiteStatusUpdated, 0)
		gauge(descSecondSiteSynced, 0)
		return
	}
	s := r.Status
	gauge(descSecondSiteStatusUpdated, unixOrZero(s.Updated))
	gauge(descSecondSiteSynced, unixOrZero(s.SyncedAt))
	gauge(descSecondSitePendingObjects, float64(s.Pending))
	gauge(descSecondSitePendingBytes, float64(s.PendingBytes))
	gauge(descSecondSiteVerifyFailures, float64(len(s.Failures)))
	for id, c := range s.Clusters {
		gauge(descSecondSiteJournalSynced, unixOrZero(c.JournalSyncedAt), id)
	}
}

// unixOrZero is t in unix seconds, 0 for the zero time (never written:
// as old as can be, so an alert on its age fires).
func unixOrZero(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return unixSeconds(t)
}

// collectReplicaCounters sends the copier's counters (only with a valid
// record) and the reads of the record by result.
func collectReplicaCounters(ch chan<- prometheus.Metric, r *ReplicaState, reads map[string]uint64) {
	if r != nil && r.Valid {
		ch <- prometheus.MustNewConstMetric(descSecondSiteCopiedObjects, prometheus.CounterValue, float64(r.Status.Copied))
		ch <- prometheus.MustNewConstMetric(descSecondSiteCopiedBytes, prometheus.CounterValue, float64(r.Status.CopiedBytes))
	}
	if r == nil && reads[replicaOK]+reads[replicaDamaged]+reads[replicaError] == 0 {
		return // a primary bucket: no second-site series at all
	}
	for _, res := range ReplicaResults {
		ch <- prometheus.MustNewConstMetric(descSecondSiteStatusReads, prometheus.CounterValue, float64(reads[res]), res)
	}
}
