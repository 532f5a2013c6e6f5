package prune

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
)

// The tables of list, prune, backup --prune, delete and the orphan pass
// (the convention: internal/output's package doc). -o json is the report
// itself.

// ListRow is one backup in `list`, for both the table and JSON.
type ListRow struct {
	Name string       `json:"name"`
	Kind catalog.Kind `json:"kind"`
	Time time.Time    `json:"time"`
	// Status is committed, incomplete, "damaged: <why>" (it cannot
	// restore: manifest unreadable, an object missing or of the wrong size)
	// or "unknown: ..." (its manifest could not be read: a store error).
	Status   string `json:"status"`
	Damaged  string `json:"damaged,omitempty"`
	Revision int64  `json:"revision,omitempty"`
	RawSize  int64  `json:"rawSize,omitempty"`
	// StoredSize is the snapshot object's size as stored (compressed), as
	// backup's STORED; TotalSize is every object of the backup (snapshot,
	// v2 export, manifest, marker), as the bucket bills it.
	StoredSize int64             `json:"storedSize,omitempty"`
	TotalSize  int64             `json:"totalSize"`
	V2Keys     *int              `json:"v2Keys,omitempty"`
	Source     string            `json:"source,omitempty"`
	Error      string            `json:"error,omitempty"`
	Manifest   *catalog.Manifest `json:"manifest,omitempty"`
	// Recipients are the age public keys the backup is encrypted to
	// (Manifest.Recipients); absent for a plaintext backup. The table's
	// ENCRYPTED TO (-o wide) shows them shortened (RecipientsCell).
	Recipients []string `json:"recipients,omitempty"`
	// Drill is the backup's restore drill (drill.json): {passed, at,
	// failed, mode, error, drilled, encrypted}; null when it was never
	// drilled. Drilled says what proved it: the stored objects
	// (decrypted, for an encrypted backup) or the backup's plaintext copy.
	Drill *catalog.DrillResult `json:"drill"`
	// Decrypt is whether an identity of list --identity-file opens the
	// backup's age header: {state: opens, "no identity opens it",
	// damaged or unknown; error}. Absent for a plaintext backup or
	// without --identity-file.
	Decrypt *DecryptResult `json:"decrypt,omitempty"`
	// Retention is what prune would do with the backup now.
	Retention ListRetention `json:"retention"`
	// Orphan is the cluster's orphan marker (the same on every row): the
	// last orphan pass found no EtcdCluster of this name; its backups go
	// after deleteAfter. Absent when the cluster is not an orphan.
	Orphan *OrphanMarker `json:"orphan,omitempty"`
	// Deleted and Overwritten (list --include-deleted, a versioned
	// bucket): the backup is held only by the object versions it wrote,
	// Versions (object name → version id); see VersionedBackups. Its
	// Status is then "deleted" or "overwritten".
	Deleted     bool              `json:"deleted,omitempty"`
	Overwritten bool              `json:"overwritten,omitempty"`
	Versions    map[string]string `json:"versions,omitempty"`
	// Lock is the retention of the backup's manifest (the version the
	// backup wrote), on a bucket with object lock: {mode, until}; absent
	// on a bucket without, or for a version without a retention. The
	// table's LOCKED UNTIL (only on a bucket with object lock) shows it.
	Lock *RowLock `json:"lock,omitempty"`
	// Escrow is the escrow the backup's manifest names (its state,
	// address, certificates and their expiry, problems); absent for a
	// backup written before escrow existed. The table's ESCROW (-o wide:
	// the default table keeps within 120 columns) shows its state ("-"
	// when absent) and CERTS EXPIRE the nearest certificate expiry; the
	// reason names a state other than present, its problems, and a
	// certificate expiring within CertExpiryWarning (EscrowNote).
	Escrow *catalog.EscrowRef `json:"escrow,omitempty"`

	lockColumn bool // the bucket has object lock: LOCKED UNTIL is shown
}

