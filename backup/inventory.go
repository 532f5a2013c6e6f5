package backup

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
)

// Entry is one backup folder found in the store, committed or not.
type Entry struct {
	ClusterID string
	Name      string // folder name, e.g. 20261122T031500.123Z-scheduled
	Time      time.Time
	Kind      Kind
	Committed bool // manifest.json is present: the backup exists
	Objects   []ObjectInfo
}

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
func Inventory(ctx context.Context, store Store, layout Layout, clusterID string) ([]Entry, error) {
	if err := ValidateClusterID(clusterID); err != nil {
		return nil, err
	}
	objs, err := store.List(ctx, layout.ClusterPrefix(clusterID))
	if err != nil {
		return nil, err
	}
	return GroupEntries(layout, objs)[clusterID], nil
}

// GroupEntries groups a listing into backup folders per cluster, each list
// newest first. Keys outside the layout are ignored.
func GroupEntries(layout Layout, objs []ObjectInfo) map[string][]Entry {
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
func LoadManifest(ctx context.Context, store Store, layout Layout, clusterID, name string) (*Manifest, error) {
	key := layout.Key(clusterID, name, ManifestObject)
	rc, err := store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return nil, err
	}
	m, err := UnmarshalManifest(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if m.ClusterID != clusterID || m.Name != name {
		return nil, fmt.Errorf("%s: manifest names cluster %q backup %q: refusing a manifest that was moved", key, m.ClusterID, m.Name)
	}
	return m, nil
}

// Listed is a backup with its manifest (nil when incomplete or unreadable).
type Listed struct {
	Entry
	Manifest    *Manifest
	ManifestErr error
}

// ListBackups returns the cluster's backups newest first, with the
// manifests of the committed ones read concurrently.
func ListBackups(ctx context.Context, store Store, layout Layout, clusterID string) ([]Listed, error) {
	entries, err := Inventory(ctx, store, layout, clusterID)
	if err != nil {
		return nil, err
	}
	out := make([]Listed, len(entries))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, e := range entries {
		out[i].Entry = e
		if !e.Committed {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i].Manifest, out[i].ManifestErr = LoadManifest(ctx, store, layout, clusterID, e.Name)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
