package catalog

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
)

// A namespace-wide restore (restore-all) keeps its plan and its progress
// in the store, under the namespace's prefix, so that a second run after a
// SIGTERM, a crash or a partial failure finishes the rest without redoing
// what was verified, and so that the exporter (which reads the store) can
// show a restore in progress:
//
//	<prefix>/_restores/<run>/plan.json                  the run's plan (FleetRestorePlan), written first, create-only
//	<prefix>/_restores/<run>/attempts/<time>.start.json an attempt began (FleetRestoreAttempt), create-only
//	<prefix>/_restores/<run>/attempts/<time>.end.json   that attempt ended (FleetRestoreAttempt, with Ended), create-only
//	<prefix>/_restores/<run>/attempts/<time>.beat-<unix seconds>.json
//	                                                    that attempt was alive then (FleetRestoreBeat), create-only, one a minute
//	<prefix>/_restores/<run>/done/<cluster>.json        a cluster restored AND verified (FleetRestoreDone), create-only
//
// Every record is create-only and none is ever rewritten: a done record is
// written only after the restored cluster was verified, so a cluster is
// never reported done half-way. <run> is a FleetRestoreRunID; <time> is
// the attempt's start in the backup names' fixed-width form.
//
// While an attempt runs it writes a beat record every
// FleetRestoreHeartbeatEvery; the beat's time is in its key, so a listing
// tells how long ago an attempt last beat without reading anything. An
// attempt with no end record counts as in progress only while its newest
// beat (or its start) is younger than FleetRestoreHeartbeatGrace and its
// deadline has not passed (FleetRestoreAlive): a process killed hard
// (SIGKILL, its node lost) stops beating, and a rerun resumes its run a
// few minutes later.

const (
	restoresDir       = "_restores/"
	fleetPlanObject   = "plan.json"
	fleetAttemptsDir  = "attempts/"
	fleetDoneDir      = "done/"
	fleetStartSuffix  = ".start.json"
	fleetEndSuffix    = ".end.json"
	fleetBeatInfix    = ".beat-"
	fleetRecordSuffix = ".json"
)

// FleetRestorePlanVersion is the plan record's format version.
const FleetRestorePlanVersion = 1

// FleetRestorePlan is a namespace-wide restore's plan: what was asked
// (Request, whose Fingerprint finds the run again on a rerun) and, for each
// selected cluster, what it would be restored from.
type FleetRestorePlan struct {
	Version   int       `json:"version"`
	Run       string    `json:"run"`
	Namespace string    `json:"namespace"`
	Created   time.Time `json:"created"`
	// Request is what the SRE asked for, canonical (sorted names and
	// labels, the point in time in UTC): two runs with the same request
	// are the same run, resumed.
	Request FleetRestoreRequest `json:"request"`
	// Fingerprint is FleetRestoreFingerprint(Request).
	Fingerprint string `json:"fingerprint"`
	// Clusters are the clusters the run restores, in the order chosen.
	Clusters []FleetRestorePlanned `json:"clusters"`
	// Expected is the plan's expected wall time (the model's inputs are
	// in Model).
	Expected time.Duration     `json:"expected"`
	Model    map[string]string `json:"model,omitempty"`
}

// FleetRestoreRequest is what a namespace-wide restore was asked to do.
type FleetRestoreRequest struct {
	Names    []string `json:"names,omitempty"`
	Selector string   `json:"selector,omitempty"`
	// ToTime / ToRevision: a point in time for every cluster (each to its
	// own revision at that time); zero: the newest backup.
	ToTime     time.Time `json:"toTime,omitzero"`
	ToRevision int64     `json:"toRevision,omitempty"`
	// Rebuild: clusters with backups and no EtcdCluster are rebuilt from
	// their escrow.
	Rebuild bool `json:"rebuild,omitempty"`
	// Force restores clusters that are healthy too.
	Force bool `json:"force,omitempty"`
}

// FleetRestorePlanned is one cluster of a plan.
type FleetRestorePlanned struct {
	Cluster string `json:"cluster"`
	// Action is "restore" (an EtcdCluster that lost quorum, or any with a
	// point in time or Force) or "rebuild" (no EtcdCluster: rebuilt from
	// the escrow, then restored).
	Action string `json:"action"`
	Backup string `json:"backup,omitempty"`
	// Revision is the backup's revision, or the point-in-time target's.
	Revision int64 `json:"revision,omitempty"`
	// Bytes is what the restore fetches from the store.
	Bytes int64 `json:"bytes"`
}

