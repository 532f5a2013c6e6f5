package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
)

// A journal proof (the journal is proven continuously, so a restore never finds out too late) is the record that
// the journal between two full backups rebuilds the second: full backup
// Base plus the journal's events up to Target's revision, built offline,
// hashes (etcd's HashKV, at the same compact revision) as Target does.
// drill.ProveJournal makes it; restore reads it to withdraw a window whose
// proof failed; the exporter reports the newest.
//
//	<prefix>/_journal/<cluster-id>/proofs/<target backup>.json   a journal proof (JournalProofKey)

// journalProofDir is the proofs' folder under a cluster's journal folder.
const journalProofDir = "proofs/"

// JournalProofFormat is the version of the proof record's format.
const JournalProofFormat = 1

// Verdicts of a journal proof. Only passed and failed are ever recorded:
// an inconclusive proof (a store error, a deadline) records nothing.
const (
	ProofPassed       = "passed"
	ProofFailed       = "failed"
	ProofInconclusive = "inconclusive"
)

// KeyJournalProof is a journal proof record (Layout.JournalProofKey).
const KeyJournalProof KeyKind = "journal proof"

// JournalProofPrefix is the key prefix of a cluster's journal proofs,
// ending in '/'.
func (l Layout) JournalProofPrefix(clusterID string) string {
	return l.JournalPrefix(clusterID) + journalProofDir
}

// JournalProofKey is the key of the proof of the journal before backup
// target: <prefix>/_journal/<cluster>/proofs/<target>.json.
func (l Layout) JournalProofKey(clusterID, target string) string {
	return l.JournalProofPrefix(clusterID) + target + ".json"
}

// classifyJournalProof classifies seg, a key under a cluster's journal
// folder without it: a proof when it is proofs/<backup name>.json.
func classifyJournalProof(id, seg string) (KeyInfo, bool) {
	name, ok := strings.CutPrefix(seg, journalProofDir)
	if !ok {
		return KeyInfo{}, false
	}
	name, ok = strings.CutSuffix(name, ".json")
	if !ok || ValidateClusterID(id) != nil {
		return KeyInfo{}, false
	}
	t, kind, err := ParseBackupName(name)
	if err != nil {
		return KeyInfo{}, false
	}
	return KeyInfo{Kind: KeyJournalProof, ClusterID: id, Name: name, Time: t, BackupKind: kind}, true
}

// ProofHash is one side of a proof: etcd's HashKV of a database.
type ProofHash struct {
	Hash uint32 `json:"hash"`
	// Revision is the database's revision (the replayed one's: the last
	// event applied).
	Revision int64 `json:"revision"`
}

// JournalProof is the record of a proof of the journal between full
// backups Base and Target of a cluster.
type JournalProof struct {
	Format    int    `json:"format"`
	ClusterID string `json:"clusterID"`
	// Base is the full backup the journal was replayed into (k), at
	// BaseRevision; Target the next full backup (k+1), at TargetRevision.
	Base           string `json:"base"`
	BaseRevision   int64  `json:"baseRevision"`
	Target         string `json:"target"`
	TargetRevision int64  `json:"targetRevision"`
	// Compact is the compact revision both were hashed for: the larger
	// of the two databases' own.
	Compact int64 `json:"compact"`
	// Segments are the journal's segments replayed, Events their events.
	Segments []string `json:"segments,omitempty"`
	// Proven name each segment replayed exactly: its raw sha256 (the one
	// its trailer records and the next segment's header names) and, on a
	// versioned bucket, the version read. A later replay of the window
	// reads those versions and refuses a segment that hashes otherwise
	// (journal.Source.Pin): what was proven is what is restored.
	Proven []ProvenSegment `json:"proven,omitempty"`
	// Replaced are the proven segments whose key holds a newer version or
	// a delete marker over the version proven (the journal's own, which
	// was read): something wrote over the journal, and says so here.
	Replaced []string `json:"replaced,omitempty"`
	Events   int64    `json:"events"`
	// Got is the hash of Base plus the journal; Want Target's.
	Got  ProofHash `json:"got"`
	Want ProofHash `json:"want"`
	// Verdict is ProofPassed or ProofFailed; Detail says why it failed.
	Verdict  string        `json:"verdict"`
	Detail   string        `json:"detail,omitempty"`
	Time     time.Time     `json:"time"`
	Duration time.Duration `json:"durationNanos"`
	// ToolVersion is the tool's version that proved it.
	ToolVersion string `json:"toolVersion,omitempty"`
}

