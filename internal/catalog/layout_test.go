package catalog_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// Every key the tool writes is classified as what it is, in both the
// new and the legacy staged place; a cluster named like a tool folder
// can't exist (a leading '_'), and one named like the legacy folder is a
// reserved id; anything else is unknown.
func TestClassify(t *testing.T) {
	t.Parallel()
	const name = "20261122T112102.831Z-scheduled-0a1b2c3d"
	at := time.Date(2026, 11, 22, 11, 21, 2, 831e6, time.UTC)
	for _, prefix := range []string{"", "p", "a/b"} {
		l := catalog.Layout{Prefix: prefix}
		r := l.RootPrefix()
		cases := []struct {
			key  string
			want catalog.KeyInfo
		}{
			{l.Key("c1", name, catalog.ManifestObject), catalog.KeyInfo{Kind: catalog.KeyBackup, ClusterID: "c1", Name: name,
				Object: catalog.ManifestObject, Time: at, BackupKind: catalog.KindScheduled}},
			{r + "c1/20261122T112102.831Z-manual/snapshot.db.zst.age", catalog.KeyInfo{Kind: catalog.KeyBackup, ClusterID: "c1",
				Name: "20261122T112102.831Z-manual", Object: "snapshot.db.zst.age", Time: at, BackupKind: catalog.KindManual}},
			{catalog.OwnerKey(l), catalog.KeyInfo{Kind: catalog.KeyOwnerMarker}},
			{catalog.OrphanMarkerKey(l, "c1"), catalog.KeyInfo{Kind: catalog.KeyOrphanMarker, ClusterID: "c1"}},
			{l.StagedKey("c1", name), catalog.KeyInfo{Kind: catalog.KeyStaged, ClusterID: "c1", Name: name}},
			{l.StagedPrefix("c1") + "odd", catalog.KeyInfo{Kind: catalog.KeyStaged, ClusterID: "c1", Name: "odd"}},
			// The legacy place, still read.
			{r + "restore/c1/" + name + "/snapshot.db", catalog.KeyInfo{Kind: catalog.KeyStaged, ClusterID: "c1", Name: name, Legacy: true}},
			{l.LegacyStagedPrefix("c1") + name + "/x", catalog.KeyInfo{Kind: catalog.KeyStaged, ClusterID: "c1", Name: name, Legacy: true}},
			// A backup of a cluster once named "restore" (now reserved):
			// neither a staged copy nor a backup.
			{r + "restore/" + name + "/manifest.json", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
			{l.JournalSegmentKey("c1", 7, 42), catalog.KeyInfo{Kind: catalog.KeyJournal, ClusterID: "c1", FirstRev: 7, LastRev: 42}},
			{r + "_journal/c1/0000000000000042-0000000000000007.seg", catalog.KeyInfo{Kind: catalog.KeyUnknown}}, // first > last
			{r + "_journal/c1/index.json", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
			{r + "_journal/-bad/0000000000000001-0000000000000002.seg", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
			// Clusters literally named like the tool's folders without the
			// '_': ordinary clusters.
			{r + "staged/" + name + "/manifest.json", catalog.KeyInfo{Kind: catalog.KeyBackup, ClusterID: "staged", Name: name,
				Object: catalog.ManifestObject, Time: at, BackupKind: catalog.KindScheduled}},
			{r + "journal/orphan.json", catalog.KeyInfo{Kind: catalog.KeyOrphanMarker, ClusterID: "journal"}},
			// A folder named like a tool folder with a backup in it is not a
			// cluster: no cluster id starts with '_'.
			{r + "_other/" + name + "/manifest.json", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
			// Garbage.
			{r + "stray.txt", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
			{r + "c1/stray.txt", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
			{r + "c1/not-a-backup/manifest.json", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
			{r + "c1/" + name + "/sub/manifest.json", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
			{r + "c1/" + name + "/", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
			{r + "-c1/orphan.json", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
			{r + "etcd-recovery-owner.json/x", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
			{r, catalog.KeyInfo{Kind: catalog.KeyUnknown}},
		}
		if prefix != "" {
			cases = append(cases, struct {
				key  string
				want catalog.KeyInfo
			}{"elsewhere/c1/" + name + "/manifest.json", catalog.KeyInfo{Kind: catalog.KeyUnknown}})
		}
		for _, tc := range cases {
			if got := l.Classify(tc.key); got != tc.want {
				t.Errorf("prefix %q: Classify(%q) = %+v, want %+v", prefix, tc.key, got, tc.want)
			}
		}
	}
}

// The keys of the layout's functions, and the tool's folders: no cluster
// id can take a folder name starting with '_'.
func TestLayoutKeys(t *testing.T) {
	t.Parallel()
	l := catalog.Layout{Prefix: "/p/"}
	for got, want := range map[string]string{
		l.StagedPrefix(""):                 "p/_staged/",
		l.StagedPrefix("c1"):               "p/_staged/c1/",
		l.StagedKey("c1", "b"):             "p/_staged/c1/b/snapshot.db",
		l.LegacyStagedPrefix(""):           "p/restore/",
		l.LegacyStagedPrefix("c1"):         "p/restore/c1/",
		l.JournalPrefix(""):                "p/_journal/",
		l.JournalPrefix("c1"):              "p/_journal/c1/",
		l.JournalSegmentKey("c1", 1, 1234): "p/_journal/c1/0000000000000001-0000000000001234.seg",
		catalog.OwnerKey(l):                "p/etcd-recovery-owner.json",
		catalog.OrphanMarkerKey(l, "c1"):   "p/c1/orphan.json",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if got := l.StagedPrefixes("c1"); !slices.Equal(got, []string{"p/_staged/c1/", "p/restore/c1/"}) {
		t.Errorf("StagedPrefixes = %v", got)
	}
	for _, id := range []string{"_staged", "_journal", "_", "_c1"} {
		if err := catalog.ValidateClusterID(id); err == nil {
			t.Errorf("ValidateClusterID(%q) = nil, want a refusal (a leading '_' is the tool's)", id)
		}
	}
}

// A staged copy left in the legacy place (<prefix>/restore/) by an older
// version is listed and pruned like one in the new place.
func TestLegacyStagedCopies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := memstore.New()
	l := catalog.Layout{Prefix: "p"}
	const name = "20261122T112102.831Z-scheduled-0a1b2c3d"
	legacy := l.LegacyStagedPrefix("c1") + name + "/snapshot.db"
	for _, k := range []string{l.StagedKey("c1", name), legacy, l.StagedKey("c2", name)} {
		if _, err := st.Put(ctx, k, strings.NewReader("plaintext")); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	copies, err := catalog.ListStaged(ctx, st, l, []string{"c1"}, now)
	if err != nil || len(copies) != 2 {
		t.Fatalf("ListStaged(c1) = %+v, %v; want the new and the legacy copy", copies, err)
	}
	for _, c := range copies {
		if c.ClusterID != "c1" || c.Backup != name {
			t.Errorf("copy %+v: want cluster c1, backup %s", c, name)
		}
	}
	if all, err := catalog.ListStaged(ctx, st, l, nil, now); err != nil || len(all) != 3 {
		t.Fatalf("ListStaged(all) = %+v, %v; want 3", all, err)
	}
	got, err := catalog.PruneStaged(ctx, st, l, []string{"c1"}, now.Add(2*time.Hour), 0, false, nil)
	if err != nil || len(got) != 2 || got[0].Action != catalog.StagedDeleted || got[1].Action != catalog.StagedDeleted {
		t.Fatalf("PruneStaged = %+v, %v; want both deleted", got, err)
	}
	left, _ := st.List(ctx, l.RootPrefix())
	if len(left) != 1 || left[0].Key != l.StagedKey("c2", name) {
		t.Fatalf("left %+v, want only c2's copy", left)
	}
}

// list, prune, delete (by name and --all-backups) and the orphan pass
// report the keys they list that are not in the layout, in the report
// (JSON "unknown") and under the table, touch none of them, and do not
// fail for them.
func TestUnknownKeysReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	const name = "20261122T112102.831Z-scheduled-0a1b2c3d"
	l := catalog.Layout{Prefix: "p"}
	strayC1 := "p/c1/stray.txt"
	strayRoot := "p/notes/readme.md"
	setup := func(t *testing.T) *memstore.Store {
		st := memstore.New()
		st.Now = func() time.Time { return now }
		for _, k := range []string{l.Key("c1", name, catalog.StartedObject), strayC1, strayRoot,
			catalog.OwnerKey(l), l.StagedKey("c1", name), l.LegacyStagedPrefix("c1") + name + "/snapshot.db",
			l.JournalSegmentKey("c1", 1, 2), catalog.OrphanMarkerKey(l, "c1")} {
			if _, err := st.Put(ctx, k, strings.NewReader("x")); err != nil {
				t.Fatal(err)
			}
		}
		return st
	}
	keys := func(t *testing.T, st *memstore.Store) int {
		objs, err := st.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		return len(objs)
	}
	checkJSON := func(t *testing.T, v any, want []string) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Unknown []string `json:"unknown"`
		}
		if err := json.Unmarshal(b, &got); err != nil || !slices.Equal(got.Unknown, want) {
			t.Errorf("JSON unknown = %v (%v), want %v: %s", got.Unknown, err, want, b)
		}
	}
	checkNote := func(t *testing.T, text string, want []string) {
		t.Helper()
		if !strings.Contains(text, "not in the tool's layout") {
			t.Errorf("no unknown-keys line in:\n%s", text)
		}
		for _, k := range want {
			if !strings.Contains(text, k) {
				t.Errorf("the table does not name %s:\n%s", k, text)
			}
		}
	}

	t.Run("PruneCluster", func(t *testing.T) {
		t.Parallel()
		st := setup(t)
		rep, err := prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{"c1"}, Policy: retention.DefaultPolicy(), Now: now})
		if err != nil {
			t.Fatalf("prune: %v", err)
		}
		want := []string{strayC1}
		if !slices.Equal(rep.Unknown, want) {
			t.Errorf("Unknown = %v, want %v", rep.Unknown, want)
		}
		checkJSON(t, rep, want)
		checkNote(t, rep.Table().Footer, want)
		if n := keys(t, st); n != 8 {
			t.Errorf("%d keys left, want 8 (nothing deleted: the staged copies are young)", n)
		}
	})
	t.Run("PruneAll", func(t *testing.T) {
		t.Parallel()
		st := setup(t)
		rep, err := prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, All: true, Policy: retention.DefaultPolicy(), Now: now})
		if err != nil {
			t.Fatalf("prune: %v", err)
		}
		want := []string{strayC1, strayRoot}
		slices.Sort(rep.Unknown)
		if !slices.Equal(rep.Unknown, want) {
			t.Errorf("Unknown = %v, want %v", rep.Unknown, want)
		}
	})
	t.Run("PruneClean", func(t *testing.T) {
		t.Parallel()
		st := setup(t)
		if err := st.Delete(ctx, []string{strayC1, strayRoot}); err != nil {
			t.Fatal(err)
		}
		rep, err := prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, All: true, Policy: retention.DefaultPolicy(), Now: now})
		if err != nil || rep.Unknown != nil || strings.Contains(rep.Table().Footer, "layout") {
			t.Fatalf("prune: %v, unknown %v, footer %q; want nothing unknown", err, rep.Unknown, rep.Table().Footer)
		}
		b, _ := json.Marshal(rep)
		if strings.Contains(string(b), `"unknown"`) {
			t.Errorf("JSON has unknown without unknown keys: %s", b)
		}
	})
	t.Run("List", func(t *testing.T) {
		t.Parallel()
		st := setup(t)
		res, err := prune.List(ctx, prune.ListOptions{Store: st, Layout: l, ClusterID: "c1", Policy: retention.DefaultPolicy(), Now: now})
		if err != nil || res.Err != nil {
			t.Fatalf("list: %v, %v", err, res)
		}
		want := []string{strayC1}
		if !slices.Equal(res.Unknown, want) {
			t.Errorf("Unknown = %v, want %v", res.Unknown, want)
		}
		if len(res.Staged) != 2 {
			t.Errorf("staged %+v, want the new and the legacy copy", res.Staged)
		}
		checkNote(t, strings.Join(res.Tables()[0].Notes, "\n"), want)
	})
	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		st := setup(t)
		rep, err := prune.Delete(ctx, prune.DeleteOptions{Store: st, Layout: l, ClusterID: "c1", Names: []string{name}})
		if err != nil {
			t.Fatalf("delete: %v", err)
		}
		want := []string{strayC1}
		checkJSON(t, rep, want)
		checkNote(t, strings.Join(rep.Table().Notes, "\n"), want)
		if n := keys(t, st); n != 7 {
			t.Errorf("%d keys left, want 7 (the backup's started object deleted)", n)
		}
	})
	t.Run("DeleteAll", func(t *testing.T) {
		t.Parallel()
		st := setup(t)
		rep, err := prune.DeleteAll(ctx, prune.DeleteAllOptions{Store: st, Layout: l, ClusterID: "c1"})
		if err != nil {
			t.Fatalf("delete --all-backups: %v", err)
		}
		want := []string{strayC1}
		checkJSON(t, rep, want)
		notes := rep.Table().Notes
		checkNote(t, strings.Join(notes, "\n"), want)
		if last := notes[len(notes)-1]; !strings.HasPrefix(last, "deleted 1 backup(s)") {
			t.Errorf("the summary is not the last note: %q", last)
		}
		if objs, _ := st.List(ctx, l.ClusterPrefix("c1")); len(objs) != 1 || objs[0].Key != strayC1 {
			t.Errorf("left under the cluster: %+v, want only %s", objs, strayC1)
		}
	})
	t.Run("Orphans", func(t *testing.T) {
		t.Parallel()
		st := setup(t)
		rep, err := prune.Orphans(ctx, prune.OrphanOptions{Store: st, Layout: l, Namespace: "ns",
			Clusters: func(context.Context) ([]string, error) { return nil, nil },
			Restores: func(context.Context) (map[string][]string, error) { return nil, nil },
			Now:      now, DryRun: true})
		if err != nil {
			t.Fatalf("orphans: %v", err)
		}
		want := []string{strayC1, strayRoot}
		slices.Sort(rep.Unknown)
		checkJSON(t, rep, want)
		checkNote(t, strings.Join(rep.Table().Notes, "\n"), want)
	})
}
