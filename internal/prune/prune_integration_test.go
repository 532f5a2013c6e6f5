package prune_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// The prune tests run against real MinIO. Backup folders are made with
// Store.Put directly (retention plans from key names), and time is a fixed
// "now" in 2100: objects and uploads written today are then genuinely old
// for the incomplete-folder and stale-upload rules, and folders named
// shortly before "now" are young.
var pruneNow = time.Date(2100, 1, 16, 9, 30, 0, 0, time.UTC)

// folder is one backup folder to create.
type folder struct {
	cluster    string
	at         time.Time
	kind       catalog.Kind
	incomplete bool  // no manifest (and no v2 export)
	rev        int64 // the manifest's revision (putGood; 0: 100)
}

func (f folder) name() string { return catalog.BackupName(f.at, f.kind) }

// keys are the folder's object keys.
func (f folder) keys(l catalog.Layout) []string {
	n := f.name()
	if f.incomplete {
		return []string{l.Key(f.cluster, n, catalog.SnapshotObjectZstd)}
	}
	return []string{l.Key(f.cluster, n, catalog.SnapshotObjectZstd), l.Key(f.cluster, n, catalog.V2ObjectZstd), l.Key(f.cluster, n, catalog.ManifestObject)}
}

// scheduledRuns returns the 03:03/11:03/19:03 runs from the first run of
// day from up to and including last.
func scheduledRuns(cluster string, from, last time.Time) []folder {
	var out []folder
	for day := from.Truncate(24 * time.Hour); !day.After(last); day = day.AddDate(0, 0, 1) {
		for _, h := range []int{3, 11, 19} {
			if t := day.Add(time.Duration(h)*time.Hour + 3*time.Minute); !t.Before(from) && !t.After(last) {
				out = append(out, folder{cluster: cluster, at: t, kind: catalog.KindScheduled})
			}
		}
	}
	return out
}