// FleetRestoreAttempt is one run of a plan (a first run, or a rerun that
// resumes it). The start record has Ended zero; the end record is the same
// attempt with Ended set and its tallies.
type FleetRestoreAttempt struct {
	Run     string    `json:"run"`
	Started time.Time `json:"started"`
	// Deadline is when the attempt gives up (its overall timeout): an
	// attempt with no end record past its deadline was killed, and is not
	// in progress any more.
	Deadline time.Time `json:"deadline"`
	Host     string    `json:"host,omitempty"`
	Parallel int       `json:"parallel"`
	Ended    time.Time `json:"ended,omitzero"`
	// Tallies at the end: clusters verified in this attempt, already done
	// before it (skipped), failed (cluster: step: cause), and not started
	// (cancelled first).
	Verified   int      `json:"verified,omitempty"`
	Skipped    int      `json:"skipped,omitempty"`
	Failed     []string `json:"failed,omitempty"`
	NotStarted int      `json:"notStarted,omitempty"`
	Cancelled  bool     `json:"cancelled,omitempty"`
	// Yielded: the attempt stopped right after it began, having found
	// another attempt in the namespace begun at the same time; it did
	// nothing, and a run's completeness is judged by its attempts that
	// did not yield.
	Yielded bool `json:"yielded,omitempty"`
	// Key is where the record is (not in the record itself).
	Key string `json:"-"`
}

// InProgress reports whether the attempt (its start record, with no end
// record found) still counts as running at now, lastBeat being its newest
// beat record's time (zero: none): FleetRestoreAlive.
func (a FleetRestoreAttempt) InProgress(now, lastBeat time.Time) bool {
	return a.Ended.IsZero() && FleetRestoreAlive(a.Started, lastBeat, a.Deadline, now)
}

// FleetRestoreHeartbeatEvery is how often a running attempt writes a beat
// record; FleetRestoreHeartbeatGrace how long after its newest beat (or
// its start) an attempt with no end record still counts as running: three
// missed beats.
const (
	FleetRestoreHeartbeatEvery = time.Minute
	FleetRestoreHeartbeatGrace = 3 * time.Minute
)

// FleetRestoreAlive says whether an attempt with no end record, started at
// started, whose newest beat is lastBeat (zero: none yet), counts as
// running at now: its newest beat (or its start) is younger than
// FleetRestoreHeartbeatGrace. Otherwise it was killed (or lost), and its
// run may be resumed. The deadline does not end a live attempt: a process
// still beating past it (a namespace slower than its plan) still holds the
// namespace, or a rerun would restore the same clusters beside it; that
// it is late is what the exporter's deadline metric and the slow-run
// alert say. deadline is kept in the signature for the callers that show it.
func FleetRestoreAlive(started, lastBeat, deadline, now time.Time) bool {
	_ = deadline
	last := started
	if lastBeat.After(last) {
		last = lastBeat
	}
	return now.Sub(last) < FleetRestoreHeartbeatGrace
}

// FleetRestoreBeat is a beat record: an attempt was alive at Beat.
type FleetRestoreBeat struct {
	Run     string    `json:"run"`
	Started time.Time `json:"started"`
	Beat    time.Time `json:"beat"`
	Host    string    `json:"host,omitempty"`
}

// FleetRestoreDone is a cluster restored and verified by a run.
type FleetRestoreDone struct {
	Run      string    `json:"run"`
	Cluster  string    `json:"cluster"`
	Action   string    `json:"action"`
	Backup   string    `json:"backup"`
	Revision int64     `json:"revision"`
	Verified time.Time `json:"verified"`
	// Verification is "verified: revision only" when the restore (a
	// killed attempt's, adopted after its staged copy was gone) was
	// verified by its members and revision, not its key count; empty:
	// fully.
	Verification string        `json:"verification,omitempty"`
	Duration     time.Duration `json:"duration"`
	// ClientURL is what the customer's kube-apiserver reaches the cluster
	// at (it must be restarted once its etcd is back).
	ClientURL string `json:"clientURL,omitempty"`
	// UID is the uid of the EtcdCluster the restore left (etcd-operator
	// recreates it): a rerun skips the cluster only while it is that one
	// and has quorum.
	UID string `json:"uid,omitempty"`
}

