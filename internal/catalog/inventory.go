package catalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
)

// Entry is one backup folder found in the store, committed or not.
type Entry struct {
	ClusterID string
	Name      string // folder name, e.g. 20261122T031500.123Z-scheduled
	Time      time.Time
	Kind      Kind
	Committed bool // manifest.json is present: the backup exists
	// Damaged says why a committed backup cannot restore ("manifest
	// unreadable: ...", "snapshot.db.zst missing", "snapshot.db.zst size
	// mismatch: ..."); empty when it checks out or was not checked.
	// CheckEntries sets it; retention counts only backups that are committed
	// and not damaged (Good).
	Damaged string
	Objects []store.ObjectInfo
	// Uploads are the multipart uploads in progress into the folder, when
	// the caller listed them: a folder being written to is young.
	Uploads []store.Upload
	// Drill is the backup's drill record (drill.json), when it has one and
	// the caller loaded it (LoadDrills); nil means never drilled or not
	// loaded.
	Drill *DrillSummary
}

// Good reports whether the backup is committed and checks out: its manifest
// parses and every object it names is stored with the recorded size.
func (e Entry) Good() bool { return e.Committed && e.Damaged == "" }

// Keys returns the keys of every object in the backup's folder.
func (e Entry) Keys() []string {
	keys := make([]string, len(e.Objects))
	for i, o := range e.Objects {
		keys[i] = o.Key
	}
	return keys
}

// Inventory lists every backup folder of a cluster, newest first, from one
// complete listing of the store. It fails rather than return a partial
// listing, so retention never plans from half the picture.
func Inventory(ctx context.Context, st store.Store, layout Layout, clusterID string) ([]Entry, error) {
	entries, _, err := ClusterInventory(ctx, st, layout, clusterID)
	return entries, err
}

// ClusterInventory is Inventory that also returns the keys under the
// cluster's prefix that are not in the layout (Layout.Classify: unknown).
func ClusterInventory(ctx context.Context, st store.Store, layout Layout, clusterID string) ([]Entry, []string, error) {
	if err := ValidateClusterID(clusterID); err != nil {
		return nil, nil, err
	}
	objs, err := st.List(ctx, layout.ClusterPrefix(clusterID))
	if err != nil {
		return nil, nil, err
	}
	return GroupEntries(layout, objs)[clusterID], UnknownKeys(layout, objs), nil
}

// GroupEntries groups a listing into backup folders per cluster, each list
// newest first. Other keys (Layout.Classify: markers, staged copies,
// journal, unknown) are ignored here.
func GroupEntries(layout Layout, objs []store.ObjectInfo) map[string][]Entry {
	byFolder := map[string]*Entry{}
	var order []string
	for _, o := range objs {
		pk, ok := layout.ParseKey(o.Key)
		if !ok {
			continue
		}
		id := pk.ClusterID + "/" + pk.Name
		e := byFolder[id]
		if e == nil {
			e = &Entry{ClusterID: pk.ClusterID, Name: pk.Name, Time: pk.Time, Kind: pk.Kind}
			byFolder[id] = e
			order = append(order, id)
		}
		e.Objects = append(e.Objects, o)
		if pk.Object == ManifestObject {
			e.Committed = true
		}
	}
	out := map[string][]Entry{}
	for _, id := range order {
		e := byFolder[id]
		out[e.ClusterID] = append(out[e.ClusterID], *e)
	}
	for _, es := range out {
		sort.Slice(es, func(i, j int) bool {
			if !es[i].Time.Equal(es[j].Time) {
				return es[i].Time.After(es[j].Time)
			}
			return es[i].Name > es[j].Name
		})
	}
	return out
}

// LoadManifest reads and decodes a committed backup's manifest.
func LoadManifest(ctx context.Context, st store.Store, layout Layout, clusterID, name string) (*Manifest, error) {
	m, _, err := loadManifest(ctx, st, layout, clusterID, name)
	return m, err
}

// loadManifest is LoadManifest that also says whether a failure is damage
// (the manifest is missing, unparseable or describes another backup: the
// backup cannot restore) rather than a store failure (the backup's state is
// unknown).
func loadManifest(ctx context.Context, st store.Store, layout Layout, clusterID, name string) (m *Manifest, damaged bool, err error) {
	key := layout.Key(clusterID, name, ManifestObject)
	b, err := objectio.ReadRecordBytes(ctx, st, key, objectio.RecordOptions{Max: MaxManifestBytes})
	if err != nil {
		return nil, errors.Is(err, objectio.ErrDamagedRecord) || isNotFound(err) && ctx.Err() == nil, err
	}
	m, err = UnmarshalManifest(b)
	if err != nil {
		return nil, true, fmt.Errorf("%s: %w", key, err)
	}
	if m.ClusterID != clusterID || m.Name != name {
		return nil, true, fmt.Errorf("%s: manifest names cluster %q backup %q: refusing a manifest that was moved", key, m.ClusterID, m.Name)
	}
	return m, false, nil
}

