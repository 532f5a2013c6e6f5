package prune_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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

// Faults of retention against a real MinIO: damaged, missing, truncated and
// swapped objects; store errors while reading manifests; multipart uploads
// only visible by their exact key after MinIO was killed and restarted; a
// prune running while a backup is in flight.

// damagedFolder is a committed folder written with a manifest that names a
// snapshot (and a v2 export) of the sizes stored, before any damage.
func putGood(tb testing.TB, st store.Store, l catalog.Layout, f folder) {
	tb.Helper()
	n := f.name()
	rev := cmp.Or(f.rev, 100)
	snap, v2 := bytes.Repeat([]byte("s"), 64), bytes.Repeat([]byte("v"), 16)
	m := &catalog.Manifest{
		Format: catalog.ManifestFormat, ClusterID: f.cluster, Name: n, Kind: f.kind,
		StartedAt: f.at, FinishedAt: f.at.Add(20 * time.Second), ServerVersion: "3.5.35",
		Source:         catalog.Member{Name: "m0", ID: "8e9e05c52164694d", Endpoint: "https://10.0.0.1:2379"},
		Snapshot:       catalog.SnapshotInfo{Object: catalog.SnapshotObjectZstd, Compression: objectio.CompressZstd, RawSize: 4096, RawSHA256: strings.Repeat("ab", 32), StoredSize: int64(len(snap)), StoredSHA256: testfix.SHA256(snap)},
		V2:             &catalog.V2Info{Object: catalog.V2ObjectZstd, Compression: objectio.CompressZstd, Keys: 1, SHA256: strings.Repeat("ef", 32), StoredSize: int64(len(v2)), StoredSHA256: testfix.SHA256(v2)},
		RevisionBefore: rev, RevisionAfter: rev, ToolVersion: "test",
	}
	mb, err := catalog.MarshalManifest(m)
	if err != nil {
		tb.Fatal(err)
	}
	for obj, body := range map[string][]byte{catalog.SnapshotObjectZstd: snap, catalog.V2ObjectZstd: v2, catalog.ManifestObject: mb} {
		if _, err := st.Put(context.Background(), l.Key(f.cluster, n, obj), bytes.NewReader(body)); err != nil {
			tb.Fatal(err)
		}
	}
}

func putObject(tb testing.TB, st store.Store, key string, body []byte) {
	tb.Helper()
	if _, err := st.Put(context.Background(), key, bytes.NewReader(body)); err != nil {
		tb.Fatal(err)
	}
}

func deleteObject(tb testing.TB, st store.Store, key string) {
	tb.Helper()
	if err := st.Delete(context.Background(), []string{key}); err != nil {
		tb.Fatal(err)
	}
}

