package restore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strings"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/journal"
)

// JournalSource is where Replay reads a journal (the segment reader over
// catalog.Layout.JournalPrefix reads one store's; a test, events it
// watched).
type JournalSource interface {
	// Leases are the leases the journal saw up to toRev (Lease.Rev <=
	// toRev, or granted before a key of revisions fromRev..toRev was put
	// on them), each with its Revoked revision when it was revoked or
	// expired. Replay asks for them before the events.
	Leases(ctx context.Context, fromRev, toRev int64) ([]journal.Lease, error)
	// Events yields every event of revisions fromRev to toRev, inclusive,
	// in revision and sub order. A gap or a refused segment is an error
	// yielded, never a silent end: Replay refuses a journal that ends
	// before toRev, naming the last revision it reached.
	Events(ctx context.Context, fromRev, toRev int64) (iter.Seq2[journal.Event, error], error)
}

// Replayed is what the replay stage applied (Plan.Replay).
type Replayed struct {
	// FromRevision is the snapshot's revision: the events start after it.
	FromRevision int64 `json:"fromRevision"`
	// ToRevision is the revision the data dirs hold.
	ToRevision int64 `json:"toRevision"`
	Events     int64 `json:"events"`
	// LeasesPut and LeasesDeleted count the changes to the lease bucket.
	LeasesPut     int `json:"leasesPut,omitempty"`
	LeasesDeleted int `json:"leasesDeleted,omitempty"`
	// RevokesUnplaced are the leases (hex IDs) the journal found gone
	// after a delete of one of their keys up to ToRevision without
	// placing their revoke (journal.Source.UnplacedRevokes): kept.
	RevokesUnplaced []string `json:"revokesUnplaced,omitempty"`
	// Segments are the journal's segments a dry run would read (with a
	// JournalPlanner), in order.
	Segments []string `json:"segments,omitempty"`
}

// JournalPlanner is a JournalSource that can say, without reading an
// event, which segments a replay of revisions from to to would read, or
// why it cannot (journal.Source: a chain that stops before to is a
// *journal.ReachError naming the last revision reachable).
type JournalPlanner interface {
	Segments(ctx context.Context, fromRev, toRev int64) ([]journal.SegmentInfo, error)
}

