package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/armada/etcd-recovery/internal/seal"
)

// FetchOptions configure the fetch stage.
type FetchOptions struct {
	// Dir holds the staged snapshot file of a real run (a dry run stages
	// it in a private dir under Options.ScratchDir, removed before Fetch
	// returns).
	Dir string
	// Prove is set by a run that proves the chosen backup (a drill): a
	// refused backup's verification error is returned as it is (no
	// BackupError), and no other backup is tried or verified.
	Prove bool
	// SpaceChecked: the caller has checked the free space for the staged
	// file and what follows it (a drill, whose data dir takes the staged
	// file over); Fetch then does not check it.
	SpaceChecked bool
}

// Fetch is the fetch stage: the chosen backup is downloaded, decrypted
// and decompressed into a staged file in fo.Dir while every hash and size
// is checked against its manifest (or a local snapshot is verified in
// place), and the staged database is read (Plan.Snapshot) and its
// revision checked against the manifest's (and, for a point in time,
// against the revision to restore to). A backup refused for its bytes
// makes Run, which chose it itself, try the next candidate
// (Plan.Fallbacks); one named with Options.Backup is refused with a
// BackupError naming the next good one. It returns the staged file's path
// ("" in a dry run, and for the survivor a dry run plans); the caller
// removes it. On error it is already removed.
//
// A journal's replay, when there is one, is the stage after this one
// (Replay): it applies to the staged file, before Prepare.
func (c *Config) Fetch(ctx context.Context, plan *Plan, sel *Selection, fo FetchOptions) (string, error) {
	fc := fetchConfig{prove: fo.Prove, spaceChecked: fo.SpaceChecked, local: sel.local}
	path, step, err := c.verifyCandidates(ctx, plan, sel.Candidates, sel.Index, fo.Dir, fc)
	if err != nil {
		if path != "" {
			os.Remove(path)
		}
		return "", stepError(ctx, c.src.clusterID, step, err)
	}
	return path, nil
}

// fallsBack reports whether a candidate refused at verification makes
// restore try the next one: only when it chose the backup itself. A backup
// named with --backup is refused and the run stops (the SRE chose it);
// a drill (FetchOptions.Prove, and it sets Backup too) proves one backup;
// a local plaintext snapshot is the only candidate.
func fallsBack(backup string, fc fetchConfig) bool {
	return backup == "" && !fc.prove && fc.local == nil
}

// verifyCandidates is the fetch stage: it verifies the chosen cands[idx]
// (verifyChosen) and, when it is
// refused for a property of its bytes (a verifyError: a checksum, a
// truncated or undecodable stream, an object gone, a database below the
// manifest's revision, an age payload that does not authenticate) and
// fallsBack, the next candidate in rank order, and so on: every candidate
// is tried at most once, each refusal is logged (the backup, why, the one
// tried next) and kept in plan.Fallbacks. A store failure, a cancelled or
// expired context (the dry run's --timeout), a local disk error or a
// missing identity stop the run as they are (a local failure reading the
// staged file back too, isLocalFailure): they say nothing about the
// backup. When every candidate is refused, the error is the last one's
// BackupError, naming the others.
func (c *Config) verifyCandidates(ctx context.Context, plan *Plan, cands []Candidate, idx int, dir string, fc fetchConfig) (string, string, error) {
	log := c.log
	for first := true; ; first = false {
		if !first {
			// The next candidate is chosen as the select stage chose
			// the first.
			if step, err := c.choose(plan, cands, idx, fc.local == nil); err != nil {
				return "", step, err
			}
			// The journal proofs gate the next candidate as they gated
			// the first: an older backup's replay may pass through a
			// window whose proof failed.
			if fc.local == nil {
				if step, err := checkJournalProof(ctx, c.src, c.to, plan); err != nil {
					return "", step, err
				}
			}
		}
		snapPath, step, err := c.verifyChosen(ctx, plan, cands, idx, dir, fc)
		var ve *verifyError
		if err == nil || !fallsBack(c.backup, fc) || !errors.As(err, &ve) || ctx.Err() != nil || IsLocalFailure(err) {
			return snapPath, step, err
		}
		if snapPath != "" {
			os.Remove(snapPath)
		}
		refused := &cands[idx]
		refused.Status, refused.Detail = StatusFailedVerification, err.Error()
		if plan.Chosen != nil {
			plan.Chosen.Status, plan.Chosen.Detail = refused.Status, refused.Detail
		}
		fb := Fallback{Backup: refused.Name, Revision: refused.Revision, Reason: err.Error(), Checks: plan.Checks}
		next := idx + 1
		if next >= len(cands) {
			plan.Fallbacks = append(plan.Fallbacks, fb)
			log.Warn("backup failed verification, and no other candidate is left", "backup", refused.Name, "err", err)
			return "", step, refusedAll(c.src.clusterID, plan.Fallbacks, err)
		}
		fb.Next = cands[next].Name
		plan.Fallbacks = append(plan.Fallbacks, fb)
		log.Warn("backup failed verification: trying the next candidate", "backup", refused.Name, "err", err,
			"next", fb.Next, "next_revision", cands[next].Revision)
		// What choose and verifyChosen filled in was the refused backup's.
		plan.Checks, plan.Snapshot, plan.Chosen, plan.Reason, plan.EtcdVersion, plan.MinRevision = []Check{}, nil, nil, "", "", 0
		idx = next
	}
}

