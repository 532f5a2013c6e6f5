package backup

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
)

// Results of the drill of a new backup (DrillOutcome.Result).
const (
	DrillPassed = "passed"
	DrillFailed = "failed"  // the backup failed a check: it is not proven
	DrillNotRun = "not run" // the drill could not run (no etcd of its version, the store failed)
	// DrillInconclusive: the node, not the backup, stopped the drill (its
	// etcd killed by a signal or the OOM killer, a full scratch disk, a
	// deadline); nothing recorded, restore never skips the backup for it.
	DrillInconclusive = "inconclusive"
)

// DrillOutcome is what happened to the drill of a new backup (backup
// --drill, one cluster or a fleet's).
type DrillOutcome struct {
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
func (d *DrillOutcome) Text() string {
	switch {
	case d == nil:
		return "-"
	case d.Result == DrillPassed && d.Comparison == catalog.CompareSelf:
		return "passed (self)"
	case d.Result == DrillPassed:
		return "passed (" + d.Comparison + ")"
	case d.Result == DrillFailed:
		return "FAILED"
	}
	return d.Result
}

// Report is one cluster's `backup` (--cluster-id): the committed backup,
// then the prune (--prune) and the restore drill (--drill) that followed
// it.
type Report struct {
	Manifest *catalog.Manifest
	Duration time.Duration
	Pruned   *prune.PruneReport
	// Drilled says --drill was asked for; Drill is its outcome.
	Drilled   bool
	Drill     *DrillOutcome
	DrillTook time.Duration
}

// NewReport is the report of a finished Run; drill is the outcome of the
// drill it was asked for (nil: no drill was asked for).
func NewReport(res *Result, drill *DrillOutcome) *Report {
	r := &Report{Manifest: res.Manifest, Duration: res.Duration, Pruned: res.Pruned, Drilled: drill != nil, Drill: drill}
	if drill != nil {
		if d := res.Drill; d != nil {
			r.DrillTook = d.FinishedAt.Sub(d.StartedAt)
		}
	}
	return r
}

// MarshalJSON is the manifest itself, with "pruned" after --prune and
// "drill" after --drill.
func (r *Report) MarshalJSON() ([]byte, error) {
	switch {
	case r.Drilled:
		return json.Marshal(struct {
			*catalog.Manifest
			Pruned *prune.PruneReport `json:"pruned,omitempty"`
			Drill  *DrillOutcome      `json:"drill"`
		}{r.Manifest, r.Pruned, r.Drill})
	case r.Pruned != nil:
		return json.Marshal(struct {
			*catalog.Manifest
			Pruned *prune.PruneReport `json:"pruned"`
		}{r.Manifest, r.Pruned})
	}
	return json.Marshal(r.Manifest)
}

// Tables are the backup's row (with DRILL after --drill, and the drill's
// result below it), then the prune's table.
func (r *Report) Tables() []output.Table {
	m := r.Manifest
	v2 := "-"
	if m.V2 != nil {
		v2 = fmt.Sprint(m.V2.Keys)
	}
	// STORED is the snapshot object's size as stored, as in list.
	t := output.Table{
		Header: []string{"CLUSTER", "BACKUP", "REVISION", "RAW", "STORED", "V2 KEYS", "SOURCE", "DURATION"},
		Wide:   []string{"CLUSTER", "SOURCE"},
		Rows: [][]string{{m.ClusterID, m.Name, fmt.Sprint(m.RevisionBefore), output.Bytes(m.Snapshot.RawSize),
			output.Bytes(m.Snapshot.StoredSize), v2, m.Source.Name, r.Duration.Round(time.Millisecond).String()}},
	}
	if r.Drilled {
		d := r.Drill
		t.Header = append(t.Header, "DRILL")
		t.Rows[0] = append(t.Rows[0], d.Text())
		switch d.Result {
		case DrillPassed:
			line := "drill: passed"
			if rec := d.Record; rec != nil {
				line += fmt.Sprintf(" in %s on etcd %s, comparison %s", r.DrillTook.Round(time.Millisecond), rec.EtcdVersion, rec.Comparison.Mode)
				if rec.Comparison.Detail != "" {
					line += " (" + rec.Comparison.Detail + ")"
				}
			}
			t.Footer = line + "\n"
		default:
			t.Footer = fmt.Sprintf("drill: %s: %s\n", d.Result, strings.TrimSpace(d.Error))
		}
	}
	if l := m.Lock; l != nil {
		// Only a locked backup says it: the table of others is unchanged.
		t.Footer += fmt.Sprintf("locked: %s until %s (object lock)\n", l.Mode, l.Until.UTC().Format(time.RFC3339))
	}
	out := []output.Table{t}
	if r.Pruned != nil {
		pt := r.Pruned.Table()
		pt.Title = "\n" + pt.Title
		out = append(out, pt)
	}
	return out
}
