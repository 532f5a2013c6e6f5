package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/escrow"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/usage"
	"github.com/armada/etcd-recovery/restore"
)

// Steps of RebuildRestore before OperatorRestore's, named in its errors.
const (
	RRStepChoose = "choose the backup"
	RRStepEscrow = "read the escrow"
)

// RebuildRestoreOptions configure RebuildRestore (restore --via
// etcd-operator --rebuild).
type RebuildRestoreOptions struct {
	// Restore is the restore that follows the rebuild (Backup, the point
	// in time, Identities, DryRun, …). Its NoLive is forced: the members
	// of a rebuilt namespace are gone, and the data comes from the store.
	Restore OperatorRestoreOptions
	// Replace replaces existing objects that differ from the escrow
	// (RebuildOptions.Replace).
	Replace bool
	// EscrowFrom is the backup whose escrow rebuilds the namespace, when
	// the restored backup's own escrow is not usable (state missing,
	// mismatch or none; a backup written before escrow existed). Default:
	// the restored backup's, which must be usable.
	EscrowFrom string
}

// RebuildRestoreError is a failed RebuildRestore before the restore: the
// cluster, the step and the cause. The restore's own failures are
// *OperatorRestoreError, the rebuild's *RebuildError.
type RebuildRestoreError struct {
	Namespace, Cluster string
	At                 string
	Err                error
}

func (e *RebuildRestoreError) Error() string {
	return fmt.Sprintf("rebuild and restore of etcdcluster %s/%s failed at step %q: %v", e.Namespace, e.Cluster, e.At, e.Err)
}

func (e *RebuildRestoreError) Unwrap() error { return e.Err }

// RebuildRestoreReport is what RebuildRestore did.
type RebuildRestoreReport struct {
	Namespace string `json:"namespace"`
	Cluster   string `json:"cluster"`
	DryRun    bool   `json:"dryRun"`
	// Backup is the backup restored (chosen as the restore chooses it);
	// EscrowFrom the backup whose escrow rebuilt the namespace (the same
	// unless RebuildRestoreOptions.EscrowFrom).
	Backup     string                 `json:"backup"`
	EscrowFrom string                 `json:"escrowFrom"`
	EscrowKey  string                 `json:"escrowKey,omitempty"`
	Escrow     *catalog.EscrowRef     `json:"escrow,omitempty"`
	Rebuild    *RebuildReport         `json:"rebuild,omitempty"`
	Restore    *OperatorRestoreReport `json:"restore,omitempty"`
	// Steps are the durations of: choose the backup, read the escrow,
	// rebuild objects, then the whole restore via etcd-operator.
	Steps    []StepTime    `json:"steps"`
	Duration time.Duration `json:"duration"`
}

