package restore

import (
	"context"
	"fmt"

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
// snapshot taken (Options.Survivor; in a dry run its member is only
// found), the committed backups listed and ranked, and one chosen: the
// best, or Options.Backup (see Plan.Reason). An encrypted backup is
// checked against Options.Identities from its manifest, before anything
// is downloaded.
func (c *Config) Select(ctx context.Context, plan *Plan) (*Selection, error) {
	return c.selectStage(ctx, plan, nil)
}

// SelectLocal is the select stage for a local plaintext snapshot of a
// committed backup (the plaintext a backup streamed, drilled by the
// backup job): the store is checked and the backup m describes is the one
// candidate. Stage then verifies the file at path in place, against m,
// and stages it as it is (the caller owns it: nothing is downloaded or
// copied).
func (c *Config) SelectLocal(ctx context.Context, plan *Plan, path string, m *catalog.Manifest) (*Selection, error) {
	return c.selectStage(ctx, plan, &localSnapshot{path: path, manifest: m})
}

func (c *Config) selectStage(ctx context.Context, plan *Plan, local *localSnapshot) (*Selection, error) {
	cands, idx, step, err := c.selectBackup(ctx, plan, local)
	if err != nil {
		return nil, stepError(ctx, c.src.clusterID, step, err)
	}
	return &Selection{Candidates: cands, Index: idx, local: local}, nil
}

// selectBackup is the select stage: the store checked, the survivor
// snapshot taken (or, in a dry run, its member found), the candidates
// listed and ranked (or, with local, the local snapshot's backup alone)
// and one chosen (choose). On error, step names the step that failed.
func (c *Config) selectBackup(ctx context.Context, plan *Plan, local *localSnapshot) (cands []Candidate, idx int, step string, err error) {
	if ck, ok := c.src.store.(store.Checker); ok {
		if err := ck.Check(ctx); err != nil {
			return nil, 0, StepStore, err
		}
	}

	// The survivor first: its data is newer than any backup, and once it
	// is committed to the store it is safe whatever happens next.
	plan.Survivor = &Survivor{}
	var planned *Candidate
	switch {
	case c.to.latest:
		plan.Survivor.Skipped = "--to-latest: the newest backup and the journal after it"
	case c.to.Revision > 0:
		plan.Survivor.Skipped = "--to-revision: a point-in-time restore starts from a backup at or below the revision"
	case c.survivor.noLive:
		plan.Survivor.Skipped = "--no-live"
	case len(c.survivor.old.Endpoints) == 0:
		plan.Survivor.Skipped = "no --endpoints of the old cluster given"
	case c.dryRun:
		if planned, err = probeSurvivor(ctx, c.src, c.survivor, plan.Survivor); err != nil {
			return nil, 0, StepSurvivor, err
		}
	default:
		if err := takeSurvivor(ctx, c.src, c.survivor, c.log, plan.Survivor); err != nil {
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
		listed, err := catalog.ListBackups(ctx, c.src.store, c.src.layout, c.src.clusterID)
		if err != nil {
			return nil, 0, StepList, err
		}
		var ignored []Ignored
		cands, ignored = rankCandidates(listed)
		if wantVersions(c.backup, c.includeDeleted, cands) {
			if listed, cands, ignored, err = withVersions(ctx, c.src, c.includeDeleted, c.log, listed); err != nil {
				return nil, 0, StepList, err
			}
		}
		if c.to.Revision > 0 {
			var above []Candidate
			if cands, ignored, above = atOrBelow(cands, ignored, c.to.Revision); len(cands) == 0 && c.backup == "" {
				plan.Ignored = ignored
				return cands, -1, StepSelect, noBackupAtOrBelow(c.src.clusterID, c.to.Revision, above)
			}
		}
		plan.Ignored = ignored
		if planned != nil {
			cands = append([]Candidate{*planned}, cands...)
			sortCandidates(cands)
		}
		if c.to.Revision == 0 {
			// The newest history first: after a restore without a
			// revision bump (or a cluster recreated under the same name)
			// its backups are below the old history's revisions.
			if cands, err = byLineage(ctx, c.src, plan, cands); err != nil {
				return cands, -1, StepList, err
			}
		}
		cands, idx, err = selectCandidate(c.src.clusterID, c.src.layout.ClusterPrefix(c.src.clusterID), listed, cands, ignored, c.backup, plan.Survivor)
		plan.Candidates = cands
		if err != nil {
			return cands, idx, StepSelect, err
		}
	}
	step, err = c.choose(plan, cands, idx, local == nil)
	if err == nil && local == nil {
		step, err = checkJournalProof(ctx, c.src, c.to, plan)
	}
	return cands, idx, step, err
}

// choose makes cands[idx] the plan's choice, with the reason, and checks,
// from the manifest, that an encrypted backup can be decrypted (checkID:
// not for a local plaintext snapshot) before anything is downloaded or
// written.
func (c *Config) choose(plan *Plan, cands []Candidate, idx int, checkID bool) (string, error) {
	log := c.log
	plan.Reason = chooseReason(cands, idx, c.backup != "", plan.Survivor)
	switch {
	case c.to.latest:
		plan.Reason += fmt.Sprintf("; the journal replayed after it to revision %d, the newest it reaches (--to-latest)", c.to.Revision)
	case c.to.Revision > 0:
		plan.Reason += fmt.Sprintf("; the newest at or below --to-revision %d, the journal replayed after it", c.to.Revision)
	}
	cands[idx].Status = "chosen"
	chosen := cands[idx]
	plan.Chosen = &chosen
	plan.EtcdVersion = chosen.ServerVersion
	plan.MinRevision = chosen.Revision + int64(c.bump)
	if w := chosen.versionsWarning(); w != "" {
		plan.Reason += "; " + w
		log.Warn("restoring from a backup that only object versions hold", "backup", chosen.Name, "status", chosen.Recovered,
			"versions", chosen.Versions)
	}
	log.Info("chose a snapshot", "backup", chosen.Name, "revision", chosen.Revision, "reason", plan.Reason)
	// An encrypted backup needs the identity of one of its recipients:
	// checked from the manifest before anything is downloaded or written.
	if !chosen.Planned && checkID {
		if err := checkIdentity(c.src.layout, chosen.manifest, c.src.ids); err != nil {
			return StepVerifyBackup, err
		}
	}
	return "", nil
}
