package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/output"
)

// The journal lag: how far the cluster's stored journal is behind now,
// the RPO of a restore right now as the store would give it (lag = now -
// the receive time of the newest stored segment's last revision).
//
// DefaultJournalLagBound is 5 minutes: ten times the journal's default
// --segment-interval (30 s). A healthy journal's lag stays under one
// interval plus one upload; a slow store shortens segments rather than
// letting the lag grow; ten intervals is a journal that is not writing
// (stopped, no leader of the Deployment, a frozen store or member), not
// one that is slow for a moment. The EtcdJournalLagging alert uses the
// same bound (300 s for 5 min).
const DefaultJournalLagBound = 5 * time.Minute

// FlagJournalLagging: the newest stored journal segment is older than the
// bound.
const FlagJournalLagging FlagKind = "journal-lagging"

// FlagJournalUnknown: the journal could not be listed.
const FlagJournalUnknown FlagKind = "journal-unknown"

// RunbookJournalLagging is the runbook section of a lagging journal (a
// flag's, not a NEXT STEP's: the next step stays the cluster's).
const RunbookJournalLagging = "runbooks/backup.md#journal-lagging"

// JournalState is the journal lag answer.
type JournalState string

const (
	JournalOK      JournalState = "ok"
	JournalLagging JournalState = "lagging"
	JournalUnknown JournalState = "unknown" // the store failed
)

// JournalStatus is the journal of one cluster in the store: nil in a
// BackupStatus when the cluster has no stored segment (no journal runs
// for it).
type JournalStatus struct {
	State JournalState `json:"state"`
	// LastRev is the newest stored segment's last revision, LastReceived
	// when the journal received it; From says where that time comes from:
	// "header" (the segment's header), or "stored" (its stored time, when
	// the header was not read: an encrypted segment, inspect having no
	// identity).
	LastRev      int64     `json:"lastRev"`
	LastReceived time.Time `json:"lastReceived"`
	From         string    `json:"from,omitempty"`
	Segments     int       `json:"segments"`
	// Lag is now - LastReceived; Bound the lag flagged (--journal-lag-bound).
	Lag        time.Duration `json:"-"`
	Bound      time.Duration `json:"-"`
	LagText    string        `json:"lag,omitempty"`
	LagSeconds float64       `json:"lagSeconds"`
	BoundText  string        `json:"bound"`
	Error      string        `json:"error,omitempty"`
}

// checkJournal reads the cluster's journal from the store: one listing,
// one segment header (journal.LoadWindow). Nil when it has no segment.
func checkJournal(ctx context.Context, opts Options) *JournalStatus {
	w, _, err := journal.LoadWindow(ctx, opts.Store, opts.Layout, opts.ClusterID, nil, nil)
	if err != nil {
		return &JournalStatus{Bound: opts.JournalLagBound, Error: output.OneLine(err)}
	}
	if !w.Journal {
		return nil
	}
	js := &JournalStatus{LastRev: w.LastRev, LastReceived: w.LastReceived, From: w.LastReceivedFrom, Segments: w.Segments, Bound: opts.JournalLagBound}
	if lag, ok := w.Lag(opts.Now()); ok {
		js.Lag = lag
	}
	return js
}

// judgeJournal sets the journal status's state and texts and returns its
// flags; pure.
func judgeJournal(j *JournalStatus, loc string) []Flag {
	j.BoundText = j.Bound.String()
	if j.Error != "" {
		j.State = JournalUnknown
		return []Flag{{Kind: FlagJournalUnknown, Severity: SeverityWarning, Runbook: RunbookJournalLagging,
			Message: "journal lag unknown: the journal of " + loc + " could not be listed: " + j.Error}}
	}
	j.LagText, j.LagSeconds = output.Age(max(j.Lag, 0)), j.Lag.Seconds()
	j.State = JournalOK
	if j.Bound > 0 && j.Lag > j.Bound {
		j.State = JournalLagging
		return []Flag{{Kind: FlagJournalLagging, Severity: SeverityWarning, Runbook: RunbookJournalLagging,
			Message: fmt.Sprintf("journal lagging: the newest journaled revision %d of %s was received %s ago (more than %s): "+
				"a restore now would lose everything since", j.LastRev, loc, output.Age(j.Lag), j.Bound)}}
	}
	return nil
}

// journalLine is the JOURNAL LAG line, empty without a journal.
func (r *Report) journalLine() string {
	if r.Backup == nil || r.Backup.Journal == nil {
		return ""
	}
	j := r.Backup.Journal
	switch j.State {
	case JournalUnknown:
		return "UNKNOWN: " + j.Error
	}
	l := fmt.Sprintf("%s (revision %d received %s", j.LagText, j.LastRev, j.LastReceived.UTC().Format(time.RFC3339))
	if j.From == "stored" {
		l += ", the segment's stored time"
	}
	l += "): "
	if j.State == JournalLagging {
		return l + "LAGGING (bound " + j.BoundText + ")"
	}
	return l + "OK (bound " + j.BoundText + ")"
}
