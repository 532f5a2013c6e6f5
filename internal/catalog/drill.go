package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sync"
	"time"

	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
)

// A restore drill proves that a backup restores: the backup is downloaded
// and verified as restore does, restored into a scratch directory with
// restore's own code, started as a real single-member etcd and checked
// (drill.Run). Its result is recorded next to the backup:
//
//	<prefix>/<cluster-id>/<backup>/drill.json   the newest drill of the backup
//
// drill.json is written after the manifest and never changes it; a later
// drill of the same backup replaces it. A drill record never makes a backup
// exist: a folder without a manifest is incomplete whatever else it holds.

// DrillObject is the drill result's object name inside a backup's folder.
const DrillObject = "drill.json"

// DrillFormat is the drill record format this build writes. Readers refuse
// a newer one (the record then counts as no proof).
const DrillFormat = 1

// Comparison modes of a drill (DrillRecord.Comparison.Mode).
const (
	// CompareSource: the source member answered HashKV at the snapshot's
	// revision, and the restored member's hash at that revision, after the
	// same compaction, was compared with it.
	CompareSource = "source"
	// CompareSelf: the source could not answer for that revision (no
	// endpoints given, the member is gone, or the revision is compacted):
	// the restored member was checked for self-consistency only.
	CompareSelf = "self-consistency"
)

// Drill check statuses.
const (
	DrillCheckPassed = "passed"
	DrillCheckFailed = "failed"
	DrillCheckInfo   = "info" // recorded, never fails the drill
	// DrillCheckInconclusive: the check could not be made for a cause of
	// the node, not of the backup (the drill's etcd killed by a signal or
	// the OOM killer, a full scratch disk, a deadline). It never fails the
	// drill; a drill with one and no failed check is inconclusive.
	DrillCheckInconclusive = "inconclusive"
)

// Drill verdicts (DrillRecord.Verdict).
const (
	VerdictPassed = "passed"
	// VerdictFailed: a property of the backup failed a check.
	VerdictFailed = "failed"
	// VerdictInconclusive: the drill could not judge the backup (see
	// DrillCheckInconclusive); it is never recorded in drill.json, so it
	// neither replaces an earlier verdict nor makes restore skip the
	// backup.
	VerdictInconclusive = "inconclusive"
)

// What a drill restored from (DrillRecord.Drilled).
const (
	// DrilledStored: the backup's stored objects, downloaded and, for an
	// encrypted backup, decrypted with a mounted identity: proof that the
	// stored ciphertext decrypts and restores.
	DrilledStored = "stored"
	// DrilledLocalPlaintext: the plaintext copy the backup streamed (the
	// CronJob's drill after a backup; it holds no identity). It proves
	// the database restores; for an encrypted backup, that its stored
	// ciphertext decrypts is proven separately (the exporter's header
	// check, a drill in the toolkit).
	DrilledLocalPlaintext = "local-plaintext"
)

// DrillRecord is the result of one restore drill of one backup.
type DrillRecord struct {
	Format    int    `json:"format"`
	ClusterID string `json:"clusterID"`
	Backup    string `json:"backup"`
	// Passed is true only when every check passed. A record that failed
	// names the first failing check in Failed ("<check>: <detail>").
	Passed bool   `json:"passed"`
	Failed string `json:"failed,omitempty"`
	// Verdict is passed or failed (records older than it: derived from
	// Passed). Failures lists every failed check ("<check>: <detail>"),
	// not only the first.
	Verdict  string   `json:"verdict,omitempty"`
	Failures []string `json:"failures,omitempty"`
	// Drilled says what was restored: the stored objects (DrilledStored)
	// or the backup's local plaintext copy (DrilledLocalPlaintext).
	// Encrypted: the backup's stored objects are age-encrypted; with
	// DrilledStored, the drill decrypted them.
	Drilled   string `json:"drilled,omitempty"`
	Encrypted bool   `json:"encrypted,omitempty"`

	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`

	// SourceVersion is the etcd version the backup was taken from (the
	// manifest's); EtcdVersion the version of the etcd the drill ran.
	SourceVersion string `json:"sourceVersion"`
	EtcdVersion   string `json:"etcdVersion"`
	ToolVersion   string `json:"toolVersion"`

	// Revision is the snapshot's revision (the database's, read while the
	// backup was verified); BumpRevision what the restore added to it.
	Revision     int64  `json:"revision"`
	BumpRevision uint64 `json:"bumpRevision"`
	// DBSize is the restored database's size in bytes.
	DBSize int64 `json:"dbSize,omitempty"`

	Comparison DrillComparison `json:"comparison"`
	Checks     []DrillCheck    `json:"checks"`
	Steps      []DrillStep     `json:"steps"`

	// ToRevision is the revision a point-in-time drill restored to
	// (drill --to-revision): the backup plus the journal up to it;
	// Revision is then the replayed database's. 0: the backup as it is.
	ToRevision int64 `json:"toRevision,omitempty"`
	// JournalProof is the verdict of the proof of the journal before the
	// drilled backup (drill.ProveJournal: passed, failed, inconclusive,
	// or "none" when there is no journal before it), made or read by the
	// drill; it never changes the drill's verdict of the backup. Empty:
	// not looked at.
	JournalProof string `json:"journalProof,omitempty"`
}

// DrillComparison is the restored keyspace compared with the source's.
type DrillComparison struct {
	Mode string `json:"mode"` // CompareSource or CompareSelf
	// Detail says why the source could not answer (CompareSelf), or what
	// was compared.
	Detail string `json:"detail,omitempty"`
	// Endpoint is the source member asked.
	Endpoint string `json:"endpoint,omitempty"`
	// Revision and CompactRevision are those of the hashes compared.
	Revision        int64 `json:"revision,omitempty"`
	CompactRevision int64 `json:"compactRevision,omitempty"`
	// SourceHash and RestoredHash are etcd's HashKV (crc32) of each side.
	SourceHash   *uint32 `json:"sourceHash,omitempty"`
	RestoredHash *uint32 `json:"restoredHash,omitempty"`
	// Equal is set when both hashes were taken.
	Equal *bool `json:"equal,omitempty"`
}

// DrillCheck is one check of a drill, with the values it compared.
type DrillCheck struct {
	Name   string `json:"name"`
	Status string `json:"status"` // DrillCheck*
	Detail string `json:"detail,omitempty"`
	// Want and Got are the compared values, when the check compares.
	Want any `json:"want,omitempty"`
	Got  any `json:"got,omitempty"`
}

// DrillStep is how long one step of the drill took.
type DrillStep struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration"`
	Error    string        `json:"error,omitempty"`
}

