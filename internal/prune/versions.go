package prune

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
)

// Backups behind delete markers and overwrites: on a versioned
// bucket a credential that deletes or overwrites a backup's objects only
// adds a delete marker or a newer version; the versions the backup wrote
// are still there, readable with store.Versioner.GetVersion. This file
// finds them (VersionedBackups) and says which version of each object is
// the backup's (pickManifest).
//
// Which manifest version is the backup's: the EARLIEST version that
//   - parses as a manifest (UnmarshalManifest) naming this cluster and
//     this backup, and
//   - whose objects (snapshot, v2 export) each have a version of exactly
//     the size the manifest records.
//
// Earliest, because backup.Run writes the manifest once, last: every later
// version is an overwrite, by definition not the backup's, whatever it
// says. A later version that also checks out (a copy of another valid
// manifest of the same name, with objects of the same sizes) is still not
// preferred. The objects' sha256s are checked when they are read (restore
// streams them through objectio against this manifest), not here: listing
// never downloads a backup. An object's version is likewise the earliest
// of the recorded size.

// Status of a VersionedBackup.
const (
	// VersionLive: the backup's versions are the current ones.
	VersionLive = "live"
	// VersionDeleted: a key of the backup reads as missing (a delete
	// marker is its current version); its versions are behind it.
	VersionDeleted = "deleted"
	// VersionOverwritten: a key of the backup has a newer version than
	// the backup's (its manifest, or an object, replaced).
	VersionOverwritten = "overwritten"
)

// VersionedBackup is a committed backup found among a versioned bucket's
// versions, at the versions it wrote.
type VersionedBackup struct {
	ClusterID string
	Name      string
	Time      time.Time
	Kind      catalog.Kind
	// Status is VersionLive, VersionDeleted or VersionOverwritten (deleted
	// wins when both hold).
	Status string
	// Deleted and Overwritten: see the statuses.
	Deleted, Overwritten bool
	Manifest             *catalog.Manifest
	// Versions are the version ids of the backup's objects, by object
	// name (manifest.json, the snapshot, the v2 export).
	Versions map[string]string
	// Objects are those versions, as a listing would show them.
	Objects []store.ObjectInfo
}

// Recovered reports whether the backup is not live (deleted or
// overwritten): only its versions hold it.
func (b VersionedBackup) Recovered() bool { return b.Status != VersionLive }

// Listed is the backup as ListBackups would list it were its versions the
// current ones: committed, checked, with its manifest.
func (b VersionedBackup) Listed() catalog.Listed {
	return catalog.Listed{Entry: catalog.Entry{ClusterID: b.ClusterID, Name: b.Name, Time: b.Time, Kind: b.Kind, Committed: true,
		Objects: b.Objects}, Manifest: b.Manifest}
}

