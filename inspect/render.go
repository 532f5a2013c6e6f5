package inspect

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/output"
)

// Table is the members table of the report.
func (r *Report) Table() output.Table {
	t := output.Table{Header: []string{"NAME", "ID", "ENDPOINT", "VERSION", "HEALTH", "ROLE", "TERM", "RAFT INDEX",
		"APPLIED", "LAG", "DB SIZE", "IN USE", "ALARMS", "LATENCY", "ERROR"},
		Wide: []string{"ID", "ENDPOINT", "VERSION", "TERM", "RAFT INDEX", "APPLIED", "IN USE", "LATENCY"},
		Long: []string{"ERROR"}}
	for _, m := range r.Members {
		role := "-"
		switch {
		case m.Unlisted:
			role = "unlisted"
		case m.Learner:
			role = "learner"
		case m.StatusOK && m.Leader:
			role = "leader"
		case m.StatusOK:
			role = "follower"
		}
		dash := func(s string) string {
			if s == "" {
				return "-"
			}
			return s
		}
		term, idx, applied, lag, db, inUse := "-", "-", "-", "-", "-", "-"
		if m.StatusOK {
			term, idx, applied, lag = fmt.Sprint(m.RaftTerm), fmt.Sprint(m.RaftIndex), fmt.Sprint(m.AppliedIndex), fmt.Sprint(m.Lag)
			db, inUse = output.Bytes(m.DBSize), output.Bytes(m.DBSizeInUse)
		}
		latency := "-"
		if m.Alive() {
			latency = fmt.Sprintf("%.1fms", m.LatencyMS)
		}
		name := m.Name
		if name == "" {
			name = m.Label()
		}
		t.Rows = append(t.Rows, []string{name, dash(m.ID), m.ClientURL, dash(m.Version), string(m.Health), role,
			term, idx, applied, lag, db, inUse, dash(strings.Join(m.Alarms, ",")), latency, dash(m.Error)})
	}
	return t
}

// Lines are the verdict, leader, flags, backup and next-step lines printed
// under the table.
func (r *Report) Lines() []string {
	var out []string
	out = append(out, fmt.Sprintf("VERDICT: %s (%s)", r.Verdict, r.Summary))
	switch {
	case r.Leader != "":
		l := "LEADER: " + r.Leader
		if r.LeaderID != "" && r.LeaderID != r.Leader {
			l += " (" + r.LeaderID + ")"
		}
		if r.LeaderNote != "" {
			l += ": " + r.LeaderNote
		}
		if r.ClusterID != "" {
			l += "; cluster " + r.ClusterID
		}
		out = append(out, l)
	default:
		out = append(out, "LEADER: none")
	}
	for _, f := range r.Flags {
		l := strings.ToUpper(string(f.Severity)) + ": " + f.Message
		if f.Runbook != "" {
			l += " (" + f.Runbook + ")"
		}
		out = append(out, l)
	}
	for _, w := range r.Warnings {
		out = append(out, "WARNING: "+w)
	}
	out = append(out, "BACKUP: "+r.backupLine())
	if l := r.drillLine(); l != "" {
		out = append(out, "DRILL: "+l)
	}
	if l := r.journalLine(); l != "" {
		out = append(out, "JOURNAL LAG: "+l)
	}
	if l := r.escrowLine(); l != "" {
		out = append(out, "ESCROW: "+l)
	}
	ns := "NEXT STEP: " + r.NextStep.Action
	if len(r.NextStep.Runbooks) > 0 {
		ns += " (see " + strings.Join(r.NextStep.Runbooks, ", then ") + ")"
	}
	return append(out, ns)
}

func (r *Report) backupLine() string {
	b := r.Backup
	if b == nil {
		return "not checked (give --bucket and --cluster-id)"
	}
	switch b.State {
	case BackupUnknown:
		return "UNKNOWN: the object store failed: " + b.Error
	case BackupMissing:
		return "MISSING: no committed backup of cluster " + b.ClusterID
	}
	n := b.Newest
	l := fmt.Sprintf("newest %s (%s, revision %d", n.Name, n.Kind, n.Revision)
	if n.Source != "" {
		l += ", from " + n.Source
	}
	l += fmt.Sprintf(") is %s old: ", b.AgeText)
	if b.State == BackupStale {
		return l + "STALE (max " + b.MaxAgeText + ")"
	}
	return l + "OK (max " + b.MaxAgeText + ")"
}

// drillLine is the restore-drill proof: the newest backup proven
// restorable and its age, and the newest drill's result. Empty when the
// drills were not checked (no store, or the store failed: the backup line
// says so).
func (r *Report) drillLine() string {
	if r.Backup == nil || r.Backup.Drill == nil {
		return ""
	}
	d := r.Backup.Drill
	if d.State == DrillUnknown {
		return "UNKNOWN: the drill records could not be read: " + d.Error
	}
	var l string
	switch {
	case d.Proven == nil:
		l = "NEVER: no backup of cluster " + r.Backup.ClusterID + " is proven restorable"
	default:
		p := d.Proven
		l = fmt.Sprintf("newest proven restorable %s (%s, drilled %s", p.Name, p.Kind, p.DrilledAt.UTC().Format(time.RFC3339))
		if p.Mode != "" {
			l += ", " + p.Mode
		}
		l += ") is " + d.AgeText + " old: "
		if d.MaxAge > 0 && d.Age > d.MaxAge {
			l += "OLD"
		} else {
			l += "OK"
		}
		l += " (max " + d.MaxAgeText + ")"
	}
	switch last := d.Last; {
	case last == nil:
	case last.Result == DrillPassed:
		if d.Proven == nil || last.Backup != d.Proven.Name {
			l += fmt.Sprintf("; newest drill passed (%s, %s ago)", last.Backup, last.AgeText)
		}
	default:
		l += fmt.Sprintf("; newest drill FAILED (%s, %s ago): %s", last.Backup, last.AgeText, last.Failed)
	}
	if len(d.Unreadable) > 0 {
		l += "; unreadable drill records (no proof): " + strings.Join(d.Unreadable, ", ")
	}
	return l
}

// Tables are the report's one section: the members table, the members'
// errors below it, then Lines (verdict, leader, flags, backup, drill, next
// step), wrapped to output.Width except with -o wide.
func (r *Report) Tables() []output.Table {
	t := r.Table()
	t.Lines = r.Lines()
	return []output.Table{t}
}

// Render is output.RenderAll(w, f, r.Tables(), r): the table and its
// lines, or JSON of the same report.
func Render(w io.Writer, f output.Format, r *Report) error {
	return output.RenderAll(w, f, r.Tables(), r)
}
