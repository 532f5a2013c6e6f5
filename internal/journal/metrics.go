package journal

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The journal process's own series (journal --listen), on a registry of
// their own: what its captures do, by cluster (the only label besides the
// leader's identity, so about 100 clusters × 6 series per process), and
// process-wide histograms of the segments it stores. The exporter's
// etcd_recovery_journal_* series read the store; these are the writer's.
const (
	NameJournalLeader          = "etcd_recovery_journal_leader"
	NameJournalCaptures        = "etcd_recovery_journal_captures"
	NameJournalLagRevisions    = "etcd_recovery_journal_watch_lag_revisions"
	NameJournalLagSeconds      = "etcd_recovery_journal_watch_lag_seconds"
	NameJournalCatchUpBacklog  = "etcd_recovery_journal_catchup_backlog_revisions"
	NameJournalLastSegment     = "etcd_recovery_journal_last_segment_timestamp_seconds"
	NameJournalUploadDuration  = "etcd_recovery_journal_segment_upload_duration_seconds"
	NameJournalUploadFailures  = "etcd_recovery_journal_segment_upload_failures_total"
	NameJournalSegmentBytes    = "etcd_recovery_journal_segment_bytes"
	NameJournalSegmentEvents   = "etcd_recovery_journal_segment_events"
	NameJournalBudgetUsedBytes = "etcd_recovery_journal_memory_budget_used_bytes"
	NameJournalBudgetBytes     = "etcd_recovery_journal_memory_budget_bytes"
	NameJournalCaptureRunning  = "etcd_recovery_journal_capture_running"
	NameJournalUnstoredSince   = "etcd_recovery_journal_unstored_since_timestamp_seconds"
)

// Defaults of the probes: DefaultUnreadyAfter is how long a segment may
// stay unstored before /healthz fails (a normal upload takes well under
// a second; a frozen store retries for FrozenAfter); LivenessBound is how
// long a capture's loop may go without turning before /livez fails (an
// upload attempt against a frozen store blocks for up to UploadTimeout).
const (
	DefaultUnreadyAfter = 2 * time.Minute
	LivenessBound       = DefaultUploadTimeout + 3*time.Minute
)

var (
	descLeader = prometheus.NewDesc(NameJournalLeader,
		"1 while this process holds the journal's Lease (or runs without --leader-elect) and writes, 0 while it waits for it; identity is its leader-election identity.", []string{"identity"}, nil)
	descCaptures = prometheus.NewDesc(NameJournalCaptures,
		"Clusters whose capture runs in this process now.", nil, nil)
	descLagRevisions = prometheus.NewDesc(NameJournalLagRevisions,
		"Revisions the capture is behind the cluster's current revision (the newest its watch reported: event and progress responses); 0 when caught up.", []string{"cluster"}, nil)
	descLagSeconds = prometheus.NewDesc(NameJournalLagSeconds,
		"Seconds since the capture first fell behind the cluster's current revision and has not caught up; 0 when caught up.", []string{"cluster"}, nil)
	descBacklog = prometheus.NewDesc(NameJournalCatchUpBacklog,
		"Revisions the captures of this process still have to catch up, summed over clusters (etcd_recovery_journal_watch_lag_revisions).", nil, nil)
	descLastSegment = prometheus.NewDesc(NameJournalLastSegment,
		"Time (unix seconds) this process last stored a segment of the cluster.", []string{"cluster"}, nil)
	descRunning = prometheus.NewDesc(NameJournalCaptureRunning,
		"1 while the cluster's capture runs in this process, 0 once it stopped (its watch-lag series are then withdrawn: a stopped capture has no lag to report).", []string{"cluster"}, nil)
	descUnstoredSince = prometheus.NewDesc(NameJournalUnstoredSince,
		"Time (unix seconds) the oldest segment of the cluster not stored yet was first tried; absent while every segment is stored. Kept across a capture's restarts (an upload given up after FrozenAfter) until a segment is stored.", []string{"cluster"}, nil)
	descBudgetUsed = prometheus.NewDesc(NameJournalBudgetUsedBytes,
		"Bytes of the memory budget (--memory-budget) the captures hold now.", nil, nil)
	descBudget = prometheus.NewDesc(NameJournalBudgetBytes,
		"The memory budget (--memory-budget) in bytes; absent without one.", nil, nil)
)

// Metrics are a journal process's series and probes. A nil *Metrics does
// nothing (CaptureOptions.Metrics unset).
type Metrics struct {
	reg            *prometheus.Registry
	budget         *Budget
	now            func() time.Time
	unreadyAfter   time.Duration
	uploadDuration prometheus.Histogram
	segmentBytes   prometheus.Histogram
	segmentEvents  prometheus.Histogram
	uploadFailures *prometheus.CounterVec

	mu       sync.Mutex
	identity string
	leading  bool
	elected  bool // --leader-elect: not leading means following
	clusters map[string]*clusterMetrics
}

