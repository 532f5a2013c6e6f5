package restore

import (
	"context"
	"log/slog"
	"sort"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
)

// Backups only object versions hold (a backup deleted or overwritten by a
// credential that can write the bucket stays restorable while its
// versions remain): on a versioned bucket a
// deleted backup is a delete marker over versions that still exist, an
// overwritten one a newer version over them. The select stage adds them
// to the candidates (prune.VersionedBackups picks each one's versions)
// with Options.IncludeDeleted, or by itself when no live backup checks out
// (or --backup names one that is not live); the fetch stage reads the
// snapshot at its version (objectio.Expect.VersionID).

// wantVersions reports whether the select stage looks at object versions.
func wantVersions(backup string, includeDeleted bool, cands []Candidate) bool {
	return includeDeleted || len(cands) == 0 || (backup != "" && findCandidate(cands, backup) < 0)
}

// withVersions adds the cluster's deleted and overwritten backups, at the
// versions they wrote, to the live listing (replacing an overwritten
// backup's live folder) and ranks them all. Without includeDeleted a
// failure to read the versions is logged and the live listing is kept.
func withVersions(ctx context.Context, src source, includeDeleted bool, log *slog.Logger, listed []catalog.Listed) ([]catalog.Listed, []Candidate, []Ignored, error) {
	vbs, err := prune.VersionedBackups(ctx, src.store, src.layout, src.clusterID)
	if err != nil {
		if includeDeleted {
			return nil, nil, nil, err
		}
		log.Warn("no live backup checks out, and the bucket's object versions could not be read", "err", err)
		cands, ignored := rankCandidates(listed)
		return listed, cands, ignored, nil
	}
	recovered := map[string]prune.VersionedBackup{}
	for _, b := range vbs {
		if b.Recovered() {
			recovered[b.Name] = b
		}
	}
	if len(recovered) == 0 {
		cands, ignored := rankCandidates(listed)
		return listed, cands, ignored, nil
	}
	var merged []catalog.Listed
	for _, l := range listed {
		if _, ok := recovered[l.Name]; !ok {
			merged = append(merged, l)
		}
	}
	var names []string
	for _, b := range vbs {
		if b.Recovered() {
			merged = append(merged, b.Listed())
			names = append(names, b.Name+" ("+b.Status+")")
		}
	}
	sort.SliceStable(merged, func(i, j int) bool {
		if !merged[i].Time.Equal(merged[j].Time) {
			return merged[i].Time.After(merged[j].Time)
		}
		return merged[i].Name > merged[j].Name
	})
	why := "--include-deleted"
	if !includeDeleted {
		why = "no live backup checks out"
	}
	log.Warn("considering backups that only object versions hold: deleted or overwritten", "why", why, "backups", names)
	cands, ignored := rankCandidates(merged)
	for i := range cands {
		if b, ok := recovered[cands[i].Name]; ok {
			cands[i].FromVersions, cands[i].Recovered, cands[i].Versions = true, b.Status, b.Versions
		}
	}
	return merged, cands, ignored, nil
}

// snapshotVersion is the version of the snapshot object to read ("": the
// current one).
func (c Candidate) snapshotVersion() string {
	if c.manifest == nil || c.Versions == nil {
		return ""
	}
	return c.Versions[c.manifest.Snapshot.Object]
}

// versionsWarning is what the plan's reason says of a candidate read
// from object versions ("" for a live one).
func (c Candidate) versionsWarning() string {
	if !c.FromVersions {
		return ""
	}
	return "WARNING: the backup is " + c.Recovered + ": read from the object versions it wrote"
}
