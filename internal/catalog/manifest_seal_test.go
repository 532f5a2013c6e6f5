package catalog

import (
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
)

// A manifest's encryption must agree with its object names: an encrypted
// backup's objects end in .age, a plaintext one's do not, and the
// recipients are well formed. Old manifests (no encryption, plain names)
// read as before.
func TestManifestEncryptionConsistency(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := seal.ParseRecipients([]string{id.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	base := func(obj string, enc *seal.Info) *Manifest {
		return &Manifest{Format: ManifestFormat, ClusterID: "c", Name: "n", Encryption: enc,
			Snapshot: SnapshotInfo{Object: obj, RawSHA256: "ab"}}
	}
	for _, tc := range []struct {
		name string
		m    *Manifest
		want string
	}{
		{"plain", base(SnapshotObject(objectio.CompressZstd, false), nil), ""},
		{"sealed", base(SnapshotObject(objectio.CompressZstd, true), seal.NewInfo(rs)), ""},
		{"sealed-none", base(SnapshotObject(objectio.CompressNone, true), seal.NewInfo(rs)), ""},
		{"sealed-object-no-info", base("snapshot.db.zst.age", nil), "no encryption"},
		{"info-plain-object", base("snapshot.db.zst", seal.NewInfo(rs)), "does not end in .age"},
		{"bad-recipient", base("snapshot.db.zst.age", &seal.Info{Format: seal.Format, Recipients: []string{"age1nope"}}), "age1nope"},
		{"unknown-format", base("snapshot.db.zst.age", &seal.Info{Format: "gpg", Recipients: rs.Strings()}), "gpg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := MarshalManifest(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			m, err := UnmarshalManifest(b)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("UnmarshalManifest: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("UnmarshalManifest: %v; want an error naming %q", err, tc.want)
			case tc.want == "" && m.Encrypted() != (tc.m.Encryption != nil):
				t.Fatalf("Encrypted() %v", m.Encrypted())
			}
		})
	}
	if got := SnapshotObject(objectio.CompressZstd, true); got != "snapshot.db.zst.age" {
		t.Errorf("sealed snapshot object %q", got)
	}
	if got := V2Object(objectio.CompressZstd, true); got != "v2.json.zst.age" {
		t.Errorf("sealed v2 object %q", got)
	}
	if n := len(DataObjects()); n != 8 {
		t.Errorf("%d data object names, want 8 (2 kinds x 2 compressions x plain/sealed)", n)
	}
}