func at(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// manifestBody is a valid manifest for a made-up backup.
func manifestBody(tb testing.TB, f folder) []byte {
	tb.Helper()
	b, err := catalog.MarshalManifest(&catalog.Manifest{
		Format: catalog.ManifestFormat, ClusterID: f.cluster, Name: f.name(), Kind: f.kind,
		StartedAt: f.at, FinishedAt: f.at.Add(20 * time.Second), ServerVersion: "3.5.35",
		Source:         catalog.Member{Name: "m0", ID: "8e9e05c52164694d", Endpoint: "https://10.0.0.1:2379"},
		Snapshot:       catalog.SnapshotInfo{Object: catalog.SnapshotObjectZstd, Compression: objectio.CompressZstd, RawSize: 4096, RawSHA256: strings.Repeat("ab", 32), StoredSize: 1, StoredSHA256: strings.Repeat("cd", 32)},
		RevisionBefore: 100, RevisionAfter: 100, ToolVersion: "test",
	})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// putAll writes the folders' objects and the extra keys, 16 at a time.
func putAll(tb testing.TB, st store.Store, l catalog.Layout, folders []folder, extra ...string) {
	tb.Helper()
	type obj struct {
		key  string
		body []byte
	}
	var objs []obj
	for _, f := range folders {
		for _, k := range f.keys(l) {
			body := []byte("x")
			if strings.HasSuffix(k, "/"+catalog.ManifestObject) {
				body = manifestBody(tb, f)
			}
			objs = append(objs, obj{k, body})
		}
	}
	for _, k := range extra {
		objs = append(objs, obj{k, []byte("not a backup")})
	}
	work := make(chan obj)
	errs := make(chan error, len(objs))
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for o := range work {
				if _, err := st.Put(context.Background(), o.key, bytes.NewReader(o.body)); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, o := range objs {
		work <- o
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		tb.Fatalf("put: %v", err)
	}
}

// createUpload starts a real multipart upload and returns its id.
func createUpload(tb testing.TB, m *testenv.MinIO, bucket, key string) string {
	tb.Helper()
	out, err := m.S3(tb).CreateMultipartUpload(&s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		tb.Fatalf("create multipart upload %s: %v", key, err)
	}
	return aws.StringValue(out.UploadId)
}

// bucketState is every key and every upload in the bucket.
type bucketState struct {
	keys    []string
	uploads []string // key + " " + upload id
}

func stateOf(tb testing.TB, st store.Store) bucketState {
	tb.Helper()
	ups, err := st.(store.Multipart).ListUploads(context.Background(), "")
	if err != nil {
		tb.Fatal(err)
	}
	s := bucketState{keys: testfix.Keys(tb, st, "")}
	for _, u := range ups {
		s.uploads = append(s.uploads, u.Key+" "+u.UploadID)
	}
	sort.Strings(s.uploads)
	return s
}

func (s bucketState) equal(o bucketState) bool {
	return slices.Equal(s.keys, o.keys) && slices.Equal(s.uploads, o.uploads)
}

func diffKeys(got, want []string) string {
	var extra, missing []string
	for _, k := range got {
		if !slices.Contains(want, k) {
			extra = append(extra, k)
		}
	}
	for _, k := range want {
		if !slices.Contains(got, k) {
			missing = append(missing, k)
		}
	}
	return fmt.Sprintf("unexpected %d %v; missing %d %v", len(extra), extra, len(missing), missing)
}

func actionsByName(rep *prune.PruneReport) map[string]prune.BackupAction {
	out := map[string]prune.BackupAction{}
	for _, c := range rep.Clusters {
		for _, a := range c.Backups {
			out[a.ClusterID+"/"+a.Name] = a
		}
	}
	return out
}

// The carrier's rule, applied in a real bucket: 40 days of 8-hourly
// backups, update, manual, pre-restore and incomplete folders, keys that
// are not backups, and multipart uploads.
func TestPruneInBucket(t *testing.T) {
	t.Parallel()
	sr := testfix.NewStoreRig(t)
	mi, bucket, st, l := sr.MinIO, sr.Bucket, sr.Store, sr.Layout
	ctx := context.Background()

	// Cluster "carrier-a": scheduled runs from 2099-12-07 to now (2100-01-16 09:30).
	a := scheduledRuns("carrier-a", at("2099-12-07 00:00"), pruneNow)
	keepA := []folder{ // by rule; the comments are the expected reasons
		{cluster: "carrier-a", at: at("2100-01-16 03:03"), kind: catalog.KindScheduled},                   // recent 1/3
		{cluster: "carrier-a", at: at("2100-01-15 19:03"), kind: catalog.KindScheduled},                   // recent 2/3
		{cluster: "carrier-a", at: at("2100-01-15 11:03"), kind: catalog.KindScheduled},                   // recent 3/3
		{cluster: "carrier-a", at: at("2100-01-01 03:03"), kind: catalog.KindScheduled},                   // anchor 2100-01-01
		{cluster: "carrier-a", at: at("2100-01-15 01:00"), kind: catalog.KindUpdate},                      // anchor 2100-01-15 (earlier than 03:03)
		{cluster: "carrier-a", at: at("2100-01-16 06:00"), kind: catalog.KindUpdate},                      // newest; update from today
		{cluster: "carrier-a", at: at("2099-12-20 10:00"), kind: catalog.KindManual},                      // manual
		{cluster: "carrier-a", at: at("2099-12-25 12:00"), kind: catalog.KindPreRestore},                  // pre-restore
		{cluster: "carrier-a", at: at("2100-01-16 08:00"), kind: catalog.KindScheduled, incomplete: true}, // incomplete, 1h30m old
	}
	deleteA := []folder{
		{cluster: "carrier-a", at: at("2100-01-10 14:00"), kind: catalog.KindUpdate},                      // an old update
		{cluster: "carrier-a", at: at("2100-01-13 05:00"), kind: catalog.KindScheduled, incomplete: true}, // incomplete, 3 days old
		{cluster: "carrier-a", at: at("2099-12-01 00:00"), kind: catalog.KindManual, incomplete: true},    // a failed manual backup
	}
	// Cluster "carrier-b": five runs; the 2100-01-15 03:03 one is its only anchor.
	b := scheduledRuns("carrier-b", at("2100-01-14 19:00"), pruneNow)
	keepB := []folder{
		{cluster: "carrier-b", at: at("2100-01-16 03:03"), kind: catalog.KindScheduled},
		{cluster: "carrier-b", at: at("2100-01-15 19:03"), kind: catalog.KindScheduled},
		{cluster: "carrier-b", at: at("2100-01-15 11:03"), kind: catalog.KindScheduled},
		{cluster: "carrier-b", at: at("2100-01-15 03:03"), kind: catalog.KindScheduled},
	}
	var all, keep []folder
	all = append(all, a...)
	all = append(all, keepA[4:]...) // the scheduled ones of keepA are in a already
	all = append(all, deleteA...)
	all = append(all, b...)
	keep = append(keep, keepA...)
	keep = append(keep, keepB...)
	if len(a) != 121 || len(b) != 5 {
		t.Fatalf("fixture: %d and %d scheduled runs", len(a), len(b))
	}
	// Keys that are not backups, inside and outside the prefix: never touched.
	strays := []string{
		l.RootPrefix() + "README",
		l.ClusterPrefix("carrier-a") + "notes.txt",
		l.ClusterPrefix("carrier-a") + "not-a-backup/snapshot.db.zst",
		l.ClusterPrefix("carrier-a") + "20991201T000000.000Z-weekly/snapshot.db.zst",
		"elsewhere/" + l.Key("carrier-a", catalog.BackupName(at("2099-12-08 03:03"), catalog.KindScheduled), catalog.ManifestObject),
	}
	putAll(t, st, l, all, strays...)

	staleKey := l.Key("carrier-a", catalog.BackupName(at("2100-01-14 19:03"), catalog.KindScheduled), catalog.SnapshotObjectZstd)
	staleID := createUpload(t, mi, bucket, staleKey)
	strayUpload := l.RootPrefix() + "upload-outside-the-layout"
	strayID := createUpload(t, mi, bucket, strayUpload)

	var wantKeys []string
	for _, f := range keep {
		wantKeys = append(wantKeys, f.keys(l)...)
	}
	wantKeys = append(wantKeys, strays...)
	sort.Strings(wantKeys)
	wantDeleted := len(all) - len(keep)

	before := stateOf(t, st)
	opts := prune.PruneOptions{Store: st, Layout: l, All: true, Policy: retention.DefaultPolicy(), Now: pruneNow, DryRun: true, Log: testfix.DebugLogger(t)}

	// A dry run plans everything and deletes nothing.
	dry, err := prune.Prune(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if after := stateOf(t, st); !after.equal(before) {
		t.Fatalf("the dry run changed the bucket: %s", diffKeys(after.keys, before.keys))
	}
	if dry.Planned != wantDeleted || dry.Kept != len(keep) || dry.Deleted != 0 || dry.Stale != 1 || dry.Aborted != 0 {
		t.Errorf("dry run counts: planned %d kept %d deleted %d stale %d aborted %d; want %d, %d, 0, 1, 0",
			dry.Planned, dry.Kept, dry.Deleted, dry.Stale, dry.Aborted, wantDeleted, len(keep))
	}
	if dry.Stats.ObjectsListed != len(before.keys)-1 { // not the key outside the prefix
		t.Errorf("dry run listed %d objects, want %d", dry.Stats.ObjectsListed, len(before.keys)-1)
	}

	opts.DryRun = false
	rep, err := prune.Prune(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	after := stateOf(t, st)
	if !slices.Equal(after.keys, wantKeys) {
		t.Fatalf("survivors: %s", diffKeys(after.keys, wantKeys))
	}
	if rep.Deleted != wantDeleted || rep.Failed != 0 || rep.Kept != len(keep) || rep.Aborted != 1 {
		t.Errorf("counts: deleted %d failed %d kept %d aborted %d", rep.Deleted, rep.Failed, rep.Kept, rep.Aborted)
	}
	if want := len(before.keys) - len(after.keys); rep.Stats.ObjectsDeleted != want {
		t.Errorf("stats: %d objects deleted, the bucket lost %d", rep.Stats.ObjectsDeleted, want)
	}
	if !slices.Equal(after.uploads, []string{strayUpload + " " + strayID}) {
		t.Errorf("uploads after prune: %v; want only the one outside the layout (stale %s %s aborted)", after.uploads, staleKey, staleID)
	}

	// Every backup has an action and a reason, and the dry run said the same.
	acts, dryActs := actionsByName(rep), actionsByName(dry)
	if len(acts) != len(all) {
		t.Errorf("report has %d backups, the bucket had %d", len(acts), len(all))
	}
	for id, x := range acts {
		d := dryActs[id]
		if x.Reason == "" || x.Reason != d.Reason || x.Keep != d.Keep || !slices.Equal(x.Rules, d.Rules) {
			t.Errorf("%s: run %+v, dry run %+v", id, x, d)
		}
		switch {
		case x.Keep && (x.Action != prune.ActionKeep || d.Action != prune.ActionKeep || len(x.Rules) == 0):
			t.Errorf("%s kept with action %q/%q rules %v", id, x.Action, d.Action, x.Rules)
		case !x.Keep && (x.Action != prune.ActionDeleted || d.Action != prune.ActionDelete || x.ObjectsDeleted != x.Objects):
			t.Errorf("%s deleted with action %q/%q, %d of %d objects", id, x.Action, d.Action, x.ObjectsDeleted, x.Objects)
		}
	}
	wantRules := map[string][]string{
		"carrier-a/21000116T030300.000Z-scheduled":   {retention.RuleRecent},
		"carrier-a/21000101T030300.000Z-scheduled":   {retention.RuleAnchor},
		"carrier-a/21000115T010000.000Z-update":      {retention.RuleAnchor},
		"carrier-a/21000116T060000.000Z-update":      {retention.RuleNewest, retention.RuleUpdateToday},
		"carrier-a/20991220T100000.000Z-manual":      {retention.RuleManual},
		"carrier-a/20991225T120000.000Z-pre-restore": {retention.RulePreRestore},
		"carrier-a/21000116T080000.000Z-scheduled":   {retention.RuleIncompleteYoung},
		"carrier-b/21000116T030300.000Z-scheduled":   {retention.RuleNewest, retention.RuleRecent},
		"carrier-b/21000115T030300.000Z-scheduled":   {retention.RuleAnchor},
		"carrier-a/21000115T030300.000Z-scheduled":   nil,
		"carrier-a/20991201T000000.000Z-manual":      nil,
		"carrier-a/21000113T050000.000Z-scheduled":   nil,
		"carrier-a/21000110T140000.000Z-update":      nil,
		"carrier-b/21000114T190300.000Z-scheduled":   nil,
		"carrier-a/20991207T030300.000Z-scheduled":   nil,
	}
	for id, rules := range wantRules {
		if x, ok := acts[id]; !ok || !slices.Equal(x.Rules, rules) {
			t.Errorf("%s: rules %v (%q), want %v", id, x.Rules, x.Reason, rules)
		}
	}
	for id, sub := range map[string]string{
		"carrier-a/21000115T030300.000Z-scheduled": "21000115T010000.000Z-update is the earliest backup of 2100-01-15",
		"carrier-a/21000113T050000.000Z-scheduled": "older than 24h",
		"carrier-a/21000110T140000.000Z-update":    "only today's update backups are kept",
	} {
		if r := acts[id].Reason; !strings.Contains(r, sub) {
			t.Errorf("%s: reason %q does not say %q", id, r, sub)
		}
	}
	if len(rep.Clusters) != 2 || len(rep.Clusters[0].Uploads) != 1 || rep.Clusters[0].Uploads[0].Action != prune.ActionAborted {
		t.Errorf("uploads in the report: %+v", rep.Clusters)
	}

	// A young upload (started just now) is left alone at the real now; the
	// backups, named in 2100, are in the future then and all kept.
	youngKey := l.Key("carrier-b", catalog.BackupName(time.Now(), catalog.KindScheduled), catalog.SnapshotObjectZstd)
	youngID := createUpload(t, mi, bucket, youngKey)
	beforeYoung := stateOf(t, st)
	rep, err = prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{"carrier-b"}, Policy: retention.DefaultPolicy(), Log: testfix.DebugLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if s := stateOf(t, st); !s.equal(beforeYoung) {
		t.Fatalf("a prune at the real now changed the bucket: keys %s, uploads %v -> %v", diffKeys(s.keys, beforeYoung.keys), beforeYoung.uploads, s.uploads)
	}
	if rep.Stale != 0 || rep.Uploads != 1 || rep.Clusters[0].Uploads[0].UploadID != youngID || rep.Clusters[0].Uploads[0].Action != prune.ActionKeep ||
		!strings.Contains(rep.Clusters[0].Uploads[0].Reason, "may be in flight") {
		t.Errorf("young upload: %+v", rep.Clusters[0].Uploads)
	}
	// 25 hours later it is stale.
	rep, err = prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{"carrier-b"}, Policy: retention.DefaultPolicy(),
		Now: time.Now().Add(25 * time.Hour), Log: testfix.DebugLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Aborted != 1 || rep.Deleted != 0 {
		t.Errorf("25h later: aborted %d deleted %d", rep.Aborted, rep.Deleted)
	}
	if s := stateOf(t, st); !slices.Equal(s.uploads, []string{strayUpload + " " + strayID}) || !slices.Equal(s.keys, wantKeys) {
		t.Errorf("25h later: uploads %v, keys %s", s.uploads, diffKeys(s.keys, wantKeys))
	}
}

// faultyStore wraps the real store and injects failures.
type faultyStore struct {
	store.Store
	failListCall int                    // the n-th List call fails (1-based); 0: never
	failUploads  bool                   // ListUploads fails
	failDelete   func(key string) error // per key; nil: never
	deleteErr    error                  // every Delete call fails as a whole
	failPut      func(key string) error
	failGet      func(key string) error // per key; nil: never
	// blockList, when set, makes List wait for ctx (a store that never
	// answers).
	blockList bool

	mu      sync.Mutex
	lists   int
	deletes [][]string
	aborts  int
}

var errInjected = errors.New("injected failure")

func (f *faultyStore) List(ctx context.Context, prefix string) ([]store.ObjectInfo, error) {
	f.mu.Lock()
	f.lists++
	n := f.lists
	f.mu.Unlock()
	if n == f.failListCall {
		return nil, fmt.Errorf("cos: list %s: %w", prefix, errInjected)
	}
	if f.blockList {
		<-ctx.Done()
		return nil, fmt.Errorf("cos: list %s: %w", prefix, ctx.Err())
	}
	return f.Store.List(ctx, prefix)
}

func (f *faultyStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if f.failGet != nil {
		if err := f.failGet(key); err != nil {
			return nil, err
		}
	}
	return f.Store.Get(ctx, key)
}

func (f *faultyStore) ListUploads(ctx context.Context, prefix string) ([]store.Upload, error) {
	if f.failUploads {
		return nil, fmt.Errorf("cos: list uploads %s: %w", prefix, errInjected)
	}
	return f.Store.(store.Multipart).ListUploads(ctx, prefix)
}

func (f *faultyStore) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if f.failPut != nil {
		if err := f.failPut(key); err != nil {
			return 0, err
		}
	}
	return f.Store.Put(ctx, key, r)
}

func (f *faultyStore) Delete(ctx context.Context, keys []string) error {
	f.mu.Lock()
	f.deletes = append(f.deletes, slices.Clone(keys))
	f.mu.Unlock()
	if f.deleteErr != nil {
		return f.deleteErr
	}
	failed := map[string]error{}
	var pass []string
	for _, k := range keys {
		if f.failDelete != nil {
			if err := f.failDelete(k); err != nil {
				failed[k] = err
				continue
			}
		}
		pass = append(pass, k)
	}
	if len(pass) > 0 {
		if err := f.Store.Delete(ctx, pass); err != nil {
			var de *store.DeleteError
			if !errors.As(err, &de) {
				return err
			}
			for k, e := range de.Failed {
				failed[k] = e
			}
		}
	}
	if len(failed) > 0 {
		return &store.DeleteError{Failed: failed}
	}
	return nil
}

func (f *faultyStore) AbortUpload(ctx context.Context, u store.Upload) error {
	f.mu.Lock()
	f.aborts++
	f.mu.Unlock()
	return f.Store.(store.Multipart).AbortUpload(ctx, u)
}

// smallFixture is two clusters of eight 8-hourly backups (four of each
// are deleted by the default policy) and a stale upload.
func smallFixture(t *testing.T) (*testenv.MinIO, string, store.Store, catalog.Layout) {
	t.Helper()
	sr := testfix.NewStoreRig(t)
	mi, bucket, st, l := sr.MinIO, sr.Bucket, sr.Store, sr.Layout
	var fs []folder
	for _, id := range []string{"small-a", "small-b"} {
		fs = append(fs, scheduledRuns(id, at("2100-01-13 19:00"), pruneNow)...)
	}
	putAll(t, st, l, fs)
	createUpload(t, mi, bucket, l.Key("small-a", catalog.BackupName(at("2100-01-10 03:03"), catalog.KindScheduled), catalog.SnapshotObjectZstd))
	return mi, bucket, st, l
}

// If any listing fails, nothing is deleted.
func TestPruneListingFailsDeletesNothing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		store func(store.Store) *faultyStore
		opts  func(*prune.PruneOptions)
		step  string
	}{
		{"second cluster listing fails", func(s store.Store) *faultyStore { return &faultyStore{Store: s, failListCall: 2} },
			func(o *prune.PruneOptions) { o.ClusterIDs = []string{"small-a", "small-b"} }, prune.PruneStepList},
		{"upload listing fails", func(s store.Store) *faultyStore { return &faultyStore{Store: s, failUploads: true} },
			func(o *prune.PruneOptions) { o.All = true }, prune.PruneStepListUploads},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, st, l := smallFixture(t)
			before := stateOf(t, st)
			fs := tc.store(st)
			opts := prune.PruneOptions{Store: fs, Layout: l, Policy: retention.DefaultPolicy(), Now: pruneNow, Log: testfix.DebugLogger(t)}
			tc.opts(&opts)
			rep, err := prune.Prune(context.Background(), opts)
			var pe *prune.PruneError
			if !errors.As(err, &pe) || pe.Step() != tc.step || !pe.NothingDeleted || !errors.Is(err, errInjected) || rep != nil {
				t.Fatalf("want a %q step error, got %v (report %v)", tc.step, err, rep)
			}
			if !strings.Contains(err.Error(), "nothing was deleted") || !strings.Contains(err.Error(), tc.step) {
				t.Errorf("error %q should name the step and say nothing was deleted", err)
			}
			if len(fs.deletes) != 0 || fs.aborts != 0 {
				t.Errorf("%d delete and %d abort calls after a failed listing", len(fs.deletes), fs.aborts)
			}
			if after := stateOf(t, st); !after.equal(before) {
				t.Errorf("the bucket changed: %s", diffKeys(after.keys, before.keys))
			}
			// The same prune without the fault deletes four backups per cluster.
			opts.Store = st
			rep, err = prune.Prune(context.Background(), opts)
			if err != nil || rep.Deleted != 8 || rep.Aborted != 1 {
				t.Fatalf("prune without the fault: %v, %+v", err, rep)
			}
		})
	}
}

