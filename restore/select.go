package restore

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
)

// Candidate is a committed backup the cluster could be rebuilt from.
type Candidate struct {
	Name          string       `json:"name"`
	Kind          catalog.Kind `json:"kind"`
	Time          time.Time    `json:"time"`
	Revision      int64        `json:"revision"`
	Source        string       `json:"source,omitempty"`
	ServerVersion string       `json:"serverVersion,omitempty"`
	RawSize       int64        `json:"rawSize,omitempty"`
	V2Keys        *int         `json:"v2Keys,omitempty"`
	// Status: chosen, verified, failed (with Detail), or empty when not
	// looked at; "planned" for the survivor snapshot a dry run would take.
	Status string `json:"status,omitempty"`
	Detail string `json:"detail,omitempty"`

	// Planned marks, in a dry run, the survivor snapshot that would be taken.
	Planned bool `json:"planned,omitempty"`

	// Drill is the backup's restore drill (drill.json); absent when it was
	// never drilled.
	Drill *catalog.DrillResult `json:"drill,omitempty"`
	// FromVersions: the backup is deleted or overwritten (Recovered, its
	// catalog.Version* status), and is read from the object versions it
	// wrote, Versions (object name → version id).
	FromVersions bool              `json:"fromVersions,omitempty"`
	Recovered    string            `json:"recovered,omitempty"`
	Versions     map[string]string `json:"versions,omitempty"`

	manifest *catalog.Manifest
	drill    *catalog.DrillSummary
	survivor bool // the pre-restore snapshot just taken of a surviving member
	// damaged is why the listing calls the backup damaged (catalog's
	// Entry.Damaged): set only on a backup named with --backup.
	damaged string
}

// proven reports whether the candidate's drill passed.
func (c Candidate) proven() bool { return c.drill.Proven() }

// drillFailed reports whether the candidate's drill ran and failed (an
// unreadable record is no proof, but no failure either).
func (c Candidate) drillFailed() bool { return c.drill.FailedBackup() }

// Ignored is a backup folder that cannot be restored from.
type Ignored struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

func candidateOf(m *catalog.Manifest) Candidate {
	c := Candidate{Name: m.Name, Kind: m.Kind, Time: m.StartedAt, Revision: m.Revision(), Source: m.Source.Name,
		ServerVersion: m.ServerVersion, RawSize: m.Snapshot.RawSize, manifest: m}
	if t, _, err := catalog.ParseBackupName(m.Name); err == nil {
		c.Time = t
	}
	if m.V2 != nil {
		k := m.V2.Keys
		c.V2Keys = &k
	}
	return c
}

// listedCandidate is the candidate of a committed backup, with its drill.
func listedCandidate(l catalog.Listed) Candidate {
	c := candidateOf(l.Manifest)
	c.drill, c.Drill = l.Drill, l.Drill.Result()
	return c
}

// damagedReason is why a backup the listing calls damaged is not chosen:
// list's status, and whether --backup can name it (not without a manifest).
func damagedReason(l catalog.Listed) string {
	if l.Manifest == nil {
		return "damaged: " + l.Damaged
	}
	return "damaged: " + l.Damaged + " (a damaged backup is used only when named with --backup)"
}

// drillFailedReason is why a backup whose drill failed is not chosen.
func drillFailedReason(c Candidate) string {
	return fmt.Sprintf("restore drill FAILED %s: %s (a backup whose drill failed is used only when named with --backup)",
		drillTime(c.drill.At), c.drill.Failed)
}

func drillTime(t time.Time) string {
	if t.IsZero() {
		return "at an unknown time"
	}
	return t.UTC().Format(time.RFC3339)
}