// RowLock is an object version's retention, as list shows it.
type RowLock struct {
	Mode  string    `json:"mode"`
	Until time.Time `json:"until"`
}

// ListRetention is the retention decision for one backup in `list`.
type ListRetention struct {
	Keep   bool     `json:"keep"`
	Rules  []string `json:"rules,omitempty"`
	Reason string   `json:"reason"`
}

func (r ListRetention) String() string {
	if r.Keep {
		return "keep: " + r.Reason
	}
	return "would delete: " + r.Reason
}

// ListRows are `list`'s rows, newest first; its JSON is the array.
type ListRows []ListRow

// Table is list's table: STORED is the snapshot object's size as stored
// (as in backup), TOTAL every object of the backup; RAW (the database's
// size) is in -o wide. DRILL is the restore drill's result and age; -o
// wide adds its comparison (DRILL MODE: source or self-consistency), and
// a failed check goes with the reason. What the drill restored, when its
// record says (DrilledWhat: "stored, decrypted", "stored", "plaintext
// copy"), is in DRILL MODE and, for an encrypted backup, in the reason.
// With list --identity-file, DECRYPTS (-o wide) says whether an identity
// opens each encrypted backup: opens, NO IDENTITY OPENS IT, DAMAGED or
// unknown ("-" for a plaintext one); STATUS is UNDECRYPTABLE for one no
// identity opens, and the cause goes with the reason.
func (rows ListRows) Table() output.Table {
	now := time.Now()
	t := output.Table{Header: []string{"BACKUP", "KIND", "TIME (UTC)", "STATUS", "REVISION", "RAW", "STORED", "TOTAL", "V2 KEYS", "SOURCE",
		"DRILL", "DRILL MODE", "ENCRYPTED TO", "ESCROW", "CERTS EXPIRE", "KEEP", "REASON"},
		Wide: []string{"KIND", "TIME (UTC)", "RAW", "TOTAL", "SOURCE", "DRILL MODE", "ENCRYPTED TO", "ESCROW", "CERTS EXPIRE"}, Long: []string{"REASON"}}
	decrypts := false
	for _, r := range rows {
		decrypts = decrypts || r.Decrypt != nil
	}
	if decrypts {
		at := slices.Index(t.Header, "ENCRYPTED TO") + 1
		t.Header = slices.Insert(t.Header, at, "DECRYPTS")
		t.Wide = append(t.Wide, "DECRYPTS")
	}
	locks := false
	for _, r := range rows {
		locks = locks || r.lockColumn
	}
	if locks {
		// -o wide: the default table keeps its width; the lock goes with
		// the reason there.
		t.Header = slices.Insert(t.Header, slices.Index(t.Header, "KEEP"), "LOCKED UNTIL")
		t.Wide = append(t.Wide, "LOCKED UNTIL")
	}
	for _, r := range rows {
		v2 := "-"
		if r.V2Keys != nil {
			v2 = fmt.Sprint(*r.V2Keys)
		}
		rev, raw, stored := "-", "-", "-"
		if r.Revision > 0 {
			rev, raw, stored = fmt.Sprint(r.Revision), output.Bytes(r.RawSize), output.Bytes(r.StoredSize)
		}
		// STATUS is one word; what is damaged, and the error, go with
		// the retention reason (below the table by default).
		status, _, _ := strings.Cut(r.Status, ":")
		reason := r.Retention.String()
		if r.Damaged != "" {
			reason += "; damaged: " + r.Damaged
		}
		if r.Error != "" {
			reason += "; " + r.Error
		}
		if n := listDrillNote(r.Drill); n != "" && !strings.Contains(reason, r.Drill.Failed+r.Drill.Error) {
			reason += "; " + n
		}
		keep := map[bool]string{true: "keep", false: "delete"}[r.Retention.Keep]
		mode := "-"
		if r.Drill != nil && r.Drill.Mode != "" {
			mode = r.Drill.Mode
		}
		if d := r.Drill; d != nil && d.Error == "" {
			if w := DrilledWhat(d.Drilled, d.Encrypted); w != "" {
				mode = strings.TrimPrefix(mode+", "+w, "-, ")
				if d.Encrypted && d.Passed {
					reason += "; drill restored the " + map[bool]string{true: "stored ciphertext, decrypted", false: "plaintext copy (not the stored ciphertext)"}[d.Drilled == catalog.DrilledStored]
				}
			}
		}
		if r.Decrypt != nil && r.Decrypt.State == DecryptNoIdentity {
			status = "UNDECRYPTABLE"
		}
		if r.Deleted || r.Overwritten {
			status = strings.ToUpper(status)
		}
		if n := EscrowNote(r.Escrow, now); n != "" {
			reason += "; " + n
		}
		row := []string{r.Name, string(r.Kind), r.Time.Format("2006-01-02 15:04:05"), status, rev, raw,
			stored, output.Bytes(r.TotalSize), v2, dashIfEmpty(r.Source), drillCell(r.Drill, now), mode, RecipientsCell(r.recipients()),
			EscrowCell(r.Escrow), ExpiryCell(r.Escrow.NearestExpiry(), now), keep, reason}
		if decrypts {
			if r.Decrypt != nil && r.Decrypt.Error != "" {
				row[len(row)-1] += "; " + r.Decrypt.Error
			}
			row = slices.Insert(row, slices.Index(t.Header, "DECRYPTS"), DecryptCell(r.Decrypt))
		}
		if locks {
			if n := lockNote(r.Lock, now); n != "" {
				row[len(row)-1] += "; " + n
			}
			row = slices.Insert(row, slices.Index(t.Header, "LOCKED UNTIL"), lockCell(r.Lock, now))
		}
		t.Rows = append(t.Rows, row)
	}
	if len(rows) > 0 && rows[0].Orphan != nil {
		t.Notes = append(t.Notes, OrphanNote(rows[0].Orphan, now))
	}
	return t
}

