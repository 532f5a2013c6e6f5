package catalog

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
)

// An undelete (package undelete) writes keys back into a live cluster, so
// every real run is recorded beside the cluster's backups, for the
// incident's review: who ran it, when, from which point, for which
// prefixes, and what it did with each key.
//
//	<prefix>/_undeletes/<cluster-id>/<run>.start.json   the run began (UndeleteRecord without Ended; Keys it is about to write), create-only
//	<prefix>/_undeletes/<cluster-id>/<run>.json         the run ended (UndeleteRecord with Ended, Outcome and Keys), create-only
//
// <run> is an UndeleteRunID: the start time in the backup names'
// fixed-width form and 8 random hex digits, so runs sort by time and two
// runs never share a key. A start record with no end record is a run that
// was killed (SIGKILL, its node lost) before it could say how it ended;
// a run cancelled by a signal writes its end record (Outcome interrupted).
// A dry run writes nothing to the cluster and no record.

const (
	undeletesDir         = "_undeletes/"
	undeleteStartSuffix  = ".start.json"
	undeleteEndSuffix    = ".json"
	maxUndeleteRecordLen = 256 << 20 // about 1.2 M keys (a record holds some 210 bytes a key)
)

// UndeleteRecordVersion is the undelete record's format version.
const UndeleteRecordVersion = 1

// Outcomes of an undelete run (UndeleteRecord.Outcome).
const (
	UndeleteComplete    = "complete"
	UndeleteInterrupted = "interrupted"
	UndeleteFailed      = "failed"
)

// UndeleteRecord is an undelete run's record.
type UndeleteRecord struct {
	Version   int    `json:"version"`
	Run       string `json:"run"`
	ClusterID string `json:"clusterID"`
	// Operator is who ran it (--operator: by default the user and host, in
	// a pod its name); Host the machine or pod it ran on.
	Operator string    `json:"operator"`
	Host     string    `json:"host,omitempty"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended,omitzero"`
	// Prefixes and Namespaces are what was asked to come back.
	Prefixes   []string `json:"prefixes,omitempty"`
	Namespaces []string `json:"namespaces,omitempty"`
	// Revision is the point the keys came back from; ToTime the time it
	// was asked as (zero when asked as a revision).
	Revision int64     `json:"revision"`
	ToTime   time.Time `json:"toTime,omitzero"`
	// Backup is the backup the journal was replayed from to build the
	// point; Site the store read when it is not the primary.
	Backup  string `json:"backup,omitempty"`
	Site    string `json:"site,omitempty"`
	Replace bool   `json:"replace,omitempty"`
	// LiveRevision is the live cluster's revision when its keys were
	// read; Accepted the --accept-* flags that let the run past a check;
	// Warnings what the run warned of.
	LiveRevision int64    `json:"liveRevision,omitempty"`
	Accepted     []string `json:"accepted,omitempty"`
	Warnings     []string `json:"warnings,omitempty"`
	// Outcome (end record only): UndeleteComplete, UndeleteInterrupted
	// or UndeleteFailed, with Error.
	Outcome string         `json:"outcome,omitempty"`
	Error   string         `json:"error,omitempty"`
	Counts  map[string]int `json:"counts,omitempty"`
	// Keys are every key the run considered, with what it did (the start
	// record: what it was about to do). Values are never recorded.
	Keys []UndeleteKey `json:"keys,omitempty"`
	// Key is where the record is (not stored).
	Key string `json:"-"`
}

// UndeleteKey is one key of an undelete run.
type UndeleteKey struct {
	Key    string `json:"key"`
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
	// ModRevision is the key's revision at the point; Written the
	// revision the run wrote it at (0: not written).
	ModRevision int64 `json:"modRevision,omitempty"`
	Written     int64 `json:"written,omitempty"`
}