// RebuildRestore rebuilds a cluster's namespace objects from the escrow
// its backup names, then restores the data through etcd-operator:
//
//  1. chooses the backup as the restore will (Restore.Backup; else
//     restore's own selection, in a dry run, with the point in time:
//     the newest backup, or the base backup of --to-revision/--to-time);
//  2. reads its manifest's escrow: one that is not usable (state
//     missing, mismatch, none, or no escrow at all) is refused, naming
//     its state and problems, unless EscrowFrom names the backup whose
//     escrow to use; then escrow.Open with Restore.Identities (a wrong
//     identity or a tampered escrow fails here, naming the escrow's key,
//     before anything is created);
//  3. Rebuild (Replace, DryRun): the secrets, Services and the
//     EtcdCluster, paused;
//  4. OperatorRestore of that backup (not in a dry run: the EtcdCluster
//     it needs as its template is not created), which verifies the
//     restored cluster.
func RebuildRestore(ctx context.Context, o RebuildRestoreOptions) (*RebuildRestoreReport, error) {
	ro := o.Restore
	if err := ro.Validate(); err != nil {
		return nil, err
	}
	if o.EscrowFrom != "" {
		if _, _, err := catalog.ParseBackupName(o.EscrowFrom); err != nil {
			return nil, usage.Errorf("restore: --escrow-from: %w", err)
		}
	}
	k := ro.Kube
	if k == nil || ro.Store == nil {
		return nil, errors.New("rebuild restore: need the kubernetes client and the store")
	}
	ro.defaults()
	ro.NoLive = true
	start := time.Now()
	rep := &RebuildRestoreReport{Namespace: k.Namespace, Cluster: ro.Cluster, DryRun: ro.DryRun, Steps: []StepTime{}}
	fail := func(step string, err error) error {
		return &RebuildRestoreError{Namespace: k.Namespace, Cluster: ro.Cluster, At: step, Err: ctxErr(ctx, err)}
	}
	timed := func(step string, t0 time.Time) {
		rep.Steps = append(rep.Steps, StepTime{Step: step, Duration: time.Since(t0)})
	}
	log := ro.Log.With("namespace", k.Namespace, "etcdcluster", ro.Cluster)
	pitr := ro.ToRevision > 0 || !ro.ToTime.IsZero() || ro.ToLatest

	// 1. The backup.
	t0 := time.Now()
	ro.step(RRStepChoose)
	var backupErr error
	rep.Backup = ro.Backup
	if rep.Backup == "" {
		sel := restore.Options{ClusterID: ro.Cluster, Store: ro.Store, Layout: ro.Layout, NoLive: true, DryRun: true,
			Log: ro.Log, Identities: ro.Identities, ToRevision: ro.ToRevision, ToTime: ro.ToTime, ToLatest: ro.ToLatest,
			Journal: ro.Journal, AcceptUnprovenJournal: ro.AcceptUnprovenJournal}
		plan, err := chooseBackup(ctx, sel)
		var idErr *restore.IdentityError
		switch {
		case errors.As(err, &idErr) && idErr.Backup != "":
			// The identity cannot decrypt the chosen backup: its escrow
			// is opened first, so that the error names it too (a
			// break-glass identity may open the escrow and not the data).
			rep.Backup, backupErr = idErr.Backup, err
		case err != nil:
			return rep, fail(RRStepChoose, err)
		case plan == nil || plan.Chosen == nil:
			return rep, fail(RRStepChoose, errors.New("no backup to restore"))
		default:
			rep.Backup = plan.Chosen.Name
		}
	}
	timed(RRStepChoose, t0)
	log.Info("backup to restore", "backup", rep.Backup)

	// 2. Its escrow (or EscrowFrom's), opened before anything is created.
	t0 = time.Now()
	ro.step(RRStepEscrow)
	rep.EscrowFrom = rep.Backup
	if o.EscrowFrom != "" {
		rep.EscrowFrom = o.EscrowFrom
	}
	m, err := catalog.LoadManifest(ctx, ro.Store, ro.Layout, ro.Cluster, rep.EscrowFrom)
	if err != nil {
		return rep, fail(RRStepEscrow, fmt.Errorf("manifest of backup %s: %w", rep.EscrowFrom, err))
	}
	rep.Escrow = m.Escrow
	if !m.Escrow.Usable() {
		why := "written before escrow existed: it names none"
		if m.Escrow != nil {
			why = fmt.Sprintf("state %s", m.Escrow.State)
			if len(m.Escrow.Problems) > 0 {
				why += ": " + strings.Join(m.Escrow.Problems, "; ")
			}
		}
		hint := "--escrow-from BACKUP rebuilds from another backup's escrow (list shows each backup's)"
		if o.EscrowFrom != "" {
			hint = "name a backup whose escrow is present (list shows each backup's)"
		}
		return rep, fail(RRStepEscrow, fmt.Errorf("backup %s has no usable escrow (%s); %s", rep.EscrowFrom, why, hint))
	}
	rep.EscrowKey = ro.Layout.EscrowKey(ro.Cluster, m.Escrow.Address)
	list, err := escrow.Open(ctx, ro.Store, ro.Layout, ro.Cluster, m.Escrow, ro.Identities)
	if err != nil {
		if backupErr != nil {
			err = fmt.Errorf("%w (nor can it decrypt the backup: %v)", err, backupErr)
		}
		return rep, fail(RRStepEscrow, err)
	}
	if backupErr != nil {
		return rep, fail(RRStepChoose, fmt.Errorf("the escrow opens, but the backup does not: %w", backupErr))
	}
	timed(RRStepEscrow, t0)
	log.Info("escrow opened", "key", rep.EscrowKey, "objects", strings.Join(list.ObjectNames(), ","))

	// 3. The namespace's objects, after OperatorRestore's own check of
	// the awsSecret (a dry run too; an EtcdRestore in flight is refused
	// by Rebuild): a restore that would fail does not rebuild first.
	warning, err := k.CheckAWSSecret(ctx, ro.AWSSecret)
	if err != nil {
		return rep, &OperatorRestoreError{Namespace: k.Namespace, Cluster: ro.Cluster, At: OpStepAWSSecret, Err: ctxErr(ctx, err)}
	}
	if warning != "" {
		log.Warn(warning, "step", OpStepAWSSecret)
	}
	t0 = time.Now()
	ro.step(StepRebuild)
	rep.Rebuild, err = Rebuild(ctx, RebuildOptions{Kube: k, Cluster: ro.Cluster, List: list, Replace: o.Replace, DryRun: ro.DryRun, Log: ro.Log})
	timed(StepRebuild, t0)
	if err != nil {
		return rep, err
	}
	if ro.DryRun {
		// OperatorRestore's dry run needs the EtcdCluster, which a dry
		// rebuild does not create: the report says what would follow.
		rep.Duration = time.Since(start)
		return rep, nil
	}

	// 4. The data, through etcd-operator, verified.
	t0 = time.Now()
	if !pitr {
		ro.Backup = rep.Backup
	}
	rep.Restore, err = OperatorRestore(ctx, ro)
	timed("restore via etcd-operator", t0)
	rep.Duration = time.Since(start)
	if err != nil {
		return rep, err
	}
	if rep.Restore.Backup != "" && rep.Restore.Backup != rep.Backup {
		log.Warn("the restore chose another backup than the one whose escrow rebuilt the namespace", "restored", rep.Restore.Backup, "escrow_from", rep.EscrowFrom)
		rep.Backup = rep.Restore.Backup
	}
	return rep, nil
}

