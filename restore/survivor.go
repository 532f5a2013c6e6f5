package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/probe"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
)

// SurvivorRequest is a survivor snapshot to take: a pre-restore backup
// (catalog.KindPreRestore) of the best member of Old, committed to Store
// as backup.Run commits any backup.
type SurvivorRequest struct {
	ClusterID         string
	Old               etcdconn.Config
	Store             store.Store
	Layout            catalog.Layout
	ProbeTimeout      time.Duration
	Progress          func(n int64)
	Log               *slog.Logger
	Now               func() time.Time
	Recipients        seal.Recipients
	RequireEncryption bool
	// OnSource is called with the member chosen, before it streams.
	OnSource func(probe.Member)
}

// SurvivorBackup takes restore's survivor snapshot (Options.Survivor).
// survivor.Backup is the one implementation, with backup's member choice
// and backup.Run: restore does not import backup.
type SurvivorBackup interface {
	// Candidates orders the probed members of the old cluster to
	// snapshot, best first; a dry run names the first.
	Candidates(members []probe.Member, quorum bool) []probe.Member
	// Take commits the survivor snapshot and returns its manifest. When
	// no member of the old cluster answers, its error is a
	// *NoSurvivorError.
	Take(ctx context.Context, req SurvivorRequest) (*catalog.Manifest, error)
}

// NoSurvivorError is SurvivorBackup.Take finding no member of the old
// cluster that answers: restore then restores from the store.
type NoSurvivorError struct{ Err error }

func (e *NoSurvivorError) Error() string { return e.Err.Error() }

func (e *NoSurvivorError) Unwrap() error { return e.Err }

var errNoSurvivorBackup = errors.New("a survivor snapshot was asked for (endpoints of the old cluster) but Options.Survivor is not set")

// probeSurvivor finds, without changing anything, the member a survivor
// snapshot would be taken of; it returns it as a planned candidate.
func probeSurvivor(ctx context.Context, src source, sv survivorConfig, s *Survivor) (*Candidate, error) {
	if sv.take == nil {
		return nil, errNoSurvivorBackup
	}
	members, _ := probe.List(ctx, sv.old, sv.probeTimeout)
	members = probe.Members(ctx, sv.old, members, sv.probeTimeout)
	cands := sv.take.Candidates(members, probe.Quorum(members))
	if len(cands) == 0 {
		s.Skipped = "no member of the old cluster answered"
		return nil, nil
	}
	m := cands[0]
	s.Member, s.Endpoint, s.Planned = m.Name, m.ClientURL, true
	if m.Status.Header != nil {
		s.Revision = m.Status.Header.Revision
	}
	return &Candidate{Name: "(survivor snapshot, dry run)", Kind: catalog.KindPreRestore,
		Time: src.now().UTC(), Revision: s.Revision, Source: m.Name, ServerVersion: m.Status.Version, Status: CheckPlanned, Planned: true}, nil
}

// takeSurvivor commits a pre-restore snapshot of a surviving member
// (Options.Survivor). No member answering is not an error (the cluster is
// gone: restore from the store); any other failure is, since a survivor's
// newer data would be lost.
func takeSurvivor(ctx context.Context, src source, sv survivorConfig, log *slog.Logger, s *Survivor) error {
	if sv.take == nil {
		return errNoSurvivorBackup
	}
	rs, from, err := survivorRecipients(ctx, src, sv)
	if err != nil {
		return err
	}
	if rs.Len() > 0 {
		log.Info("the survivor snapshot is encrypted", "recipients", rs.String(), "from", from)
	}
	prog := src.progress("pre-restore snapshot")
	m, err := sv.take.Take(ctx, SurvivorRequest{
		ClusterID: src.clusterID, Old: sv.old,
		Store: src.store, Layout: src.layout, ProbeTimeout: sv.probeTimeout,
		Progress: prog.Update, Log: src.log, Now: src.now,
		Recipients: rs, RequireEncryption: sv.requireEncryption,
		OnSource: func(m probe.Member) { s.Member, s.Endpoint = m.Name, m.ClientURL },
	})
	prog.Done()
	var ne *NoSurvivorError
	if err != nil && errors.As(err, &ne) && ctx.Err() == nil {
		s.Member, s.Endpoint = "", ""
		s.Skipped = "no member of the old cluster answered"
		log.Warn("no surviving member answered: restoring from the store", "err", ne.Err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("a member of the old cluster answers but its snapshot could not be committed "+
			"(pass --no-live to restore from the store without it): %w", err)
	}
	s.Member, s.Endpoint, s.Revision, s.Backup = m.Source.Name, m.Source.Endpoint, m.Revision(), m.Name
	log.Info("survivor snapshot committed", "backup", m.Name, "member", m.Source.Name, "revision", m.Revision())
	return nil
}

// survivorRecipients are the recipients of the survivor snapshot, and
// where they come from: Options.Recipients, else those of the cluster's
// newest committed encrypted backup. With recipients, Identities must hold
// one of theirs (restore reads the survivor back); without any,
// RequireEncryption refuses. Both are checked before anything is written.
func survivorRecipients(ctx context.Context, src source, sv survivorConfig) (seal.Recipients, string, error) {
	rs, from := sv.recipients, "--encrypt-to / --recipients-file"
	if rs.Len() == 0 {
		listed, err := catalog.ListBackups(ctx, src.store, src.layout, src.clusterID)
		if err != nil {
			return rs, "", fmt.Errorf("listing the backups for the recipients of the survivor snapshot: %w", err)
		}
		for _, l := range listed { // newest first
			if l.Manifest == nil || !l.Manifest.Encryption.Encrypted() {
				continue
			}
			if rs, err = seal.ParseRecipients(l.Manifest.Encryption.Recipients); err != nil {
				return rs, "", fmt.Errorf("recipients of backup %s: %w", l.Name, err)
			}
			from = "the newest encrypted backup, " + l.Name
			break
		}
	}
	if err := seal.CheckRequired(rs, sv.requireEncryption); err != nil {
		return rs, "", fmt.Errorf("the survivor snapshot would be written in plaintext: %w (give --encrypt-to or --recipients-file)", err)
	}
	if rs.Len() == 0 {
		return rs, "", nil
	}
	for _, have := range src.ids.Recipients() {
		if slices.Contains(rs.Strings(), have) {
			return rs, from, nil
		}
	}
	return rs, "", fmt.Errorf("%w: the survivor snapshot is encrypted to %s (%s) and restore reads it back, but --identity-file holds none of their identities; "+
		"give the identity, or --no-live to restore from the store without a survivor snapshot", seal.ErrNoIdentity, rs.String(), from)
}