// CertExpiryWarning is how soon an escrowed certificate's expiry is
// warned about: list's reason, inspect's check and the exporter's alert
// (EtcdRecoveryCertificateExpiringSoon) use the same 30 days.
const CertExpiryWarning = 30 * 24 * time.Hour

// EscrowCell is a backup's escrow state for a table: present, mismatch,
// missing, none, or "-" for a backup written before escrow existed.
func EscrowCell(r *catalog.EscrowRef) string {
	if r == nil {
		return "-"
	}
	return string(r.State)
}

// ExpiryCell is a certificate expiry for a table: the date (UTC), with
// EXPIRED or the days left when within CertExpiryWarning; "-" when
// there is none.
func ExpiryCell(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.UTC().Format("2006-01-02")
	switch left := t.Sub(now); {
	case left <= 0:
		return d + " (EXPIRED)"
	case left <= CertExpiryWarning:
		return fmt.Sprintf("%s (%dd)", d, int(left.Hours()/24))
	}
	return d
}

// EscrowNote is what a table's reason says of a backup's escrow: its
// problems (missing, mismatch, none), and an escrowed certificate that
// expires within CertExpiryWarning; "" when there is nothing to say.
func EscrowNote(r *catalog.EscrowRef, now time.Time) string {
	if r == nil {
		return ""
	}
	var parts []string
	if r.State != catalog.EscrowPresent {
		p := "escrow " + string(r.State)
		if len(r.Problems) > 0 {
			p += ": " + strings.Join(r.Problems, "; ")
		}
		parts = append(parts, p)
	}
	if c, ok := nearestCert(r); ok && c.NotAfter.Sub(now) <= CertExpiryWarning {
		verb := "expires"
		if !c.NotAfter.After(now) {
			verb = "EXPIRED"
		}
		parts = append(parts, fmt.Sprintf("escrowed certificate %s (%s) %s %s", c.Secret, c.Subject, verb, c.NotAfter.UTC().Format(time.RFC3339)))
	}
	return strings.Join(parts, "; ")
}

