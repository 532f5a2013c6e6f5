package kube

import (
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/output"
)

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
		switch {
		case p.Snapshot != nil && p.Replay != nil:
			// Point in time: the staged copy was bumped.
			text("Expected after the restore: revision >= %d (the journal's revision %d + bump %d, in the staged copy), %d live keys.\n",
				p.MinRevision, p.Replay.ToRevision, p.BumpRevision, p.Snapshot.LiveKeys)
		case p.Snapshot != nil:
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
