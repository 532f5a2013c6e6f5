package drill_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// plaintextOf decrypts and decompresses a backup's snapshot into a file,
// through objectio.Open (checked against the manifest).
func plaintextOf(tb testing.TB, r *storeRig, m *catalog.Manifest, ids *seal.Identities) string {
	tb.Helper()
	rd, err := objectio.Open(context.Background(), r.Store, r.SnapshotKey(m), objectio.Expect{
		StoredSize: m.Snapshot.StoredSize, StoredSHA256: m.Snapshot.StoredSHA256,
		RawSize: m.Snapshot.RawSize, RawSHA256: m.Snapshot.RawSHA256, Compression: m.Snapshot.Compression,
		Snapshot: true, Encrypted: true, Recipients: m.Recipients(), Identities: ids})
	if err != nil {
		tb.Fatal(err)
	}
	defer rd.Close()
	path := filepath.Join(tb.TempDir(), "snapshot.db")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(f, rd); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return path
}

// A drill of an encrypted backup needs the identity: without it, a clear
// error and nothing recorded; with it, it passes. A local plaintext copy
// (the drill after a backup) drills without downloading or any identity,
// and one whose sha256 is not the manifest's is refused.
func TestDrillEncrypted(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	fillDrillData(t, cli, 100)
	r := newStoreRig(t)
	const id = "enc-drill"
	k := testfix.NewAgeKey(t)
	m := r.TakeEncrypted(t, c, id, testfix.RecipientsOf(t, k))
	ctx := testfix.Context(t, 3*time.Minute)
	bin := testenv.DrillBinDir(t, testenv.V35)
	drillKey := r.Layout.Key(id, m.Name, catalog.DrillObject)

	o := drillOpts(t, r, id, bin)
	rec, err := drill.Run(ctx, o)
	var de *drill.Error
	if !errors.Is(err, seal.ErrNoIdentity) || !errors.As(err, &de) || de.Record != nil || rec != nil || !strings.Contains(err.Error(), k.Pub) {
		t.Fatalf("drill without identity: want a no-identity error and no record, got %v (record %v)", err, rec)
	}
	if keys := testfix.Keys(t, r.Store, drillKey); len(keys) > 0 {
		t.Fatalf("a drill without identity recorded %v", keys)
	}

	o.Identities = k.IDs
	if rec, err = drill.Run(ctx, o); err != nil || !rec.Passed {
		t.Fatalf("drill with the identity: %v (%+v)", err, rec)
	}

	// The drill after a backup: the plaintext it streamed.
	plain := plaintextOf(t, r, m, k.IDs)
	lo := drillOpts(t, r, id, bin)
	lo.Plaintext, lo.Manifest, lo.NoRecord = plain, m, true
	b, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err = drill.Run(ctx, lo); err != nil || !rec.Passed {
		t.Fatalf("drill of the plaintext copy: %v (%+v)", err, rec)
	}
	// Taken over (renamed into the drill's data dir), not copied.
	if _, err := os.Stat(plain); !os.IsNotExist(err) {
		t.Fatalf("the drill left the plaintext copy %s where it was (stat: %v): it copied it instead of taking it over", plain, err)
	}
	b[len(b)/3] ^= 0x01
	badPath := filepath.Join(t.TempDir(), "bad.db")
	if err := os.WriteFile(badPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	lo.Plaintext = badPath
	rec, err = drill.Run(ctx, lo)
	if err == nil || rec == nil || rec.Passed || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("drill of a plaintext copy that does not match the manifest: want refused, got %v (%+v)", err, rec)
	}
}
