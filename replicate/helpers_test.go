package replicate_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/replicate"
)

func TestMain(m *testing.M) { testfix.Main(m) }

// rig is two regions: the primary, a bucket on the shared MinIO, and the
// second site, a bucket on a MinIO server of the test's own (which the
// test may stop), each with its own prefix.
type rig struct {
	pm, sm  *testenv.MinIO
	primary store.Store
	second  store.Store
	pl, sl  catalog.Layout
}

func newRig(tb testing.TB) *rig {
	tb.Helper()
	pm := testenv.SharedMinIO(tb)
	sm := testenv.StartMinIO(tb)
	return &rig{pm: pm, sm: sm,
		primary: testfix.Store(tb, pm, pm.NewBucket(tb)),
		second:  testfix.Store(tb, sm, sm.NewBucket(tb), func(c *cos.Config) { c.StallTimeout = 5 * time.Second }),
		pl:      catalog.Layout{Prefix: testenv.Prefix(tb)}, sl: catalog.Layout{Prefix: "dr/" + testenv.Prefix(tb)}}
}

// newBackedUpRig is a rig whose primary holds a fake backup of cluster id
// an hour old, and the time it was made at.
func newBackedUpRig(tb testing.TB, id string) (*rig, time.Time, *catalog.Manifest) {
	tb.Helper()
	r := newRig(tb)
	now := time.Now().UTC()
	return r, now, fakeBackup(tb, r.primary, r.pl, id, now.Add(-time.Hour))
}

func (r *rig) opts(tb testing.TB) replicate.Options {
	return replicate.Options{Primary: r.primary, PrimaryLayout: r.pl, Second: r.second, SecondLayout: r.sl,
		Parallel: 4, Copier: tb.Name(), Log: testfix.Logger(tb)}
}

// backedUpEtcd is a one-member etcd 3.5 with 10 keys under /before/, a
// rig of the primary, and the scheduled backup of the etcd as cluster id
// there.
func (r *rig) backedUpEtcd(tb testing.TB, id string) (*testenv.EtcdCluster, *testfix.StoreRig, *catalog.Manifest) {
	tb.Helper()
	c := testenv.StartEtcd(tb, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(tb, c.Client(tb), "/before/", 10, 16)
	rig := &testfix.StoreRig{MinIO: r.pm, Store: r.primary.(*cos.Store), Layout: r.pl}
	return c, rig, rig.TakeBackup(tb, c, id, catalog.KindScheduled)
}

// backgroundRun is a replicate.Run in the background.
type backgroundRun struct {
	cancel context.CancelFunc
	done   chan error
}

// runInBackground runs replicate.Run with o until stop (or the test's end).
func runInBackground(tb testing.TB, ctx context.Context, o replicate.Options) *backgroundRun {
	tb.Helper()
	rctx, cancel := context.WithCancel(ctx)
	tb.Cleanup(cancel)
	c := &backgroundRun{cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- replicate.Run(rctx, o) }()
	return c
}

// stop cancels the run and fails tb unless it ended by that.
func (c *backgroundRun) stop(tb testing.TB) {
	tb.Helper()
	c.cancel()
	if err := <-c.done; !errors.Is(err, context.Canceled) {
		tb.Fatalf("Run: %v", err)
	}
}

// chains are cluster id's journal chains from base on the primary and on
// the second site.
func (r *rig) chains(tb testing.TB, ctx context.Context, id string, base int64) (primary, second *journal.Chain) {
	tb.Helper()
	pc, err := journal.ListSegments(ctx, r.primary, r.pl, id, base)
	if err != nil {
		tb.Fatal(err)
	}
	sc, err := journal.ListSegments(ctx, r.second, r.sl, id, base)
	if err != nil {
		tb.Fatal(err)
	}
	return pc, sc
}

// dst is the second site's key of a primary key.
func (r *rig) dst(key string) string {
	return r.sl.RootPrefix() + strings.TrimPrefix(key, r.pl.RootPrefix())
}

// copyable is what of the primary must be on the second site: the
// objects of committed backup folders, the escrows their manifests name,
// journal segments, gap and proof records, the owner record.
func (r *rig) copyable(tb testing.TB) map[string]string {
	tb.Helper()
	all := testfix.Sums(tb, r.primary, r.pl)
	committed := map[string]bool{}
	for k := range all {
		if ki := r.pl.Classify(k); ki.Kind == catalog.KeyBackup && ki.Object == catalog.ManifestObject {
			committed[r.pl.BackupPrefix(ki.ClusterID, ki.Name)] = true
		}
	}
	out := map[string]string{}
	for k, sum := range all {
		ki := r.pl.Classify(k)
		switch ki.Kind {
		case catalog.KeyBackup:
			if !committed[r.pl.BackupPrefix(ki.ClusterID, ki.Name)] {
				continue
			}
		case catalog.KeyJournal, catalog.KeyJournalGap, catalog.KeyJournalProof, catalog.KeyOwnerMarker, catalog.KeyEscrow:
		default:
			continue
		}
		out[r.dst(k)] = sum
	}
	return out
}

// checkSame fails tb unless the second site holds exactly the primary's
// copyable objects (and the status record), each with the primary's
// sha256; it returns how many.
func (r *rig) checkSame(tb testing.TB) int {
	tb.Helper()
	want := r.copyable(tb)
	got := testfix.Sums(tb, r.second, r.sl)
	delete(got, r.sl.ReplicaStatusKey())
	if d := diff(want, got); d != "" {
		tb.Fatalf("the second site differs from the primary: %s", d)
	}
	return len(want)
}

// diff names the keys two sets of sums disagree on ("" when none).
func diff(want, got map[string]string) string {
	var out []string
	for k, s := range want {
		switch g, ok := got[k]; {
		case !ok:
			out = append(out, "missing "+k)
		case g != s:
			out = append(out, fmt.Sprintf("%s: sha256 %s, want %s", k, g, s))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "extra "+k)
		}
	}
	slices.Sort(out)
	if len(out) > 6 {
		out = append(out[:6], fmt.Sprintf("and %d more", len(out)-6))
	}
	return strings.Join(out, "; ")
}

