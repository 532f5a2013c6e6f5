package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// A namespace-wide restore (restore-all) in the store: the newest run
// under <prefix>/_restores/ (run ids sort by time) and its latest attempt,
// from the same listing of the root as the backups (no listing of its
// own). Its records are create-only, so each is read once: the plan when
// the newest run changes, an attempt's start and end records when they
// appear; the done records are counted and the beat records' times taken
// from the listing (the time is in the key), never read.
const (
	NameRestoreRunInfo       = "etcd_recovery_restore_run_info"
	NameRestoreRunInProgress = "etcd_recovery_restore_run_in_progress"
	NameRestoreRunKilled     = "etcd_recovery_restore_run_killed"
	NameRestoreRunClusters   = "etcd_recovery_restore_run_clusters"
	NameRestoreRunStarted    = "etcd_recovery_restore_run_started_timestamp_seconds"
	NameRestoreRunDeadline   = "etcd_recovery_restore_run_deadline_timestamp_seconds"
	NameRestoreRunEnded      = "etcd_recovery_restore_run_ended_timestamp_seconds"
	NameRestoreRunExpected   = "etcd_recovery_restore_run_expected_seconds"
)

// RestoreRunStates are the state label values of
// etcd_recovery_restore_run_clusters.
var RestoreRunStates = []string{"planned", "done", "failed"}

var (
	descRestoreRunInfo = prometheus.NewDesc(NameRestoreRunInfo,
		"1 for the newest namespace-wide restore run (restore-all) recorded under the prefix's _restores/, labelled with its id; absent when there is none.", []string{"run"}, nil)
	descRestoreRunInProgress = prometheus.NewDesc(NameRestoreRunInProgress,
		"1 while the newest restore run's latest attempt is in progress (its start record has no end record, its newest beat record, or its start, is less than 3m old; its deadline does not end a live attempt), 0 otherwise; absent when there is no run.", nil, nil)
	descRestoreRunKilled = prometheus.NewDesc(NameRestoreRunKilled,
		"1 when the newest restore run's latest attempt has no end record and is not in progress (no beat record for 3m: the process was killed or lost) and clusters of the plan are not done: rerun the same restore-all to resume it; 0 otherwise; absent when there is no run.", nil, nil)
	descRestoreRunClusters = prometheus.NewDesc(NameRestoreRunClusters,
		"Clusters of the newest restore run, by state: planned (in its plan), done (restored and verified: a done record, by any attempt), failed (named failed by the latest attempt's end record; 0 while it runs).", []string{"state"}, nil)
	descRestoreRunStarted = prometheus.NewDesc(NameRestoreRunStarted,
		"Time (unix seconds) the newest restore run's latest attempt started; absent when the run has no attempt.", nil, nil)
	descRestoreRunDeadline = prometheus.NewDesc(NameRestoreRunDeadline,
		"Time (unix seconds) the newest restore run's latest attempt gives up (its overall timeout); absent when the run has no attempt.", nil, nil)
	descRestoreRunEnded = prometheus.NewDesc(NameRestoreRunEnded,
		"Time (unix seconds) the newest restore run's latest attempt ended (its end record); absent while it runs or when it never ended.", nil, nil)
	descRestoreRunExpected = prometheus.NewDesc(NameRestoreRunExpected,
		"Expected wall time in seconds of the newest restore run, from its plan (the model of the store's throughput, the per-cluster fixed cost and the parallelism).", nil, nil)
)

// RestoreRunState is the newest namespace-wide restore run of the prefix.
type RestoreRunState struct {
	Run      string        `json:"run"`
	Planned  int           `json:"planned"`
	Done     int           `json:"done"`
	Expected time.Duration `json:"expected"`
	// The latest attempt (zero Started: none yet): its start, deadline and
	// end (zero: no end record), and the clusters its end record names
	// failed.
	Started  time.Time `json:"started,omitzero"`
	Deadline time.Time `json:"deadline,omitzero"`
	Ended    time.Time `json:"ended,omitzero"`
	Failed   int       `json:"failed"`
	// LastBeat is the latest attempt's newest beat record's time (zero:
	// none), from the listing.
	LastBeat time.Time `json:"lastBeat,omitzero"`
}

// InProgress: the latest attempt runs at now (no end record, a beat or
// its start within catalog.FleetRestoreHeartbeatGrace:
// catalog.FleetRestoreAlive; a live attempt past its deadline still runs).
func (r *RestoreRunState) InProgress(now time.Time) bool {
	return !r.Started.IsZero() && r.Ended.IsZero() && catalog.FleetRestoreAlive(r.Started, r.LastBeat, r.Deadline, now)
}

// Killed: the latest attempt has no end record and is not in progress (its
// beats stopped), and the plan is not done.
func (r *RestoreRunState) Killed(now time.Time) bool {
	return !r.Started.IsZero() && r.Ended.IsZero() && !catalog.FleetRestoreAlive(r.Started, r.LastBeat, r.Deadline, now) && r.Done < r.Planned
}