var fleetRunRe = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}\.[0-9]{3}Z-[0-9a-f]{8}$`)

// NewFleetRestoreRunID is a new run id: the time and 8 random hex digits
// (as backup names), so run ids sort by time.
func NewFleetRestoreRunID(t time.Time) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("restore-all: crypto/rand: " + err.Error())
	}
	return t.UTC().Format(TimeLayout) + "-" + hex.EncodeToString(b[:])
}

// ValidateFleetRestoreRunID checks a run id's form.
func ValidateFleetRestoreRunID(id string) error {
	if !fleetRunRe.MatchString(id) {
		return fmt.Errorf("restore run id %q: want <time>-<8 hex digits>, as restore-all prints it", id)
	}
	return nil
}

// RestoresPrefix is the folder of every namespace-wide restore run:
// <prefix>/_restores/.
func (l Layout) RestoresPrefix() string { return l.RootPrefix() + restoresDir }

// FleetRestorePrefix is one run's folder.
func (l Layout) FleetRestorePrefix(run string) string { return l.RestoresPrefix() + run + "/" }

// FleetRestorePlanKey is a run's plan record.
func (l Layout) FleetRestorePlanKey(run string) string {
	return l.FleetRestorePrefix(run) + fleetPlanObject
}

// FleetRestoreAttemptKey is an attempt's start (end false) or end record.
func (l Layout) FleetRestoreAttemptKey(run string, started time.Time, end bool) string {
	suffix := fleetStartSuffix
	if end {
		suffix = fleetEndSuffix
	}
	return l.FleetRestorePrefix(run) + fleetAttemptsDir + started.UTC().Format(TimeLayout) + suffix
}

// FleetRestoreBeatKey is a beat record of the attempt started at started,
// written at at (whole seconds in the key).
func (l Layout) FleetRestoreBeatKey(run string, started, at time.Time) string {
	return l.FleetRestorePrefix(run) + fleetAttemptsDir + started.UTC().Format(TimeLayout) + fleetBeatInfix +
		strconv.FormatInt(at.Unix(), 10) + fleetRecordSuffix
}

// FleetRestoreDoneKey is a cluster's done record in a run.
func (l Layout) FleetRestoreDoneKey(run, cluster string) string {
	return l.FleetRestorePrefix(run) + fleetDoneDir + cluster + fleetRecordSuffix
}

// FleetRestoreKey is what a key under RestoresPrefix is: its run, and
// which record (plan, start, end, beat or done; Cluster for done, Started
// for an attempt's records, Beat for a beat). ok is false for anything
// else.
type FleetRestoreKey struct {
	Run     string
	Record  string // "plan", "start", "end", "beat", "done"
	Cluster string
	Started time.Time
	Beat    time.Time
}

// ParseFleetRestoreKey parses a key under l.RestoresPrefix().
func (l Layout) ParseFleetRestoreKey(key string) (FleetRestoreKey, bool) {
	rest, ok := strings.CutPrefix(key, l.RestoresPrefix())
	if !ok {
		return FleetRestoreKey{}, false
	}
	run, obj, ok := strings.Cut(rest, "/")
	if !ok || ValidateFleetRestoreRunID(run) != nil {
		return FleetRestoreKey{}, false
	}
	k := FleetRestoreKey{Run: run}
	switch {
	case obj == fleetPlanObject:
		k.Record = "plan"
		return k, true
	case strings.HasPrefix(obj, fleetDoneDir):
		c, ok := strings.CutSuffix(strings.TrimPrefix(obj, fleetDoneDir), fleetRecordSuffix)
		if !ok || ValidateClusterID(c) != nil {
			return FleetRestoreKey{}, false
		}
		k.Record, k.Cluster = "done", c
		return k, true
	case strings.HasPrefix(obj, fleetAttemptsDir):
		name := strings.TrimPrefix(obj, fleetAttemptsDir)
		if ts, beat, ok := strings.Cut(name, fleetBeatInfix); ok {
			secs, ok := strings.CutSuffix(beat, fleetRecordSuffix)
			t, err := time.Parse(TimeLayout, ts)
			if !ok || err != nil || secs == "" || strings.TrimLeft(secs, "0123456789") != "" {
				return FleetRestoreKey{}, false
			}
			n, err := strconv.ParseInt(secs, 10, 64)
			if err != nil {
				return FleetRestoreKey{}, false
			}
			k.Record, k.Started, k.Beat = "beat", t, time.Unix(n, 0).UTC()
			return k, true
		}
		for rec, suffix := range map[string]string{"start": fleetStartSuffix, "end": fleetEndSuffix} {
			if ts, ok := strings.CutSuffix(name, suffix); ok {
				t, err := time.Parse(TimeLayout, ts)
				if err != nil {
					return FleetRestoreKey{}, false
				}
				k.Record, k.Started = rec, t
				return k, true
			}
		}
	}
	return FleetRestoreKey{}, false
}

// WriteFleetRestoreRecord writes one of a run's records (a plan, an
// attempt or a done record) at key, create-only: a record there already is
// store.ErrExists.
func WriteFleetRestoreRecord(ctx context.Context, st store.Store, key string, v any) error {
	return objectio.CreateRecord(ctx, st, key, v, nil)
}

// ReadFleetRestoreRecord reads one of a run's records at key into v.
func ReadFleetRestoreRecord(ctx context.Context, st store.Store, key string, v any) error {
	if err := objectio.ReadRecord(ctx, st, key, v, objectio.RecordOptions{Max: maxSmallRecordBytes}); err != nil {
		return fmt.Errorf("restore run record %s: %w", key, err)
	}
	return nil
}

// FleetRestoreFingerprint is a request's identity: the sha256 of its
// canonical JSON (names and labels sorted by the caller, times in UTC),
// in hex. A rerun with the same request resumes the newest unfinished run
// that has it.
func FleetRestoreFingerprint(r FleetRestoreRequest) string {
	r.ToTime = r.ToTime.UTC()
	b, err := json.Marshal(r)
	if err != nil {
		panic("restore-all: fingerprint: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