// isNotFound reports whether err says an object does not exist: the store
// contract's ErrNotFound (a missing bucket is not one).
func isNotFound(err error) bool { return store.IsNotFound(err) }

// DefaultCheckParallel is how many manifests CheckEntries reads at once.
const DefaultCheckParallel = 16

// CheckEntries reads the manifest of every committed entry, parallel at a
// time (DefaultCheckParallel when parallel <= 0), and checks the backup
// against the listing the entries come from: the manifest parses, names this
// backup, and every object it names is in the folder with the recorded
// size. A backup that fails sets entries[i].Damaged. It returns each
// entry's manifest (nil when incomplete or unreadable) and each entry's
// read error (damage or store failure: a store failure leaves Damaged
// empty, the backup's state is unknown), plus the first store failure, if
// any, named by cluster and backup: whoever deletes must not go on then.
func CheckEntries(ctx context.Context, st store.Store, layout Layout, entries []Entry, parallel int) ([]*Manifest, []error, error) {
	if parallel <= 0 {
		parallel = DefaultCheckParallel
	}
	manifests := make([]*Manifest, len(entries))
	errs := make([]error, len(entries))
	unknown := make([]bool, len(entries))
	var committed []int
	for i := range entries {
		if entries[i].Committed {
			committed = append(committed, i)
		}
	}
	// None is started once ctx ends: the error below says so.
	fanout.ForEach(ctx, len(committed), parallel, func(ctx context.Context, j int) {
		i := committed[j]
		e := &entries[i]
		m, damaged, err := loadManifest(ctx, st, layout, e.ClusterID, e.Name)
		switch {
		case err == nil:
			manifests[i] = m
			e.Damaged = objectDamage(*e, m)
		case damaged && isNotFound(err):
			errs[i], e.Damaged = err, "manifest missing"
		case damaged:
			errs[i], e.Damaged = err, "manifest unreadable: "+manifestCause(err)
		default:
			errs[i], unknown[i] = err, true
		}
	})
	if err := ctx.Err(); err != nil {
		return manifests, errs, fmt.Errorf("read manifests: %w", err)
	}
	var first error
	n := 0
	for i, u := range unknown {
		if u {
			if first == nil {
				first = fmt.Errorf("read manifest of backup %s/%s: %w", entries[i].ClusterID, entries[i].Name, errs[i])
			}
			n++
		}
	}
	if n > 1 {
		first = fmt.Errorf("%w (and %d more manifests could not be read)", first, n-1)
	}
	return manifests, errs, first
}

// manifestCause is a short cause of a damaged manifest, without its key.
func manifestCause(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "/"+ManifestObject+": "); i >= 0 {
		msg = msg[i+len("/"+ManifestObject+": "):]
	}
	return msg
}

// objectDamage checks the objects m names against e's listing: "" when every
// one is there with the recorded size.
func objectDamage(e Entry, m *Manifest) string {
	type want struct {
		name string
		size int64
	}
	wants := []want{{m.Snapshot.Object, m.Snapshot.StoredSize}}
	if m.V2 != nil {
		wants = append(wants, want{m.V2.Object, m.V2.StoredSize})
	}
	var problems []string
	for _, w := range wants {
		if w.name == "" || strings.Contains(w.name, "/") || w.name == ManifestObject {
			problems = append(problems, fmt.Sprintf("manifest names object %q, which is not a backup object", w.name))
			continue
		}
		var found *store.ObjectInfo
		for j := range e.Objects {
			if path.Base(e.Objects[j].Key) == w.name {
				found = &e.Objects[j]
				break
			}
		}
		switch {
		case found == nil:
			problems = append(problems, w.name+" missing")
		case found.Size != w.size:
			problems = append(problems, fmt.Sprintf("%s size mismatch: %d bytes stored, the manifest says %d", w.name, found.Size, w.size))
		}
	}
	return strings.Join(problems, "; ")
}

