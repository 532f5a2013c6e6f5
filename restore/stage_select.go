package restore

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// Selection is what the select stage chose: the candidates, ranked
// (also in Plan.Candidates), and the index of the chosen one.
type Selection struct {
	Candidates []Candidate
	Index      int
	// local is the local plaintext snapshot SelectLocal chose.
	local *localSnapshot
}

// Chosen is the chosen candidate.
func (s *Selection) Chosen() Candidate { return s.Candidates[s.Index] }

// Select is the select stage: the store is checked, the survivor
// snapshot taken (opts.Survivor; in a dry run its member is only
// found), the committed backups listed and ranked, and one chosen: the
// best, or opts.Backup (see Plan.Reason). An encrypted backup is checked
// against opts.Identities from its manifest, before anything is
// downloaded.
func Select(ctx context.Context, opts Options, plan *Plan) (*Selection, error) {
	return selectStage(ctx, opts, plan, nil)
}

// SelectLocal is the select stage for a local plaintext snapshot of a
// committed backup (the plaintext a backup streamed, drilled by the
// backup job): the store is checked and the backup m describes is the one
// candidate. Fetch then verifies the file at path in place, against m,
// and stages it as it is (the caller owns it: nothing is downloaded or
// copied).
func SelectLocal(ctx context.Context, opts Options, plan *Plan, path string, m *catalog.Manifest) (*Selection, error) {
	return selectStage(ctx, opts, plan, &localSnapshot{path: path, manifest: m})
}

func selectStage(ctx context.Context, opts Options, plan *Plan, local *localSnapshot) (*Selection, error) {
	if err := opts.defaults(); err != nil {
		return nil, stepError(ctx, opts.ClusterID, StepValidate, err)
	}
	log := opts.Log.With("cluster", opts.ClusterID)
	cands, idx, step, err := selectBackup(ctx, opts, log, plan, local)
	if err != nil {
		return nil, stepError(ctx, opts.ClusterID, step, err)
	}
	return &Selection{Candidates: cands, Index: idx, local: local}, nil
}

// selectAndVerify is the select and fetch stages together, for
// SelectSnapshot: it takes the survivor snapshot (or, in a dry run, finds
// the member it would be taken of), lists and ranks the candidates,
// chooses one and verifies it by streaming it: into a temp file in dir,
// whose path it returns (the caller removes it, also on error), except in
// a dry run. On error, step names the step that failed.
func selectAndVerify(ctx context.Context, opts Options, log *slog.Logger, plan *Plan, dir string) (snapPath, step string, err error) {
	cands, idx, step, err := selectBackup(ctx, opts, log, plan, nil)
	if err != nil {
		return "", step, err
	}
	return verifyCandidates(ctx, opts, log, plan, cands, idx, dir, fetchConfig{})
}

