package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/probe"
)

// JournalReacher is a JournalSource that says how far it reaches exactly
// from a revision (journal.Source.Reach): what Options.ToLatest restores
// to.
type JournalReacher interface {
	Reach(ctx context.Context, from int64) (journal.Reach, error)
}

// Latest is what Options.ToLatest (--to-latest) resolved to: the newest
// revision the journal reaches exactly from the backup the restore starts
// from, when the journal received it, and how old that was when the
// restore started (the state lost: at most one segment interval plus one
// upload before the loss, when the journal ran to the end).
type Latest struct {
	// Backup and BackupRevision are the base: the backup a plain
	// restore would choose (Backup when named), by its manifest.
	Backup         string `json:"backup"`
	BackupRevision int64  `json:"backupRevision"`
	// Revision is the last revision the journal reaches exactly from it.
	Revision int64     `json:"revision"`
	Received time.Time `json:"received"`
	// Age is how old Revision was (Received to the restore's start).
	Age        time.Duration `json:"-"`
	AgeText    string        `json:"age"`
	AgeSeconds int64         `json:"ageSeconds"`
	// Segment is the stored segment holding Revision.
	Segment string `json:"segment"`
	// Problem is the break in the journal after Revision (a gap, an
	// overlap), when its segments do not simply end there.
	Problem string `json:"problem,omitempty"`
	// LiveMember names a member of the old cluster that still answered
	// (Options.Old): its survivor snapshot, a plain restore, has RPO 0.
	LiveMember string `json:"liveMember,omitempty"`
}

// ErrNoJournalForLatest is --to-latest for a cluster without a journal.
var ErrNoJournalForLatest = errors.New("the cluster has no journal")