var undeleteRunRe = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}\.[0-9]{3}Z-[0-9a-f]{8}$`)

// NewUndeleteRunID is a new run id: the time and 8 random hex digits.
func NewUndeleteRunID(t time.Time) string { return NewFleetRestoreRunID(t) }

// ValidateUndeleteRunID checks a run id's form.
func ValidateUndeleteRunID(id string) error {
	if !undeleteRunRe.MatchString(id) {
		return fmt.Errorf("undelete run id %q: want <time>-<8 hex digits>", id)
	}
	return nil
}

// UndeletesRoot is the folder of every cluster's undelete records:
// <prefix>/_undeletes/.
func (l Layout) UndeletesRoot() string { return l.RootPrefix() + undeletesDir }

// UndeletesPrefix is a cluster's undelete records' folder.
func (l Layout) UndeletesPrefix(cluster string) string { return l.UndeletesRoot() + cluster + "/" }

// UndeleteRecordKey is a run's start record (start true) or end record.
func (l Layout) UndeleteRecordKey(cluster, run string, start bool) string {
	if start {
		return l.UndeletesPrefix(cluster) + run + undeleteStartSuffix
	}
	return l.UndeletesPrefix(cluster) + run + undeleteEndSuffix
}

// ParseUndeleteKey parses a key under UndeletesRoot: its cluster, its run
// and whether it is a start record. ok is false for anything else.
func (l Layout) ParseUndeleteKey(key string) (cluster, run string, start, ok bool) {
	rest, found := strings.CutPrefix(key, l.UndeletesRoot())
	if !found {
		return "", "", false, false
	}
	cluster, name, found := strings.Cut(rest, "/")
	if !found || ValidateClusterID(cluster) != nil {
		return "", "", false, false
	}
	if r, s := strings.CutSuffix(name, undeleteStartSuffix); s {
		run, start = r, true
	} else if r, e := strings.CutSuffix(name, undeleteEndSuffix); e {
		run = r
	} else {
		return "", "", false, false
	}
	if ValidateUndeleteRunID(run) != nil {
		return "", "", false, false
	}
	return cluster, run, start, true
}

// WriteUndeleteRecord writes a run's start (start true) or end record,
// create-only (a record there already is store.ErrExists), and returns its
// key.
func WriteUndeleteRecord(ctx context.Context, st store.Store, l Layout, r UndeleteRecord, start bool) (string, error) {
	if err := ValidateClusterID(r.ClusterID); err != nil {
		return "", err
	}
	if err := ValidateUndeleteRunID(r.Run); err != nil {
		return "", err
	}
	if r.Version == 0 {
		r.Version = UndeleteRecordVersion
	}
	key := l.UndeleteRecordKey(r.ClusterID, r.Run, start)
	if err := objectio.CreateRecord(ctx, st, key, r, nil); err != nil {
		return key, fmt.Errorf("cluster %s: write the undelete record %s: %w", r.ClusterID, key, err)
	}
	return key, nil
}

// ListUndeleteRecords reads a cluster's undelete runs, oldest first: for
// each run its end record, or its start record when it has none (Ended
// zero: killed before it ended, or still running). A damaged record is
// skipped and named in the error, which is returned with the rest.
func ListUndeleteRecords(ctx context.Context, st store.Store, l Layout, cluster string) ([]UndeleteRecord, error) {
	if err := ValidateClusterID(cluster); err != nil {
		return nil, err
	}
	listed, err := st.List(ctx, l.UndeletesPrefix(cluster))
	if err != nil {
		return nil, fmt.Errorf("cluster %s: list the undelete records: %w", cluster, err)
	}
	type pair struct{ start, end string }
	runs := map[string]*pair{}
	for _, o := range listed {
		c, run, start, ok := l.ParseUndeleteKey(o.Key)
		if !ok || c != cluster {
			continue
		}
		p := runs[run]
		if p == nil {
			p = &pair{}
			runs[run] = p
		}
		if start {
			p.start = o.Key
		} else {
			p.end = o.Key
		}
	}
	ids := make([]string, 0, len(runs))
	for id := range runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []UndeleteRecord
	var errs []error
	for _, id := range ids {
		key := runs[id].end
		if key == "" {
			key = runs[id].start
		}
		var r UndeleteRecord
		if err := objectio.ReadRecord(ctx, st, key, &r, objectio.RecordOptions{Max: maxUndeleteRecordLen}); err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			errs = append(errs, fmt.Errorf("undelete record %s: %w", key, err))
			continue
		}
		r.Key = key
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}
