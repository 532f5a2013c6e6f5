package catalog

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/seal"
)

// Object layout in the bucket (documented in docs/object-layout.md):
//
//	<prefix>/<cluster-id>/<time>-<kind>/snapshot.db.zst   the v3 snapshot (snapshot.db with --compress none)
//	<prefix>/<cluster-id>/<time>-<kind>/v2.json.zst       the v2 keyspace export (absent when skipped)
//	<prefix>/<cluster-id>/<time>-<kind>/manifest.json     written last: the backup exists once this does
//	<prefix>/<cluster-id>/<time>-<kind>/started           written first: makes an in-flight folder visible
//
// An encrypted backup's data objects carry age's suffix (seal.Suffix):
// snapshot.db.zst.age, v2.json.zst.age; its manifest, started marker and
// drill record stay plaintext. The manifest names each object, so readers
// take the name from it and read both forms.
//
// <time> is UTC with millisecond precision in a fixed-width form
// (20261122T031500.123Z), so names sort lexically in time order. Backups
// taken by this version add a random suffix to the folder name,
// <time>-<kind>-<8 hex digits> (NewBackupName), so that two runs started in
// the same millisecond, in one process or many, never share a folder; names
// without the suffix (older backups) still parse.

// Kind says why a backup was taken. Retention treats each kind differently.
type Kind string

const (
	KindScheduled  Kind = "scheduled"   // the CronJob, three times a day
	KindUpdate     Kind = "update"      // the pre-update Job before a master update
	KindManual     Kind = "manual"      // taken by hand; never deleted automatically
	KindPreRestore Kind = "pre-restore" // survivor snapshot taken by restore; never deleted automatically
)

// Kinds lists every valid kind.
var Kinds = []Kind{KindScheduled, KindUpdate, KindManual, KindPreRestore}

// ParseKind validates a kind name.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown backup kind %q (want one of scheduled, update, manual, pre-restore)", s)
}

// Object names inside a backup's folder.
const (
	ManifestObject     = "manifest.json"
	SnapshotObjectZstd = "snapshot.db.zst"
	SnapshotObjectRaw  = "snapshot.db"
	V2ObjectZstd       = "v2.json.zst"
	V2ObjectRaw        = "v2.json"
	// StartedObject is the first object a backup writes (a few bytes: the
	// start time and the tool's version). It makes the folder visible to
	// prune before any upload exists, so an upload leaked by a killed run
	// (which some stores list only under its exact key) is found under
	// the folder's exact keys and aborted.
	StartedObject = "started"
)

// SnapshotObject is the snapshot's object name for a compression, with
// seal.Suffix when the backup is encrypted.
func SnapshotObject(c Compression, encrypted bool) string {
	name := SnapshotObjectZstd
	if c == CompressNone {
		name = SnapshotObjectRaw
	}
	return sealed(name, encrypted)
}

// V2Object is the v2 export's object name for a compression, with
// seal.Suffix when the backup is encrypted.
func V2Object(c Compression, encrypted bool) string {
	name := V2ObjectZstd
	if c == CompressNone {
		name = V2ObjectRaw
	}
	return sealed(name, encrypted)
}

func sealed(name string, encrypted bool) string {
	if encrypted {
		return seal.ObjectKey(name)
	}
	return name
}

// DataObjects are every data object name a backup may write: both
// compressions, plain and encrypted (for a folder without a manifest).
func DataObjects() []string {
	var out []string
	for _, enc := range []bool{false, true} {
		for _, c := range []Compression{CompressZstd, CompressNone} {
			out = append(out, SnapshotObject(c, enc), V2Object(c, enc))
		}
	}
	return out
}

// TimeLayout is the layout of the time part of a backup name.
const TimeLayout = "20060102T150405.000Z"

var (
	clusterIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)
	// The kind is matched lazily so that "pre-restore-0a1b2c3d" splits into
	// the kind "pre-restore" and the suffix; kinds never end in a dash and
	// eight hex digits, so the split is unambiguous.
	backupNameRe = regexp.MustCompile(`^(\d{8}T\d{6}\.\d{3}Z)-([a-z]+(?:-[a-z]+)*?)(?:-([0-9a-f]{8}))?$`)
)

