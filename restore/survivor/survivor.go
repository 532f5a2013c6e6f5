// Package survivor is restore's survivor snapshot taken with backup's own
// code: Backup implements restore.SurvivorBackup with backup's member
// choice (backup.SnapshotCandidates) and backup.Run, so that restore does
// not import backup. The CLI's restore, kube's etcd-operator restore and
// restore's tests set restore.Options.Survivor to Backup{}. It imports
// backup and restore; nothing but those composers imports it.
package survivor

import (
	"context"
	"errors"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/probe"
	"github.com/armada/etcd-recovery/restore"
)

// Backup takes the survivor snapshot with backup.Run.
type Backup struct{}

var _ restore.SurvivorBackup = Backup{}

// Candidates is backup.SnapshotCandidates.
func (Backup) Candidates(members []probe.Member, quorum bool) []probe.Member {
	return backup.SnapshotCandidates(members, quorum)
}

// Take commits a pre-restore backup of the best member of req.Old. When
// no member answers (backup fails at backup.StepMembers), the error is a
// *restore.NoSurvivorError holding backup's cause.
func (Backup) Take(ctx context.Context, req restore.SurvivorRequest) (*catalog.Manifest, error) {
	r, err := backup.Run(ctx, backup.Options{
		ClusterID: req.ClusterID, Kind: catalog.KindPreRestore, Etcd: req.Old,
		Store: req.Store, Layout: req.Layout, ProbeTimeout: req.ProbeTimeout,
		Progress: req.Progress, Log: req.Log, Now: req.Now,
		Recipients: req.Recipients, RequireEncryption: req.RequireEncryption,
		OnSource: req.OnSource,
	})
	var be *backup.Error
	if err != nil && errors.As(err, &be) && be.Step() == backup.StepMembers {
		return nil, &restore.NoSurvivorError{Err: be.Err}
	}
	if err != nil {
		return nil, err
	}
	return r.Manifest, nil
}