// MarshalDrill encodes a drill record.
func MarshalDrill(r *DrillRecord) ([]byte, error) {
	return json.MarshalIndent(r, "", "  ")
}

// UnmarshalDrill decodes and checks a drill record.
func UnmarshalDrill(b []byte) (*DrillRecord, error) {
	var r DrillRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("drill record: %w", err)
	}
	if r.Format < 1 || r.Format > DrillFormat {
		return nil, fmt.Errorf("drill record: format %d is not supported by this build (max %d)", r.Format, DrillFormat)
	}
	if r.ClusterID == "" || r.Backup == "" || r.FinishedAt.IsZero() {
		return nil, errors.New("drill record: missing required fields")
	}
	if r.Passed && r.Failed != "" {
		return nil, errors.New("drill record: passed, yet names a failed check")
	}
	switch r.Verdict {
	case "":
		r.Verdict = VerdictFailed
		if r.Passed {
			r.Verdict = VerdictPassed
		}
	case VerdictPassed, VerdictFailed:
		if (r.Verdict == VerdictPassed) != r.Passed {
			return nil, fmt.Errorf("drill record: verdict %s contradicts passed=%v", r.Verdict, r.Passed)
		}
	default:
		return nil, fmt.Errorf("drill record: verdict %q is never recorded", r.Verdict)
	}
	return &r, nil
}

// ErrNoManifest refuses a drill record for a backup that is not committed.
var ErrNoManifest = errors.New("the backup has no manifest: a drill is recorded only next to a committed backup")

// PutDrill records a drill next to its backup, replacing any earlier
// record. It refuses when the backup's manifest is not there (a record
// never makes a folder look like a backup), and reads the record back.
func PutDrill(ctx context.Context, st store.Store, layout Layout, r *DrillRecord) error {
	if err := ValidateClusterID(r.ClusterID); err != nil {
		return err
	}
	if _, _, err := ParseBackupName(r.Backup); err != nil {
		return err
	}
	if r.Format == 0 {
		r.Format = DrillFormat
	}
	b, err := MarshalDrill(r)
	if err != nil {
		return err
	}
	if _, err := UnmarshalDrill(b); err != nil {
		return err
	}
	if _, damaged, err := loadManifest(ctx, st, layout, r.ClusterID, r.Backup); err != nil {
		if damaged && isNotFound(err) {
			return fmt.Errorf("drill record of %s/%s: %w", r.ClusterID, r.Backup, ErrNoManifest)
		}
		return fmt.Errorf("drill record of %s/%s: reading the manifest: %w", r.ClusterID, r.Backup, err)
	}
	key := layout.Key(r.ClusterID, r.Backup, DrillObject)
	if _, err := st.Put(ctx, key, bytes.NewReader(b)); err != nil {
		return fmt.Errorf("drill record of %s/%s: %w", r.ClusterID, r.Backup, err)
	}
	rc, err := st.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("drill record of %s/%s: reading it back: %w", r.ClusterID, r.Backup, err)
	}
	defer rc.Close()
	got, err := io.ReadAll(io.LimitReader(rc, int64(len(b))+1))
	if err != nil {
		return fmt.Errorf("drill record of %s/%s: reading it back: %w", r.ClusterID, r.Backup, err)
	}
	if !bytes.Equal(got, b) {
		return fmt.Errorf("drill record of %s/%s: the record read back differs from the one written (another drill replaced it)", r.ClusterID, r.Backup)
	}
	return nil
}

