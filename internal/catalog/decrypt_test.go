package catalog_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// ageKey is a new age identity, as an identity file and its recipient.
func ageKey(tb testing.TB) (*seal.Identities, string) {
	tb.Helper()
	k := testfix.NewAgeKey(tb)
	return k.IDs, k.Pub
}

// putSealed stores an encrypted snapshot object of size bytes (a real age
// file to pubs) and returns the manifest that names it. The header check
// reads the object's age header only, so its plaintext need not be a
// database.
func putSealed(tb testing.TB, st store.Store, layout catalog.Layout, id, name string, size int, pubs ...string) *catalog.Manifest {
	tb.Helper()
	rs, err := seal.ParseRecipients(pubs)
	if err != nil {
		tb.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := seal.Encrypt(&buf, rs)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := w.Write(bytes.Repeat([]byte("etcd"), size/4)); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	m := &catalog.Manifest{Format: catalog.ManifestFormat, ClusterID: id, Name: name, Kind: catalog.KindScheduled,
		Encryption: seal.NewInfo(rs),
		Snapshot:   catalog.SnapshotInfo{Object: catalog.SnapshotObject(objectio.CompressZstd, true), StoredSize: int64(buf.Len())}}
	if _, err := st.Put(context.Background(), layout.Key(id, name, m.Snapshot.Object), &buf); err != nil {
		tb.Fatal(err)
	}
	return m
}

// plainStore hides the capabilities of the store it holds (no Ranger).
type plainStore struct{ store.Store }

// TestCheckDecrypts on real MinIO: an identity of a recipient opens the
// header of a 2 MiB encrypted snapshot with one ranged read of 4 KiB (a
// store without Ranger: Get, closed after the header); another identity,
// or none, is ErrNoIdentity naming the recipients; a store failure and a
// missing object are store errors, never ErrNoIdentity; a plaintext
// backup is nil.
func TestCheckDecrypts(t *testing.T) {
	t.Parallel()
	rig := testfix.NewStoreRig(t)
	cosStore, layout := rig.Store, rig.Layout
	ctx := testfix.Context(t, time.Minute)

	mine, pubMine := ageKey(t)
	other, pubOther := ageKey(t)
	stranger, pubStranger := ageKey(t)
	bk := catalog.BackupName(time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC), catalog.KindScheduled)
	man := putSealed(t, cosStore, layout, "c1", bk, 2<<20, pubMine, pubOther)

	fs := faults.Wrap(cosStore)
	for _, ids := range []*seal.Identities{mine, other} {
		if err := catalog.CheckDecrypts(ctx, fs, layout, man, ids); err != nil {
			t.Errorf("CheckDecrypts with %v: %v", ids, err)
		}
	}
	if n, g := fs.CountCalls(faults.OpGetRange, man.Snapshot.Object), fs.CountCalls(faults.OpGet, ""); n != 2 || g != 0 {
		t.Errorf("%d ranged reads and %d Gets for 2 checks; want one ranged read each, no Get", n, g)
	}
	// A store without Ranger: Get, closed early.
	if err := catalog.CheckDecrypts(ctx, plainStore{cosStore}, layout, man, mine); err != nil {
		t.Errorf("CheckDecrypts on a store without Ranger: %v", err)
	}

	for name, ids := range map[string]*seal.Identities{"stranger": stranger, "nil": nil, "empty": {}} {
		err := catalog.CheckDecrypts(ctx, fs, layout, man, ids)
		if !errors.Is(err, seal.ErrNoIdentity) || store.IsStoreError(err) {
			t.Fatalf("CheckDecrypts with %s identities: %v; want ErrNoIdentity", name, err)
		}
		for _, want := range []string{"c1", bk, catalog.StepCheckDecrypts, pubMine, pubOther} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		if name == "stranger" && !strings.Contains(err.Error(), pubStranger) {
			t.Errorf("error %q does not name the identity tried", err)
		}
		if name != "stranger" && !strings.Contains(err.Error(), "no identity mounted") {
			t.Errorf("error %q does not say no identity is mounted", err)
		}
	}

	// The store fails: not "undecryptable".
	fs.Inject(faults.Fault{Op: faults.OpGetRange, KeySuffix: man.Snapshot.Object, Kind: faults.ServerError})
	err := catalog.CheckDecrypts(ctx, fs, layout, man, mine)
	if err == nil || errors.Is(err, seal.ErrNoIdentity) || !store.IsStoreError(err) {
		t.Errorf("CheckDecrypts over a failing store: %v; want a store error, not ErrNoIdentity", err)
	}
	fs.Clear()
	gone := *man
	gone.Name = catalog.BackupName(time.Date(2026, 11, 25, 4, 0, 0, 0, time.UTC), catalog.KindScheduled)
	err = catalog.CheckDecrypts(ctx, fs, layout, &gone, mine)
	if !errors.Is(err, store.ErrNotFound) || errors.Is(err, seal.ErrNoIdentity) {
		t.Errorf("CheckDecrypts of a missing object: %v; want ErrNotFound", err)
	}

	// A plaintext backup: nothing to open, nothing read.
	plain := &catalog.Manifest{Format: catalog.ManifestFormat, ClusterID: "c1", Name: bk,
		Snapshot: catalog.SnapshotInfo{Object: catalog.SnapshotObject(objectio.CompressZstd, false)}}
	before := len(fs.Calls())
	if err := catalog.CheckDecrypts(ctx, fs, layout, plain, nil); err != nil || len(fs.Calls()) != before {
		t.Errorf("CheckDecrypts of a plaintext backup: %v, %d store calls; want nil and none", err, len(fs.Calls())-before)
	}
}