// A failed delete leaves the backup complete when its manifest could not be
// deleted, and an incomplete folder when only other objects could not; the
// rest of the plan runs, and the failure is reported.
func TestPruneDeleteFailsMidway(t *testing.T) {
	t.Parallel()
	t.Run("per key", func(t *testing.T) {
		t.Parallel()
		_, _, st, l := smallFixture(t)
		keepManifest := l.Key("small-a", "21000114T030300.000Z-scheduled", catalog.ManifestObject) // phase 1 fails
		keepV2 := l.Key("small-b", "21000114T110300.000Z-scheduled", catalog.V2ObjectZstd)         // phase 2 fails
		fs := &faultyStore{Store: st, failDelete: func(k string) error {
			if k == keepManifest || k == keepV2 {
				return errors.New("AccessDenied: injected (HTTP 403)")
			}
			return nil
		}}
		rep, err := prune.Prune(context.Background(), prune.PruneOptions{Store: fs, Layout: l, All: true,
			Policy: retention.DefaultPolicy(), Now: pruneNow, Log: testfix.DebugLogger(t)})
		var pe *prune.PruneError
		var de *store.DeleteError
		if !errors.As(err, &pe) || pe.Failed != 2 || pe.NothingDeleted || !errors.As(err, &de) {
			t.Fatalf("want a prune error with 2 failed backups wrapping a *DeleteError, got %v", err)
		}
		if rep == nil || rep.Failed != 2 || rep.Deleted != 6 || rep.Aborted != 1 {
			t.Fatalf("report: %+v", rep)
		}
		acts := actionsByName(rep)
		x := acts["small-a/21000114T030300.000Z-scheduled"]
		if x.Action != prune.ActionFailed || x.ManifestDeleted || !strings.Contains(x.Error, "left complete") {
			t.Errorf("manifest failure: %+v", x)
		}
		y := acts["small-b/21000114T110300.000Z-scheduled"]
		if y.Action != prune.ActionFailed || !y.ManifestDeleted || y.ObjectsDeleted != 2 || !strings.Contains(y.Error, "1 of 3 objects") {
			t.Errorf("object failure: %+v", y)
		}
		// Phase 1 asked for the eight manifests alone, phase 2 for the rest
		// of the seven backups whose manifest was deleted.
		if len(fs.deletes) != 2 || len(fs.deletes[0]) != 8 || len(fs.deletes[1]) != 14 {
			t.Errorf("delete calls: %v", fs.deletes)
		}
		for _, k := range fs.deletes[0] {
			if !strings.HasSuffix(k, "/"+catalog.ManifestObject) {
				t.Errorf("phase 1 deleted %s", k)
			}
		}
		if slices.Contains(fs.deletes[1], l.Key("small-a", "21000114T030300.000Z-scheduled", catalog.SnapshotObjectZstd)) {
			t.Error("phase 2 deleted an object of the backup whose manifest could not be deleted")
		}
		// The backup whose manifest stayed is complete and still listed as committed.
		entries, err := catalog.Inventory(context.Background(), st, l, "small-a")
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, e := range entries {
			if e.Name == "21000114T030300.000Z-scheduled" {
				found = e.Committed && len(e.Objects) == 3
			}
		}
		if !found {
			t.Errorf("the backup whose manifest could not be deleted is not complete: %+v", entries)
		}
		keys := testfix.Keys(t, st, l.ClusterPrefix("small-b")+"21000114T110300.000Z-scheduled/")
		if !slices.Equal(keys, []string{keepV2}) {
			t.Errorf("half-deleted backup holds %v; want only its v2 export, without a manifest", keys)
		}
		// A prune without the fault finishes the job.
		rep, err = prune.Prune(context.Background(), prune.PruneOptions{Store: st, Layout: l, All: true,
			Policy: retention.DefaultPolicy(), Now: pruneNow, Log: testfix.DebugLogger(t)})
		if err != nil || rep.Deleted != 2 || rep.Kept != 8 {
			t.Fatalf("second prune: %v %+v", err, rep)
		}
	})
	t.Run("whole request", func(t *testing.T) {
		t.Parallel()
		_, _, st, l := smallFixture(t)
		before := stateOf(t, st)
		fs := &faultyStore{Store: st, deleteErr: errors.New("cos: delete: connection reset by peer")}
		rep, err := prune.Prune(context.Background(), prune.PruneOptions{Store: fs, Layout: l, All: true,
			Policy: retention.DefaultPolicy(), Now: pruneNow, Log: testfix.DebugLogger(t)})
		if err == nil || rep == nil || rep.Failed != 8 || rep.Deleted != 0 {
			t.Fatalf("want 8 failures, got %v %+v", err, rep)
		}
		// Phase 1's outcome is unknown, so phase 2 never ran: every backup is complete.
		if len(fs.deletes) != 1 {
			t.Errorf("delete calls after a failed phase 1: %v", fs.deletes)
		}
		after := stateOf(t, st)
		if !slices.Equal(after.keys, before.keys) || len(after.uploads) != 0 {
			t.Errorf("bucket after: %s; uploads %v (the stale one is aborted anyway)", diffKeys(after.keys, before.keys), after.uploads)
		}
	})
}

