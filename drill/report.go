package drill

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/store"
)

// What a drill's caller reports: the outcome of one drill (Outcome, from
// Run's record and error), a cluster's row (Result) and the table of a
// drill run (Report). The single-cluster drill (RunNewest), the drill
// that follows a backup and the fleet's drills all report through them,
// so a drill reads the same wherever it ran.

// Outcomes of a drill (Outcome.Result, Result.Result).
const (
	Passed = "passed"
	Failed = "failed"  // the backup failed a check: it is not proven
	NotRun = "not run" // the drill could not run (no etcd of its version, the store failed)
	// Inconclusive: the node, not the backup, stopped the drill (its
	// etcd killed by a signal or the OOM killer, a full scratch disk, a
	// deadline); nothing recorded, restore never skips the backup for it.
	Inconclusive = "inconclusive"
	// NoBackup: the cluster has no committed backup, nothing was drilled
	// (not a failure: inspect warns about missing backups).
	NoBackup = "no backup"
)

// Outcome is what happened to one drill (backup --drill, one cluster or a
// fleet's; a fleet's drill rows).
type Outcome struct {
	Result string `json:"result"`
	// Comparison is the record's comparison mode: catalog.CompareSource
	// (the restored keyspace hashes as the source's at that revision) or
	// catalog.CompareSelf.
	Comparison string        `json:"comparison,omitempty"`
	Error      string        `json:"error,omitempty"`
	Duration   time.Duration `json:"-"`
	Seconds    float64       `json:"durationSeconds,omitempty"`
	// Record is the drill record (drill.json), when the drill ran.
	Record *catalog.DrillRecord `json:"record,omitempty"`
}

// Text is the DRILL column: passed (source), passed (self), FAILED, not
// run, not chosen.
func (d *Outcome) Text() string {
	switch {
	case d == nil:
		return "-"
	case d.Result == Passed && d.Comparison == catalog.CompareSelf:
		return "passed (self)"
	case d.Result == Passed:
		return "passed (" + d.Comparison + ")"
	case d.Result == Failed:
		return "FAILED"
	}
	return d.Result
}

// NewOutcome describes a drill's result: its record and error as Run
// returned them, and how long it took.
func NewOutcome(rec *catalog.DrillRecord, err error, d time.Duration) *Outcome {
	var de *Error
	if rec == nil && errors.As(err, &de) {
		rec = de.Record
	}
	o := &Outcome{Result: Passed, Record: rec, Duration: d, Seconds: d.Seconds()}
	if rec != nil {
		o.Comparison = rec.Comparison.Mode
	}
	switch {
	case err == nil && rec != nil && rec.Passed:
	case err == nil:
		// A drill that returned no error must have passed; anything else
		// is not proof.
		o.Result = Failed
		o.Error = "the drill returned no error but no passing record"
	case de != nil && de.Inconclusive != "":
		o.Result, o.Error = Inconclusive, err.Error()
	case rec != nil:
		o.Result, o.Error = Failed, err.Error()
		if rec.Failed != "" && !strings.Contains(o.Error, rec.Failed) {
			o.Error += " (failed check: " + rec.Failed + ")"
		}
	default:
		o.Result, o.Error = NotRun, err.Error()
	}
	return o
}

// ForBackup are the options of the drill of a backup just committed
// (backup --drill), against its source: the same endpoints and client
// TLS the backup used. plaintext is the local plaintext copy the backup
// streamed when it is encrypted (backup.Taken.Plaintext): the drill then
// downloads nothing and needs no identity.
func ForBackup(m *catalog.Manifest, plaintext string, st store.Store, layout catalog.Layout, src etcdconn.Config,
	etcdBinDir, scratchDir string, log *slog.Logger) Options {
	o := Options{
		ClusterID:  m.ClusterID,
		Store:      st,
		Layout:     layout,
		Backup:     m.Name,
		Source:     src,
		EtcdBinDir: etcdBinDir,
		ScratchDir: scratchDir,
		Log:        log,
	}
	if plaintext != "" {
		o.Plaintext, o.Manifest = plaintext, m
	}
	return o
}

