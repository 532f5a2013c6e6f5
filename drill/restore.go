package drill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/ctxerr"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/restore"
)

// stepError is a failure of the drill's own step between restore's
// stages, with the drill step it belongs to.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// restore composes restore's stages for the drill's one member: plan,
// select (the backup named, or the local plaintext snapshot), the drill's
// etcd found, free space checked, fetch (the backup proven: no fallback),
// the source hashed, prepare without the compaction mark (the drill
// compacts through the API once it has hashed the snapshot's revision)
// and write with take-over (the staged file renamed into the data dir).
// It returns when the restore step began; its errors are restore's
// *Error, or a *stepError of the drill's own steps. The verify checks are
// recorded on every return path.
func (d *drill) restore(ctx context.Context, ro restore.Options) (restoreStart time.Time, err error) {
	cfg, plan, err := restore.Resolve(ctx, ro)
	defer func() {
		for _, c := range plan.Checks {
			st := catalog.DrillCheckPassed
			switch c.Status {
			case restore.CheckFailed:
				st = catalog.DrillCheckFailed
			case restore.CheckSkipped, restore.CheckPlanned:
				st = catalog.DrillCheckInfo
			}
			d.rec.Checks = append(d.rec.Checks, catalog.DrillCheck{Name: CheckVerify + ": " + c.Name, Status: st, Detail: c.Detail})
		}
	}()
	if err != nil {
		return restoreStart, err
	}
	if err := cfg.PlanTargets(plan); err != nil {
		return restoreStart, err
	}
	d.token = plan.Token
	var sel *restore.Selection
	if d.opts.Plaintext != "" {
		sel, err = cfg.SelectLocal(ctx, plan, d.opts.Plaintext, d.opts.Manifest)
	} else {
		sel, err = cfg.Select(ctx, plan)
	}
	if err != nil {
		return restoreStart, err
	}
	c := sel.Chosen()
	if err := d.findEtcd(ctx, c); err != nil {
		return restoreStart, restoreError(ctx, cfg, restore.StepSelect, err)
	}
	d.step(ctx, StepVerify)
	d.verifyStart = time.Now()
	if c.RawSize > 0 {
		if err := restore.CheckSpace(spaceNeeds(d.opts.Plaintext != "", d.dataDir, c, ro.ScratchDir)); err != nil {
			return restoreStart, restoreError(ctx, cfg, restore.StepSpace, err)
		}
	}
	staged, err := cfg.Fetch(ctx, plan, sel, restore.FetchOptions{Dir: ro.ScratchDir, Prove: true, SpaceChecked: true})
	if err != nil {
		return restoreStart, err
	}
	defer os.Remove(staged) // gone already once taken over

	d.addStep(StepVerify, d.verifyStart, nil)
	// A point-in-time drill: the journal replayed into the staged file;
	// the facts checked and the revision hashed are then the replayed
	// database's.
	if err := restore.Replay(ctx, plan, staged, cfg.Target(), ro.Log.With("cluster", ro.ClusterID)); err != nil {
		return restoreStart, err
	}
	if plan.Snapshot != nil {
		d.facts = *plan.Snapshot
	}
	d.rec.Revision = d.facts.StoreRevision()
	// The source first: the apiserver compacts every 5 minutes.
	t := time.Now()
	d.hashSource(ctx)
	d.addStep(StepHashSource, t, nil)
	if err := ctx.Err(); err != nil {
		return restoreStart, restoreError(ctx, cfg, restore.StepVerifyBackup, &stepError{StepCompare, err})
	}
	d.step(ctx, StepRestore)
	restoreStart = time.Now()
	if err := ctx.Err(); err != nil {
		return restoreStart, restoreError(ctx, cfg, restore.StepVerifyBackup, err)
	}
	prep, err := cfg.Prepare(ctx, plan, staged, false)
	if err != nil {
		return restoreStart, err
	}
	return restoreStart, restore.WriteDataDirs(ctx, plan, prep, restore.WriteOptions{Parallel: ro.Parallel, TakeOver: true, Log: ro.Log.With("cluster", ro.ClusterID)})
}

// restoreError is a failure between restore's stages as restore.Run
// reports one: the cluster, the restore step and the cause.
func restoreError(ctx context.Context, cfg *restore.Config, step string, err error) error {
	return &restore.Error{ClusterID: cfg.ClusterID(), At: step, Err: ctxerr.Wrap(ctx, err)}
}

// findEtcd records the chosen backup and finds the etcd of its minor
// version, before anything is downloaded.
func (d *drill) findEtcd(ctx context.Context, c restore.Candidate) error {
	d.chosen = c
	d.rec.Backup, d.rec.SourceVersion = c.Name, c.ServerVersion
	d.rec.Encrypted = c.Manifest() != nil && c.Manifest().Encrypted()
	d.rec.Drilled = catalog.DrilledStored
	if d.opts.Plaintext != "" {
		d.rec.Drilled = catalog.DrilledLocalPlaintext
	}
	d.step(ctx, StepEtcd)
	t := time.Now()
	bin, v, err := findEtcd(ctx, d.opts.EtcdBinDir, c.ServerVersion)
	d.addStep(StepEtcd, t, err)
	if err != nil {
		return &stepError{StepEtcd, err}
	}
	d.bin, d.rec.EtcdVersion = bin, v
	d.log.Info("drill etcd found", "backup", c.Name, "etcd", bin, "version", v, "source_version", c.ServerVersion)
	if err := ctx.Err(); err != nil {
		return &stepError{StepEtcd, err}
	}
	return nil
}

// spaceNeeds is what a drill writes: the download staged in stageDir
// (none when it drills a plaintext copy it already has there), and its
// data dir, where the staged database is renamed (take-over) and etcd
// adds its WAL.
func spaceNeeds(local bool, dataDir string, chosen restore.Candidate, stageDir string) []restore.SpaceNeed {
	raw := chosen.RawSize
	src := "the manifest's raw size"
	var needs []restore.SpaceNeed
	if !local {
		needs = append(needs, restore.SpaceNeed{Path: stageDir, Bytes: restore.StagedBytes(raw), Hint: restore.HintScratch,
			What: fmt.Sprintf("the download of backup %s, a database of %s (%s)", chosen.Name, output.Bytes(raw), src)})
	}
	needs = append(needs, restore.SpaceNeed{Path: dataDir, Bytes: restore.DrillScratchBytes(raw), Hint: restore.HintScratch,
		What: fmt.Sprintf("the drill's data dir for backup %s, a database of %s (%s), moved in without a copy, and its etcd's WAL",
			chosen.Name, output.Bytes(raw), src)})
	return needs
}

// stepOf maps a restore step to the drill's.
func stepOf(err error) string {
	var se *stepError
	if errors.As(err, &se) {
		return se.step
	}
	var re *restore.Error
	if !errors.As(err, &re) {
		return StepRestore
	}
	switch re.Step() {
	case restore.StepValidate:
		return StepValidate
	case restore.StepStore, restore.StepList, restore.StepSelect, restore.StepSurvivor:
		return StepSelect
	case restore.StepSpace:
		return StepSpace
	case restore.StepVerifyBackup:
		return StepVerify
	default:
		return StepRestore
	}
}