// rankCandidates orders the committed backups best first: the highest
// revision wins (the manifest's revision before the snapshot stream, a
// lower bound of what the snapshot holds); among equal revisions one whose
// restore drill passed, then the newer time. Incomplete backups, those the
// listing calls damaged (catalog.CheckEntries: a manifest missing or
// unreadable, an object it names missing or of another size; the reason
// is list's "damaged: ..." status) and those whose manifest the store
// failed to return are set aside with the reason, and so are backups whose
// drill failed: damaged and drill-failed ones are used only with --backup
// (selectCandidate).
func rankCandidates(listed []catalog.Listed) ([]Candidate, []Ignored) {
	var cands []Candidate
	var ignored []Ignored
	for _, l := range listed {
		switch {
		case !l.Committed:
			ignored = append(ignored, Ignored{Name: l.Name, Reason: "incomplete: no manifest"})
		case l.Damaged != "":
			ignored = append(ignored, Ignored{Name: l.Name, Reason: damagedReason(l)})
		case l.ManifestErr != nil:
			ignored = append(ignored, Ignored{Name: l.Name, Reason: "unknown: manifest could not be read: " + l.ManifestErr.Error()})
		default:
			c := listedCandidate(l)
			if c.drillFailed() {
				ignored = append(ignored, Ignored{Name: l.Name, Reason: drillFailedReason(c)})
				continue
			}
			cands = append(cands, c)
		}
	}
	sortCandidates(cands)
	return cands, ignored
}

// sortCandidates: the highest revision first; at equal revision the
// survivor's snapshot (planned or just taken) first as its data is live,
// then a backup whose drill passed, then the newer.
func sortCandidates(cands []Candidate) {
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.Revision != b.Revision {
			return a.Revision > b.Revision
		}
		if sa, sb := a.Planned || a.survivor, b.Planned || b.survivor; sa != sb {
			return sa
		}
		if a.proven() != b.proven() {
			return a.proven()
		}
		if !a.Time.Equal(b.Time) {
			return a.Time.After(b.Time)
		}
		return a.Name > b.Name
	})
}

// selectCandidate picks the backup to restore from cands (ranked by
// rankCandidates, with the survivor's planned snapshot if any): the first,
// or the one named by --backup (name). A backup whose drill failed, or
// that the listing calls damaged, is not among cands; named with --backup
// it is used, the failed check or the damage in its Detail and in the
// plan's reason (a damaged one is then refused at verification, naming
// the next good one). When every committed backup failed its drill, the error names
// them and says to pass --backup. It returns the candidates (the forced
// one added) and the index chosen.
func selectCandidate(clusterID, prefix string, listed []catalog.Listed, cands []Candidate, ignored []Ignored, name string, survivor *Survivor) ([]Candidate, int, error) {
	if survivor != nil && survivor.Backup != "" {
		for i := range cands {
			cands[i].survivor = cands[i].Name == survivor.Backup
		}
		sortCandidates(cands)
	}
	var failed []Candidate
	for _, l := range listed {
		if l.Committed && l.ManifestErr == nil && l.Manifest != nil && l.Damaged == "" {
			if c := listedCandidate(l); c.drillFailed() {
				failed = append(failed, c)
			}
		}
	}
	if name != "" {
		if i := findCandidate(cands, name); i >= 0 {
			return cands, i, nil
		}
		for _, l := range listed {
			if l.Name == name && l.Committed && l.Manifest != nil && l.Damaged != "" {
				c := listedCandidate(l)
				c.damaged = l.Damaged
				c.Detail = "WARNING: the listing calls it damaged: " + l.Damaged
				cands = append(cands, c)
				sortCandidates(cands)
				return cands, findCandidate(cands, name), nil
			}
		}
		for _, c := range failed {
			if c.Name == name {
				c.Detail = "WARNING: " + drillFailedReason(c)
				cands = append(cands, c)
				sortCandidates(cands)
				return cands, findCandidate(cands, name), nil
			}
		}
		var names []string
		for _, c := range cands {
			names = append(names, c.Name)
		}
		why := "not found"
		for _, ig := range ignored {
			if ig.Name == name {
				why = ig.Reason
			}
		}
		return cands, -1, fmt.Errorf("--backup %s: %s (committed backups: %s)", name, why, strings.Join(names, ", "))
	}
	if len(cands) > 0 {
		return cands, 0, nil
	}
	if len(failed) > 0 {
		var what []string
		for _, c := range failed {
			what = append(what, fmt.Sprintf("%s (drill FAILED %s: %s)", c.Name, drillTime(c.drill.At), c.drill.Failed))
		}
		return cands, -1, fmt.Errorf("every committed backup of cluster %s failed its restore drill: %s; "+
			"pass --backup NAME to restore from one of them anyway", clusterID, strings.Join(what, ", "))
	}
	skipped := ""
	if survivor != nil {
		skipped = survivor.Skipped
	}
	// Damaged backups, and those whose manifest could not be read (a
	// frozen store prefix: the store's stall detection says so), are
	// named: "no committed backup" would send the SRE looking for backups
	// that are there.
	var set []string
	for _, ig := range ignored {
		if strings.HasPrefix(ig.Reason, "damaged: ") || strings.HasPrefix(ig.Reason, "unknown: ") {
			set = append(set, ig.Name+" ("+ig.Reason+")")
		}
	}
	if len(set) > 0 {
		return cands, -1, fmt.Errorf("no backup of cluster %s under %s checks out: %s; and no surviving member to snapshot (%s)",
			clusterID, prefix, strings.Join(set, ", "), skipped)
	}
	return cands, -1, fmt.Errorf("no committed backup of cluster %s under %s, and no surviving member to snapshot (%s)", clusterID, prefix, skipped)
}