// ProvenSegment is one segment a proof replayed, named exactly.
type ProvenSegment struct {
	Key       string `json:"key"`
	SHA256    string `json:"sha256"`
	VersionID string `json:"versionID,omitempty"`
}

// Failed says whether the proof failed.
func (p *JournalProof) Failed() bool { return p != nil && p.Verdict == ProofFailed }

// Covers says whether a restore to revision rev from backup base replays
// the journal this proof judged: base is its Base and rev is above the
// base's revision and at or below the target's.
func (p *JournalProof) Covers(base string, rev int64) bool {
	return p != nil && p.Base == base && rev > p.BaseRevision && rev <= p.TargetRevision
}

func (p *JournalProof) validate() error {
	if err := ValidateClusterID(p.ClusterID); err != nil {
		return err
	}
	for _, n := range []string{p.Base, p.Target} {
		if _, _, err := ParseBackupName(n); err != nil {
			return err
		}
	}
	if p.Verdict != ProofPassed && p.Verdict != ProofFailed {
		return fmt.Errorf("journal proof of %s/%s: verdict %q is never recorded (only %s or %s)", p.ClusterID, p.Target, p.Verdict, ProofPassed, ProofFailed)
	}
	return nil
}

// ErrProofExists is PutJournalProof finding a proof of the target already.
var ErrProofExists = errors.New("a journal proof of this backup is recorded already")

// PutJournalProof writes p create-only at JournalProofKey(p.ClusterID,
// p.Target) (with a store that can create only if absent; another store
// is checked first). A proof already there is an error wrapping
// ErrProofExists: a recorded verdict is never replaced.
func PutJournalProof(ctx context.Context, st store.Store, layout Layout, p *JournalProof) error {
	if p.Format == 0 {
		p.Format = JournalProofFormat
	}
	if err := p.validate(); err != nil {
		return err
	}
	key := layout.JournalProofKey(p.ClusterID, p.Target)
	ret, err := proofRetention(ctx, st, p)
	if err != nil {
		return fmt.Errorf("journal proof of %s/%s at %s: reading the retention of the segments it covers: %w", p.ClusterID, p.Target, key, err)
	}
	err = objectio.CreateRecord(ctx, st, key, p, ret)
	if errors.Is(err, store.ErrExists) {
		return fmt.Errorf("journal proof of %s/%s at %s: %w", p.ClusterID, p.Target, key, ErrProofExists)
	}
	if err != nil {
		return fmt.Errorf("journal proof of %s/%s at %s: %w", p.ClusterID, p.Target, key, err)
	}
	return nil
}

// proofRetention is the lock a proof record is written with: that of the
// newest segment it proved (its recorded version), when that is locked, so
// the record is locked like the segments it covers and as long; nil when
// the bucket has no object lock or the segment is not locked.
func proofRetention(ctx context.Context, st store.Store, p *JournalProof) (*store.Retention, error) {
	if len(p.Proven) == 0 {
		return nil, nil
	}
	lk, ok := st.(store.Locker)
	if !ok {
		return nil, nil
	}
	info, err := lk.LockConfig(ctx)
	if err != nil || !info.Enabled {
		return nil, err
	}
	last := p.Proven[len(p.Proven)-1]
	r, err := lk.Retention(ctx, last.Key, last.VersionID)
	if err != nil || !r.Locked(time.Now()) {
		return nil, err
	}
	return &r, nil
}

// maxProofBytes bounds a proof record read.
const maxProofBytes = 1 << 20

// ReadJournalProof reads the proof of the journal before backup target;
// an error matching store.ErrNotFound when there is none.
//
// On a versioned bucket it reads the record's earliest version, behind a
// delete marker too: a proof is written once, create-only, so a newer
// version is an overwrite (a failed verdict turned passed, or segments
// renamed) and a delete marker a failed proof hidden; neither is the
// proof's.
func ReadJournalProof(ctx context.Context, st store.Store, layout Layout, clusterID, target string) (*JournalProof, error) {
	key := layout.JournalProofKey(clusterID, target)
	version := ""
	v, on, err := proofVersions(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("journal proof of %s/%s: %w", clusterID, target, err)
	}
	if on {
		vers, err := v.ListVersions(ctx, key)
		switch {
		case err != nil && optionalVersions(ctx, err):
			// No right to list versions: the current record.
		case err != nil:
			return nil, fmt.Errorf("journal proof of %s/%s: %w", clusterID, target, err)
		default:
			version = earliestVersions(vers)[key]
		}
	}
	return readJournalProof(ctx, st, v, key, version, clusterID, target)
}

