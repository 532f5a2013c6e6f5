package kube

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
)

// BackupReport is one cluster's `backup` (--cluster-id): the committed
// backup, then the prune (--prune) and the restore drill (--drill) that
// followed it.
type BackupReport struct {
	Manifest *catalog.Manifest
	Duration time.Duration
	Pruned   *catalog.PruneReport
	// Drilled says --drill was asked for; Drill is its outcome.
	Drilled   bool
	Drill     *DrillOutcome
	DrillTook time.Duration
}

// NewBackupReport is the report of a finished backup.Run; drilled says
// it was asked to drill the backup.
func NewBackupReport(res *backup.Result, drilled bool) *BackupReport {
	r := &BackupReport{Manifest: res.Manifest, Duration: res.Duration, Pruned: res.Pruned, Drilled: drilled}
	if drilled {
		if d := res.Drill; d != nil {
			r.DrillTook = d.FinishedAt.Sub(d.StartedAt)
		}
		r.Drill = NewDrillOutcome(res.Drill, res.DrillErr, r.DrillTook)
	}
	return r
}

// MarshalJSON is the manifest itself, with "pruned" after --prune and
// "drill" after --drill.
func (r *BackupReport) MarshalJSON() ([]byte, error) {
	switch {
	case r.Drilled:
		return json.Marshal(struct {
			*catalog.Manifest
			Pruned *catalog.PruneReport `json:"pruned,omitempty"`
			Drill  *DrillOutcome        `json:"drill"`
		}{r.Manifest, r.Pruned, r.Drill})
	case r.Pruned != nil:
		return json.Marshal(struct {
			*catalog.Manifest
			Pruned *catalog.PruneReport `json:"pruned"`
		}{r.Manifest, r.Pruned})
	}
	return json.Marshal(r.Manifest)
}

// Tables are the backup's row (with DRILL after --drill, and the drill's
// result below it), then the prune's table.
func (r *BackupReport) Tables() []output.Table {
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
	out := []output.Table{t}
	if r.Pruned != nil {
		pt := r.Pruned.Table()
		pt.Title = "\n" + pt.Title
		out = append(out, pt)
	}
	return out
}

// Tables are a restore via etcd-operator for people (output.RenderAll):
// the selection, the replaced EtcdCluster's spec, the actions (the
// EtcdRestore as YAML), the wait and the verification.
func (r *OperatorRestoreReport) Tables() []output.Table {
	var out []output.Table
	var b strings.Builder
	text := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	flush := func(ts ...output.Table) {
		if len(ts) == 0 {
			ts = []output.Table{{}}
		}
		ts[0].Title = b.String() + ts[0].Title
		b.Reset()
		out = append(out, ts...)
	}
	if r.DryRun {
		text("Restore of etcdcluster %s/%s via etcd-operator (dry run: nothing was changed)\n\n", r.Namespace, r.Cluster)
	} else {
		text("Restore of etcdcluster %s/%s via etcd-operator\n\n", r.Namespace, r.Cluster)
	}
	if p := r.Plan; p != nil {
		if sel := p.SelectionTables(); len(sel) > 0 {
			flush(sel...)
		}
		if p.Snapshot != nil {
			text("Expected after the restore: revision >= %d (the snapshot's: etcd-operator does not bump it), %d live keys.\n",
				p.Snapshot.Revision, p.Snapshot.LiveKeys)
		}
		text("\n")
	}
	if r.OldSpec != nil {
		text("EtcdCluster %s/%s (uid %s), replaced by etcd-operator; its spec, also kept in the EtcdRestore's annotation %s:\n%s\n",
			r.Namespace, r.Cluster, r.OldUID, AnnotationClusterSpec, yamlIndented(map[string]any{"spec": r.OldSpec}))
	}
	verb := map[bool]string{true: "Would ", false: ""}[r.DryRun]
	for _, a := range r.Actions {
		switch a.Verb {
		case "stage":
			text("%s%s: %s", verb, a.Verb, a.What)
			if r.StagedSHA256 != "" {
				text(" (%s, sha256 %s, read back and checked)", output.Bytes(r.StagedSize), r.StagedSHA256)
			}
			text("\n")
		case "create":
			y, err := yaml.Marshal(a.Object)
			if err != nil {
				y = []byte(fmt.Sprintf("# cannot render: %v\n", err))
			}
			text("%s%s: %s\n---\n%s---\n", verb, a.Verb, a.What, y)
		case "remove":
			text("%s: %s\n", a.Verb, a.What)
		case "delete":
			// The old EtcdRestore: its annotations are what it recorded
			// (the backup, the replaced EtcdCluster's uid and spec).
			text("%s%s: %s\n", verb, a.Verb, a.What)
			if r.Replaced != nil && len(r.Replaced.Annotations) > 0 {
				text("%s\n", yamlIndented(map[string]any{"annotations": r.Replaced.Annotations}))
			}
		default:
			text("Then etcd-operator will %s: %s\n", a.Verb, a.What)
		}
	}
	if r.NewUID != "" || r.LastSeen != "" && !r.DryRun {
		text("\nWaited %s for etcd-operator; last seen: %s\n", r.Waited.Round(time.Millisecond), r.LastSeen)
	}
	if r.Verify != nil {
		text("\nRestored cluster at %s:\n", strings.Join(r.Endpoints, ","))
		flush(r.Verify.Tables()...)
	}
	for _, warning := range r.Warnings {
		text("\nWARNING: %s\n", warning)
	}
	if !r.DryRun && r.Verify != nil && r.Verify.Verified {
		text("\nRestored and verified in %s. The EtcdRestore %s/%s stays as the record of this restore (its annotations keep "+
			"the replaced EtcdCluster's uid and spec); the next restore --via etcd-operator of this cluster deletes it.\n",
			r.Duration.Round(time.Millisecond), r.Namespace, r.Cluster)
	}
	if b.Len() > 0 {
		flush()
	}
	return out
}

// yamlIndented is v as YAML, indented by two spaces.
func yamlIndented(v any) string {
	y, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprintf("  # cannot render: %v", err)
	}
	return "  " + strings.ReplaceAll(strings.TrimRight(string(y), "\n"), "\n", "\n  ")
}

// Tables are the fleet's table, then the orphan pass's when it found any.
func (r *BackupAllReport) Tables() []output.Table {
	out := []output.Table{r.Table()}
	if r.Orphans != nil && len(r.Orphans.Orphans) > 0 {
		out = append(out, r.Orphans.Table())
	}
	return out
}