// A header longer than one ranged read (many recipients) is read in
// further chunks, and still opens.
func TestCheckDecryptsLongHeader(t *testing.T) {
	t.Parallel()
	rig := testfix.NewStoreRig(t)
	cosStore, layout := rig.Store, rig.Layout
	var pubs []string
	for range 60 { // about 100 bytes of header each: 6 KiB
		_, p := ageKey(t)
		pubs = append(pubs, p)
	}
	last, pubLast := ageKey(t)
	pubs = append(pubs, pubLast)
	bk := catalog.BackupName(time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC), catalog.KindScheduled)
	man := putSealed(t, cosStore, layout, "c2", bk, 64<<10, pubs...)
	fs := faults.Wrap(cosStore)
	if err := catalog.CheckDecrypts(context.Background(), fs, layout, man, last); err != nil {
		t.Fatalf("CheckDecrypts of a 61-recipient header: %v", err)
	}
	if n := fs.CountCalls(faults.OpGetRange, man.Snapshot.Object); n < 2 || n > 3 {
		t.Errorf("%d ranged reads for a header of about 6 KiB; want 2 or 3", n)
	}
}

// commitSealed stores an encrypted backup of cluster id taken at t (its
// snapshot object and its manifest, so List and Inventory see it
// committed) and returns the manifest.
func commitSealed(tb testing.TB, st store.Store, layout catalog.Layout, id string, t time.Time, pubs ...string) *catalog.Manifest {
	tb.Helper()
	m := putSealed(tb, st, layout, id, catalog.BackupName(t, catalog.KindScheduled), 8<<10, pubs...)
	m.StartedAt, m.FinishedAt, m.Snapshot.RawSHA256 = t, t, strings.Repeat("ab", 32)
	b, err := catalog.MarshalManifest(m)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := st.Put(context.Background(), layout.Key(id, m.Name, catalog.ManifestObject), bytes.NewReader(b)); err != nil {
		tb.Fatal(err)
	}
	return m
}