type clusterMetrics struct {
	running     bool
	reached     int64 // the last revision the capture holds
	clusterRev  int64 // the cluster's newest revision its watch reported
	behindSince time.Time
	lastSegment time.Time
	beat        time.Time // the capture's loop last turned
	waiting     bool      // waiting for budget: a bounded wait, alive
	// unstored is when the oldest segment not stored yet was first
	// tried (zero: none). Only a stored segment clears it: an upload
	// given up and the capture's restart keep it, since the revisions
	// that segment held are still in no segment.
	unstored time.Time
	// uploading is when the upload in progress began (the duration
	// histogram's start).
	uploading time.Time
}

// MetricsOptions configure NewMetrics.
type MetricsOptions struct {
	// Budget is the captures' shared budget (nil: none).
	Budget *Budget
	// Identity is the leader-election identity; Elected says the process
	// runs with leader election (it is ready while it waits for the Lease).
	Identity string
	Elected  bool
	// UnreadyAfter: /healthz fails once a segment has stayed unstored
	// this long (default DefaultUnreadyAfter).
	UnreadyAfter time.Duration
	Now          func() time.Time
}

// NewMetrics is a journal process's metrics on a registry of their own
// (with the Go and process collectors).
func NewMetrics(o MetricsOptions) *Metrics {
	if o.UnreadyAfter <= 0 {
		o.UnreadyAfter = DefaultUnreadyAfter
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	m := &Metrics{reg: prometheus.NewRegistry(), budget: o.Budget, now: o.Now, unreadyAfter: o.UnreadyAfter,
		identity: o.Identity, elected: o.Elected, leading: !o.Elected, clusters: map[string]*clusterMetrics{},
		uploadDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: NameJournalUploadDuration,
			Help:    "Time from a segment's first upload attempt to its being stored (retries included), every cluster of the process.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}}),
		segmentBytes: prometheus.NewHistogram(prometheus.HistogramOpts{Name: NameJournalSegmentBytes,
			Help:    "Stored size in bytes (compressed, encrypted) of the segments stored, every cluster of the process.",
			Buckets: prometheus.ExponentialBuckets(1024, 4, 9)}),
		segmentEvents: prometheus.NewHistogram(prometheus.HistogramOpts{Name: NameJournalSegmentEvents,
			Help:    "Events in each segment stored, every cluster of the process.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10)}),
		uploadFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: NameJournalUploadFailures,
			Help: "Segment upload attempts that failed (each retry counts), by cluster."}, []string{"cluster"}),
	}
	m.reg.MustRegister(m, m.uploadDuration, m.segmentBytes, m.segmentEvents, m.uploadFailures,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// Describe implements prometheus.Collector (the gauges read at scrape).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeader, descCaptures, descLagRevisions, descLagSeconds, descBacklog, descLastSegment, descRunning, descUnstoredSince, descBudgetUsed, descBudget} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, b2f(m.leading), m.identity)
	var running, backlog int64
	for id, c := range m.clusters {
		ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, b2f(c.running), id)
		if c.running {
			running++
			lag, secs := c.lag(now)
			backlog += lag
			ch <- prometheus.MustNewConstMetric(descLagRevisions, prometheus.GaugeValue, float64(lag), id)
			ch <- prometheus.MustNewConstMetric(descLagSeconds, prometheus.GaugeValue, secs, id)
		}
		if !c.unstored.IsZero() {
			ch <- prometheus.MustNewConstMetric(descUnstoredSince, prometheus.GaugeValue, float64(c.unstored.UnixMilli())/1e3, id)
		}
		if !c.lastSegment.IsZero() {
			ch <- prometheus.MustNewConstMetric(descLastSegment, prometheus.GaugeValue, float64(c.lastSegment.UnixMilli())/1e3, id)
		}
	}
	ch <- prometheus.MustNewConstMetric(descCaptures, prometheus.GaugeValue, float64(running))
	ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(backlog))
	used, _ := m.budget.Used()
	ch <- prometheus.MustNewConstMetric(descBudgetUsed, prometheus.GaugeValue, float64(used))
	if m.budget != nil {
		ch <- prometheus.MustNewConstMetric(descBudget, prometheus.GaugeValue, float64(m.budget.limit))
	}
}

func (c *clusterMetrics) lag(now time.Time) (int64, float64) {
	if c.clusterRev <= c.reached {
		return 0, 0
	}
	return c.clusterRev - c.reached, now.Sub(c.behindSince).Seconds()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Registry is the registry the series are on.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SetLeading records that this process leads (writes) or waits for the
// Lease.
func (m *Metrics) SetLeading(leading bool) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leading = leading
}

// Forget drops a cluster's series (its EtcdCluster is gone).
func (m *Metrics) Forget(clusterID string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.clusters, clusterID)
	m.mu.Unlock()
	m.uploadFailures.DeleteLabelValues(clusterID)
}