// Delete removes named backups of any kind, manifest first, and refuses
// unknown names and the newest committed backup.
func TestDeleteNamed(t *testing.T) {
	t.Parallel()
	sr := testfix.NewStoreRig(t)
	st, l := sr.Store, sr.Layout
	fs := []folder{
		{cluster: "named", at: at("2100-01-10 10:00"), kind: catalog.KindManual},
		{cluster: "named", at: at("2100-01-11 10:00"), kind: catalog.KindPreRestore},
		{cluster: "named", at: at("2100-01-12 10:00"), kind: catalog.KindScheduled, incomplete: true},
		{cluster: "named", at: at("2100-01-13 10:00"), kind: catalog.KindScheduled},
		{cluster: "named", at: at("2100-01-14 10:00"), kind: catalog.KindScheduled, incomplete: true},
	}
	putAll(t, st, l, fs)
	ctx := context.Background()
	before := stateOf(t, st)
	opts := func(force bool, names ...string) prune.DeleteOptions {
		return prune.DeleteOptions{Store: st, Layout: l, ClusterID: "named", Names: names, Force: force, Log: testfix.DebugLogger(t)}
	}
	if _, err := prune.Delete(ctx, opts(false, fs[0].name(), "21000101T000000.000Z-manual")); !errors.Is(err, prune.ErrBackupNotFound) {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := prune.Delete(ctx, opts(false, fs[0].name(), fs[3].name())); !errors.Is(err, prune.ErrNewestBackup) {
		t.Errorf("newest committed backup without force: %v", err)
	}
	if _, err := prune.Delete(ctx, opts(false, "not-a-name")); err == nil {
		t.Error("an invalid name was accepted")
	}
	if s := stateOf(t, st); !s.equal(before) {
		t.Fatalf("a refused delete changed the bucket: %s", diffKeys(s.keys, before.keys))
	}
	rep, err := prune.Delete(ctx, opts(false, fs[0].name(), fs[1].name(), fs[2].name(), fs[0].name()))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Backups) != 3 || rep.Backups[0].Name != fs[2].name() || rep.Stats.ObjectsDeleted != 7 {
		t.Errorf("report: %+v", rep)
	}
	for _, a := range rep.Backups {
		if a.Action != prune.ActionDeleted {
			t.Errorf("%s: %s", a.Name, a.Action)
		}
	}
	var want []string
	for _, f := range fs[3:] {
		want = append(want, f.keys(l)...)
	}
	sort.Strings(want)
	if got := testfix.Keys(t, st, ""); !slices.Equal(got, want) {
		t.Errorf("after delete: %s", diffKeys(got, want))
	}
	if _, err := prune.Delete(ctx, opts(true, fs[3].name())); err != nil {
		t.Fatalf("forced delete of the newest: %v", err)
	}
	if got := testfix.Keys(t, st, ""); !slices.Equal(got, fs[4].keys(l)) {
		t.Errorf("after the forced delete: %v", got)
	}
}