// TestListDecrypts: list --identity-file on real MinIO, four encrypted
// backups checked in parallel (two to the identity, one to a stranger
// only, one whose snapshot object is not age at all) and a plaintext one:
// each row's decrypt state is its own, the table says UNDECRYPTABLE and
// names the stranger's key; NewestEncrypted skips the newer plaintext
// backup. A store failure on one header makes that row unknown and List's
// error name the step, never "no identity opens it".
func TestListDecrypts(t *testing.T) {
	t.Parallel()
	rig := testfix.NewStoreRig(t)
	cosStore, layout := rig.Store, rig.Layout
	ctx := testfix.Context(t, time.Minute)
	mine, pubMine := ageKey(t)
	_, pubStranger := ageKey(t)
	t0 := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	const id = "c3"
	opens1 := commitSealed(t, cosStore, layout, id, t0, pubMine)
	stranger := commitSealed(t, cosStore, layout, id, t0.Add(time.Hour), pubStranger)
	opens2 := commitSealed(t, cosStore, layout, id, t0.Add(2*time.Hour), pubMine, pubStranger)
	garbled := commitSealed(t, cosStore, layout, id, t0.Add(3*time.Hour), pubMine)
	// The garbled one's snapshot: not an age file (same size: not damaged by the listing's check).
	if _, err := cosStore.Put(ctx, layout.Key(id, garbled.Name, garbled.Snapshot.Object), bytes.NewReader(bytes.Repeat([]byte{'z'}, int(garbled.Snapshot.StoredSize)))); err != nil {
		t.Fatal(err)
	}
	plain := &catalog.Manifest{Format: catalog.ManifestFormat, ClusterID: id, Name: catalog.BackupName(t0.Add(4*time.Hour), catalog.KindScheduled),
		Kind: catalog.KindScheduled, StartedAt: t0.Add(4 * time.Hour), FinishedAt: t0.Add(4 * time.Hour),
		Snapshot: catalog.SnapshotInfo{Object: catalog.SnapshotObject(objectio.CompressZstd, false), RawSHA256: strings.Repeat("ab", 32), StoredSize: 3}}
	for obj, body := range map[string][]byte{plain.Snapshot.Object: []byte("zst"), catalog.ManifestObject: must(catalog.MarshalManifest(plain))} {
		if _, err := cosStore.Put(ctx, layout.Key(id, plain.Name, obj), bytes.NewReader(body)); err != nil {
			t.Fatal(err)
		}
	}

	fs := faults.Wrap(cosStore)
	opts := prune.ListOptions{Store: fs, Layout: layout, ClusterID: id, Identities: mine, Now: t0.Add(5 * time.Hour), Policy: retention.DefaultPolicy()}
	start := time.Now()
	res, err := prune.List(ctx, opts)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if res.Err != nil {
		t.Fatalf("List: %v", res.Err)
	}
	t.Logf("list of 5 backups with header checks: %v", time.Since(start).Round(time.Millisecond))
	want := map[string]string{opens1.Name: prune.DecryptOpens, opens2.Name: prune.DecryptOpens,
		stranger.Name: prune.DecryptNoIdentity, garbled.Name: prune.DecryptDamaged, plain.Name: ""}
	for _, r := range res.Rows {
		got := ""
		if r.Decrypt != nil {
			got = r.Decrypt.State
		}
		if got != want[r.Name] {
			t.Errorf("backup %s: decrypt %+v, want state %q", r.Name, r.Decrypt, want[r.Name])
		}
	}
	if n := fs.CountCalls(faults.OpGetRange, ""); n != 4 {
		t.Errorf("%d ranged reads, want one per encrypted backup (4)", n)
	}
	var sb strings.Builder
	if err := output.RenderAll(&sb, output.FormatTable, res.Tables(), res.Rows); err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(sb.String()), " ")
	for _, w := range []string{"UNDECRYPTABLE", pubStranger, "encrypted object damaged"} {
		if !strings.Contains(flat, w) {
			t.Errorf("list's table lacks %q:\n%s", w, sb.String())
		}
	}
	if newest, err := catalog.NewestEncrypted(ctx, cosStore, layout, id); err != nil || newest == nil || newest.Name != garbled.Name {
		t.Errorf("NewestEncrypted: %+v, %v; want %s (the plaintext one is newer)", newest, err, garbled.Name)
	}

	// The store fails one header read: that row is unknown, List says why.
	fs.Inject(faults.Fault{Op: faults.OpGetRange, KeyContains: stranger.Name, Kind: faults.ServerError})
	res, err = prune.List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Err == nil || !strings.Contains(res.Err.Error(), catalog.StepCheckDecrypts) || errors.Is(res.Err, seal.ErrNoIdentity) {
		t.Errorf("List with a failing header read: err %v; want the step named, not ErrNoIdentity", res.Err)
	}
	for _, r := range res.Rows {
		if r.Name == stranger.Name && (r.Decrypt == nil || r.Decrypt.State != prune.DecryptUnknown) {
			t.Errorf("the row whose read failed: %+v, want unknown", r.Decrypt)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
