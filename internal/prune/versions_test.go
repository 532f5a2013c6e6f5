package prune_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// putVersioned writes a minimal committed backup (snapshot object, then
// manifest) and returns its manifest.
func putVersioned(t *testing.T, st store.Store, layout catalog.Layout, id string, at time.Time, snap string) *catalog.Manifest {
	t.Helper()
	ctx := context.Background()
	name := catalog.NewBackupName(at, catalog.KindScheduled)
	m := &catalog.Manifest{Format: catalog.ManifestFormat, ClusterID: id, Name: name, Kind: catalog.KindScheduled,
		StartedAt: at, FinishedAt: at, RevisionBefore: 7,
		Snapshot: catalog.SnapshotInfo{Object: "snapshot.db", Compression: objectio.CompressNone, RawSize: int64(len(snap)),
			RawSHA256: strings.Repeat("ab", 32), StoredSize: int64(len(snap)), StoredSHA256: strings.Repeat("cd", 32)}}
	if _, err := st.Put(ctx, layout.Key(id, name, "snapshot.db"), strings.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	b, err := catalog.MarshalManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, layout.Key(id, name, catalog.ManifestObject), bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestVersionedBackupsPick(t *testing.T) {
	ctx := context.Background()
	layout := catalog.Layout{Prefix: "p"}
	const id = "c1"
	st := memstore.NewVersioned()
	t0 := time.Date(2026, 11, 1, 3, 0, 0, 0, time.UTC)
	old := putVersioned(t, st, layout, id, t0, "old snapshot")
	newer := putVersioned(t, st, layout, id, t0.Add(time.Hour), "newer snapshot")
	live := putVersioned(t, st, layout, id, t0.Add(2*time.Hour), "live snapshot")

	// old: every object deleted (markers).
	if err := st.Delete(ctx, []string{layout.Key(id, old.Name, catalog.ManifestObject), layout.Key(id, old.Name, "snapshot.db")}); err != nil {
		t.Fatal(err)
	}
	// newer: the manifest overwritten with garbage, then with a copy of a
	// valid manifest (a second valid version: not the backup's), then
	// garbage again; the snapshot overwritten with bytes of another size.
	mkey := layout.Key(id, newer.Name, catalog.ManifestObject)
	valid, _ := catalog.MarshalManifest(newer)
	for _, b := range [][]byte{[]byte("garbage"), valid, []byte("{not json")} {
		if _, err := st.Put(ctx, mkey, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Put(ctx, layout.Key(id, newer.Name, "snapshot.db"), strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	vers, err := st.ListVersions(ctx, layout.ClusterPrefix(id))
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]string{} // key → its earliest version
	for _, v := range vers {
		if !v.DeleteMarker {
			first[v.Key] = v.VersionID
		}
	}

	vbs, err := prune.VersionedBackups(ctx, st, layout, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(vbs) != 3 {
		t.Fatalf("got %d versioned backups, want 3: %+v", len(vbs), vbs)
	}
	want := []struct {
		name, status string
		m            *catalog.Manifest
	}{{live.Name, prune.VersionLive, live}, {newer.Name, prune.VersionOverwritten, newer}, {old.Name, prune.VersionDeleted, old}}
	for i, w := range want {
		b := vbs[i]
		if b.Name != w.name || b.Status != w.status {
			t.Errorf("backup %d: %s %s, want %s %s", i, b.Name, b.Status, w.name, w.status)
		}
		if b.Manifest == nil || b.Manifest.Snapshot.StoredSize != w.m.Snapshot.StoredSize {
			t.Errorf("%s: manifest %+v", b.Name, b.Manifest)
		}
		for _, obj := range []string{catalog.ManifestObject, "snapshot.db"} {
			if got, exp := b.Versions[obj], first[layout.Key(id, b.Name, obj)]; got != exp {
				t.Errorf("%s: %s at version %q, want the earliest, %q", b.Name, obj, got, exp)
			}
		}
	}

	// The versioned listing as list --include-deleted shows it.
	res, err := prune.List(ctx, prune.ListOptions{Store: st, Layout: layout, ClusterID: id, Policy: retention.DefaultPolicy(), IncludeDeleted: true})
	if err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for _, r := range res.Rows {
		statuses = append(statuses, r.Status)
	}
	if got := strings.Join(statuses, ","); got != "committed,overwritten,deleted" {
		t.Errorf("list --include-deleted statuses: %s", got)
	}
	if !res.Rows[2].Deleted || res.Rows[2].Versions[catalog.ManifestObject] == "" {
		t.Errorf("deleted row: %+v", res.Rows[2])
	}
	res, err = prune.List(ctx, prune.ListOptions{Store: st, Layout: layout, ClusterID: id, Policy: retention.DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 || res.Rows[1].Status == "overwritten" {
		t.Errorf("list without --include-deleted: %+v", res.Rows)
	}
}

func TestVersionedBackupsUnversioned(t *testing.T) {
	st := memstore.New()
	layout := catalog.Layout{Prefix: "p"}
	putVersioned(t, st, layout, "c1", time.Date(2026, 11, 1, 3, 0, 0, 0, time.UTC), "snap")
	vbs, err := prune.VersionedBackups(context.Background(), st, layout, "c1")
	if err != nil || vbs != nil {
		t.Fatalf("unversioned bucket: %v, %v", vbs, err)
	}
}

func TestListLockedUntil(t *testing.T) {
	ctx := context.Background()
	layout := catalog.Layout{Prefix: "p"}
	st := memstore.NewLocked(store.LockInfo{Enabled: true, DefaultMode: store.LockGovernance, DefaultPeriod: 48 * time.Hour})
	putVersioned(t, st, layout, "c1", time.Now().Add(-time.Hour).UTC(), "snap")
	res, err := prune.List(ctx, prune.ListOptions{Store: st, Layout: layout, ClusterID: "c1", Policy: retention.DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	if res.LockErr != nil || res.Rows[0].Lock == nil || res.Rows[0].Lock.Mode != "governance" {
		t.Fatalf("lock: %+v %v", res.Rows[0].Lock, res.LockErr)
	}
	tab := res.Tables()[0]
	if !strings.Contains(strings.Join(tab.Header, "|"), "LOCKED UNTIL") || !slices.Contains(tab.Wide, "LOCKED UNTIL") {
		t.Errorf("no LOCKED UNTIL column: %v", tab.Header)
	}
	var buf bytes.Buffer
	if err := output.Render(&buf, output.FormatTable, tab, res.Rows); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(buf.String(), "\n") {
		if n := utf8.RuneCountInString(l); n > output.Width {
			t.Errorf("a line of %d runes (max %d):\n%s", n, output.Width, buf.String())
		}
	}
	t.Logf("\n%s", buf.String())
	plain := memstore.NewVersioned()
	putVersioned(t, plain, layout, "c1", time.Now().Add(-time.Hour).UTC(), "snap")
	res, err = prune.List(ctx, prune.ListOptions{Store: plain, Layout: layout, ClusterID: "c1", Policy: retention.DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(res.Tables()[0].Header, "|"), "LOCKED UNTIL") {
		t.Errorf("LOCKED UNTIL on a bucket without lock")
	}
}