// Replay is the replay stage, between Fetch and Prepare, of a
// point-in-time restore (to.Revision set; without it there is nothing to
// do): the journal's events after the staged snapshot's revision, up to
// to.Revision, are applied straight into the staged file at path
// (etcdinternals.ApplyEvents, exactly as etcd's MVCC writes them; no etcd
// runs), with the leases as they were at that revision: one granted after
// it is left out, one revoked after it kept. The plan's snapshot facts
// and MinRevision are then those of the replayed database (Prepare bumps
// above to.Revision, and VerifyRebuilt expects its keys), and Plan.Replay
// says what was applied. A journal that does not continue the snapshot
// exactly (an event at or below its revision, a gap, a repeat) or that
// ends before to.Revision is refused: the error names the last revision
// reached. On error the staged file holds part of the journal: the caller
// removes it, as after a failed Fetch.
//
// In a dry run (plan.DryRun) nothing is written: the staged snapshot's
// revision (read by Fetch; the chosen backup's when the dry run did not
// stage it) must be at or below to.Revision, and a journal that is a
// JournalPlanner must reach to.Revision from it: Plan.Replay then says
// what would be replayed (the revisions and the segments), and a check
// "journal" the same.
//
// It is the one replay: Run, SelectSnapshot and package drill (a
// point-in-time drill, and the journal proof, which replays to the next
// backup's revision) all call it.
func Replay(ctx context.Context, plan *Plan, path string, to Target, log *slog.Logger) error {
	if to.Revision <= 0 {
		return nil
	}
	if plan.DryRun {
		return planReplay(ctx, plan, to)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return applyReplay(ctx, plan, path, to, log)
}

// planReplay is Replay in a dry run.
func planReplay(ctx context.Context, plan *Plan, ro Target) error {
	if ro.Journal == nil {
		return stepError(ctx, plan.ClusterID, StepReplay, errNoJournal)
	}
	var from int64
	switch {
	case plan.Snapshot != nil:
		from = plan.Snapshot.StoreRevision()
	case plan.Chosen != nil:
		from = plan.Chosen.Revision
	default:
		return stepError(ctx, plan.ClusterID, StepReplay, errors.New("no backup chosen to replay the journal into"))
	}
	if ro.Revision < from {
		return stepError(ctx, plan.ClusterID, StepReplay, fmt.Errorf("the backup is at revision %d, above the revision to restore to, %d: restore an older backup (--backup)", from, ro.Revision))
	}
	rep := &Replayed{FromRevision: from, ToRevision: ro.Revision}
	detail := fmt.Sprintf("would replay revisions %d to %d", from+1, ro.Revision)
	if ro.Revision == from {
		detail = fmt.Sprintf("the backup is at revision %d already: nothing to replay", from)
	} else if p, ok := ro.Journal.(JournalPlanner); ok {
		segs, err := p.Segments(ctx, from+1, ro.Revision)
		if err != nil {
			plan.Checks = append(plan.Checks, Check{Name: "journal", Status: CheckFailed, Detail: err.Error()})
			return stepError(ctx, plan.ClusterID, StepReplay, err)
		}
		for _, s := range segs {
			rep.Segments = append(rep.Segments, s.Key)
		}
		if len(segs) > 0 {
			detail += fmt.Sprintf(" from %d segments (%s to %s)", len(segs), segs[0].Key, segs[len(segs)-1].Key)
		}
	}
	plan.Replay = rep
	plan.Checks = append(plan.Checks, Check{Name: "journal", Status: CheckPlanned, Detail: detail})
	return nil
}

// applyReplay is Replay of a real run.
func applyReplay(ctx context.Context, plan *Plan, path string, ro Target, log *slog.Logger) error {
	rep, err := replay(ctx, plan, path, ro)
	if err != nil {
		return stepError(ctx, plan.ClusterID, StepReplay, err)
	}
	facts, err := readSnapshotFacts(path)
	if err != nil {
		return stepError(ctx, plan.ClusterID, StepReplay, fmt.Errorf("read the replayed database: %w", err))
	}
	plan.Snapshot = &facts
	plan.MinRevision = facts.Revision + int64(plan.BumpRevision)
	plan.Replay = rep
	plan.Checks = append(plan.Checks, Check{Name: "journal", Status: CheckPassed,
		Detail: fmt.Sprintf("%d events of revisions %d to %d replayed: revision %d, %d live keys", rep.Events, rep.FromRevision+1,
			rep.ToRevision, facts.StoreRevision(), facts.LiveKeys)})
	log.Info("journal replayed", "from_revision", rep.FromRevision, "to_revision", rep.ToRevision, "events", rep.Events)
	if vu, ok := ro.Journal.(interface{ VersionsUnread() error }); ok && vu.VersionsUnread() != nil {
		w := fmt.Sprintf("the bucket's object versions could not be read (%v): the journal's segments were read at their current versions, "+
			"so a segment written over since would not be seen by its version (its sha256 is still checked against the next segment and the proofs)", vu.VersionsUnread())
		plan.Warnings = append(plan.Warnings, w)
		log.Warn("journal read without object versions", "err", vu.VersionsUnread())
	}
	if ur, ok := ro.Journal.(interface{ UnplacedRevokes() journal.Unplaced }); ok {
		if u := ur.UnplacedRevokes(); len(u.Leases) > 0 {
			ids := make([]string, len(u.Leases))
			for i, id := range u.Leases {
				ids[i] = fmt.Sprintf("%x", id)
			}
			rep.RevokesUnplaced = ids
			named := strings.Join(ids[:min(len(ids), 20)], ", ")
			if len(ids) > 20 {
				named += fmt.Sprintf(" and %d more (revokesUnplaced in -o json)", len(ids)-20)
			}
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("lease(s) %s: the journal saw a delete of one of their keys at or before revision %d and found them gone, "+
				"or could not look them up, but not where a revoke lies (%s): they are kept, and end with their TTL unless their holder renews them", named, rep.ToRevision, u.Why))
			log.Warn("journal: lease revokes not placed: leases kept", "leases", len(ids), "first", ids[0], "to_revision", rep.ToRevision, "why", u.Why)
		}
	}
	if rs, ok := ro.Journal.(JournalReplacedLister); ok {
		for _, seg := range rs.Replaced() {
			w := fmt.Sprintf("journal segment %s: its own (earliest) version %s was replayed; ", seg.Key, seg.VersionID)
			if seg.Replaced > 0 {
				w += fmt.Sprintf("%d newer version(s) written over it were passed over", seg.Replaced)
			}
			if seg.Hidden {
				if seg.Replaced > 0 {
					w += ", and "
				}
				w += "a delete marker hides it"
			}
			plan.Warnings = append(plan.Warnings, w+": something wrote over the journal")
			log.Warn("journal segment written over: replayed its own version", "segment", seg.Key, "version", seg.VersionID,
				"newer_versions", seg.Replaced, "delete_marker", seg.Hidden)
		}
	}
	return nil
}