// ValidateClusterID rejects ids that would escape or break the layout, and
// the reserved names (ReservedClusterIDs): the folders and objects the
// layout keeps beside the clusters under the prefix.
func ValidateClusterID(id string) error {
	if !clusterIDRe.MatchString(id) {
		return fmt.Errorf("invalid cluster id %q: want letters, digits, '.', '_' or '-', not starting with a symbol", id)
	}
	if slices.Contains(ReservedClusterIDs(), id) {
		return fmt.Errorf("invalid cluster id %q: a reserved name: the layout keeps %s under the prefix (reserved: %s)",
			id, reservedWhat[id], strings.Join(ReservedClusterIDs(), ", "))
	}
	return nil
}

// reservedWhat says what each reserved name holds beside the clusters.
var reservedWhat = map[string]string{
	strings.TrimSuffix(stagedDir, "/"): "the staged plaintext copies of restores via etcd-operator there (" + stagedDir + ")",
	OwnerObject:                        "the prefix's ownership record there",
}

// ReservedClusterIDs are the names the layout uses directly under the
// prefix, beside the cluster folders, sorted: never a cluster id, so a
// listing of the prefix never reads them as a cluster, and a cluster's
// backups never land where prune deletes staged copies.
func ReservedClusterIDs() []string {
	out := make([]string, 0, len(reservedWhat))
	for id := range reservedWhat {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// BackupName returns the folder name of a backup taken at t, without the
// unique suffix (the form older versions wrote). Backups take
// NewBackupName.
func BackupName(t time.Time, kind Kind) string {
	return t.UTC().Format(TimeLayout) + "-" + string(kind)
}

// NewBackupName returns a fresh, unique folder name for a backup taken at
// t: BackupName plus "-" and 8 random hex digits (crypto/rand), so names
// still sort by time first and concurrent runs never collide.
func NewBackupName(t time.Time, kind Kind) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms; never fall
		// back to a guessable name silently.
		panic("backup: crypto/rand: " + err.Error())
	}
	return BackupName(t, kind) + "-" + hex.EncodeToString(b[:])
}

// ParseBackupName splits a backup folder name into its time and kind. It
// accepts names with and without the unique suffix.
func ParseBackupName(name string) (time.Time, Kind, error) {
	m := backupNameRe.FindStringSubmatch(name)
	if m == nil {
		return time.Time{}, "", fmt.Errorf("not a backup name: %q", name)
	}
	t, err := time.Parse(TimeLayout, m[1])
	if err != nil {
		return time.Time{}, "", fmt.Errorf("not a backup name: %q: %w", name, err)
	}
	k, err := ParseKind(m[2])
	if err != nil {
		return time.Time{}, "", fmt.Errorf("not a backup name: %q: %w", name, err)
	}
	return t, k, nil
}

// Layout maps clusters and backups to object keys under a prefix.
type Layout struct {
	Prefix string // may be empty; no leading or trailing slash needed
}

func (l Layout) clean() string { return strings.Trim(l.Prefix, "/") }

// ClusterPrefix is the key prefix holding every backup of a cluster, ending in '/'.
func (l Layout) ClusterPrefix(clusterID string) string {
	if p := l.clean(); p != "" {
		return p + "/" + clusterID + "/"
	}
	return clusterID + "/"
}

// RootPrefix is the key prefix holding every cluster, ending in '/' (empty when there is no prefix).
func (l Layout) RootPrefix() string {
	if p := l.clean(); p != "" {
		return p + "/"
	}
	return ""
}

// BackupPrefix is the folder of one backup, ending in '/'.
func (l Layout) BackupPrefix(clusterID, name string) string {
	return l.ClusterPrefix(clusterID) + name + "/"
}

// Key is the key of object obj inside a backup's folder.
func (l Layout) Key(clusterID, name, obj string) string {
	return l.BackupPrefix(clusterID, name) + obj
}

// ParsedKey is an object key split by the layout.
type ParsedKey struct {
	ClusterID string
	Name      string // backup folder name
	Object    string // object name inside the folder
	Time      time.Time
	Kind      Kind
}

// ParseKey splits a key under the layout's root. ok is false for keys that
// do not belong to the layout (they are never touched by retention).
func (l Layout) ParseKey(key string) (ParsedKey, bool) {
	rest, found := strings.CutPrefix(key, l.RootPrefix())
	if !found {
		return ParsedKey{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || ValidateClusterID(parts[0]) != nil || parts[2] == "" {
		return ParsedKey{}, false
	}
	t, k, err := ParseBackupName(parts[1])
	if err != nil {
		return ParsedKey{}, false
	}
	return ParsedKey{ClusterID: parts[0], Name: parts[1], Object: path.Base(parts[2]), Time: t, Kind: k}, true
}
