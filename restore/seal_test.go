package restore_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/restore/survivor"
)

// emptyDir fails unless dir does not exist or is empty.
func emptyDir(tb testing.TB, dir string) {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		tb.Fatal(err)
	}
	if len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		tb.Fatalf("%s holds %v: something was written", dir, names)
	}
}

// A backup encrypted to two recipients restores with either identity, and
// not with a third nor without any: that fails before anything is written,
// naming both recipients.
func TestRestoreEncryptedRecipients(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	want := testenv.PutKeys(t, cli, "/enc/", 50, 32)
	r := newStoreRig(t)
	const id = "enc-two"
	a, b, third := testfix.NewAgeKey(t), testfix.NewAgeKey(t), testfix.NewAgeKey(t)
	m := r.TakeEncrypted(t, c, id, testfix.RecipientsOf(t, a, b))
	ctx := testfix.Context(t, 3*time.Minute)
	opts := func(dir string, ids *seal.Identities) restore.Options {
		ic, _ := newCluster(t, 1, false)
		return restore.Options{Survivor: survivor.Backup{}, ClusterID: id, Store: r.Store, Layout: r.Layout, NoLive: true, Identities: ids,
			Targets:      restore.Targets{InitialCluster: ic, DataDir: filepath.Join(dir, "{name}.etcd")},
			BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Log: testfix.Logger(t)}
	}
	for name, ids := range map[string]*seal.Identities{"third identity": third.IDs, "no identity": nil} {
		dir := filepath.Join(t.TempDir(), "data")
		_, err := restore.Run(ctx, opts(dir, ids))
		var re *restore.Error
		if !errors.Is(err, seal.ErrNoIdentity) || !errors.As(err, &re) || re.Step() != restore.StepVerifyBackup || re.ClusterID != id {
			t.Fatalf("%s: want a no-identity error at %q, got %v", name, restore.StepVerifyBackup, err)
		}
		for _, p := range []string{a.Pub, b.Pub, id, m.Name} {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("%s: the error does not name %s: %v", name, p, err)
			}
		}
		emptyDir(t, dir)
	}
	// Either identity: the dry run streams, decrypts and reads the whole
	// database; the real run with the other is started and compared.
	o := opts(filepath.Join(t.TempDir(), "data"), b.IDs)
	o.DryRun = true
	res, err := restore.Run(ctx, o)
	if err != nil {
		t.Fatalf("dry run with the second identity: %v", err)
	}
	decrypted := false
	for _, ch := range res.Checks {
		decrypted = decrypted || ch.Name == restore.CheckDecrypt && ch.Status == restore.CheckPassed
	}
	if !decrypted {
		t.Fatalf("no passed %q check: %+v", restore.CheckDecrypt, res.Checks)
	}
	ic, ms := newCluster(t, 1, false)
	o = opts(filepath.Join(t.TempDir(), "data"), a.IDs)
	o.InitialCluster = ic
	res, err = restore.Run(ctx, o)
	if err != nil {
		t.Fatalf("restore with the first identity: %v", err)
	}
	nc := startRestored(t, testenv.V35, &res.Plan, ms, nil, false)
	got, _ := allKeys(t, nc.Client(t))
	sameKeys(t, got, want)

	// restore verify --backup decrypts with the identity, and refuses
	// without it before downloading.
	vo := restore.ClusterCheckOptions{ClusterID: id, Backup: m.Name, Store: r.Store, Layout: r.Layout, TempDir: t.TempDir(), Identities: b.IDs}
	vo.Etcd, vo.Timeout, vo.ExpectedKeys = testfix.EtcdConfig(nc), 30*time.Second, -1
	vo.Etcd.Endpoints = []string{ms[0].clientURL}
	if chk, err := restore.CheckCluster(ctx, vo); err != nil || chk.Snapshot == nil {
		t.Fatalf("verify --backup with the identity: %v", err)
	}
	vo.Identities = third.IDs
	if _, err := restore.CheckCluster(ctx, vo); !errors.Is(err, seal.ErrNoIdentity) || !strings.Contains(err.Error(), a.Pub) {
		t.Fatalf("verify --backup with a third identity: %v", err)
	}
}