// VersionedBackups lists a cluster's versions and returns every backup
// folder with a manifest version that checks out (pickManifest), newest
// first, live ones included (Status). On a store without versioning it
// returns nil and no error: nothing hides behind a delete marker there. A
// store failure (listing or reading a manifest version) is an error: a
// caller must not conclude that a backup is gone from half a picture.
func VersionedBackups(ctx context.Context, st store.Store, layout catalog.Layout, clusterID string) ([]VersionedBackup, error) {
	if err := catalog.ValidateClusterID(clusterID); err != nil {
		return nil, err
	}
	v, on, err := catalog.Versioned(ctx, st)
	if err != nil || !on {
		return nil, err
	}
	vers, err := v.ListVersions(ctx, layout.ClusterPrefix(clusterID))
	if err != nil {
		return nil, err
	}
	type folder struct {
		pk     catalog.ParsedKey
		byName map[string][]store.Version // object name → versions, newest first
	}
	folders := map[string]*folder{}
	var order []string
	for _, ver := range vers {
		pk, ok := layout.ParseKey(ver.Key)
		if !ok || pk.ClusterID != clusterID {
			continue
		}
		f := folders[pk.Name]
		if f == nil {
			f = &folder{pk: pk, byName: map[string][]store.Version{}}
			folders[pk.Name] = f
			order = append(order, pk.Name)
		}
		f.byName[pk.Object] = append(f.byName[pk.Object], ver)
	}
	out := make([]*VersionedBackup, len(order))
	errs := make([]error, len(order))
	fanout.ForEach(ctx, len(order), catalog.DefaultCheckParallel, func(ctx context.Context, i int) {
		f := folders[order[i]]
		out[i], errs[i] = pickBackup(ctx, v, layout, clusterID, f.pk, f.byName)
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var res []VersionedBackup
	for i, b := range out {
		if errs[i] != nil {
			return nil, fmt.Errorf("versions of backup %s/%s: %w", clusterID, order[i], errs[i])
		}
		if b != nil {
			res = append(res, *b)
		}
	}
	sort.SliceStable(res, func(i, j int) bool {
		if !res[i].Time.Equal(res[j].Time) {
			return res[i].Time.After(res[j].Time)
		}
		return res[i].Name > res[j].Name
	})
	return res, nil
}

// pickBackup picks a folder's versions (nil: no manifest version checks
// out). byName's versions are newest first.
func pickBackup(ctx context.Context, v store.Versioner, layout catalog.Layout, clusterID string, pk catalog.ParsedKey, byName map[string][]store.Version) (*VersionedBackup, error) {
	m, mv, err := pickManifest(ctx, v, layout.Key(clusterID, pk.Name, catalog.ManifestObject), clusterID, pk.Name, byName)
	if err != nil || m == nil {
		return nil, err
	}
	b := &VersionedBackup{ClusterID: clusterID, Name: pk.Name, Time: pk.Time, Kind: pk.Kind, Manifest: m,
		Versions: map[string]string{catalog.ManifestObject: mv.VersionID}}
	picked := []store.Version{mv}
	for _, w := range manifestObjects(m) {
		ov, _ := objectVersion(byName[w.name], w.size)
		b.Versions[w.name] = ov.VersionID
		picked = append(picked, ov)
	}
	for _, p := range picked {
		vs := byName[path.Base(p.Key)]
		latest := vs[0]
		switch {
		case latest.VersionID == p.VersionID:
		case latest.DeleteMarker:
			b.Deleted = true
		default:
			b.Overwritten = true
		}
		b.Objects = append(b.Objects, store.ObjectInfo{Key: p.Key, Size: p.Size, LastModified: p.LastModified})
	}
	sort.Slice(b.Objects, func(i, j int) bool { return b.Objects[i].Key < b.Objects[j].Key })
	switch {
	case b.Deleted:
		b.Status = VersionDeleted
	case b.Overwritten:
		b.Status = VersionOverwritten
	default:
		b.Status = VersionLive
	}
	return b, nil
}

type wantObject struct {
	name string
	size int64
}

// manifestObjects are the data objects m names, with their stored sizes.
func manifestObjects(m *catalog.Manifest) []wantObject {
	out := []wantObject{{m.Snapshot.Object, m.Snapshot.StoredSize}}
	if m.V2 != nil {
		out = append(out, wantObject{m.V2.Object, m.V2.StoredSize})
	}
	return out
}

// objectVersion is the earliest version (not a delete marker) of the given
// size among vs (newest first).
func objectVersion(vs []store.Version, size int64) (store.Version, bool) {
	for i := len(vs) - 1; i >= 0; i-- {
		if !vs[i].DeleteMarker && vs[i].Size == size {
			return vs[i], true
		}
	}
	return store.Version{}, false
}

// pickManifest reads the manifest's versions, earliest first, and returns
// the first that parses, names clusterID and name, and whose objects each
// have a version of the recorded size (see the top of this file); nil when
// none does. A version the store fails to return is an error.
func pickManifest(ctx context.Context, v store.Versioner, key, clusterID, name string, byName map[string][]store.Version) (*catalog.Manifest, store.Version, error) {
	vs := byName[catalog.ManifestObject]
	for i := len(vs) - 1; i >= 0; i-- {
		mv := vs[i]
		if mv.DeleteMarker || mv.Size > catalog.MaxManifestBytes {
			continue
		}
		b, err := readVersion(ctx, v, key, mv.VersionID)
		if store.IsNotFound(err) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, store.Version{}, err
		}
		m, err := catalog.UnmarshalManifest(b)
		if err != nil || m.ClusterID != clusterID || m.Name != name || !objectsOK(m, byName) {
			continue
		}
		return m, mv, nil
	}
	return nil, store.Version{}, nil
}

// objectsOK: every object m names is a backup object with a version of
// the recorded size.
func objectsOK(m *catalog.Manifest, byName map[string][]store.Version) bool {
	for _, w := range manifestObjects(m) {
		if w.name == "" || strings.Contains(w.name, "/") || w.name == catalog.ManifestObject {
			return false
		}
		if _, ok := objectVersion(byName[w.name], w.size); !ok {
			return false
		}
	}
	return true
}

func readVersion(ctx context.Context, v store.Versioner, key, versionID string) ([]byte, error) {
	return objectio.ReadRecordVersion(ctx, v, key, objectio.RecordOptions{Version: versionID, Max: catalog.MaxManifestBytes})
}

// withRecoveredRows adds to rows (list's, newest first) the backups of vbs
// that only object versions hold, each replacing a live row of the same
// name (an overwritten manifest's folder lists as damaged). Prune does not
// see them: their retention says so.
func withRecoveredRows(rows ListRows, vbs []VersionedBackup) ListRows {
	rec := map[string]VersionedBackup{}
	for _, b := range vbs {
		if b.Recovered() {
			rec[b.Name] = b
		}
	}
	if len(rec) == 0 {
		return rows
	}
	out := make(ListRows, 0, len(rows)+len(rec))
	for _, r := range rows {
		if _, ok := rec[r.Name]; !ok {
			out = append(out, r)
		}
	}
	for _, b := range vbs {
		if !b.Recovered() {
			continue
		}
		r := listRow(b.Listed(), retention.Decision{Keep: true, Reason: "held only by object versions (" + b.Status +
			"): prune does not see it; restore and drill use it with --include-deleted"})
		r.Status, r.Deleted, r.Overwritten, r.Versions = b.Status, b.Deleted, b.Overwritten, b.Versions
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Time.Equal(out[j].Time) {
			return out[i].Time.After(out[j].Time)
		}
		return out[i].Name > out[j].Name
	})
	return out
}