// resolveLatest is the ToLatest step of Run and SelectSnapshot: the
// backup the selection would start from (the best-ranked candidate, or
// Backup), the revision the journal reaches exactly from its revision + 1,
// returned as the revision to restore to, and the warning when a member of the old
// cluster still answers (survivor-first has RPO 0; the PITR flag is the
// caller's choice, so it is a warning, not a refusal).
func resolveLatest(ctx context.Context, src source, backup string, sv survivorConfig, j JournalSource, plan *Plan, log *slog.Logger) (int64, error) {
	jr, ok := j.(JournalReacher)
	if !ok {
		return 0, errors.New("--to-latest: the journal cannot say how far it reaches")
	}
	listed, err := catalog.ListBackups(ctx, src.store, src.layout, src.clusterID)
	if err != nil {
		return 0, fmt.Errorf("--to-latest: listing the backups: %w", err)
	}
	cands, ignored := rankCandidates(listed)
	// The base is the backup a plain restore would choose: of the newest
	// history first (byLineage). By revision alone, after a restore
	// without a revision bump (or a cluster recreated under its name), the
	// old history's backup won and the old journal took it to the old
	// history's end: the replaced cluster's state, restored with exit 0.
	if cands, err = byLineage(ctx, src, plan, cands); err != nil {
		return 0, fmt.Errorf("--to-latest: reading the journal's lineage breaks: %w", err)
	}
	cands, idx, err := selectCandidate(src.clusterID, src.layout.ClusterPrefix(src.clusterID), listed, cands, ignored, backup, nil)
	if err != nil {
		return 0, fmt.Errorf("--to-latest: %w", err)
	}
	base := cands[idx]
	r, err := jr.Reach(ctx, base.Revision+1)
	if err == nil {
		// A backup of the new history below the old one's end: the
		// segments after it are the old history's (the journal stores
		// none of the new one below that end), and the selection, by
		// revision up to their end, would take the old history's backup.
		breaks, berr := lineageBreaks(ctx, src)
		if berr != nil {
			return 0, fmt.Errorf("--to-latest: reading the journal's lineage breaks: %w", berr)
		}
		if l := splices(breaks, base, r.Revision); l != nil {
			lerr := &LineageError{ClusterID: src.clusterID, Backup: base.Name, Revision: base.Revision, Break: l.Key, End: l.From - 1, Found: l.Time}
			return 0, fmt.Errorf("--to-latest: %w; the journal holds nothing of this history after it yet, so it is the newest state stored", lerr)
		}
	}
	switch {
	case errors.Is(err, journal.ErrNoJournal):
		return 0, fmt.Errorf("--to-latest: %w (%v): nothing to restore past backup %s (revision %d); restore it without --to-latest "+
			"(a plain restore from the newest backup)", ErrNoJournalForLatest, err, base.Name, base.Revision)
	case errors.Is(err, journal.ErrNothingAfter):
		return 0, fmt.Errorf("--to-latest: the journal holds no revision after backup %s (revision %d): %w; it is the newest state stored: "+
			"restore it without --to-latest", base.Name, base.Revision, err)
	case err != nil:
		return 0, fmt.Errorf("--to-latest: from backup %s (revision %d): %w", base.Name, base.Revision, err)
	}
	now := src.now()
	l := &Latest{Backup: base.Name, BackupRevision: base.Revision, Revision: r.Revision, Received: r.Received,
		Segment: r.Segment}
	if !r.Received.IsZero() {
		l.Age = now.Sub(r.Received).Round(time.Millisecond)
		l.AgeText, l.AgeSeconds = l.Age.String(), int64(l.Age.Seconds())
	}
	if r.Problem != nil {
		l.Problem = r.Problem.Error()
	}
	plan.Latest = l
	args := []any{"backup", base.Name, "backup_revision", base.Revision, "revision", r.Revision,
		"received", r.Received.Format(time.RFC3339Nano), "age", l.AgeText, "segment", r.Segment}
	if l.Problem != "" {
		args = append(args, "break_after", l.Problem)
	}
	log.Info("--to-latest: the newest revision the journal reaches exactly from the newest backup", args...)
	if len(sv.old.Endpoints) > 0 && !sv.noLive {
		if m := liveMember(ctx, sv); m != "" {
			l.LiveMember = m
			w := fmt.Sprintf("member %s of the old cluster still answers: its survivor snapshot (a plain restore, without --to-latest) "+
				"loses nothing; --to-latest restores revision %d, the journal's newest", m, r.Revision)
			plan.Warnings = append(plan.Warnings, w)
			log.Warn(w)
		}
	}
	return r.Revision, nil
}

// liveMember names the members of the old cluster that answer (name and
// client URL), empty when none does. Every probe has ProbeTimeout.
func liveMember(ctx context.Context, sv survivorConfig) string {
	members, _ := probe.List(ctx, sv.old, sv.probeTimeout)
	members = probe.Members(ctx, sv.old, members, sv.probeTimeout)
	var alive []string
	for _, m := range members {
		if m.Alive() {
			alive = append(alive, fmt.Sprintf("%s (%s)", m.Name, m.ClientURL))
		}
	}
	return strings.Join(alive, ", ")
}

// StepLatest is the step that resolves --to-latest (Options.ToLatest),
// named in its errors.
const StepLatest = "find the journal's newest revision"

// latestText is what --to-latest resolved to, and the plan's warnings,
// for people (the -o json form is Plan.Latest and Plan.Warnings).
func (p *Plan) latestText(s *sections) {
	if l := p.Latest; l != nil {
		recv := "receive time not recorded"
		if !l.Received.IsZero() {
			recv = fmt.Sprintf("received %s, %s before the restore started", l.Received.UTC().Format(time.RFC3339Nano), l.AgeText)
		}
		s.printf("Latest (--to-latest): revision %d (%s), the newest the journal reaches exactly from backup %s (revision %d); segment %s.\n",
			l.Revision, recv, l.Backup, l.BackupRevision, l.Segment)
		if l.Problem != "" {
			s.printf("The journal breaks after it: %s.\n", l.Problem)
		}
	}
	for _, w := range p.Warnings {
		s.printf("WARNING: %s.\n", w)
	}
}