// cluster is a cluster's state, created on first use; with m.mu held.
func (m *Metrics) cluster(id string) *clusterMetrics {
	c, ok := m.clusters[id]
	if !ok {
		c = &clusterMetrics{}
		m.clusters[id] = c
	}
	return c
}

// update runs f on a cluster's state under the lock.
func (m *Metrics) update(id string, f func(c *clusterMetrics, now time.Time)) {
	if m == nil {
		return
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m.cluster(id), now)
}

// captureRunning: a capture of the cluster starts (true) or ended.
func (m *Metrics) captureRunning(id string, running bool, reached int64) {
	m.update(id, func(c *clusterMetrics, now time.Time) {
		c.running, c.beat, c.waiting = running, now, false
		if running {
			c.reached = reached
			c.noteLag(now)
		}
	})
}

// beat: the capture's loop turned; waiting says it now waits for budget.
func (m *Metrics) beat(id string, waiting bool) {
	m.update(id, func(c *clusterMetrics, now time.Time) { c.beat, c.waiting = now, waiting })
}

// reachedRev: the capture holds every revision up to rev.
func (m *Metrics) reachedRev(id string, rev int64) {
	m.update(id, func(c *clusterMetrics, now time.Time) {
		c.reached = max(c.reached, rev)
		c.noteLag(now)
	})
}

// clusterRevision: the watch reported the cluster's revision rev.
func (m *Metrics) clusterRevision(id string, rev int64) {
	m.update(id, func(c *clusterMetrics, now time.Time) {
		c.clusterRev = max(c.clusterRev, rev)
		c.noteLag(now)
	})
}

func (c *clusterMetrics) noteLag(now time.Time) {
	switch {
	case c.clusterRev <= c.reached:
		c.behindSince = time.Time{}
	case c.behindSince.IsZero():
		c.behindSince = now
	}
}

// uploadStarted: a segment's first upload attempt begins.
func (m *Metrics) uploadStarted(id string) {
	m.update(id, func(c *clusterMetrics, now time.Time) {
		c.beat, c.uploading = now, now
		if c.unstored.IsZero() {
			c.unstored = now
		}
	})
}

// uploadFailed: an upload attempt failed.
func (m *Metrics) uploadFailed(id string) {
	if m == nil {
		return
	}
	m.uploadFailures.WithLabelValues(id).Inc()
	m.beat(id, false)
}

// uploadEnded: a segment was stored (info), or given up (nil).
func (m *Metrics) uploadEnded(id string, info *SegmentInfo, events int) {
	if m == nil {
		return
	}
	var took time.Duration
	m.update(id, func(c *clusterMetrics, now time.Time) {
		took = now.Sub(c.uploading)
		c.beat = now
		if info != nil {
			c.lastSegment, c.unstored = now, time.Time{}
		}
	})
	if info != nil {
		m.uploadDuration.Observe(took.Seconds())
		m.segmentBytes.Observe(float64(info.Size))
		m.segmentEvents.Observe(float64(events))
	}
}

// Live is /livez: nil while every running capture's loop (its watch loop
// or its uploader) turned within LivenessBound, or waits for budget.
func (m *Metrics) Live() error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var stuck []string
	for id, c := range m.clusters {
		if c.running && !c.waiting && now.Sub(c.beat) > LivenessBound {
			stuck = append(stuck, fmt.Sprintf("%s (idle %s)", id, now.Sub(c.beat).Round(time.Second)))
		}
	}
	if len(stuck) > 0 {
		slices.Sort(stuck)
		return fmt.Errorf("the capture loop of %v has not turned within %s", stuck, LivenessBound)
	}
	return nil
}

// Ready is /healthz: nil for a follower waiting for the Lease, and for a
// leader while no cluster's segment has stayed unstored (its uploads
// failing or hanging) for longer than UnreadyAfter. An upload given up
// after FrozenAfter, and the capture's end and restart, do not make it
// ready again: only a segment stored does (or the cluster forgotten).
// It is the store's health, for SREs and alerts; the Deployment's
// readiness probe does not ask it (a COS outage must neither block node
// drains through the PodDisruptionBudget nor drop the pod from its
// metrics Service).
func (m *Metrics) Ready() error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.leading {
		if m.elected {
			return nil // a follower: ready to take over
		}
		return errors.New("not running")
	}
	var failing []string
	for id, c := range m.clusters {
		if !c.unstored.IsZero() && now.Sub(c.unstored) > m.unreadyAfter {
			failing = append(failing, fmt.Sprintf("%s (for %s)", id, now.Sub(c.unstored).Round(time.Second)))
		}
	}
	if len(failing) > 0 {
		slices.Sort(failing)
		return fmt.Errorf("segments of %v not stored for longer than %s (store failing or frozen)", failing, m.unreadyAfter)
	}
	return nil
}

// Handler serves /metrics, /livez and /healthz (200 "ok", or 503 and the
// reason).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	probe := func(check func() error) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if err := check(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		}
	}
	mux.Handle("/livez", probe(m.Live))
	mux.Handle("/healthz", probe(m.Ready))
	return mux
}