// selectBackup is the select stage: the store checked, the survivor
// snapshot taken (or, in a dry run, its member found), the candidates
// listed and ranked (or, with local, the local snapshot's backup alone)
// and one chosen (choose). On error, step names the step that failed.
func selectBackup(ctx context.Context, opts Options, log *slog.Logger, plan *Plan, local *localSnapshot) (cands []Candidate, idx int, step string, err error) {
	if c, ok := opts.Store.(store.Checker); ok {
		if err := c.Check(ctx); err != nil {
			return nil, 0, StepStore, err
		}
	}

	// The survivor first: its data is newer than any backup, and once it
	// is committed to the store it is safe whatever happens next.
	plan.Survivor = &Survivor{}
	var planned *Candidate
	switch {
	case opts.ToLatest:
		plan.Survivor.Skipped = "--to-latest: the newest backup and the journal after it"
	case opts.ToRevision > 0:
		plan.Survivor.Skipped = "--to-revision: a point-in-time restore starts from a backup at or below the revision"
	case opts.NoLive:
		plan.Survivor.Skipped = "--no-live"
	case len(opts.Old.Endpoints) == 0:
		plan.Survivor.Skipped = "no --endpoints of the old cluster given"
	case opts.DryRun:
		if planned, err = probeSurvivor(ctx, opts, plan.Survivor); err != nil {
			return nil, 0, StepSurvivor, err
		}
	default:
		if err := takeSurvivor(ctx, opts, log, plan.Survivor); err != nil {
			return nil, 0, StepSurvivor, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, StepSurvivor, err
	}

	if local != nil {
		cands = []Candidate{candidateOf(local.manifest)}
		plan.Candidates = cands
	} else {
		listed, err := catalog.ListBackups(ctx, opts.Store, opts.Layout, opts.ClusterID)
		if err != nil {
			return nil, 0, StepList, err
		}
		var ignored []Ignored
		cands, ignored = rankCandidates(listed)
		if wantVersions(opts, cands) {
			if listed, cands, ignored, err = withVersions(ctx, opts, log, listed); err != nil {
				return nil, 0, StepList, err
			}
		}
		if opts.ToRevision > 0 {
			var above []Candidate
			if cands, ignored, above = atOrBelow(cands, ignored, opts.ToRevision); len(cands) == 0 && opts.Backup == "" {
				plan.Ignored = ignored
				return cands, -1, StepSelect, noBackupAtOrBelow(opts.ClusterID, opts.ToRevision, above)
			}
		}
		plan.Ignored = ignored
		if planned != nil {
			cands = append([]Candidate{*planned}, cands...)
			sortCandidates(cands)
		}
		if opts.ToRevision == 0 {
			// The newest history first: after a restore without a
			// revision bump (or a cluster recreated under the same name)
			// its backups are below the old history's revisions.
			if cands, err = byLineage(ctx, opts, plan, cands); err != nil {
				return cands, -1, StepList, err
			}
		}
		cands, idx, err = selectCandidate(opts.ClusterID, opts.Layout.ClusterPrefix(opts.ClusterID), listed, cands, ignored, opts.Backup, plan.Survivor)
		plan.Candidates = cands
		if err != nil {
			return cands, idx, StepSelect, err
		}
	}
	step, err = choose(opts, log, plan, cands, idx, local == nil)
	if err == nil && local == nil {
		step, err = checkJournalProof(ctx, opts, plan)
	}
	return cands, idx, step, err
}

// choose makes cands[idx] the plan's choice, with the reason, and checks,
// from the manifest, that an encrypted backup can be decrypted (checkID:
// not for a local plaintext snapshot) before anything is downloaded or
// written.
func choose(opts Options, log *slog.Logger, plan *Plan, cands []Candidate, idx int, checkID bool) (string, error) {
	plan.Reason = chooseReason(cands, idx, opts.Backup != "", plan.Survivor)
	switch {
	case opts.ToLatest:
		plan.Reason += fmt.Sprintf("; the journal replayed after it to revision %d, the newest it reaches (--to-latest)", opts.ToRevision)
	case opts.ToRevision > 0:
		plan.Reason += fmt.Sprintf("; the newest at or below --to-revision %d, the journal replayed after it", opts.ToRevision)
	}
	cands[idx].Status = "chosen"
	chosen := cands[idx]
	plan.Chosen = &chosen
	plan.EtcdVersion = chosen.ServerVersion
	plan.MinRevision = chosen.Revision + int64(opts.BumpRevision)
	if w := chosen.versionsWarning(); w != "" {
		plan.Reason += "; " + w
		log.Warn("restoring from a backup that only object versions hold", "backup", chosen.Name, "status", chosen.Recovered,
			"versions", chosen.Versions)
	}
	log.Info("chose a snapshot", "backup", chosen.Name, "revision", chosen.Revision, "reason", plan.Reason)
	// An encrypted backup needs the identity of one of its recipients:
	// checked from the manifest before anything is downloaded or written.
	if !chosen.Planned && checkID {
		if err := checkIdentity(opts.Layout, chosen.manifest, opts.Identities); err != nil {
			return StepVerifyBackup, err
		}
	}
	return "", nil
}