func findCandidate(cands []Candidate, name string) int {
	for i, c := range cands {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// chooseReason explains, in one sentence, why cands[i] was chosen.
func chooseReason(cands []Candidate, i int, forced bool, survivor *Survivor) string {
	c := cands[i]
	var b strings.Builder
	switch {
	case forced:
		fmt.Fprintf(&b, "forced with --backup (revision %d)", c.Revision)
		if c.damaged != "" {
			fmt.Fprintf(&b, "; WARNING: the listing calls it damaged: %s", c.damaged)
		} else if c.drillFailed() {
			fmt.Fprintf(&b, "; WARNING: its restore drill FAILED %s: %s", drillTime(c.drill.At), c.drill.Failed)
		} else if c.proven() {
			fmt.Fprintf(&b, "; drilled %s: proven restorable", drillTime(c.drill.At))
		}
		if first := firstUnforced(cands, i); first >= 0 {
			fmt.Fprintf(&b, "; the newest candidate would have been %s at revision %d", cands[first].Name, cands[first].Revision)
		}
	case c.Planned:
		fmt.Fprintf(&b, "member %s of the old cluster still answers at revision %d: its data is at least as new as any backup, "+
			"so a pre-restore snapshot of it would be taken first and restored", survivor.Member, c.Revision)
		if len(cands) > 1 {
			fmt.Fprintf(&b, " (the newest backup in COS, %s, is at revision %d)", cands[1].Name, cands[1].Revision)
		}
	case len(refusedBefore(cands, i)) > 0:
		fmt.Fprintf(&b, "%s failed verification, so the next candidate was tried: revision %d",
			strings.Join(refusedBefore(cands, i), ", "), c.Revision)
		if c.proven() {
			fmt.Fprintf(&b, "; drilled %s: proven restorable", drillTime(c.drill.At))
		}
	case survivor != nil && survivor.Backup == c.Name:
		fmt.Fprintf(&b, "the pre-restore snapshot just taken of surviving member %s has the highest revision (%d) of %s",
			survivor.Member, c.Revision, output.Count(len(cands), "candidate"))
		if len(cands) > 1 {
			fmt.Fprintf(&b, "; the newest backup before it, %s, is at revision %d", cands[1].Name, cands[1].Revision)
		}
	default:
		fmt.Fprintf(&b, "highest revision (%d) of %s", c.Revision, output.Count(len(cands), "committed backup"))
		if i+1 < len(cands) && cands[i+1].Revision == c.Revision {
			if c.proven() && !cands[i+1].proven() {
				fmt.Fprintf(&b, "; ties with %s, and was drilled", cands[i+1].Name)
			} else {
				fmt.Fprintf(&b, "; ties with %s, and is newer", cands[i+1].Name)
			}
		}
		if c.proven() {
			fmt.Fprintf(&b, "; drilled %s: proven restorable", drillTime(c.drill.At))
		}
		if survivor != nil && survivor.Skipped != "" {
			fmt.Fprintf(&b, "; no survivor snapshot: %s", survivor.Skipped)
		}
	}
	return b.String()
}

// firstUnforced is the candidate that would have been chosen without
// --backup: the first that is not a failed drill or a damaged backup added
// by it (-1: none, or it is i).
func firstUnforced(cands []Candidate, i int) int {
	for k, c := range cands {
		if !c.drillFailed() && c.damaged == "" {
			if k == i {
				return -1
			}
			return k
		}
	}
	return -1
}

// StatusFailedVerification is the status of a candidate refused at
// verification (its Detail says why).
const StatusFailedVerification = "failed verification"

// refusedBefore names the candidates ranked before i that were refused at
// verification (a fallback: see verifyCandidates).
func refusedBefore(cands []Candidate, i int) []string {
	var out []string
	for _, c := range cands[:i] {
		if c.Status == StatusFailedVerification {
			out = append(out, fmt.Sprintf("%s (revision %d)", c.Name, c.Revision))
		}
	}
	return out
}

// Fallback is a candidate refused at verification, without --backup, and
// the candidate tried after it.
type Fallback struct {
	Backup   string `json:"backup"`
	Revision int64  `json:"revision"`
	// Reason is the verification's error: the object, the check and the
	// cause.
	Reason string `json:"reason"`
	// Checks are the refused backup's checks (the failed one last).
	Checks []Check `json:"checks,omitempty"`
	// Next is the candidate tried next; empty when none was left.
	Next string `json:"next,omitempty"`
}

// refusedAll is the error when every candidate was refused: the last
// one's BackupError, naming those refused before it.
func refusedAll(clusterID string, fbs []Fallback, last error) error {
	be := &BackupError{Backup: fbs[len(fbs)-1].Backup, Err: last}
	if len(fbs) == 1 {
		return be
	}
	var names []string
	for _, fb := range fbs {
		names = append(names, fb.Backup)
	}
	return fmt.Errorf("every candidate backup of cluster %s failed verification, each tried once, in this order: %s; the last: %w",
		clusterID, strings.Join(names, ", "), be)
}

// atOrBelow keeps, for a point-in-time restore to rev, the candidates
// whose revision is at or below it (the manifest's revision, a lower
// bound of the snapshot's: one whose snapshot turns out above rev is
// refused at Fetch, and the next tried); the others are set aside,
// with the reason, and returned.
func atOrBelow(cands []Candidate, ignored []Ignored, rev int64) ([]Candidate, []Ignored, []Candidate) {
	var keep, above []Candidate
	for _, c := range cands {
		if c.Revision > rev {
			above = append(above, c)
			ignored = append(ignored, Ignored{Name: c.Name, Reason: fmt.Sprintf("revision %d is above --to-revision %d", c.Revision, rev)})
			continue
		}
		keep = append(keep, c)
	}
	return keep, ignored, above
}

// noBackupAtOrBelow is a point-in-time restore to rev without a
// committed backup at or below it.
func noBackupAtOrBelow(clusterID string, rev int64, above []Candidate) error {
	if len(above) == 0 {
		return fmt.Errorf("no committed backup of cluster %s to replay the journal from up to revision %d", clusterID, rev)
	}
	oldest := above[len(above)-1]
	return fmt.Errorf("no committed backup of cluster %s at or below revision %d: the oldest, %s, is at revision %d; "+
		"a point-in-time restore cannot go back before the oldest full backup", clusterID, rev, oldest.Name, oldest.Revision)
}
