package catalog

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
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
//
// Beside the backups, every other key the tool writes is defined here too
// (Layout.Classify tells them apart):
//
//	<prefix>/etcd-recovery-owner.json                          the prefix's ownership record (OwnerKey)
//	<prefix>/<cluster-id>/orphan.json                          a cluster's orphan marker (OrphanMarkerKey)
//	<prefix>/_staged/<cluster-id>/<backup>/snapshot.db         a plaintext copy staged for etcd-operator (StagedKey)
//	<prefix>/_journal/<cluster-id>/<first>-<last>.seg          a journal segment (JournalSegmentKey; internal/journal writes it)
//	<prefix>/_journal/<cluster-id>/gaps/<from>.json            a journal gap's record (JournalGapKey; fleet's journal writes it)
//	<prefix>/_journal/<cluster-id>/proofs/<backup>.json        a journal proof (JournalProofKey; drill.ProveJournal writes it)
//	<prefix>/_escrow/<cluster-id>/<address>.json.age           a cluster's escrow (EscrowKey; escrow.go)
//	<prefix>/_restores/<run>/...                               a namespace-wide restore's records (fleetrestore.go)
//	<prefix>/_replica/status.json                              a second site's copier status (ReplicaStatusKey; replica.go)
//	<prefix>/_undeletes/<cluster-id>/<run>[.start].json        an undelete's records (UndeleteRecordKey; undelete.go)
//
// The tool's own folders under the prefix start with '_', which no cluster
// id can (ValidateClusterID). Older versions staged copies under
// <prefix>/restore/ (legacyStagedDir): they are still listed, reported and
// deleted there, and "restore" stays a reserved cluster id. The ownership
// record keeps its key: it is an object directly under the prefix, one
// segment, where a backup key has three and a cluster id is only ever a
// folder (<prefix>/<id>/...), so no cluster's key can be it; its name stays
// reserved as a cluster id all the same, as before. The orphan marker stays
// in its cluster's folder: a backup folder name never parses as
// "orphan.json", so it cannot collide either, and deleting a cluster's
// folder takes it with it.

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
func SnapshotObject(c objectio.Compression, encrypted bool) string {
	name := SnapshotObjectZstd
	if c == objectio.CompressNone {
		name = SnapshotObjectRaw
	}
	return sealed(name, encrypted)
}