// restoreRunListing is the newest run in a listing of the root: its plan's
// key, its latest attempt's start and end keys, and its done records.
type restoreRunListing struct {
	run       string
	plan      string
	started   time.Time
	startKey  string
	endKey    string
	lastBeat  time.Time
	doneCount int
}

// newestRestoreRun finds the newest run (the greatest id) in a listing of
// the root; ok false when there is none.
func newestRestoreRun(layout catalog.Layout, objs []store.ObjectInfo) (restoreRunListing, bool) {
	var newest string
	for _, o := range objs {
		if ki := layout.Classify(o.Key); ki.Kind == catalog.KeyFleetRestore && ki.Name > newest {
			newest = ki.Name
		}
	}
	if newest == "" {
		return restoreRunListing{}, false
	}
	l := restoreRunListing{run: newest}
	ends := map[time.Time]string{}
	beats := map[time.Time]time.Time{}
	for _, o := range objs {
		k, ok := layout.ParseFleetRestoreKey(o.Key)
		if !ok || k.Run != newest {
			continue
		}
		switch k.Record {
		case "plan":
			l.plan = o.Key
		case "done":
			l.doneCount++
		case "start":
			if l.startKey == "" || k.Started.After(l.started) {
				l.started, l.startKey = k.Started, o.Key
			}
		case "end":
			ends[k.Started] = o.Key
		case "beat":
			if k.Beat.After(beats[k.Started]) {
				beats[k.Started] = k.Beat
			}
		}
	}
	if l.startKey != "" {
		l.endKey, l.lastBeat = ends[l.started], beats[l.started]
	}
	return l, true
}

// restoreRunCache keeps the records read at earlier refreshes (they are
// create-only: a key's content never changes).
type restoreRunCache struct {
	planKey string
	plan    catalog.FleetRestorePlan
	att     map[string]catalog.FleetRestoreAttempt
}

// readRestoreRun builds the newest run's state from the listing, reading
// the records it has not read before. found is false when there is no
// run; an error (a record that could not be read) leaves the previous
// refresh's state in place.
func (e *Exporter) readRestoreRun(ctx context.Context, objs []store.ObjectInfo) (state *RestoreRunState, err error) {
	l, found := newestRestoreRun(e.opts.Layout, objs)
	if !found {
		return nil, nil
	}
	c := &e.restoreRuns
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s := &RestoreRunState{Run: l.run, Done: l.doneCount}
	if l.plan != "" {
		if c.planKey != l.plan {
			var p catalog.FleetRestorePlan
			if err := catalog.ReadFleetRestoreRecord(rctx, e.opts.Store, l.plan, &p); err != nil {
				return nil, fmt.Errorf("restore run %s: the plan: %w", l.run, err)
			}
			c.planKey, c.plan = l.plan, p
		}
		s.Planned, s.Expected = len(c.plan.Clusters), c.plan.Expected
	}
	if l.startKey == "" {
		return s, nil
	}
	read := func(key string) (catalog.FleetRestoreAttempt, error) {
		if a, ok := c.att[key]; ok {
			return a, nil
		}
		var a catalog.FleetRestoreAttempt
		if err := catalog.ReadFleetRestoreRecord(rctx, e.opts.Store, key, &a); err != nil {
			return a, fmt.Errorf("restore run %s: an attempt: %w", l.run, err)
		}
		// Keep only the newest run's records: the cache stays small.
		if c.att == nil || len(c.att) > 16 {
			c.att = map[string]catalog.FleetRestoreAttempt{}
		}
		c.att[key] = a
		return a, nil
	}
	start, err := read(l.startKey)
	if err != nil {
		return nil, err
	}
	s.Started, s.Deadline, s.LastBeat = start.Started, start.Deadline, l.lastBeat
	if s.Started.IsZero() {
		s.Started = l.started
	}
	if l.endKey != "" {
		end, err := read(l.endKey)
		if err != nil {
			return nil, err
		}
		s.Ended, s.Failed = end.Ended, len(end.Failed)
		if s.Ended.IsZero() {
			// An end record is an end, whatever it holds.
			s.Ended = s.Started
		}
	}
	return s, nil
}

// collectRestoreRun sends the newest restore run's gauges, judged at now.
func collectRestoreRun(gauge func(*prometheus.Desc, float64, ...string), r *RestoreRunState, now time.Time) {
	if r == nil {
		return
	}
	gauge(descRestoreRunInfo, 1, r.Run)
	gauge(descRestoreRunInProgress, b2f(r.InProgress(now)))
	gauge(descRestoreRunKilled, b2f(r.Killed(now)))
	for _, s := range RestoreRunStates {
		n := map[string]int{"planned": r.Planned, "done": r.Done, "failed": r.Failed}[s]
		gauge(descRestoreRunClusters, float64(n), s)
	}
	gauge(descRestoreRunExpected, r.Expected.Seconds())
	if !r.Started.IsZero() {
		gauge(descRestoreRunStarted, unixSeconds(r.Started))
		gauge(descRestoreRunDeadline, unixSeconds(r.Deadline))
	}
	if !r.Ended.IsZero() {
		gauge(descRestoreRunEnded, unixSeconds(r.Ended))
	}
}