// JournalReplacedLister is a JournalSource that says which segments it
// read were written over (journal.Source.Replaced): a newer version passed
// over, or a delete marker read behind.
type JournalReplacedLister interface {
	Replaced() []journal.SegmentInfo
}

// JournalPinner is a JournalSource that can be told the segments a
// passed proof replayed (journal.Source.Pin): a replay then reads those
// versions and refuses a segment hashing otherwise.
type JournalPinner interface {
	Pin([]catalog.ProvenSegment)
}

// replay is Replay without the step error and the plan's new facts.
func replay(ctx context.Context, plan *Plan, path string, ro Target) (*Replayed, error) {
	if ro.Journal == nil {
		return nil, errNoJournal
	}
	if ro.Revision <= 0 {
		return nil, fmt.Errorf("revision %d to restore to: not a revision", ro.Revision)
	}
	if path == "" {
		return nil, errors.New("no staged snapshot to replay the journal into")
	}
	if plan.Snapshot == nil {
		return nil, errors.New("the staged snapshot was not read: Fetch comes first")
	}
	from := plan.Snapshot.StoreRevision()
	if ro.Revision < from {
		return nil, fmt.Errorf("the backup is at revision %d, above the revision to restore to, %d: restore an older backup (--backup)", from, ro.Revision)
	}
	rep := &Replayed{FromRevision: from, ToRevision: ro.Revision}
	if ro.Revision == from {
		return rep, nil
	}
	all, err := ro.Journal.Leases(ctx, from+1, ro.Revision)
	if err != nil {
		return nil, fmt.Errorf("read the journal's leases: %w", err)
	}
	leases := leasesAt(all, ro.Revision)
	events, err := ro.Journal.Events(ctx, from+1, ro.Revision)
	if err != nil {
		return nil, fmt.Errorf("read the journal: %w", err)
	}
	upTo := func(yield func(journal.Event, error) bool) {
		for ev, err := range events {
			if err == nil && ev.Rev > ro.Revision {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
			if ctx.Err() != nil {
				yield(journal.Event{}, ctx.Err())
				return
			}
		}
	}
	a, err := etcdinternals.ApplyEvents(path, upTo, leases)
	if err != nil {
		if a.LastRevision > 0 {
			return nil, fmt.Errorf("%w (the journal reached revision %d)", err, a.LastRevision)
		}
		return nil, err
	}
	if a.LastRevision != ro.Revision {
		reached := max(a.LastRevision, from)
		return nil, fmt.Errorf("the journal reaches revision %d only, not %d: the last revision this backup can be restored to is %d", reached, ro.Revision, reached)
	}
	rep.Events, rep.LeasesPut, rep.LeasesDeleted = a.Events, a.LeasesPut, a.LeasesDeleted
	return rep, nil
}

// leasesAt are the leases as they were at revision rev: those granted
// after it left out, those revoked after it alive.
func leasesAt(all []journal.Lease, rev int64) []journal.Lease {
	var out []journal.Lease
	for _, l := range all {
		if l.Rev > rev {
			continue
		}
		if l.Revoked > rev {
			l.Revoked = 0
		}
		out = append(out, l)
	}
	return out
}

var errNoJournal = errors.New("a revision to restore to was given, but no journal to replay up to it")