// fetchConfig is how the fetch stage treats the chosen candidate
// (FetchOptions, and the selection's local snapshot).
type fetchConfig struct {
	// prove: one backup is proven (a drill); see FetchOptions.Prove.
	prove bool
	// spaceChecked: the caller checked the free space itself.
	spaceChecked bool
	// local replaces the download with a local plaintext snapshot,
	// verified in place and staged as it is.
	local *localSnapshot
}

// verifyChosen verifies the chosen cands[idx] by streaming it, as the
// fetch stage says; verifyCandidates (select.go) calls it for each
// candidate it tries.
func (c *Config) verifyChosen(ctx context.Context, plan *Plan, cands []Candidate, idx int, dir string, fc fetchConfig) (snapPath, step string, err error) {
	log := c.log
	chosen := cands[idx]
	// Verify before anything is written.
	if chosen.Planned {
		for _, n := range []string{CheckStoredSHA, CheckEtcdHash, CheckRawSHA, CheckSizes} {
			plan.Checks = append(plan.Checks, Check{Name: n, Status: CheckPlanned, Detail: "checked while the survivor snapshot streams"})
		}
		return "", "", nil
	}
	// Room first: nothing is downloaded unless every file system it is
	// written to has space for it.
	if !fc.spaceChecked {
		if err := checkRestoreSpace(ctx, c.dryRun, c.scratchDir, plan, chosen, dir); err != nil {
			return "", StepSpace, err
		}
	}
	var dst *os.File
	switch {
	case c.dryRun:
		// The same checks as the real run, the database's revision
		// included, so the database is read from a file: in a private
		// scratch dir, not next to the data dirs, removed on return.
		scratchRoot := ScratchRoot(c.scratchDir)
		scratch, err := seal.MkdirTemp(scratchRoot, ".etcd-recovery-dry-run-") // plaintext: named and registered (seal)
		if err != nil {
			return "", StepVerifyBackup, fmt.Errorf("dry run: scratch dir for the snapshot: %w", err)
		}
		defer os.RemoveAll(scratch)
		if dst, err = os.OpenFile(filepath.Join(scratch, "snapshot.db"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return "", StepVerifyBackup, fmt.Errorf("dry run: scratch file for the snapshot: %w", err)
		}
		defer dst.Close()
	case fc.local != nil:
		// The caller owns the plaintext copy the backup streamed: it is
		// verified where it is and staged as it is (a drill then renames
		// it into the data dir, takeOverMember): the database is never
		// copied.
		snapPath = fc.local.path
	default:
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return snapPath, StepVerifyBackup, err
		}
		if dst, err = seal.CreateTemp(dir, ".etcd-recovery-"+c.src.clusterID+"-", ".snapshot.db"); err != nil { // plaintext: named and registered (seal)
			return snapPath, StepVerifyBackup, fmt.Errorf("temp file for the snapshot in %s: %w", dir, err)
		}
		snapPath = dst.Name()
		defer dst.Close()
	}
	fetchStart := time.Now()
	prog := withTotal(c.src.progress(fmt.Sprintf("download %s", chosen.Name)), chosen.manifest)
	var fr *fetchResult
	if fc.local != nil {
		fr, err = verifyLocal(ctx, *fc.local, dst) // dst nil: verified in place
	} else {
		fr, err = fetchSnapshot(ctx, c.src.store, c.src.layout, chosen.manifest, chosen.snapshotVersion(), c.src.ids, dst, prog.Update)
	}
	prog.Done()
	if fr != nil {
		plan.Checks = append(plan.Checks, fr.Checks...)
	}
	if err != nil {
		return snapPath, StepVerifyBackup, c.refuse(ctx, cands, idx, err, fc)
	}
	cands[idx].Status, plan.Chosen.Status = "chosen, verified", "chosen, verified"
	stagedPath := snapPath
	if dst != nil {
		if err := dst.Close(); err != nil {
			return snapPath, StepVerifyBackup, err
		}
		stagedPath = dst.Name()
	}
	log.Debug("snapshot streamed and checked", "backup", chosen.Name, "duration", time.Since(fetchStart).Round(time.Millisecond))
	facts, err := readSnapshotFacts(stagedPath)
	if err != nil {
		return snapPath, StepVerifyBackup, c.refuse(ctx, cands, idx, &verifyError{err}, fc)
	}
	plan.Snapshot = &facts
	plan.MinRevision = facts.Revision + int64(c.bump)
	plan.Checks = append(plan.Checks, Check{Name: "database", Status: CheckPassed,
		Detail: fmt.Sprintf("revision %d, %d live keys, %d key revisions", facts.Revision, facts.LiveKeys, facts.Revisions)})
	if facts.StoreRevision() < chosen.Revision {
		return snapPath, StepVerifyBackup, c.refuse(ctx, cands, idx, &verifyError{fmt.Errorf(
			"the database's revision %d is below the manifest's %d", facts.StoreRevision(), chosen.Revision)}, fc)
	}
	if c.to.Revision > 0 && facts.StoreRevision() > c.to.Revision {
		// The manifest's revision is a lower bound: the snapshot may hold
		// revisions past the one to restore to, which no replay undoes.
		return snapPath, StepVerifyBackup, c.refuse(ctx, cands, idx, &verifyError{fmt.Errorf(
			"the database's revision %d is above --to-revision %d (the manifest's %d is a lower bound): an older backup is needed",
			facts.StoreRevision(), c.to.Revision, chosen.Revision)}, fc)
	}
	log.Info("backup verified", "backup", chosen.Name, "checks", len(plan.Checks), "duration", time.Since(fetchStart).Round(time.Millisecond))
	return snapPath, "", nil
}