// backup --prune on a real etcd: a committed backup is followed by the
// prune of its cluster; a failed backup deletes nothing; a failed prune
// after a committed backup says the backup was committed.
func TestBackupPrune(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/", 100, 64)
	r := newRig(t, c, nil)
	policy := retention.DefaultPolicy()
	old := func(id string) []folder {
		fs := scheduledRuns(id, at("2100-01-12 00:00"), at("2100-01-14 23:59")) // no anchor days
		return append(fs,
			folder{cluster: id, at: at("2100-01-09 10:00"), kind: catalog.KindManual},
			folder{cluster: id, at: at("2100-01-13 05:00"), kind: catalog.KindScheduled, incomplete: true})
	}
	options := func(id string) backup.Options {
		o := r.Options(t, id)
		o.Now = func() time.Time { return pruneNow }
		o.Prune = &policy
		o.V2 = backup.V2Off
		return o
	}

	t.Run("committed", func(t *testing.T) {
		fs := old("pruned")
		putAll(t, r.Store, r.Layout, fs)
		res, err := backup.Run(context.Background(), options("pruned"))
		if err != nil {
			t.Fatal(err)
		}
		// Names carry a unique suffix after <time>-<kind>.
		newName := res.Manifest.Name
		if !strings.HasPrefix(newName, catalog.BackupName(pruneNow, catalog.KindScheduled)) || res.Pruned == nil {
			t.Fatalf("result: %+v", res)
		}
		if res.Pruned.Deleted != 8 || res.Pruned.Kept != 4 || res.Pruned.Failed != 0 {
			t.Errorf("pruned: deleted %d kept %d failed %d", res.Pruned.Deleted, res.Pruned.Kept, res.Pruned.Failed)
		}
		var got []string
		for _, e := range r.Listed(t, "pruned") {
			got = append(got, e.Name)
		}
		want := []string{newName, "21000114T190300.000Z-scheduled", "21000114T110300.000Z-scheduled", "21000109T100000.000Z-manual"}
		if !slices.Equal(got, want) {
			t.Errorf("after backup --prune: %v, want %v", got, want)
		}
		testfix.CheckSnapshot(t, r.Store, r.Layout, res.Manifest)
	})

	t.Run("failed backup deletes nothing", func(t *testing.T) {
		putAll(t, r.Store, r.Layout, old("fails"))
		before := testfix.Keys(t, r.Store, r.Layout.ClusterPrefix("fails"))
		fs := &faultyStore{Store: r.Store, failPut: func(k string) error {
			if strings.HasSuffix(k, "/"+catalog.ManifestObject) {
				return fmt.Errorf("cos: put %s: %w", k, errInjected)
			}
			return nil
		}}
		o := options("fails")
		o.Store = fs
		res, err := backup.Run(context.Background(), o)
		var be *backup.Error
		if !errors.As(err, &be) || be.Step() != backup.StepManifest || res != nil {
			t.Fatalf("want a manifest step error, got %v %+v", err, res)
		}
		// Only the failed backup's own snapshot was removed (its folder
		// is <time>-<kind> plus a unique suffix).
		newPrefix := strings.TrimSuffix(r.Layout.BackupPrefix("fails", catalog.BackupName(pruneNow, catalog.KindScheduled)), "/") + "-"
		for _, call := range fs.deletes {
			for _, k := range call {
				if !strings.HasPrefix(k, newPrefix) {
					t.Errorf("a failed backup deleted %s", k)
				}
			}
		}
		if after := testfix.Keys(t, r.Store, r.Layout.ClusterPrefix("fails")); !slices.Equal(after, before) {
			t.Errorf("a failed backup changed the cluster's backups: %s", diffKeys(after, before))
		}
	})

	t.Run("prune fails after commit", func(t *testing.T) {
		putAll(t, r.Store, r.Layout, old("prune-fails"))
		fs := &faultyStore{Store: r.Store, deleteErr: fmt.Errorf("cos: delete: %w", errInjected)}
		o := options("prune-fails")
		o.Store = fs
		res, err := backup.Run(context.Background(), o)
		var be *backup.Error
		if !errors.As(err, &be) || be.Step() != backup.StepPrune || !errors.Is(err, errInjected) {
			t.Fatalf("want a prune step error, got %v", err)
		}
		if !strings.Contains(err.Error(), "backup itself was committed") {
			t.Errorf("error %q does not say the backup was committed", err)
		}
		if res == nil || res.Manifest == nil || res.Pruned == nil || res.Pruned.Failed != 8 {
			t.Fatalf("result with a failed prune: %+v", res)
		}
		l := r.Listed(t, "prune-fails")
		if len(l) != 12 || l[0].Name != res.Manifest.Name || l[0].Manifest == nil {
			t.Errorf("after a failed prune: %d backups, newest %s", len(l), l[0].Name)
		}
	})
}
