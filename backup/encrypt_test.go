package backup_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/backup/drilled"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/usage"
)

// ageHeader is how every age file starts.
const ageHeader = "age-encryption.org/v1\n"

// newIdentities returns n fresh age identities and their recipients.
func newIdentities(tb testing.TB, n int) ([]*age.X25519Identity, seal.Recipients) {
	tb.Helper()
	var ids []*age.X25519Identity
	var pubs []string
	for range n {
		id, err := age.GenerateX25519Identity()
		if err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, id)
		pubs = append(pubs, id.Recipient().String())
	}
	rs, err := seal.ParseRecipients(pubs)
	if err != nil {
		tb.Fatal(err)
	}
	return ids, rs
}

// putSecrets writes n keys shaped like Kubernetes secrets with random
// names and values, and returns every name and value: what must never be
// readable in an encrypted backup's objects.
func putSecrets(tb testing.TB, c *testenv.EtcdCluster, n int) []string {
	tb.Helper()
	cli := c.Client(tb)
	var needles []string
	for i := range n {
		var b [12]byte
		rand.Read(b[:])
		key := fmt.Sprintf("/registry/secrets/kube-system/token-%x", b[:6])
		val := fmt.Sprintf("sa-token-%d-%s", i, hex.EncodeToString(b[6:]))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cli.Put(ctx, key, val)
		cancel()
		if err != nil {
			tb.Fatal(err)
		}
		needles = append(needles, key, val)
	}
	return needles
}

// storedObjects returns every object of the backup folder, raw, as stored.
func (r *rig) storedObjects(tb testing.TB, m *catalog.Manifest) map[string][]byte {
	tb.Helper()
	ctx := context.Background()
	objs, err := r.Store.List(ctx, r.Layout.BackupPrefix(m.ClusterID, m.Name))
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string][]byte{}
	for _, o := range objs {
		rc, err := r.Store.Get(ctx, o.Key)
		if err != nil {
			tb.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			tb.Fatal(err)
		}
		out[o.Key] = b
	}
	return out
}

// found returns the needles that occur in any of the objects.
func found(objs map[string][]byte, needles []string) []string {
	var hits []string
	for _, n := range needles {
		for k, b := range objs {
			if bytes.Contains(b, []byte(n)) {
				hits = append(hits, n+" in "+filepath.Base(k))
				break
			}
		}
	}
	return hits
}

// open decrypts (with id) and decompresses a stored object.
func open(tb testing.TB, stored []byte, c objectio.Compression, id age.Identity) []byte {
	tb.Helper()
	pr, err := age.Decrypt(bytes.NewReader(stored), id)
	if err != nil {
		tb.Fatalf("decrypt: %v", err)
	}
	dr, err := objectio.NewDecoder(pr, c)
	if err != nil {
		tb.Fatal(err)
	}
	defer dr.Close()
	b, err := io.ReadAll(dr)
	if err != nil {
		tb.Fatalf("decrypt and decompress: %v", err)
	}
	return b
}