// nearestCert is the escrowed certificate that expires first.
func nearestCert(r *catalog.EscrowRef) (catalog.EscrowCert, bool) {
	var best catalog.EscrowCert
	ok := false
	for _, c := range r.Certs {
		if !ok || c.NotAfter.Before(best.NotAfter) {
			best, ok = c, true
		}
	}
	return best, ok
}

// recipients are the row's recipients, from its manifest when the row
// was built without them.
func (r ListRow) recipients() []string {
	if len(r.Recipients) == 0 && r.Manifest != nil {
		return r.Manifest.Recipients()
	}
	return r.Recipients
}

// RecipientShortLen is how many characters of an age public key (age1…)
// a table shows: enough to tell the keys of a rotation apart.
const RecipientShortLen = 12

// RecipientsCell is the ENCRYPTED TO cell: each recipient's first
// RecipientShortLen characters, comma-separated; "-" for a plaintext
// backup. -o json holds the full keys.
func RecipientsCell(rs []string) string {
	if len(rs) == 0 {
		return "-"
	}
	short := make([]string, len(rs))
	for i, r := range rs {
		if len(r) > RecipientShortLen {
			r = r[:RecipientShortLen] + "…"
		}
		short[i] = r
	}
	return strings.Join(short, ",")
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// DecryptCell is the DECRYPTS cell of list and inspect --all: "opens",
// "NO IDENTITY OPENS IT", "DAMAGED", "unknown", or "-" (not encrypted, or
// not checked).
func DecryptCell(d *DecryptResult) string {
	switch {
	case d == nil:
		return "-"
	case d.State == DecryptNoIdentity || d.State == DecryptDamaged:
		return strings.ToUpper(d.State)
	}
	return d.State
}

// drillCell is the DRILL cell: "passed 3h ago", "FAILED 2h ago", "never"
// or "unreadable".
func drillCell(d *catalog.DrillResult, now time.Time) string {
	switch {
	case d == nil:
		return "never"
	case d.Error != "":
		return "unreadable"
	}
	word := "FAILED"
	if d.Passed {
		word = "passed"
	}
	if d.At == nil {
		return word
	}
	return word + " " + shortAge(now.Sub(*d.At)) + " ago"
}

// DrilledWhat names what a drill restored: "stored, decrypted" (the stored
// ciphertext, decrypted with a mounted identity), "stored", "plaintext
// copy" (the copy backup --drill streamed: for an encrypted backup, no
// proof that its ciphertext decrypts), or "" for a record that does not
// say.
func DrilledWhat(drilled string, encrypted bool) string {
	switch {
	case drilled == catalog.DrilledStored && encrypted:
		return "stored, decrypted"
	case drilled == catalog.DrilledStored:
		return "stored"
	case drilled == catalog.DrilledLocalPlaintext:
		return "plaintext copy"
	}
	return ""
}

// shortAge is an age to the unit that matters for a daily drill: 45s, 12m,
// 3h, 26h, then days.
func shortAge(d time.Duration) string {
	switch {
	case d < 0:
		return "in " + shortAge(-d)
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours())/24)
}

// listDrillNote is the drill's detail for the REASON text: the failed check,
// or why the record could not be read ("" when it passed or never ran).
func listDrillNote(d *catalog.DrillResult) string {
	switch {
	case d == nil:
		return ""
	case d.Error != "":
		return "drill record unreadable: " + d.Error
	case !d.Passed:
		return "drill FAILED: " + d.Failed
	}
	return ""
}

