package fleet

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/output"
)

// ToTimeFlag is the --to-time argument that resumes a run of point in
// time t: t absolute, in UTC, RFC 3339 with its fraction (the run's
// request records t exactly).
func ToTimeFlag(t time.Time) string {
	return "--to-time " + t.UTC().Format(time.RFC3339Nano)
}

// Tables are the report's: the runs and the plan's model, then one row
// per cluster (the same rows as -o json's clusters).
func (r *RestoreAllReport) Tables() []output.Table {
	head := output.Table{}
	var lines []string
	if r.Site != "" {
		lines = append(lines, "Read from the "+r.Site)
	}
	for _, w := range r.Warnings {
		lines = append(lines, "WARNING: "+w)
	}
	for _, c := range r.Clusters {
		for _, w := range c.Warnings {
			lines = append(lines, fmt.Sprintf("WARNING: %s/%s: %s", c.Namespace, c.Cluster, w))
		}
	}
	for _, e := range r.NamespaceErrors {
		lines = append(lines, fmt.Sprintf("NAMESPACE FAILED: %s at step %q: %s (its clusters were not touched; the other namespaces went on)", e.Namespace, e.Step, e.Error))
	}
	for _, run := range r.Runs {
		verb := "new run"
		if run.Resumed {
			verb = "resuming run"
		}
		lines = append(lines, fmt.Sprintf("%s: %s %s (records under %s_restores/%s/)", run.Namespace, verb, run.Run, run.Prefix, run.Run))
	}
	if !r.ToTime.IsZero() {
		lines = append(lines, fmt.Sprintf("Point in time: %s (to resume this run, rerun with %s: a relative --to-time moves with the clock and starts another run).",
			r.ToTime.UTC().Format(time.RFC3339Nano), ToTimeFlag(r.ToTime)))
	}
	if r.DryRun {
		lines = append(lines, fmt.Sprintf("Dry run: nothing is changed and no record written. Expected: %s at --parallel %d (order %s).",
			expected(r.Expected), r.Parallel, r.Order))
		keys := make([]string, 0, len(r.Model))
		for k := range r.Model {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			lines = append(lines, fmt.Sprintf("  model %s: %s", k, r.Model[k]))
		}
	}
	head.Lines = append(lines, "")
	t := r.Table()
	return []output.Table{head, t}
}

// Table is one row per cluster.
func (r *RestoreAllReport) Table() output.Table {
	// By default what an SRE acts on (fits 120 columns with 32-character
	// cluster names); -o wide adds the backup, revision, health, client
	// URL and run; the error and the next step go below the table.
	t := output.Table{
		Header: []string{"NAMESPACE", "CLUSTER", "OUTCOME", "BYTES", "ELAPSED", "NODEPORT", "BACKUP", "REVISION", "HEALTH", "CLIENT URL", "RUN", "ERROR"},
		Wide:   []string{"BACKUP", "REVISION", "HEALTH", "CLIENT URL", "RUN"},
		Long:   []string{"ERROR"},
		Key:    "CLUSTER",
	}
	var restarts []string
	for _, c := range r.Clusters {
		t.Rows = append(t.Rows, c.cells())
		// As the runbook's jq lists them: done-earlier ones too (an
		// earlier attempt restored them; their restart may not be done).
		if c.Outcome == OutcomeRestored || c.Outcome == OutcomeRebuilt || c.Outcome == OutcomeDoneEarlier {
			np := ""
			if c.NodePort != 0 {
				np = fmt.Sprintf(" (NodePort %d)", c.NodePort)
			}
			restarts = append(restarts, c.Namespace+"/"+c.Cluster+np)
		}
	}
	if len(restarts) > 0 {
		t.Notes = append(t.Notes, "Restart the kube-apiserver of each restored cluster (done-earlier ones too, if not done yet): "+strings.Join(restarts, ", ")+".")
	}
	if len(r.Failed) > 0 {
		rerun := "A rerun of the same command"
		if !r.ToTime.IsZero() {
			rerun = "A rerun of the same command with " + ToTimeFlag(r.ToTime)
		}
		t.Notes = append(t.Notes, fmt.Sprintf("%d cluster(s) failed: %s. %s resumes this run: the clusters done are skipped.",
			len(r.Failed), strings.Join(r.Failed, ", "), rerun))
	}
	return t
}

// cells are the row's table cells.
func (c RestoreAllRow) cells() []string {
	rev, bytes, elapsed, np := "-", "-", "-", "-"
	if c.Revision > 0 {
		rev = fmt.Sprint(c.Revision)
	}
	if c.Bytes > 0 {
		bytes = output.Bytes(c.Bytes)
	}
	if c.Elapsed > 0 {
		elapsed = c.Elapsed.Round(time.Second).String()
	}
	if c.NodePort != 0 {
		np = fmt.Sprint(c.NodePort)
	}
	outcome := c.Outcome
	if c.Outcome == OutcomePlanned && c.Action != "" {
		outcome += ": " + c.Action
	}
	if c.Verification != "" {
		outcome += " (" + c.Verification + ")"
	}
	errText := "-"
	switch {
	case c.FailedStep != "":
		errText = fmt.Sprintf("at step %q: %s; next: %s", c.FailedStep, c.Cause, c.NextStep)
	case c.Cause != "":
		errText = c.Cause
	}
	return []string{c.Namespace, c.Cluster, outcome, bytes, elapsed, np, dash(c.Backup), rev, dash(c.Health), dash(c.ClientURL), dash(c.Run), errText}
}

func expected(d time.Duration) string {
	if d <= 0 {
		return "unknown (no model)"
	}
	return output.ETA(d)
}
