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

// Report is one cluster's `backup` (--cluster-id): the committed backup,
// then the prune (--prune) that followed it. (The drill that follows a
// backup --drill is reported with it by backup/drilled.)
type Report struct {
	Manifest *catalog.Manifest
	Duration time.Duration
	Pruned   *prune.PruneReport
}

// NewReport is the report of a finished Run.
func NewReport(res *Result) *Report {
	return &Report{Manifest: res.Manifest, Duration: res.Duration, Pruned: res.Pruned}
}

// MarshalJSON is the manifest itself, with "pruned" after --prune.
func (r *Report) MarshalJSON() ([]byte, error) {
	switch {
	case r.Pruned != nil:
		return json.Marshal(struct {
			*catalog.Manifest
			Pruned *prune.PruneReport `json:"pruned"`
		}{r.Manifest, r.Pruned})
	}
	return json.Marshal(r.Manifest)
}

// Tables are the backup's row (its lock below it), then the prune's
// table.
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
	if l := m.Lock; l != nil {
		// Only a locked backup says it: the table of others is unchanged.
		t.Footer += fmt.Sprintf("locked: %s until %s (object lock)\n", l.Mode, l.Until.UTC().Format(time.RFC3339))
	}
	if line := EscrowLine(m.Escrow); line != "" {
		t.Footer += line + "\n"
	}
	out := []output.Table{t}
	if r.Pruned != nil {
		pt := r.Pruned.Table()
		pt.Title = "\n" + pt.Title
		out = append(out, pt)
	}
	return out
}

// EscrowLine is a backup's escrow in one line: "escrow: present|mismatch
// (why)|missing (why)|none (why)", with the nearest certificate expiry;
// "" for a backup without an escrow step.
func EscrowLine(e *catalog.EscrowRef) string {
	if e == nil {
		return ""
	}
	line := "escrow: " + string(e.State)
	switch {
	case e.State == catalog.EscrowPresent:
		line += fmt.Sprintf(" (%s, %s)", e.Address[:12], output.Count(len(e.Objects), "object"))
	case e.State == catalog.EscrowNone && len(e.Problems) > 0:
		line += " (no recipient)"
	case len(e.Problems) > 0:
		line += " (" + strings.Join(e.Problems, "; ") + ")"
	}
	if t := e.NearestExpiry(); !t.IsZero() {
		line += fmt.Sprintf("; nearest certificate expiry %s", t.UTC().Format(time.RFC3339))
	}
	return line
}