// OrphanNote is the line list shows for an orphan.
func OrphanNote(m *OrphanMarker, now time.Time) string {
	when := "after " + fmtTime(m.DeleteAfter) + " UTC"
	if !now.Before(m.DeleteAfter) {
		when = "at the next orphan pass (grace over since " + fmtTime(m.DeleteAfter) + " UTC)"
	}
	return fmt.Sprintf("orphan: no EtcdCluster %s in namespace %s since %s UTC, backups deleted %s (%s; only under a prefix the namespace owns)",
		m.ClusterID, m.Namespace, fmtTime(m.FirstSeen), when, orphanRule(m.Grace))
}

// actionsTable is the table of prune, backup --prune and delete: the time
// is in the backup's name (-o wide shows it apart), and the reasons go
// below it by default, one line per backup.
func actionsTable(backups []BackupAction, uploads []UploadAction) output.Table {
	t := output.Table{Header: []string{"CLUSTER", "BACKUP", "KIND", "TIME (UTC)", "ACTION", "REASON"},
		Wide: []string{"TIME (UTC)"}, Long: []string{"REASON"}, Key: "BACKUP"}
	for _, a := range backups {
		t.Rows = append(t.Rows, a.row())
	}
	for _, u := range uploads {
		t.Rows = append(t.Rows, u.row())
	}
	return t
}

func (a BackupAction) row() []string {
	reason := a.Reason
	if a.Error != "" {
		reason += "; " + a.Error
	}
	kind := string(a.Kind)
	switch {
	case !a.Committed:
		kind += " (incomplete)"
	case a.Damaged != "":
		kind += " (damaged)"
	}
	return []string{a.ClusterID, a.Name, kind, fmtTime(a.Time), a.Action, reason}
}

func (u UploadAction) row() []string {
	reason := u.Reason
	if u.Error != "" {
		reason += "; " + u.Error
	}
	return []string{u.ClusterID, u.Name, "upload: " + u.Key[strings.LastIndex(u.Key, "/")+1:], fmtTime(u.Initiated), u.Action, reason}
}

// Table is every backup, then every multipart upload, per cluster; the
// totals and the clusters' problems below it.
func (r *PruneReport) Table() output.Table {
	var t output.Table
	for _, c := range r.Clusters {
		ct := actionsTable(c.Backups, c.Uploads)
		t.Header, t.Wide, t.Long, t.Key = ct.Header, ct.Wide, ct.Long, ct.Key
		t.Rows = append(t.Rows, ct.Rows...)
		for _, a := range c.Segments {
			t.Rows = append(t.Rows, a.row())
		}
		for _, a := range c.Escrows {
			t.Rows = append(t.Rows, a.row())
		}
	}
	if t.Header == nil {
		t = actionsTable(nil, nil)
	}
	verb, n := "deleted", r.Deleted
	if r.DryRun {
		verb, n = "would delete", r.Planned
	}
	var f strings.Builder
	fmt.Fprintf(&f, "%d kept, %s %d (%d failed), %d damaged, %d of %d multipart uploads to abort; listed %d objects in %s\n",
		r.Kept, verb, n, r.Failed, r.Damaged, r.Stale, r.Uploads, r.Stats.ObjectsListed, r.Stats.Duration.Round(time.Millisecond))
	if n := r.SegmentsKept + r.SegmentsPlanned; n > 0 {
		sverb, sn := "deleted", r.SegmentsDeleted
		if r.DryRun {
			sverb, sn = "would delete", r.SegmentsPlanned
		}
		fmt.Fprintf(&f, "journal: %d segment(s) kept, %s %d (%d failed)\n", r.SegmentsKept, sverb, sn, r.SegmentsFailed)
	}
	if line := escrowSummary(r.allEscrows(), r.DryRun); line != "" {
		fmt.Fprintf(&f, "%s\n", line)
	}
	for _, cl := range r.Clusters {
		if cl.Problem != "" {
			fmt.Fprintf(&f, "WARNING: %s\n", cl.Problem)
		}
	}
	for _, c := range r.Staged {
		fmt.Fprintf(&f, "staged plaintext snapshot %s (%s old): %s%s\n", c.Key, c.Age, c.Action, map[bool]string{true: ": " + c.Error}[c.Error != ""])
	}
	if r.StagedError != "" {
		fmt.Fprintf(&f, "WARNING: staged plaintext snapshots: %s\n", r.StagedError)
	}
	if len(r.Unknown) > 0 {
		fmt.Fprintf(&f, "%s\n", catalog.UnknownNote(r.Unknown))
	}
	t.Footer = f.String()
	return t
}