// Listed is a backup with its manifest (nil when incomplete or unreadable).
type Listed struct {
	Entry
	Manifest *Manifest
	// ManifestErr is why the manifest could not be read. With Damaged set
	// the backup cannot restore; with Damaged empty the read failed (a store
	// error) and the backup's state is unknown.
	ManifestErr error
}

// ListBackups returns the cluster's backups newest first, with the
// manifests of the committed ones read concurrently and each checked
// against the listing (Entry.Damaged, see CheckEntries). A manifest that
// cannot be read is reported in its Listed, not as an error.
func ListBackups(ctx context.Context, st store.Store, layout Layout, clusterID string) ([]Listed, error) {
	entries, err := Inventory(ctx, st, layout, clusterID)
	if err != nil {
		return nil, err
	}
	manifests, errs, _ := CheckEntries(ctx, st, layout, entries, DefaultCheckParallel)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// A drill record the store fails to return is summarised as unreadable
	// (no proof); listing and restore go on without it.
	_ = LoadDrills(ctx, st, layout, entries, DefaultCheckParallel)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]Listed, len(entries))
	for i, e := range entries {
		out[i] = Listed{Entry: e, Manifest: manifests[i], ManifestErr: errs[i]}
	}
	return out, nil
}

// UploadKeys are the keys a backup folder's multipart uploads can write:
// the objects its manifest names when it has one, else every object name a
// backup writes with either compression, plain or encrypted.
func UploadKeys(layout Layout, e Entry, m *Manifest) []string {
	var names []string
	if m != nil {
		names = append(names, m.Snapshot.Object)
		if m.V2 != nil {
			names = append(names, m.V2.Object)
		}
	} else {
		names = DataObjects()
	}
	var keys []string
	for _, n := range names {
		if n != "" && !strings.Contains(n, "/") {
			keys = append(keys, layout.Key(e.ClusterID, e.Name, n))
		}
	}
	return keys
}

// ListUploadsAt lists the multipart uploads of each of keys (exactly),
// parallel at a time (DefaultCheckParallel when parallel <= 0). It fails
// rather than return a partial answer.
func ListUploadsAt(ctx context.Context, st store.Store, keys []string, parallel int) ([]store.Upload, error) {
	if parallel <= 0 {
		parallel = DefaultCheckParallel
	}
	kl, exact := st.(store.KeyUploadLister)
	results := make([][]store.Upload, len(keys))
	errs := make([]error, len(keys))
	// None is started once ctx ends: the error below says so.
	fanout.ForEach(ctx, len(keys), parallel, func(ctx context.Context, i int) {
		k := keys[i]
		var ups []store.Upload
		var err error
		if exact {
			ups, err = kl.ListUploadsForKey(ctx, k)
		} else {
			ups, err = ListUploads(ctx, st, k)
		}
		for _, u := range ups {
			if u.Key == k {
				results[i] = append(results[i], u)
			}
		}
		errs[i] = err
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []store.Upload
	for i := range keys {
		if errs[i] != nil {
			return nil, fmt.Errorf("list multipart uploads of %s: %w", keys[i], errs[i])
		}
		out = append(out, results[i]...)
	}
	return out, nil
}

// CompareEntries orders entries oldest first: by time, then name, then the
// rest of the entry, so that sorting is deterministic even for duplicates.
func CompareEntries(a, b Entry) int {
	if c := cmp.Or(
		a.Time.Compare(b.Time),
		strings.Compare(a.Name, b.Name),
		strings.Compare(a.ClusterID, b.ClusterID),
		strings.Compare(string(a.Kind), string(b.Kind)),
		compareBool(a.Committed, b.Committed),
		strings.Compare(a.Damaged, b.Damaged),
		cmp.Compare(len(a.Objects), len(b.Objects)),
		cmp.Compare(len(a.Uploads), len(b.Uploads)),
	); c != 0 {
		return c
	}
	for i := range a.Objects {
		x, y := a.Objects[i], b.Objects[i]
		if c := cmp.Or(strings.Compare(x.Key, y.Key), cmp.Compare(x.Size, y.Size), x.LastModified.Compare(y.LastModified)); c != 0 {
			return c
		}
	}
	for i := range a.Uploads {
		x, y := a.Uploads[i], b.Uploads[i]
		if c := cmp.Or(strings.Compare(x.Key, y.Key), strings.Compare(x.UploadID, y.UploadID), x.Initiated.Compare(y.Initiated)); c != 0 {
			return c
		}
	}
	return 0
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