// proofVersions is Versioned, a permanent failure (no right to read the
// bucket's versioning: an optional permission, as for backups) read as
// "no versions".
func proofVersions(ctx context.Context, st store.Store) (store.Versioner, bool, error) {
	v, on, err := Versioned(ctx, st)
	if err != nil && optionalVersions(ctx, err) {
		return v, false, nil
	}
	return v, on, err
}

// optionalVersions says whether a failure to read versions is the
// credential's (permanent, the context alive): reading goes on without.
func optionalVersions(ctx context.Context, err error) bool {
	return !store.IsTransient(err) && ctx.Err() == nil
}

// earliestVersions maps each key of a version listing (newest first per
// key) to its earliest object version, delete markers passed over.
func earliestVersions(vers []store.Version) map[string]string {
	out := map[string]string{}
	for _, ver := range vers {
		if !ver.DeleteMarker {
			out[ver.Key] = ver.VersionID
		}
	}
	return out
}

func readJournalProof(ctx context.Context, st store.Store, v store.Versioner, key, version, clusterID, target string) (*JournalProof, error) {
	o := objectio.RecordOptions{Max: maxProofBytes, Version: version}
	var b []byte
	var err error
	if version != "" && v != nil {
		b, err = objectio.ReadRecordVersion(ctx, v, key, o)
	} else {
		b, err = objectio.ReadRecordBytes(ctx, st, key, objectio.RecordOptions{Max: maxProofBytes})
	}
	if err != nil {
		return nil, fmt.Errorf("journal proof of %s/%s: %w", clusterID, target, err)
	}
	var p JournalProof
	if err := objectio.DecodeRecord(key, b, &p); err != nil {
		return nil, fmt.Errorf("journal proof of %s/%s: %w", clusterID, target, err)
	}
	if p.ClusterID != clusterID || p.Target != target {
		return nil, fmt.Errorf("journal proof %s is of %s/%s", key, p.ClusterID, p.Target)
	}
	return &p, nil
}

// ListJournalProofs reads every proof recorded for a cluster, by target
// revision (then time). A record that cannot be read is an error naming
// it.
//
// On a versioned bucket each record is read at its earliest version,
// those behind delete markers included (ReadJournalProof).
func ListJournalProofs(ctx context.Context, st store.Store, layout Layout, clusterID string) ([]*JournalProof, error) {
	prefix := layout.JournalProofPrefix(clusterID)
	v, on, err := proofVersions(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("list the journal proofs of cluster %s: %w", clusterID, err)
	}
	var keys []string
	versions := map[string]string{}
	var vers []store.Version
	if on {
		if vers, err = v.ListVersions(ctx, prefix); err != nil && optionalVersions(ctx, err) {
			on = false
		} else if err != nil {
			return nil, fmt.Errorf("list the journal proofs of cluster %s: %w", clusterID, err)
		}
	}
	if on {
		versions = earliestVersions(vers)
		for k := range versions {
			keys = append(keys, k)
		}
		slices.Sort(keys)
	} else {
		objs, err := st.List(ctx, prefix)
		if err != nil {
			return nil, fmt.Errorf("list the journal proofs of cluster %s: %w", clusterID, err)
		}
		for _, o := range objs {
			keys = append(keys, o.Key)
		}
	}
	var out []*JournalProof
	for _, k := range keys {
		ki := layout.Classify(k)
		if ki.Kind != KeyJournalProof || ki.ClusterID != clusterID {
			continue
		}
		p, err := readJournalProof(ctx, st, v, k, versions[k], clusterID, ki.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *JournalProof) int {
		if a.TargetRevision != b.TargetRevision {
			return int(min(max(a.TargetRevision-b.TargetRevision, -1), 1))
		}
		return a.Time.Compare(b.Time)
	})
	return out, nil
}