// The newest backups are damaged in every way the
// store can damage them; retention keeps the good ones behind them, keeps
// the damaged ones that are newer for investigation, deletes old damaged
// ones as damaged, and the prune fails naming the cluster's newest good
// backup. ListBackups (what list shows) reports the same damage.
func TestPruneDamagedBackups(t *testing.T) {
	t.Parallel()
	sr := testfix.NewStoreRig(t)
	st, l := sr.Store, sr.Layout
	const id = "dmg"
	runs := scheduledRuns(id, at("2100-01-13 19:00"), pruneNow) // 8 runs, newest 2100-01-16 03:03
	for _, f := range runs {
		putGood(t, st, l, f)
	}
	key := func(i int, obj string) string { return l.Key(id, runs[i].name(), obj) }
	n := len(runs)
	// The 5 newest are damaged: unreadable manifest, snapshot truncated,
	// snapshot gone, manifest swapped in from another backup, v2 gone.
	putObject(t, st, key(n-1, catalog.ManifestObject), []byte(`{"format": 1, "clusterID": "dmg", "na`))
	putObject(t, st, key(n-2, catalog.SnapshotObjectZstd), bytes.Repeat([]byte("s"), 10))
	deleteObject(t, st, key(n-3, catalog.SnapshotObjectZstd))
	putObject(t, st, key(n-4, catalog.ManifestObject), testfix.ReadObject(t, st, key(0, catalog.ManifestObject)))
	deleteObject(t, st, key(n-5, catalog.V2ObjectZstd))
	// And one old backup, behind the good ones: its snapshot is gone.
	deleteObject(t, st, key(0, catalog.SnapshotObjectZstd))
	wantDamage := map[int]string{
		n - 1: "manifest unreadable: manifest: unexpected end of JSON input",
		n - 2: "snapshot.db.zst size mismatch: 10 bytes stored, the manifest says 64",
		n - 3: "snapshot.db.zst missing",
		n - 4: "manifest unreadable: manifest names cluster \"dmg\" backup \"" + runs[0].name() + "\": refusing a manifest that was moved",
		n - 5: "v2.json.zst missing",
		0:     "snapshot.db.zst missing",
	}

	listed, err := catalog.ListBackups(context.Background(), st, l, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range listed {
		i := slices.IndexFunc(runs, func(f folder) bool { return f.name() == x.Name })
		if x.Damaged != wantDamage[i] || x.Good() != (wantDamage[i] == "") {
			t.Errorf("list %s: damaged %q, want %q", x.Name, x.Damaged, wantDamage[i])
		}
	}

	before := stateOf(t, st)
	opts := prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{id}, Policy: retention.DefaultPolicy(), Now: pruneNow, DryRun: true, Log: testfix.DebugLogger(t)}
	for _, dry := range []bool{true, false} {
		opts.DryRun = dry
		rep, err := prune.Prune(context.Background(), opts)
		var pe *prune.PruneError
		if !errors.As(err, &pe) || pe.Step() != prune.PruneStepDamaged || pe.NothingDeleted || len(pe.Problems) != 1 {
			t.Fatalf("dry run %v: want a %q prune error, got %v", dry, prune.PruneStepDamaged, err)
		}
		for _, sub := range []string{"cluster dmg", "the newest backup that checks out, " + runs[n-6].name(), "5 damaged backup(s) newer", runs[n-1].name() + " (manifest unreadable"} {
			if !strings.Contains(err.Error(), sub) {
				t.Errorf("error %q does not say %q", err, sub)
			}
		}
		if rep == nil || rep.Damaged != 6 || rep.Clusters[0].Damaged != 6 || rep.Clusters[0].Problem == "" {
			t.Fatalf("report: %+v", rep)
		}
		acts := actionsByName(rep)
		for i, f := range runs {
			a := acts[id+"/"+f.name()]
			if a.Damaged != wantDamage[i] {
				t.Errorf("%s: damaged %q, want %q", f.name(), a.Damaged, wantDamage[i])
			}
			switch {
			case i >= n-5: // damaged, newer than the newest good: kept
				if !a.Keep || !slices.Contains(a.Rules, retention.RuleDamagedNewer) || !strings.HasPrefix(a.Reason, "damaged: "+wantDamage[i]+"; newer than the newest good backup "+runs[n-6].name()) {
					t.Errorf("%s: %+v", f.name(), a)
				}
			case i == n-6: // the newest good one
				if !a.Keep || !slices.Equal(a.Rules, []string{retention.RuleNewest, retention.RuleRecent}) {
					t.Errorf("newest good %s: %+v", f.name(), a)
				}
			case i >= n-8+1: // recent 2/3 and 3/3
				if !a.Keep || !slices.Equal(a.Rules, []string{retention.RuleRecent}) {
					t.Errorf("good %s: %+v", f.name(), a)
				}
			case i == 0: // damaged, behind the good ones, old: deleted as damaged
				if a.Keep || !strings.HasPrefix(a.Reason, "damaged: snapshot.db.zst missing; older than the newest good backup") {
					t.Errorf("old damaged %s: %+v", f.name(), a)
				}
			}
		}
		if dry {
			if after := stateOf(t, st); !after.equal(before) {
				t.Fatalf("the dry run changed the bucket: %s", diffKeys(after.keys, before.keys))
			}
		}
	}
	// The three good backups are all there, and so are the damaged newer ones.
	left := testfix.Keys(t, st, l.ClusterPrefix(id))
	for i := 1; i < n; i++ {
		if !slices.ContainsFunc(left, func(k string) bool { return strings.Contains(k, "/"+runs[i].name()+"/") }) {
			t.Errorf("%s was deleted", runs[i].name())
		}
	}
	if slices.ContainsFunc(left, func(k string) bool { return strings.Contains(k, "/"+runs[0].name()+"/") }) {
		t.Errorf("the old damaged backup %s is still there", runs[0].name())
	}
	// Once the damaged ones are dealt with (deleted by hand), prune succeeds.
	var names []string
	for i := n - 5; i < n; i++ {
		names = append(names, runs[i].name())
	}
	if _, err := prune.Delete(context.Background(), prune.DeleteOptions{Store: st, Layout: l, ClusterID: id, Names: names, Log: testfix.DebugLogger(t)}); err != nil {
		t.Fatalf("delete of damaged backups newer than the newest good one (no --force needed): %v", err)
	}
	opts.DryRun = false
	if rep, err := prune.Prune(context.Background(), opts); err != nil || rep.Damaged != 0 || rep.Deleted != 0 || rep.Kept != 2 {
		t.Fatalf("prune after the damaged ones were deleted: %v %+v", err, rep)
	}
	// The newest good backup is refused without force.
	if _, err := prune.Delete(context.Background(), prune.DeleteOptions{Store: st, Layout: l, ClusterID: id, Names: []string{runs[n-6].name()}}); !errors.Is(err, prune.ErrNewestBackup) {
		t.Errorf("delete of the newest good backup without force: %v", err)
	}
}

