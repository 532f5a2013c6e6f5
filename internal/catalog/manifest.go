package catalog

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
)

// ManifestFormat is the manifest format version this build writes. Readers
// refuse manifests with a newer format.
const ManifestFormat = 1

// Manifest describes one committed backup. It is written last: a backup
// exists only once its manifest does.
type Manifest struct {
	Format     int       `json:"format"`
	ClusterID  string    `json:"clusterID"`
	Name       string    `json:"name"`
	Kind       Kind      `json:"kind"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`

	Source         Member `json:"source"`
	ServerVersion  string `json:"serverVersion"`
	ClusterVersion string `json:"clusterVersion,omitempty"`

	// RevisionBefore/After are the source member's revision read just before
	// and just after the snapshot stream.
	RevisionBefore int64 `json:"revisionBefore"`
	RevisionAfter  int64 `json:"revisionAfter"`

	Snapshot SnapshotInfo `json:"snapshot"`
	V2       *V2Info      `json:"v2,omitempty"`
	// V2Skipped says why there is no v2 export (v2 off, or not served).
	V2Skipped string `json:"v2Skipped,omitempty"`

	// Encryption is set when the backup's objects are age-encrypted (keys end in seal.Suffix, ".age").
	// It holds the recipients' public keys only; nil for plaintext backups.
	Encryption *seal.Info `json:"encryption,omitempty"`

	// Lock is the object-lock retention the backup's objects were written
	// with (backup --lock-mode; lock.go); nil when none was asked for.
	// Readers that predate it ignore it.
	Lock *ManifestLock `json:"lock,omitempty"`

	// Escrow is what a restore needs besides the data (escrow.go): the
	// escrow this backup names, or why there is none. Nil for a backup
	// written before escrow existed; readers that predate it ignore it.
	Escrow *EscrowRef `json:"escrow,omitempty"`

	ToolVersion string `json:"toolVersion"`
}

// Member identifies an etcd member.
type Member struct {
	Name     string `json:"name"`
	ID       string `json:"id"` // hex, as etcdctl prints it
	Endpoint string `json:"endpoint"`
}

// SnapshotInfo describes the v3 snapshot object.
type SnapshotInfo struct {
	Object      string               `json:"object"` // object name inside the backup folder
	Compression objectio.Compression `json:"compression"`
	// RawSize and RawSHA256 are of the bbolt database itself; etcd's trailing
	// sha256 equals RawSHA256 and was checked while streaming.
	RawSize   int64  `json:"rawSize"`
	RawSHA256 string `json:"rawSHA256"`
	// The stored object is the stream etcdctl would save (database followed
	// by etcd's 32-byte sha256), compressed.
	StoredSize   int64  `json:"storedSize"`
	StoredSHA256 string `json:"storedSHA256"`
}

// V2Info describes the v2 keyspace export object.
type V2Info struct {
	Object       string               `json:"object"`
	Compression  objectio.Compression `json:"compression"`
	Keys         int                  `json:"keys"` // leaf keys
	Dirs         int                  `json:"dirs"`
	EtcdIndex    uint64               `json:"etcdIndex"`
	SHA256       string               `json:"sha256"` // of the uncompressed JSON export
	StoredSize   int64                `json:"storedSize"`
	StoredSHA256 string               `json:"storedSHA256"`
}

// Revision is the revision the backup restores to (the revision before the
// stream is a lower bound; the snapshot holds at least that).
func (m *Manifest) Revision() int64 { return m.RevisionBefore }

// Encrypted reports whether the backup's objects are age-encrypted.
func (m *Manifest) Encrypted() bool { return m.Encryption.Encrypted() }

// Recipients are the public keys the backup is encrypted to (nil when
// it is not).
func (m *Manifest) Recipients() []string {
	if !m.Encrypted() {
		return nil
	}
	return m.Encryption.Recipients
}

// checkEncryption checks that the encryption entry is well formed and
// agrees with the object names: encrypted objects end in seal.Suffix, plain
// ones do not, so a reader never feeds ciphertext to zstd or the reverse.
func (m *Manifest) checkEncryption() error {
	enc := m.Encrypted()
	if m.Encryption != nil && (enc || len(m.Encryption.Recipients) > 0) {
		if err := m.Encryption.Validate(); err != nil {
			return err
		}
	}
	objs := []string{m.Snapshot.Object}
	if m.V2 != nil {
		objs = append(objs, m.V2.Object)
	}
	for _, o := range objs {
		switch sealed := seal.IsSealedKey(o); {
		case enc && !sealed:
			return fmt.Errorf("object %s of an encrypted backup does not end in %s", o, seal.Suffix)
		case !enc && sealed:
			return fmt.Errorf("object %s ends in %s but the manifest records no encryption", o, seal.Suffix)
		}
	}
	return nil
}

// MarshalManifest encodes a manifest.
func MarshalManifest(m *Manifest) ([]byte, error) {
	return json.MarshalIndent(m, "", "  ")
}

// UnmarshalManifest decodes and checks a manifest.
func UnmarshalManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if m.Format < 1 || m.Format > ManifestFormat {
		return nil, fmt.Errorf("manifest: format %d is not supported by this build (max %d): upgrade etcd-recovery", m.Format, ManifestFormat)
	}
	if m.ClusterID == "" || m.Name == "" || m.Snapshot.Object == "" || m.Snapshot.RawSHA256 == "" {
		return nil, fmt.Errorf("manifest: missing required fields")
	}
	if err := m.checkEncryption(); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if err := m.Escrow.Validate(); err != nil {
		// Data first: an escrow reference this build cannot use (a future
		// state, a malformed ref) makes the escrow not usable, never the
		// data backup unreadable.
		m.Escrow = &EscrowRef{State: EscrowMissing, BreakGlass: m.Escrow.BreakGlass, Certs: m.Escrow.Certs,
			Problems: append([]string{fmt.Sprintf("the manifest's escrow reference is not valid (%v): the escrow is not usable by this build", err)}, m.Escrow.Problems...)}
	}
	return &m, nil
}

// MaxManifestBytes bounds a manifest (and the ownership and orphan
// records): a few KiB as written; anything larger is not one of the
// tool's and reads as damaged.
const MaxManifestBytes = 1 << 20

// maxSmallRecordBytes bounds a journal gap record, as a manifest.
const maxSmallRecordBytes = MaxManifestBytes