// fakeBackup commits a backup folder of cluster id at t0 with a snapshot
// of random bytes that its manifest names correctly (no etcd: the copier
// reads bytes and hashes, not databases), and returns its manifest.
func fakeBackup(tb testing.TB, st store.Store, l catalog.Layout, id string, t0 time.Time) *catalog.Manifest {
	tb.Helper()
	return fakeBackupSized(tb, st, l, id, t0, 4096)
}

// fakeBackupSized is fakeBackup with a snapshot of size random bytes.
func fakeBackupSized(tb testing.TB, st store.Store, l catalog.Layout, id string, t0 time.Time, size int) *catalog.Manifest {
	tb.Helper()
	ctx := context.Background()
	name := catalog.NewBackupName(t0, catalog.KindScheduled)
	data := make([]byte, size)
	rand.Read(data)
	m := &catalog.Manifest{Format: catalog.ManifestFormat, ClusterID: id, Name: name, Kind: catalog.KindScheduled,
		StartedAt: t0, FinishedAt: t0.Add(time.Second), ServerVersion: "3.5.0", RevisionBefore: 10, RevisionAfter: 10,
		Snapshot: catalog.SnapshotInfo{Object: catalog.SnapshotObjectZstd, Compression: objectio.CompressZstd,
			RawSize: int64(size), RawSHA256: strings.Repeat("ab", 32), StoredSize: int64(len(data)), StoredSHA256: testfix.SHA256(data)}, ToolVersion: "test"}
	put(tb, st, l.Key(id, name, catalog.StartedObject), []byte(t0.Format(time.RFC3339)))
	put(tb, st, l.Key(id, name, m.Snapshot.Object), data)
	b, err := catalog.MarshalManifest(m)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := st.Put(ctx, l.Key(id, name, catalog.ManifestObject), bytes.NewReader(b)); err != nil {
		tb.Fatal(err)
	}
	return m
}

func put(tb testing.TB, st store.Store, key string, b []byte) {
	tb.Helper()
	if _, err := st.Put(context.Background(), key, bytes.NewReader(b)); err != nil {
		tb.Fatalf("put %s: %v", key, err)
	}
}

// segment writes cluster id's journal segment of a put at each revision
// first..last (base backup base at revision 10).
func segment(tb testing.TB, st store.Store, l catalog.Layout, id, base string, first, last int64) journal.SegmentInfo {
	tb.Helper()
	var evs []journal.Event
	for r := first; r <= last; r++ {
		evs = append(evs, journal.Event{Rev: r, Type: journal.Put, Key: []byte(fmt.Sprint("k", r)), Value: []byte("v"), CreateRev: r, Version: 1})
	}
	h := journal.Header{Format: journal.FormatVersion, ClusterID: id, BaseBackup: base, BaseRev: min(first-1, 10), FirstRev: first, LastRev: last,
		Received: map[int64]int64{first: first * 100, last: last * 100}}
	info, err := journal.WriteSegment(context.Background(), st, l, objectio.Encoding{Compression: objectio.CompressZstd}, h, evs)
	if err != nil {
		tb.Fatal(err)
	}
	return info
}

// record writes a small JSON record at key, create-only.
func record(tb testing.TB, st store.Store, key string) {
	tb.Helper()
	if err := objectio.CreateRecord(context.Background(), st, key, map[string]any{"key": key, "time": time.Now()}, nil); err != nil {
		tb.Fatal(err)
	}
}