// A manifest that cannot be read because of the store (not because the
// backup is damaged) leaves the backup's state unknown: nothing is deleted.
func TestPruneManifestReadFailsDeletesNothing(t *testing.T) {
	t.Parallel()
	_, _, st, l := smallFixture(t)
	before := stateOf(t, st)
	victim := l.Key("small-b", "21000115T030300.000Z-scheduled", catalog.ManifestObject)
	for _, cause := range []error{
		fmt.Errorf("cos: get %s: RequestError: send request failed: read: connection reset by peer", victim),
		fmt.Errorf("cos: get %s: %w", victim, context.DeadlineExceeded),
	} {
		fs := &faultyStore{Store: st, failGet: func(k string) error {
			if k == victim {
				return cause
			}
			return nil
		}}
		rep, err := prune.Prune(context.Background(), prune.PruneOptions{Store: fs, Layout: l, All: true,
			Policy: retention.DefaultPolicy(), Now: pruneNow, Log: testfix.DebugLogger(t)})
		var pe *prune.PruneError
		if !errors.As(err, &pe) || pe.Step() != prune.PruneStepCheck || !pe.NothingDeleted || rep != nil {
			t.Fatalf("%v: want a %q error that deleted nothing, got %v", cause, prune.PruneStepCheck, err)
		}
		for _, sub := range []string{"nothing was deleted", "small-b/21000115T030300.000Z-scheduled", cause.Error()} {
			if !strings.Contains(err.Error(), sub) {
				t.Errorf("error %q does not say %q", err, sub)
			}
		}
		if len(fs.deletes) != 0 || fs.aborts != 0 {
			t.Errorf("%d delete and %d abort calls after a failed manifest read", len(fs.deletes), fs.aborts)
		}
	}
	if after := stateOf(t, st); !after.equal(before) {
		t.Errorf("the bucket changed: %s", diffKeys(after.keys, before.keys))
	}
}

// listUploadsExact lists the uploads of key with the key as the server-side
// prefix: the only listing MinIO answers after a restart.
func listUploadsExact(tb testing.TB, mi *testenv.MinIO, bucket, key string) []string {
	tb.Helper()
	out, err := mi.S3(tb).ListMultipartUploads(&s3.ListMultipartUploadsInput{Bucket: aws.String(bucket), Prefix: aws.String(key)})
	if err != nil {
		tb.Fatal(err)
	}
	var ids []string
	for _, u := range out.Uploads {
		if aws.StringValue(u.Key) == key {
			ids = append(ids, aws.StringValue(u.UploadId))
		}
	}
	return ids
}

