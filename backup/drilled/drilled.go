// Package drilled composes a backup and the restore drill of it, as
// backup --drill runs them for one cluster (the CLI) and for each cluster
// of a namespace (fleet): backup.Take commits the backup, the drill runs
// at once (while the source can still answer for the snapshot's revision,
// on the plaintext an encrypted backup streamed), and the prune comes
// last (Taken.Prune), so that the retention rule `drilled` sees the new
// record. Neither backup nor drill imports the other; this package is
// where they meet, and it reports the pair (Report).
package drilled

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
)

// Drill drills the committed backup m: drill.Run with drill.ForBackup's
// options in production (tests stand in for it). plaintext is
// backup.Taken.Plaintext: "" for an unencrypted backup, else the local
// plaintext copy the backup streamed, which the drill may take over.
type Drill func(ctx context.Context, m *catalog.Manifest, plaintext string) (*catalog.DrillRecord, error)

// Result is a committed backup and the drill that followed it.
type Result struct {
	*backup.Result
	// Drill is the drill's record: nil when it could not run. DrillErr is
	// its error (nil when it passed).
	Drill    *catalog.DrillRecord
	DrillErr error
}

// Run takes the backup (backup.Take, with KeepPlaintext), drills it with
// d, then applies Options.Prune. A failed drill (or one that could not
// run) never undoes the backup: Run returns the Result, with the record,
// and a *backup.Error at backup.StepDrill saying the backup is committed;
// the prune still runs after it, unless the run was cancelled (nothing
// is deleted after a drill cut short). A failed prune's error is joined to
// the drill's. A failed backup is Take's error and no Result.
func Run(ctx context.Context, opts backup.Options, d Drill) (*Result, error) {
	opts.KeepPlaintext = true
	t, err := backup.Take(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer t.Release()
	res := &Result{Result: t.Result()}
	m := res.Manifest
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("cluster", opts.ClusterID)

	// After the commit, before the prune: the drill's record is what the
	// retention rule `drilled` reads.
	res.Drill, res.DrillErr = drillTaken(ctx, t, d)
	var drillErr error
	if res.DrillErr != nil {
		// No record: the drill could not run (no etcd of the version, no
		// room, the store failed), which proves nothing either way; with
		// one, the backup failed a check.
		what := "failed"
		if res.Drill == nil {
			what = "could not run"
		}
		drillErr = &backup.Error{ClusterID: opts.ClusterID, At: backup.StepDrill,
			Err: fmt.Errorf("the backup itself was committed (%s); its restore drill %s: %w", m.Name, what, res.DrillErr)}
		log.Error("restore drill of the new backup "+what, "backup", m.Name, "err", res.DrillErr)
	} else if res.Drill != nil {
		log.Info("restore drill passed", "backup", m.Name, "comparison", res.Drill.Comparison.Mode,
			"duration", res.Drill.FinishedAt.Sub(res.Drill.StartedAt).Round(time.Millisecond))
	}
	if ctx.Err() != nil {
		return res, drillErr
	}
	if _, err := t.Prune(ctx); err != nil {
		if drillErr != nil {
			return res, errors.Join(drillErr, err)
		}
		return res, err
	}
	return res, drillErr
}

// drillTaken runs d on the committed backup: on the plaintext copy (checked
// against the manifest first) when it is encrypted, removed as soon as the
// drill returns.
func drillTaken(ctx context.Context, t *backup.Taken, d Drill) (*catalog.DrillRecord, error) {
	defer t.Release()
	path, err := t.Plaintext()
	if err != nil {
		return nil, err
	}
	return d(ctx, t.Result().Manifest, path)
}

// Outcome is the drill's outcome (drill.NewOutcome), timed by its record.
func (r *Result) Outcome() *drill.Outcome {
	var took time.Duration
	if d := r.Drill; d != nil {
		took = d.FinishedAt.Sub(d.StartedAt)
	}
	return drill.NewOutcome(r.Drill, r.DrillErr, took)
}

// Report is one cluster's `backup --drill`: the backup's report
// (backup.Report) with the drill's outcome.
type Report struct {
	*backup.Report
	Drill *drill.Outcome
}

// NewReport is the report of a finished Run.
func NewReport(res *Result) *Report {
	return &Report{Report: backup.NewReport(res.Result), Drill: res.Outcome()}
}

// MarshalJSON is the manifest itself, with "pruned" after --prune and
// "drill".
func (r *Report) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		*catalog.Manifest
		Pruned *prune.PruneReport `json:"pruned,omitempty"`
		Drill  *drill.Outcome     `json:"drill"`
	}{r.Manifest, r.Pruned, r.Drill})
}

// Tables are the backup's (backup.Report.Tables) with a DRILL column and
// the drill's result below the backup's row, before its lock.
func (r *Report) Tables() []output.Table {
	ts := r.Report.Tables()
	t, d := &ts[0], r.Drill
	t.Header = append(t.Header, "DRILL")
	t.Rows[0] = append(t.Rows[0], d.Text())
	var line string
	switch d.Result {
	case drill.Passed:
		line = "drill: passed"
		if rec := d.Record; rec != nil {
			line += fmt.Sprintf(" in %s on etcd %s, comparison %s", d.Duration.Round(time.Millisecond), rec.EtcdVersion, rec.Comparison.Mode)
			if rec.Comparison.Detail != "" {
				line += " (" + rec.Comparison.Detail + ")"
			}
		}
		line += "\n"
	default:
		line = fmt.Sprintf("drill: %s: %s\n", d.Result, strings.TrimSpace(d.Error))
	}
	t.Footer = line + t.Footer
	return ts
}