// chooseBackup is restore's selection (the point in time resolved, the
// committed backups ranked, an encrypted one checked against the
// identities from its manifest) without the download that verifies the
// chosen backup: OperatorRestore verifies it, and reading a 1 GiB backup
// twice costs 10 s. The placeholder target satisfies the options' check
// of a manual restore: nothing is written.
func chooseBackup(ctx context.Context, sel restore.Options) (*restore.Plan, error) {
	sel.InitialCluster = "rebuild=http://127.0.0.1:2380"
	cfg, plan, err := restore.Resolve(ctx, sel)
	if err != nil {
		return plan, err
	}
	if _, err := cfg.Select(ctx, plan); err != nil {
		return plan, err
	}
	return plan, nil
}

// Tables are the rebuild's objects, then the restore's report, then the
// steps' durations.
func (r *RebuildRestoreReport) Tables() []output.Table {
	var out []output.Table
	head := output.Table{Title: fmt.Sprintf("Backup %s; escrow of backup %s", r.Backup, r.EscrowFrom)}
	if r.EscrowKey != "" {
		head.Title += " (" + r.EscrowKey + ")"
	}
	head.Title += "\n\n"
	out = append(out, head)
	if r.Rebuild != nil {
		t := r.Rebuild.Table()
		if r.DryRun {
			t.Notes = append(t.Notes, fmt.Sprintf("Then etcd-operator would restore backup %s into it and the restored cluster would be verified.", r.Backup))
		}
		out = append(out, t)
	}
	if r.Restore != nil {
		out = append(out, r.Restore.Tables()...)
	}
	st := output.Table{Title: "\n", Header: []string{"STEP", "DURATION"}}
	for _, s := range r.Steps {
		st.Rows = append(st.Rows, []string{s.Step, s.Duration.Round(time.Millisecond).String()})
	}
	return append(out, st)
}