// V2Object is the v2 export's object name for a compression, with
// seal.Suffix when the backup is encrypted.
func V2Object(c objectio.Compression, encrypted bool) string {
	name := V2ObjectZstd
	if c == objectio.CompressNone {
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
		for _, c := range []objectio.Compression{objectio.CompressZstd, objectio.CompressNone} {
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

// reservedWhat says what each reserved name holds beside the clusters:
// the names older versions gave what the tool keeps under the prefix,
// still read. The tool's own folders today start with '_' (stagedDir,
// journalDir), which clusterIDRe refuses.
var reservedWhat = map[string]string{
	strings.TrimSuffix(legacyStagedDir, "/"): "the staged plaintext copies of restores via etcd-operator there (" + legacyStagedDir + ")",
	OwnerObject:                              "the prefix's ownership record there",
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

// Object names of the lifecycle records.
const (
	OwnerObject        = "etcd-recovery-owner.json"
	OrphanMarkerObject = "orphan.json"
)

// OwnerKey is the key of the ownership record of the layout's prefix.
func OwnerKey(l Layout) string { return l.RootPrefix() + OwnerObject }

// OrphanMarkerKey is the key of a cluster's orphan marker.
func OrphanMarkerKey(l Layout, clusterID string) string {
	return l.ClusterPrefix(clusterID) + OrphanMarkerObject
}

// The tool's folders under the root prefix. Each starts with '_', which
// no cluster id can; legacyStagedDir is where older versions staged
// copies (still read and cleaned; "restore" stays a reserved id).
const (
	stagedDir       = "_staged/"
	legacyStagedDir = "restore/"
	journalDir      = "_journal/"
)

// StagedPrefix is the key prefix of the staged copies of a cluster,
// ending in '/'; of every cluster when clusterID is empty. New copies are
// staged there; LegacyStagedPrefix is where older versions staged them.
func (l Layout) StagedPrefix(clusterID string) string {
	return l.underRoot(stagedDir, clusterID)
}

// LegacyStagedPrefix is StagedPrefix where older versions staged copies,
// <prefix>/restore/<cluster>/: still listed and pruned.
func (l Layout) LegacyStagedPrefix(clusterID string) string {
	return l.underRoot(legacyStagedDir, clusterID)
}

// StagedPrefixes are the prefixes staged copies of a cluster (every
// cluster when clusterID is empty) may be under: StagedPrefix, then
// LegacyStagedPrefix.
func (l Layout) StagedPrefixes(clusterID string) []string {
	return []string{l.StagedPrefix(clusterID), l.LegacyStagedPrefix(clusterID)}
}

// StagedKey is where a restore via etcd-operator stages the uncompressed
// snapshot of a backup: <prefix>/_staged/<cluster>/<backup>/snapshot.db.
func (l Layout) StagedKey(clusterID, backupName string) string {
	return l.StagedPrefix(clusterID) + backupName + "/" + SnapshotObjectRaw
}

// JournalPrefix is the key prefix of a cluster's journal segments, ending
// in '/'; of every cluster when clusterID is empty.
func (l Layout) JournalPrefix(clusterID string) string {
	return l.underRoot(journalDir, clusterID)
}

// journalSegRe is a journal segment's object name: the first and last
// revision it holds, zero-padded to 16 digits so names sort by revision.
var journalSegRe = regexp.MustCompile(`^(\d{16})-(\d{16})\.seg$`)

// JournalSegmentKey is the key of the journal segment of a cluster that
// holds revisions first to last:
// <prefix>/_journal/<cluster>/<first %016d>-<last %016d>.seg.
func (l Layout) JournalSegmentKey(clusterID string, first, last int64) string {
	return l.JournalPrefix(clusterID) + fmt.Sprintf("%016d-%016d.seg", first, last)
}

// journalGapsDir is the folder of a cluster's gap records inside its
// journal folder; journalGapRe a record's name (its first revision not
// captured, zero-padded to 16 digits).
const journalGapsDir = "gaps/"

var journalGapRe = regexp.MustCompile(`^(\d{16})\.json$`)

// JournalGapKey is the key of the record of a gap in a cluster's journal
// whose first revision not captured is from:
// <prefix>/_journal/<cluster>/gaps/<from %016d>.json. It is written
// create-only, once per gap; segments never match it (ListSegments reads
// KeyJournal keys only).
func (l Layout) JournalGapKey(clusterID string, from int64) string {
	return l.JournalGapsPrefix(clusterID) + fmt.Sprintf("%016d.json", from)
}

// JournalGapsPrefix is the folder of a cluster's gap records:
// <prefix>/_journal/<cluster>/gaps/.
func (l Layout) JournalGapsPrefix(clusterID string) string {
	return l.JournalPrefix(clusterID) + journalGapsDir
}

func (l Layout) underRoot(dir, clusterID string) string {
	if clusterID == "" {
		return l.RootPrefix() + dir
	}
	return l.RootPrefix() + dir + clusterID + "/"
}

// KeyKind is what a key is in the layout (Layout.Classify).
type KeyKind string

// Kinds of keys.
const (
	KeyUnknown      KeyKind = "unknown"       // not the tool's: left alone, and reported
	KeyBackup       KeyKind = "backup"        // an object of a backup folder
	KeyOwnerMarker  KeyKind = "owner marker"  // the prefix's ownership record
	KeyOrphanMarker KeyKind = "orphan marker" // a cluster's orphan marker
	KeyStaged       KeyKind = "staged copy"   // a plaintext copy staged for etcd-operator (either place)
	KeyJournal      KeyKind = "journal"       // a journal segment
	KeyJournalGap   KeyKind = "journal gap"   // a journal gap's record (JournalGapKey)
	KeyEscrow       KeyKind = "escrow"        // a cluster's escrow (EscrowKey); Name is its address
	KeyFleetRestore KeyKind = "restore run"   // a record of a namespace-wide restore (fleetrestore.go); Name is the run
	KeyUndelete     KeyKind = "undelete run"  // an undelete's start or end record (undelete.go); ClusterID and Name (the run)
)

// KeyInfo is a key classified by the layout.
type KeyInfo struct {
	Kind KeyKind
	// ClusterID: a backup's, an orphan marker's, a staged copy's or a
	// journal segment's cluster.
	ClusterID string
	// Name is the backup folder name of a backup's object, and of the
	// backup a staged copy was staged from (empty for an object directly
	// under the cluster's staged folder).
	Name string
	// Object is the object name inside a backup's folder.
	Object string
	// Time and BackupKind are a backup's (from its name).
	Time       time.Time
	BackupKind Kind
	// Legacy: a staged copy in the place older versions used
	// (LegacyStagedPrefix).
	Legacy bool
	// FirstRev and LastRev are a journal segment's revisions; FirstRev
	// is also a journal gap record's first revision not captured.
	FirstRev, LastRev int64
}

// Classify says what key is in the layout. Staged copies are any object
// under a cluster's staged folder (plaintext the tool put there), in
// either place, except, in the legacy place, an object of a backup folder
// directly under it (a backup of a cluster named "restore", written by a
// version that accepted the id): that one is unknown, never deleted as a
// staged copy. A journal key is a segment name under a valid cluster id,
// or a gap record's name in its gaps/ folder (KeyJournalGap); anything
// else under the journal folder is unknown. Keys outside the
// root prefix are unknown.
func (l Layout) Classify(key string) KeyInfo {
	unknown := KeyInfo{Kind: KeyUnknown}
	rest, found := strings.CutPrefix(key, l.RootPrefix())
	if !found || rest == "" {
		return unknown
	}
	if rest == OwnerObject {
		return KeyInfo{Kind: KeyOwnerMarker}
	}
	if r, ok := strings.CutPrefix(rest, stagedDir); ok {
		return stagedInfo(r, false)
	}
	if r, ok := strings.CutPrefix(rest, legacyStagedDir); ok {
		if isBackupObject(r) {
			return unknown
		}
		return stagedInfo(r, true)
	}
	if r, ok := strings.CutPrefix(rest, escrowDir); ok {
		return classifyEscrow(r)
	}
	if strings.HasPrefix(rest, replicaDir) {
		if rest == replicaDir+replicaStatusObject {
			return KeyInfo{Kind: KeyReplica}
		}
		return unknown
	}
	if strings.HasPrefix(rest, restoresDir) {
		k, ok := l.ParseFleetRestoreKey(key)
		if !ok {
			return unknown
		}
		return KeyInfo{Kind: KeyFleetRestore, ClusterID: k.Cluster, Name: k.Run, Time: k.Started}
	}
	if strings.HasPrefix(rest, undeletesDir) {
		cluster, run, _, ok := l.ParseUndeleteKey(key)
		if !ok {
			return unknown
		}
		return KeyInfo{Kind: KeyUndelete, ClusterID: cluster, Name: run}
	}
	if r, ok := strings.CutPrefix(rest, journalDir); ok {
		id, seg, ok := strings.Cut(r, "/")
		if pi, isProof := classifyJournalProof(id, seg); ok && isProof {
			return pi
		}
		if g, isGap := strings.CutPrefix(seg, journalGapsDir); ok && isGap {
			m := journalGapRe.FindStringSubmatch(g)
			if m == nil || ValidateClusterID(id) != nil {
				return unknown
			}
			from, err := strconv.ParseInt(m[1], 10, 64)
			if err != nil {
				return unknown
			}
			return KeyInfo{Kind: KeyJournalGap, ClusterID: id, FirstRev: from}
		}
		m := journalSegRe.FindStringSubmatch(seg)
		if !ok || m == nil || ValidateClusterID(id) != nil {
			return unknown
		}
		first, err1 := strconv.ParseInt(m[1], 10, 64)
		last, err2 := strconv.ParseInt(m[2], 10, 64)
		if err1 != nil || err2 != nil || first > last {
			return unknown
		}
		return KeyInfo{Kind: KeyJournal, ClusterID: id, FirstRev: first, LastRev: last}
	}
	if id, obj, ok := strings.Cut(rest, "/"); ok && obj == OrphanMarkerObject && ValidateClusterID(id) == nil {
		return KeyInfo{Kind: KeyOrphanMarker, ClusterID: id}
	}
	if pk, ok := l.ParseKey(key); ok {
		return KeyInfo{Kind: KeyBackup, ClusterID: pk.ClusterID, Name: pk.Name, Object: pk.Object, Time: pk.Time, BackupKind: pk.Kind}
	}
	return unknown
}

// stagedInfo is a staged copy from rest, its key under the staged folder:
// <cluster>/<backup>/...
func stagedInfo(rest string, legacy bool) KeyInfo {
	cluster, backup, _ := strings.Cut(rest, "/")
	backup, _, _ = strings.Cut(backup, "/")
	return KeyInfo{Kind: KeyStaged, ClusterID: cluster, Name: backup, Legacy: legacy}
}

// isBackupObject says whether rest, a key under the legacy staged folder
// without that folder, is <backup>/<object>: an object of a backup of a
// cluster named like the folder (an id now reserved, written by a version
// that accepted it), never a staged copy (<cluster>/<backup>/snapshot.db).
// It is left alone: deleting it would bypass manifest-first deletion and
// retention's guards.
func isBackupObject(rest string) bool {
	parts := strings.Split(rest, "/")
	if len(parts) != 2 || parts[1] == "" {
		return false
	}
	_, _, err := ParseBackupName(parts[0])
	return err == nil
}

// UnknownKeys are the keys of objs that Classify does not know, in listing
// order: reported by list, prune, delete and the orphan pass, never
// touched.
func UnknownKeys(l Layout, objs []store.ObjectInfo) []string {
	var out []string
	for _, o := range objs {
		if l.Classify(o.Key).Kind == KeyUnknown {
			out = append(out, o.Key)
		}
	}
	return out
}

// UnknownShown is how many unknown keys a table names; -o json has them all.
const UnknownShown = 5

// UnknownNote is the line a table shows for keys under the prefix that are
// not the tool's (Classify: unknown): how many, and the first few.
func UnknownNote(keys []string) string {
	shown := keys
	more := ""
	if len(keys) > UnknownShown {
		shown = keys[:UnknownShown]
		more = fmt.Sprintf(" (and %d more; -o json lists them all)", len(keys)-UnknownShown)
	}
	return fmt.Sprintf("WARNING: %d key(s) under the prefix are not in the tool's layout, left alone: %s%s", len(keys), strings.Join(shown, ", "), more)
}