// A leaked upload: MinIO killed mid-upload and restarted no longer returns the
// upload in a bucket-wide listing; prune lists the exact keys of every
// incomplete folder and of every backup it deletes, and aborts them.
func TestPruneFindsUploadsHiddenByRestart(t *testing.T) {
	t.Parallel()
	mi := testenv.StartMinIO(t)
	bucket := mi.NewBucket(t)
	st := testfix.Store(t, mi, bucket)
	l := catalog.Layout{Prefix: testenv.Prefix(t)}
	const id = "leak"
	now := time.Now().UTC()
	day := now.Add(-72 * time.Hour).Truncate(24 * time.Hour)
	var good []folder
	for i := range 6 {
		f := folder{cluster: id, at: day.Add(time.Duration(i)*8*time.Hour + 3*time.Minute + 2*time.Hour), kind: catalog.KindScheduled}
		good = append(good, f)
		putGood(t, st, l, f)
	}
	// A failed backup: its v2 export is there, its snapshot upload leaked.
	failed := folder{cluster: id, at: day.Add(time.Hour), kind: catalog.KindScheduled}
	putObject(t, st, l.Key(id, failed.name(), catalog.V2ObjectZstd), []byte("v2"))
	leakInFailed := l.Key(id, failed.name(), catalog.SnapshotObjectZstd)
	// A committed backup that retention deletes: a retried upload of its
	// snapshot leaked next to the object that was completed.
	leakInDeleted := l.Key(id, good[0].name(), catalog.SnapshotObjectZstd)
	cli := mi.S3(t)
	var ids []string
	for _, k := range []string{leakInFailed, leakInDeleted} {
		out, err := cli.CreateMultipartUpload(&s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(k)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.UploadPart(&s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(k), UploadId: out.UploadId,
			PartNumber: aws.Int64(1), Body: bytes.NewReader(bytes.Repeat([]byte("p"), 5<<20))}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, aws.StringValue(out.UploadId))
	}
	mi.Kill()
	mi.Start(t)
	ups, err := st.ListUploads(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after kill -9 and restart the bucket-wide listing shows %d of the 2 uploads", len(ups))
	for i, k := range []string{leakInFailed, leakInDeleted} {
		if got := listUploadsExact(t, mi, bucket, k); !slices.Equal(got, ids[i:i+1]) {
			t.Fatalf("fixture: exact listing of %s: %v, want %v", k, got, ids[i:i+1])
		}
	}

	// 25 hours from now every upload is stale, and the failed folder old.
	rep, err := prune.Prune(context.Background(), prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{id},
		Policy: retention.DefaultPolicy(), Now: now.Add(25 * time.Hour), Log: testfix.DebugLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Aborted != 2 || rep.AbortFailed != 0 {
		t.Errorf("aborted %d uploads (%d failed), want 2: %+v", rep.Aborted, rep.AbortFailed, rep.Clusters)
	}
	for _, k := range []string{leakInFailed, leakInDeleted} {
		if got := listUploadsExact(t, mi, bucket, k); len(got) != 0 {
			t.Errorf("upload of %s still there after prune: %v", k, got)
		}
	}
	acts := actionsByName(rep)
	if a := acts[id+"/"+failed.name()]; a.Action != prune.ActionDeleted {
		t.Errorf("failed folder: %+v", a)
	}
	if a := acts[id+"/"+good[0].name()]; a.Action != prune.ActionDeleted {
		t.Errorf("oldest backup: %+v", a)
	}
	if rep.Stats.KeyUploadLists == 0 {
		t.Error("no exact-key upload listing was made")
	}
}

// A folder without a manifest into which an upload was started within
// --incomplete-after is in flight: not deleted, however old its objects.
func TestPruneKeepsFolderWithYoungUpload(t *testing.T) {
	t.Parallel()
	sr := testfix.NewStoreRig(t)
	mi, bucket, st, l := sr.MinIO, sr.Bucket, sr.Store, sr.Layout
	const id = "young"
	now := time.Now().UTC()
	putGood(t, st, l, folder{cluster: id, at: now.Add(-time.Hour), kind: catalog.KindScheduled})
	inflight := folder{cluster: id, at: now.Add(-3 * time.Hour), kind: catalog.KindScheduled, incomplete: true}
	putObject(t, st, l.Key(id, inflight.name(), catalog.V2ObjectZstd), []byte("v2"))
	upID := createUpload(t, mi, bucket, l.Key(id, inflight.name(), catalog.SnapshotObjectZstd))
	// At now+90m the v2 object is 90m old, the upload too: with a 1h limit
	// both would be old; at now+30m the upload is young.
	p := retention.DefaultPolicy()
	p.IncompleteAfter = time.Hour
	rep, err := prune.Prune(context.Background(), prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{id}, Policy: p,
		Now: now.Add(30 * time.Minute), Log: testfix.DebugLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if a := actionsByName(rep)[id+"/"+inflight.name()]; !a.Keep || !slices.Equal(a.Rules, []string{retention.RuleIncompleteYoung}) {
		t.Errorf("folder with a young upload: %+v", a)
	}
	if got := listUploadsExact(t, mi, bucket, l.Key(id, inflight.name(), catalog.SnapshotObjectZstd)); !slices.Equal(got, []string{upID}) {
		t.Errorf("the young upload was touched: %v", got)
	}
	// An --incomplete-after below the floor is refused before anything.
	p.IncompleteAfter = time.Second
	_, err = prune.Prune(context.Background(), prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{id}, Policy: p, Log: testfix.DebugLogger(t)})
	var pe *prune.PruneError
	if !errors.As(err, &pe) || pe.Step() != prune.PruneStepValidate || !strings.Contains(err.Error(), "at least 1h") {
		t.Errorf("IncompleteAfter 1s: %v", err)
	}
}

// Prune beside a backup: prunes run back to back while a backup streams
// a real etcd into the same cluster folder; the backup commits and its
// snapshot is intact and restorable.
func TestPruneDuringBackup(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/", 4000, 1024)
	r := newRig(t, c, nil)
	const id = "inflight"
	now := time.Now().UTC()
	// Old backups, so that each prune has work to do, and an old
	// incomplete folder it deletes.
	for i := range 6 {
		putGood(t, r.Store, r.Layout, folder{cluster: id, at: now.Add(-time.Duration(10+8*i) * time.Hour), kind: catalog.KindScheduled})
	}
	putObject(t, r.Store, r.Layout.Key(id, catalog.BackupName(now.Add(-50*time.Hour), catalog.KindScheduled), catalog.SnapshotObjectZstd), []byte("old"))
	p := retention.DefaultPolicy()
	p.IncompleteAfter = retention.MinIncompleteAfter

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var prunes int
	var pruneErr error
	wg.Go(func() {
		for ctx.Err() == nil {
			_, err := prune.Prune(ctx, prune.PruneOptions{Store: r.Store, Layout: r.Layout, ClusterIDs: []string{id}, Policy: p, Log: testfix.DebugLogger(t)})
			if err != nil && ctx.Err() == nil {
				pruneErr = err
				return
			}
			prunes++
		}
	})
	o := r.Options(t, id)
	o.V2 = backup.V2Off
	res, err := backup.Run(context.Background(), o)
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatalf("backup with prunes running: %v", err)
	}
	if pruneErr != nil {
		t.Fatalf("prune during the backup: %v", pruneErr)
	}
	t.Logf("%d prunes ran during the backup", prunes)
	testfix.CheckSnapshot(t, r.Store, r.Layout, res.Manifest)
	listed := r.Listed(t, id)
	if len(listed) == 0 || listed[0].Name != res.Manifest.Name || !listed[0].Good() {
		t.Fatalf("after the backup: newest %+v", listed[0].Entry)
	}
}