// A flipped byte of an encrypted object is refused with the object named,
// as damaged/tampered, never as a store error; restore names the older
// good backup as it does for a corrupt one, and writes nothing.
func TestRestoreEncryptedTampered(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/enc/", 50, 32)
	r := newStoreRig(t)
	const id = "enc-tampered"
	k := testfix.NewAgeKey(t)
	older := r.TakeEncrypted(t, c, id, testfix.RecipientsOf(t, k))
	testenv.PutKeys(t, cli, "/enc2/", 10, 32)
	newest := r.TakeEncrypted(t, c, id, testfix.RecipientsOf(t, k))
	key := r.SnapshotKey(newest)
	ctx := testfix.Context(t, 2*time.Minute)
	for _, part := range []string{"payload", "header"} {
		rc, err := r.Store.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		orig, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		bad := bytes.Clone(orig)
		at := len(bad) / 2
		if part == "header" {
			at = bytes.Index(bad, []byte("\n---")) + 5 // the header's MAC
		}
		bad[at] ^= 0x01
		r.PutObject(t, key, bad)

		dir := filepath.Join(t.TempDir(), "data")
		ic, _ := newCluster(t, 1, false)
		_, err = restore.Run(ctx, restore.Options{Survivor: survivor.Backup{}, ClusterID: id, Store: r.Store, Layout: r.Layout, NoLive: true, Identities: k.IDs,
			Backup:       newest.Name, // without it restore falls back to the older one
			Targets:      restore.Targets{InitialCluster: ic, DataDir: filepath.Join(dir, "{name}.etcd")},
			BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Log: testfix.Logger(t)})
		var be *restore.BackupError
		if !errors.Is(err, seal.ErrTampered) || !errors.As(err, &be) {
			t.Fatalf("%s: want a tampered backup refused, got %v", part, err)
		}
		if !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "damaged/tampered: refusing it") {
			t.Errorf("%s: the error does not name the object as tampered: %v", part, err)
		}
		if be.Backup != newest.Name || be.Next != older.Name {
			t.Errorf("%s: refused %s, next %s; want %s, next %s", part, be.Backup, be.Next, newest.Name, older.Name)
		}
		emptyDir(t, dir)
		r.PutObject(t, key, orig)
	}
}

// The survivor snapshot restore commits during an incident is encrypted to
// the recipients of the cluster's newest encrypted backup when restore is
// given none (an encrypted fleet gets no plaintext backup from an
// incident), and to restore's own --encrypt-to when given. Without an
// identity that can read it back, restore refuses before the snapshot is
// taken: nothing is committed, nothing written.
func TestRestoreSurvivorEncrypted(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/surv/", 20, 16)
	r := newStoreRig(t)
	const id = "enc-survivor"
	a, b := testfix.NewAgeKey(t), testfix.NewAgeKey(t)
	r.TakeEncrypted(t, c, id, testfix.RecipientsOf(t, a))
	ctx := testfix.Context(t, 3*time.Minute)
	run := func(ids *seal.Identities, rs seal.Recipients) (string, error) {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "data")
		ic, _ := newCluster(t, 1, false)
		_, err := restore.Run(ctx, restore.Options{Survivor: survivor.Backup{}, ClusterID: id, Store: r.Store, Layout: r.Layout, Old: testfix.EtcdConfig(c),
			Identities: ids, Recipients: rs, ProbeTimeout: 3 * time.Second,
			Targets:      restore.Targets{InitialCluster: ic, DataDir: filepath.Join(dir, "{name}.etcd")},
			BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Log: testfix.Logger(t)})
		return dir, err
	}
	survivors := func() []*catalog.Manifest {
		t.Helper()
		listed, err := catalog.ListBackups(ctx, r.Store, r.Layout, id)
		if err != nil {
			t.Fatal(err)
		}
		var out []*catalog.Manifest
		for _, l := range listed {
			if l.Kind == catalog.KindPreRestore && l.Manifest != nil {
				out = append(out, l.Manifest)
			}
		}
		return out
	}

	// No identity: refused at the survivor step, nothing committed.
	dir, err := run(nil, seal.Recipients{})
	var re *restore.Error
	if !errors.Is(err, seal.ErrNoIdentity) || !errors.As(err, &re) || re.Step() != restore.StepSurvivor || !strings.Contains(err.Error(), a.Pub) {
		t.Fatalf("without an identity: want a no-identity error at %q naming %s, got %v", restore.StepSurvivor, a.Pub, err)
	}
	emptyDir(t, dir)
	if s := survivors(); len(s) != 0 {
		t.Fatalf("a survivor snapshot was committed although restore could not read it back: %s", s[0].Name)
	}

	// With the identity: the survivor is encrypted to the newest backup's
	// recipients, and restore reads it back.
	if _, err := run(a.IDs, seal.Recipients{}); err != nil {
		t.Fatalf("restore with the identity: %v", err)
	}
	s := survivors()
	if len(s) != 1 || !s[0].Encryption.Encrypted() || strings.Join(s[0].Encryption.Recipients, ",") != a.Pub || !seal.IsSealedKey(s[0].Snapshot.Object) {
		t.Fatalf("survivor snapshots: want one encrypted to %s, got %+v", a.Pub, s)
	}

	// Restore's own recipients win over the manifest's.
	time.Sleep(5 * time.Millisecond)
	if _, err := run(b.IDs, testfix.RecipientsOf(t, b)); err != nil {
		t.Fatalf("restore with --encrypt-to b: %v", err)
	}
	s = survivors()
	if len(s) != 2 || strings.Join(s[0].Encryption.Recipients, ",") != b.Pub {
		t.Fatalf("newest survivor: want it encrypted to %s, got %+v", b.Pub, s[0].Encryption)
	}
}