// LoadDrill reads a backup's drill record: (nil, nil) when the backup has
// none. A record that does not parse, or names another backup, is an error.
func LoadDrill(ctx context.Context, st store.Store, layout Layout, clusterID, name string) (*DrillRecord, error) {
	key := layout.Key(clusterID, name, DrillObject)
	b, err := objectio.ReadRecordBytes(ctx, st, key, objectio.RecordOptions{})
	switch {
	case isNotFound(err) && ctx.Err() == nil:
		return nil, nil
	case errors.Is(err, objectio.ErrDamagedRecord):
		return nil, &DrillRecordError{Key: key, Err: err}
	case err != nil:
		return nil, err
	}
	r, err := UnmarshalDrill(b)
	if err != nil {
		return nil, &DrillRecordError{Key: key, Err: err}
	}
	if r.ClusterID != clusterID || r.Backup != name {
		return nil, &DrillRecordError{Key: key, Err: fmt.Errorf("drill record names cluster %q backup %q: refusing a record that was moved", r.ClusterID, r.Backup)}
	}
	return r, nil
}

// DrillSummary is what list, retention, restore and inspect need of a
// backup's drill record.
type DrillSummary struct {
	Passed bool
	At     time.Time // when the drill finished
	Failed string    // the failing check, when it failed
	// Mode is the comparison the drill made (CompareSource, CompareSelf).
	Mode string
	// Drilled and Encrypted are the record's (what was restored).
	Drilled   string
	Encrypted bool
	// Err is set when the record could not be read or parsed: no proof.
	Err string
}

// Proven reports whether the drill record proves the backup restores.
//
// A drill of the backup's local plaintext copy counts, for an encrypted
// backup too: it proves the database restores, and the stored ciphertext
// is what that plaintext was encrypted into (its sha256 checked on
// upload). That a mounted identity opens it is proven apart from the
// record: the exporter opens each newest backup's age header on every
// refresh (EtcdBackupUndecryptable), and a drill in the toolkit restores
// the stored ciphertext (Drilled: stored). Retention and restore read
// Proven alike; list shows which kind of drill it was.
func (s *DrillSummary) Proven() bool { return s != nil && s.Passed && s.Err == "" }

// FailedBackup reports whether the drill ran and failed for a property of
// the backup (an unreadable record is no proof, but no failure either;
// an inconclusive drill is never recorded).
func (s *DrillSummary) FailedBackup() bool { return s != nil && s.Err == "" && !s.Passed }

// Summary is the record's summary.
func (r *DrillRecord) Summary() *DrillSummary {
	return &DrillSummary{Passed: r.Passed, At: r.FinishedAt, Failed: r.Failed, Mode: r.Comparison.Mode,
		Drilled: r.Drilled, Encrypted: r.Encrypted}
}

// HasDrill reports whether the backup's folder holds a drill record.
func (e Entry) HasDrill() bool {
	for _, o := range e.Objects {
		if path.Base(o.Key) == DrillObject {
			return true
		}
	}
	return false
}

// LoadDrills reads the drill record of every committed entry that has one,
// parallel at a time, into entries[i].Drill. A record that cannot be parsed
// is summarised with Err set (it proves nothing); so is one the store
// failed to return, and the first such failure is also returned (named by
// cluster and backup), with the other records loaded: whoever deletes by
// the records must not go on then.
func LoadDrills(ctx context.Context, st store.Store, layout Layout, entries []Entry, parallel int) error {
	if parallel <= 0 {
		parallel = DefaultCheckParallel
	}
	var drilled []int
	for i := range entries {
		if entries[i].Committed && entries[i].HasDrill() {
			drilled = append(drilled, i)
		}
	}
	var mu sync.Mutex
	var first error
	// None is started once ctx ends: the error below says so.
	fanout.ForEach(ctx, len(drilled), parallel, func(ctx context.Context, j int) {
		e := &entries[drilled[j]]
		r, err := LoadDrill(ctx, st, layout, e.ClusterID, e.Name)
		switch {
		case err == nil && r != nil:
			e.Drill = r.Summary()
		case err == nil:
			// Listed, then gone (a drill replacing it, or a delete).
		case isStoreFailure(err):
			e.Drill = &DrillSummary{Err: "could not be read: " + err.Error()}
			mu.Lock()
			if first == nil {
				first = fmt.Errorf("read drill record of backup %s/%s: %w", e.ClusterID, e.Name, err)
			}
			mu.Unlock()
		default:
			e.Drill = &DrillSummary{Err: err.Error()}
		}
	})
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("read drill records: %w", err)
	}
	return first
}

// DrillRecordError is a drill record that was read and is bad (does not
// parse, or names another backup): it proves nothing. Any other error of
// LoadDrill is a store failure.
type DrillRecordError struct {
	Key string
	Err error
}

func (e *DrillRecordError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *DrillRecordError) Unwrap() error { return e.Err }

// isStoreFailure tells a store or context failure (the record's state is
// unknown) from a record that was read and is bad.
func isStoreFailure(err error) bool {
	var bad *DrillRecordError
	return !errors.As(err, &bad)
}