// Result is one cluster's drill, a row of a Report.
type Result struct {
	Cluster string `json:"cluster"`
	Backup  string `json:"backup,omitempty"`
	Result  string `json:"result"` // Passed, Failed, NotRun, Inconclusive, NoBackup
	// Reason says why a cluster was not drilled (NoBackup).
	Reason     string        `json:"reason,omitempty"`
	Comparison string        `json:"comparison,omitempty"`
	Failed     string        `json:"failed,omitempty"`
	Step       string        `json:"step,omitempty"`
	Error      string        `json:"error,omitempty"`
	Duration   time.Duration `json:"-"`
	Seconds    float64       `json:"durationSeconds"`
	// Record is drill.json's content (also with --no-record).
	Record *catalog.DrillRecord `json:"record,omitempty"`
	// EventError says why the drill's Event could not be recorded.
	EventError string `json:"eventError,omitempty"`
}

// NewResult is one drill's row (NewOutcome: a drill that returned no
// error without a passing record is not proof) with its step and backup.
func NewResult(id string, rec *catalog.DrillRecord, err error, d time.Duration) Result {
	o := NewOutcome(rec, err, d)
	r := Result{Cluster: id, Result: o.Result, Comparison: o.Comparison, Error: o.Error, Duration: d, Seconds: d.Seconds(), Record: o.Record}
	var de *Error
	if errors.As(err, &de) {
		r.Step, r.Backup = de.Step(), de.Backup
		if r.Backup == "(newest)" {
			r.Backup = ""
		}
	}
	if o.Record != nil {
		r.Backup, r.Failed = o.Record.Backup, o.Record.Failed
	}
	return r
}

// Report is a drill run's rows, in cluster order: one cluster's (drill
// --cluster-id, RunNewest) or a fleet's (drill --all).
type Report struct {
	Namespace string   `json:"namespace,omitempty"`
	Prefix    string   `json:"prefix,omitempty"`
	Parallel  int      `json:"parallel"`
	Clusters  []Result `json:"clusters"`
	// Failed names the clusters whose drill failed or could not run.
	Failed []string `json:"failed"`
	// NoBackup names the clusters not drilled for want of a committed
	// backup.
	NoBackup []string `json:"noBackup"`
}

// Table is the drill results, one row per cluster: cluster, backup,
// result, comparison, failing check, duration; -o wide adds the step; the
// error (or why the cluster was not drilled) goes below the table.
func (r *Report) Table() output.Table {
	t := output.Table{
		Header: []string{"CLUSTER", "BACKUP", "RESULT", "COMPARISON", "FAILED CHECK", "DURATION", "STEP", "ERROR"},
		Wide:   []string{"STEP"},
		Long:   []string{"ERROR"},
	}
	for _, c := range r.Clusters {
		res, dur := c.Result, c.Duration.Round(time.Millisecond).String()
		switch res {
		case Failed:
			res = "FAILED"
		case NoBackup:
			dur = "-"
		}
		msg := c.Error
		if msg == "" {
			msg = c.Reason
		}
		if c.EventError != "" {
			msg = strings.TrimPrefix(msg+"; event not recorded: "+c.EventError, "; ")
		}
		// The failing check's name ("verify backup", "source hash"); its
		// values are in the error below the table.
		check, _, _ := strings.Cut(c.Failed, ": ")
		t.Rows = append(t.Rows, []string{c.Cluster, dash(c.Backup), res, dash(c.Comparison), dash(check),
			dur, dash(c.Step), dash(msg)})
	}
	return t
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// RunNewest drills one cluster's backup (opts.Backup; empty: the newest
// committed one, named, so that the record says which) and reports it as
// a fleet's drill is reported, one row. The error is Run's (*Error).
func RunNewest(ctx context.Context, opts Options) (*Report, error) {
	if opts.Backup == "" && opts.ToRevision == 0 {
		// Named rather than left to restore's choice: restore prefers an
		// older backup already proven among equal revisions, and never
		// one whose drill failed, so an idle cluster's newest backup
		// would never be drilled and a failed one never re-drilled. With
		// none, Run says there is none. (A point-in-time drill's is the
		// newest at or below its revision: Run chooses it.)
		if entries, err := catalog.Inventory(ctx, opts.Store, opts.Layout, opts.ClusterID); err == nil {
			for _, e := range entries {
				if e.Committed {
					opts.Backup = e.Name
					break
				}
			}
		}
	}
	start := time.Now()
	rec, err := Run(ctx, opts)
	r := NewResult(opts.ClusterID, rec, err, time.Since(start))
	rep := &Report{Prefix: opts.Layout.RootPrefix(), Parallel: 1, Clusters: []Result{r}, Failed: []string{}, NoBackup: []string{}}
	if r.Result != Passed {
		rep.Failed = append(rep.Failed, opts.ClusterID)
	}
	return rep, err
}