// restore v2 of an encrypted backup decrypts its v2 export with the
// identity, and without one refuses before writing a key, naming the
// recipients.
func TestRestoreV2Encrypted(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, EnableV2: true})
	v2 := testenv.PutV2Keys(t, c, 8)
	r := newStoreRig(t)
	const id = "enc-v2"
	a, other := testfix.NewAgeKey(t), testfix.NewAgeKey(t)
	m := r.TakeEncrypted(t, c, id, testfix.RecipientsOf(t, a))
	if m.V2 == nil || !seal.IsSealedKey(m.V2.Object) {
		t.Fatalf("the v2 export is not encrypted: %+v", m.V2)
	}
	nc := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, EnableV2: true})
	ctx := testfix.Context(t, time.Minute)
	opts := restore.V2Options{ClusterID: id, Store: r.Store, Layout: r.Layout, Backup: m.Name, Etcd: testfix.EtcdConfig(nc), Log: testfix.Logger(t)}
	for name, ids := range map[string]*seal.Identities{"no identity": nil, "another identity": other.IDs} {
		o := opts
		o.Identities = ids
		rep, err := restore.RestoreV2(ctx, o)
		if !errors.Is(err, seal.ErrNoIdentity) || !strings.Contains(err.Error(), a.Pub) {
			t.Fatalf("%s: want a no-identity error naming %s, got %v", name, a.Pub, err)
		}
		if rep != nil && rep.Created+rep.Updated != 0 {
			t.Fatalf("%s: keys were written: %+v", name, rep)
		}
		for k := range v2 {
			gr, err := testenv.V2HTTPClient(nc).Get(nc.Endpoints()[0] + "/v2/keys" + k + "?quorum=true")
			if err != nil {
				t.Fatal(err)
			}
			gr.Body.Close()
			if gr.StatusCode != http.StatusNotFound {
				t.Fatalf("%s: GET %s: %s; want 404: nothing may be written", name, k, gr.Status)
			}
		}
	}
	opts.Identities = a.IDs
	rep, err := restore.RestoreV2(ctx, opts)
	if err != nil || rep.Failed != 0 || rep.Keys != len(v2) {
		t.Fatalf("restore v2 with the identity: %+v, %v", rep, err)
	}
	for k, v := range v2 {
		if n := testenv.GetV2Key(t, nc, k); n == nil || n.Value != v {
			t.Fatalf("key %s = %+v, want %q", k, n, v)
		}
	}
}