// refuse turns a failed verification into a BackupError naming the
// next-newest backup that passes (each verified by streaming, nothing
// written). Store and disk errors are returned as they are, and so is the
// refusal of a backup being proven (fc.prove: a drill proves one backup,
// it does not look for another).
func (c *Config) refuse(ctx context.Context, cands []Candidate, idx int, err error, fc fetchConfig) error {
	var ve *verifyError
	if !errors.As(err, &ve) || ctx.Err() != nil || fc.prove {
		return err
	}
	cands[idx].Status, cands[idx].Detail = "failed verification", err.Error()
	if fallsBack(c.backup, fc) {
		// verifyCandidates tries the next candidate itself.
		return err
	}
	be := &BackupError{Backup: cands[idx].Name, Err: err}
	for i := idx + 1; i < len(cands); i++ {
		cand := &cands[i]
		if cand.Planned {
			continue
		}
		prog := withTotal(c.src.progress(fmt.Sprintf("verify %s", cand.Name)), cand.manifest)
		_, verr := fetchSnapshot(ctx, c.src.store, c.src.layout, cand.manifest, cand.snapshotVersion(), c.src.ids, nil, prog.Update)
		prog.Done()
		if ctx.Err() != nil {
			return err
		}
		var cve *verifyError
		if verr != nil && !errors.As(verr, &cve) {
			// The store, not the backup: the ones after it are unknown.
			cand.Status, cand.Detail = "not checked", verr.Error()
			be.NextErr = verr
			break
		}
		if verr != nil {
			cand.Status, cand.Detail = "failed verification", verr.Error()
			c.src.log.Warn("backup failed verification", "cluster", c.src.clusterID, "backup", cand.Name, "err", verr)
			continue
		}
		cand.Status = "verified"
		be.Next, be.NextRevision = cand.Name, cand.Revision
		break
	}
	return be
}

// checkRestoreSpace checks, before the download, that the staged snapshot
// fits where it is staged and, for a restore that writes data dirs, that
// their file systems have room for every member's database and WAL. A
// dry run reports the data dirs' shortfall as a problem (it writes none)
// and fails only when its own staged copy would not fit.
func checkRestoreSpace(ctx context.Context, dryRun bool, scratchDir string, plan *Plan, chosen Candidate, dir string) error {
	raw := chosen.RawSize
	if raw <= 0 {
		return nil
	}
	stage := SpaceNeed{Bytes: StagedBytes(raw), Hint: HintScratch,
		What: fmt.Sprintf("the staged snapshot of backup %s, uncompressed", chosen.Name)}
	switch {
	case dryRun:
		stage.Path = ScratchRoot(scratchDir)
	default:
		stage.Path = dir
		if scratchDir == "" && len(plan.Members) > 0 {
			stage.Hint = "or stage the snapshot elsewhere with --temp-dir"
		}
	}
	var dirs []SpaceNeed
	for _, m := range plan.Members {
		if m.Problem != "" {
			continue
		}
		dirs = append(dirs, SpaceNeed{Path: m.DataDir, Bytes: memberBytes(raw), Hint: HintDataDirs,
			What: fmt.Sprintf("member %s's data dir, database and 64 MiB WAL", m.Name)})
	}
	if dryRun {
		if err := CheckSpace([]SpaceNeed{stage}); err != nil {
			return err
		}
		if err := CheckSpace(dirs); err != nil {
			plan.Problems = append(plan.Problems, "data dirs: "+err.Error())
		}
		return nil
	}
	// Reserved while dir (the staging dir) exists: restores running at
	// once in this process count each other's staged copies.
	_, err := reserveSpace(ctx, ScratchRoot(""), dir, append(dirs, stage))
	return err
}