// Table is the backups delete removed (or refused), and the keys under the
// cluster's prefix that are not in the layout below it.
func (r *DeleteReport) Table() output.Table {
	t := actionsTable(r.Backups, nil)
	for _, a := range r.Escrows {
		t.Rows = append(t.Rows, a.row())
	}
	if line := escrowSummary(r.Escrows, false); line != "" {
		t.Notes = append(t.Notes, line)
	}
	if len(r.Unknown) > 0 {
		t.Notes = append(t.Notes, catalog.UnknownNote(r.Unknown))
	}
	return t
}

// Table is every backup and multipart upload of the cluster, with a
// summary below.
func (r *DeleteAllReport) Table() output.Table {
	t := actionsTable(r.Backups, r.Uploads)
	for _, a := range r.Escrows {
		t.Rows = append(t.Rows, a.row())
	}
	verb := "deleted"
	if r.DryRun {
		verb = "would delete"
	}
	marker := ""
	if r.Marker {
		marker = ", and its orphan marker"
	}
	if len(r.Unknown) > 0 {
		t.Notes = append(t.Notes, catalog.UnknownNote(r.Unknown))
	}
	if n := len(r.UndeleteRecords); n > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%s %d undelete record(s) of the cluster (they go with its last backup; kept while a backup is retained)", verb, n))
	}
	// The summary is the last note (the CLI prefixes it).
	t.Notes = append(t.Notes, fmt.Sprintf("%s %d backup(s), %d multipart upload(s) and %d escrow(s) of cluster %s%s",
		verb, len(r.Backups), len(r.Uploads), countEscrows(r.Escrows).planned, r.ClusterID, marker))
	return t
}

// Table is one row per orphan (prune --orphans, backup --all --prune), the
// reasons and whether the namespace owns the prefix below it.
func (r *OrphanReport) Table() output.Table {
	t := output.Table{Header: []string{"CLUSTER", "BACKUPS", "SIZE", "NEWEST BACKUP", "FIRST SEEN", "DELETE AFTER", "STATE", "REASON"},
		Wide: []string{"SIZE", "NEWEST BACKUP"}, Long: []string{"REASON"}, Key: "CLUSTER"}
	for _, o := range r.Orphans {
		reason := o.Reason
		if o.Error != "" {
			reason += "; " + o.Error
		}
		t.Rows = append(t.Rows, []string{o.ClusterID, fmt.Sprint(o.Backups), output.Bytes(o.Bytes), fmtTime(o.NewestBackup),
			fmtTime(o.FirstSeen), fmtTime(o.DeleteAfter), o.State, reason})
	}
	own := fmt.Sprintf("prefix %q owned by namespace %s: orphans are deleted after their grace (%s)", r.Prefix, r.Namespace, r.Grace)
	if !r.Owned {
		own = fmt.Sprintf("orphans are reported, never deleted: %s", r.NotOwned)
	}
	t.Notes = append(t.Notes, fmt.Sprintf("orphans of namespace %s (%d EtcdClusters): %d; %s", r.Namespace, r.EtcdClusters, len(r.Orphans), own))
	if r.DryRun {
		t.Notes = append(t.Notes, "dry run: nothing deleted, no marker written")
	}
	if len(r.Unknown) > 0 {
		t.Notes = append(t.Notes, catalog.UnknownNote(r.Unknown))
	}
	return t
}

// fmtTime is a table's time: UTC to the second, "-" when unknown.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}