// lockRows, on a bucket with object lock, sets every committed row's Lock
// from its manifest version's retention (the version the backup wrote,
// for a row read from versions) and marks the rows for the LOCKED UNTIL
// column. A store without Locker, a bucket without lock, or a lock
// configuration that cannot be read changes nothing. It returns the
// retentions that could not be read.
func lockRows(ctx context.Context, st store.Store, layout catalog.Layout, id string, rows ListRows) error {
	lk, ok := st.(store.Locker)
	if !ok {
		return nil
	}
	info, err := lk.LockConfig(ctx)
	if err != nil || !info.Enabled {
		// A credential that cannot read the lock configuration lists as
		// on a bucket without lock.
		return nil
	}
	errs := make([]error, len(rows))
	fanout.ForEach(ctx, len(rows), catalog.DefaultCheckParallel, func(ctx context.Context, i int) {
		r := &rows[i]
		r.lockColumn = true
		if r.Manifest == nil {
			return
		}
		ret, err := lk.Retention(ctx, layout.Key(id, r.Name, catalog.ManifestObject), r.Versions[catalog.ManifestObject])
		if err != nil {
			if !store.IsNotFound(err) {
				errs[i] = err
			}
			return
		}
		if ret.Mode != "" {
			r.Lock = &RowLock{Mode: strings.ToLower(string(ret.Mode)), Until: ret.Until.UTC()}
		}
	})
	for i := range rows {
		rows[i].lockColumn = true
	}
	var first error
	n := 0
	for i, err := range errs {
		if err != nil {
			if first == nil {
				first = fmt.Errorf("retention of backup %s: %w", rows[i].Name, err)
			}
			n++
		}
	}
	if n > 1 {
		first = fmt.Errorf("%w (and %d more)", first, n-1)
	}
	return first
}

// lockCell is the LOCKED UNTIL cell: the retain-until time (UTC, to the
// minute; the mode and the exact time are in -o json), "expired" once it
// passed, "-" without a retention.
func lockCell(l *RowLock, now time.Time) string {
	switch {
	case l == nil:
		return "-"
	case !now.Before(l.Until):
		return "expired"
	}
	return l.Until.Format("2006-01-02 15:04")
}

// lockNote is what the reason says of a row's lock ("" without one).
func lockNote(l *RowLock, now time.Time) string {
	switch {
	case l == nil:
		return ""
	case !now.Before(l.Until):
		return "lock expired " + l.Until.Format(time.RFC3339)
	}
	return "locked until " + l.Until.Format(time.RFC3339) + " (" + l.Mode + ")"
}