// A backup encrypted to two recipients: its data objects end in .age and
// are age files, readable with either identity (and not with a third),
// and none of the keys and values put into etcd (v3 and v2) appears in
// any stored object, with or without compression. The same backup
// unencrypted and uncompressed does show them: the grep can fail.
func TestBackupEncrypted(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, EnableV2: true})
	needles := putSecrets(t, c, 40)
	for k, v := range testenv.PutV2Keys(t, c, 20) {
		needles = append(needles, k, v)
	}
	ids, rs := newIdentities(t, 3)
	two := seal.MergeRecipients(mustRecipients(t, ids[0]), mustRecipients(t, ids[1]))
	if two.Len() != 2 || rs.Len() != 3 {
		t.Fatal("recipients")
	}
	for _, tc := range []struct {
		name     string
		compress objectio.Compression
		encrypt  bool
	}{
		{"plain-none", objectio.CompressNone, false},
		{"sealed-none", objectio.CompressNone, true},
		{"sealed-zstd", objectio.CompressZstd, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, c, nil)
			opts := r.Options(t, "enc-"+tc.name)
			opts.Compression, opts.V2 = tc.compress, backup.V2On
			if tc.encrypt {
				opts.Recipients = two
			}
			res, err := backup.Run(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			m := res.Manifest
			objs := r.storedObjects(t, m)
			hits := found(objs, needles)
			if !tc.encrypt {
				// The control: plaintext objects show the data.
				if len(hits) < len(needles)/2 || m.Encryption != nil || strings.HasSuffix(m.Snapshot.Object, seal.Suffix) {
					t.Fatalf("unencrypted backup: %d of %d needles found (want most), encryption %+v, object %s",
						len(hits), len(needles), m.Encryption, m.Snapshot.Object)
				}
				return
			}
			if len(hits) != 0 {
				t.Fatalf("an encrypted backup's stored objects show %d secrets, e.g. %v", len(hits), hits[:min(3, len(hits))])
			}
			if !m.Encrypted() || !slices.Equal(m.Recipients(), two.Strings()) {
				t.Fatalf("manifest encryption %+v, want recipients %v", m.Encryption, two.Strings())
			}
			if want := catalog.SnapshotObject(tc.compress, true); m.Snapshot.Object != want || m.V2 == nil || m.V2.Object != catalog.V2Object(tc.compress, true) {
				t.Fatalf("objects %s, %+v; want %s and the v2 export, both .age", m.Snapshot.Object, m.V2, want)
			}
			for _, obj := range []struct {
				name, sum string
				size      int64
			}{{m.Snapshot.Object, m.Snapshot.StoredSHA256, m.Snapshot.StoredSize}, {m.V2.Object, m.V2.StoredSHA256, m.V2.StoredSize}} {
				b, ok := objs[r.Layout.Key(m.ClusterID, m.Name, obj.name)]
				if !ok {
					t.Fatalf("%s not stored", obj.name)
				}
				if !bytes.HasPrefix(b, []byte(ageHeader)) {
					t.Errorf("%s does not start with the age header: %q", obj.name, b[:min(len(b), 24)])
				}
				if s := sha256.Sum256(b); hex.EncodeToString(s[:]) != obj.sum || int64(len(b)) != obj.size {
					t.Errorf("%s: stored sha256/size in the manifest are not the ciphertext's", obj.name)
				}
			}
			// The manifest stays readable without any secret.
			if _, err := catalog.LoadManifest(context.Background(), r.Store, r.Layout, m.ClusterID, m.Name); err != nil {
				t.Fatalf("manifest of an encrypted backup: %v", err)
			}
			snap := objs[r.Layout.Key(m.ClusterID, m.Name, m.Snapshot.Object)]
			for i, id := range ids[:2] {
				raw := open(t, snap, tc.compress, id)
				if int64(len(raw)) != m.Snapshot.RawSize+32 {
					t.Fatalf("identity %d: %d bytes decrypted, want %d and etcd's trailer", i, len(raw), m.Snapshot.RawSize)
				}
				if s := sha256.Sum256(raw[:m.Snapshot.RawSize]); hex.EncodeToString(s[:]) != m.Snapshot.RawSHA256 {
					t.Fatalf("identity %d: the decrypted database does not hash to the manifest's raw sha256", i)
				}
				if len(found(map[string][]byte{"snapshot": raw}, needles[:80])) == 0 {
					t.Fatalf("identity %d: the decrypted snapshot holds none of the keys put", i)
				}
			}
			if _, err := age.Decrypt(bytes.NewReader(snap), ids[2]); err == nil {
				t.Fatal("a third identity decrypted the backup")
			}
		})
	}
}

func mustRecipients(tb testing.TB, id *age.X25519Identity) seal.Recipients {
	tb.Helper()
	rs, err := seal.ParseRecipients([]string{id.Recipient().String()})
	if err != nil {
		tb.Fatal(err)
	}
	return rs
}

// --require-encryption without a recipient is a usage error before
// anything is contacted (no store, no etcd needed).
func TestBackupRequireEncryption(t *testing.T) {
	t.Parallel()
	_, rs := newIdentities(t, 1)
	opts := backup.Options{ClusterID: "req", RequireEncryption: true}
	err := opts.ValidateTemplate()
	if !usage.Is(err) || !strings.Contains(err.Error(), "--require-encryption") {
		t.Fatalf("ValidateTemplate: %v; want a usage error naming --require-encryption", err)
	}
	_, err = backup.Run(context.Background(), opts)
	var be *backup.Error
	if !errors.As(err, &be) || be.Step() != backup.StepValidate || !usage.Is(err) {
		t.Fatalf("Run: %v; want a usage error at step validate", err)
	}
	opts.Recipients = rs
	if err := opts.ValidateTemplate(); err != nil {
		t.Fatalf("with a recipient: %v", err)
	}
}

// The drill after an encrypted backup gets the plaintext the backup
// streamed: a 0600 file in a 0700 dir under ScratchDir whose database
// hashes to the manifest's raw sha256; it is gone when Run returns, after
// a drill that passed, failed or was cancelled. Unencrypted backups (and
// runs without a drill) write nothing there.
func TestBackupEncryptedDrillPlaintext(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/pods/", 200, 512)
	_, rs := newIdentities(t, 2)
	for _, tc := range []struct {
		name    string
		encrypt bool
		drill   bool
		cancel  bool
		fail    bool
	}{
		{name: "sealed-passed", encrypt: true, drill: true},
		{name: "sealed-failed", encrypt: true, drill: true, fail: true},
		{name: "sealed-cancelled", encrypt: true, drill: true, cancel: true},
		{name: "sealed-no-drill", encrypt: true},
		{name: "plain-drill", drill: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, c, nil)
			scratch := t.TempDir()
			opts := r.Options(t, "plain-"+tc.name)
			opts.ScratchDir = scratch
			if tc.encrypt {
				opts.Recipients = rs
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls := 0
			var hook drilled.Drill
			if tc.drill {
				hook = func(ctx context.Context, m *catalog.Manifest, plaintext string) (*catalog.DrillRecord, error) {
					calls++
					if !tc.encrypt {
						if plaintext != "" {
							t.Errorf("unencrypted backup: drill got a plaintext copy %s", plaintext)
						}
						return nil, errors.New("not drilled")
					}
					checkPlaintext(t, scratch, plaintext, m)
					switch {
					case tc.cancel:
						cancel()
						return nil, ctx.Err()
					case tc.fail:
						return nil, errors.New("drill failed")
					}
					return &catalog.DrillRecord{Backup: m.Name, Passed: true}, nil
				}
			}
			// backup --drill's composition, or the backup alone.
			var (
				committed bool
				err       error
			)
			if tc.drill {
				res, rerr := drilled.Run(ctx, opts, hook)
				committed, err = res != nil, rerr
			} else {
				res, rerr := backup.Run(ctx, opts)
				committed, err = res != nil, rerr
			}
			if !committed {
				t.Fatalf("no committed backup: %v", err)
			}
			if tc.drill && calls != 1 {
				t.Fatalf("drill called %d times", calls)
			}
			if (err == nil) != (!tc.fail && !tc.cancel && tc.encrypt || !tc.drill) {
				t.Fatalf("Run: %v", err)
			}
			left, rerr := os.ReadDir(scratch)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if len(left) != 0 {
				t.Fatalf("%s holds %d entries after the run (e.g. %s): the plaintext copy must be removed", scratch, len(left), left[0].Name())
			}
		})
	}
}

func checkPlaintext(t *testing.T, scratch, path string, m *catalog.Manifest) {
	t.Helper()
	if path == "" || filepath.Dir(filepath.Dir(path)) != scratch {
		t.Fatalf("plaintext copy %q, want a file in a directory of %s", path, scratch)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Errorf("plaintext copy %v in a dir %v; want 0600 in 0700", fi.Mode(), di.Mode())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b[:min(int64(len(b)), m.Snapshot.RawSize)])
	if int64(len(b)) != m.Snapshot.RawSize+32 || hex.EncodeToString(sum[:]) != m.Snapshot.RawSHA256 ||
		!bytes.Equal(b[len(b)-32:], sum[:]) {
		t.Errorf("plaintext copy: %d bytes, database sha256 %x; manifest %d bytes, %s", len(b), sum, m.Snapshot.RawSize, m.Snapshot.RawSHA256)
	}
}

// The write fault rows hold with encryption on: a stalled upload, a
// vanished object and a 5xx on the manifest leave no committed backup and
// nothing behind.
func TestBackupEncryptedStoreFaults(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 3, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/big/", 600, 8<<10) // ~5 MiB
	_, rs := newIdentities(t, 2)
	sealedSnap := catalog.SnapshotObject(objectio.CompressZstd, true)
	for _, tc := range []struct {
		name     string
		fault    faults.Fault
		wantStep string
		wantErr  error
	}{
		{"stall-mid-part", faults.Fault{Op: faults.OpPut, KeySuffix: sealedSnap, Kind: faults.Stall, After: 1 << 20, Delay: time.Second, Times: 1},
			backup.StepUpload, store.ErrStalled},
		{"object-vanishes", faults.Fault{Op: faults.OpPut, KeySuffix: sealedSnap, Kind: faults.Vanish}, backup.StepObjects, nil},
		{"5xx-on-manifest", faults.Fault{Op: faults.OpPut, KeySuffix: catalog.ManifestObject, Kind: faults.ServerError}, backup.StepManifest, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, c, nil)
			fs := faults.Wrap(r.Store)
			fs.Inject(tc.fault)
			id := "encfault-" + tc.name
			opts := r.Options(t, id)
			opts.Store, opts.Recipients, opts.ScratchDir = fs, rs, t.TempDir()
			hook := func(context.Context, *catalog.Manifest, string) (*catalog.DrillRecord, error) {
				t.Error("a drill ran after a failed backup")
				return nil, nil
			}
			res, err := drilled.Run(context.Background(), opts, hook)
			var be *backup.Error
			if res != nil || !errors.As(err, &be) || be.Step() != tc.wantStep || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("Run: %v (result %v); want a failure at step %q", err, res != nil, tc.wantStep)
			}
			if n := fs.CountCalls(faults.OpPut, sealedSnap); n != 1 {
				t.Errorf("%d snapshot uploads, want 1", n)
			}
			r.assertNothingStored(t, id)
			if left, _ := os.ReadDir(opts.ScratchDir); len(left) != 0 {
				t.Errorf("the plaintext copy of a failed backup was left in %s", opts.ScratchDir)
			}
		})
	}
}
