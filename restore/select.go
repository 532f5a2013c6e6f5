package restore

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
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

	manifest *catalog.Manifest
	drill    *catalog.DrillSummary
	survivor bool // the pre-restore snapshot just taken of a surviving member
}

// proven reports whether the candidate's drill passed.
func (c Candidate) proven() bool { return c.drill.Proven() }

// drillFailed reports whether the candidate's drill ran and failed (an
// unreadable record is no proof, but no failure either).
func (c Candidate) drillFailed() bool {
	return c.drill != nil && c.drill.Err == "" && !c.drill.Passed
}

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
// restore drill passed, then the newer time. Incomplete and unreadable
// backups are set aside with the reason, and so are backups whose drill
// failed: those are used only with --backup (selectCandidate).
func rankCandidates(listed []catalog.Listed) ([]Candidate, []Ignored) {
	var cands []Candidate
	var ignored []Ignored
	for _, l := range listed {
		switch {
		case !l.Committed:
			ignored = append(ignored, Ignored{Name: l.Name, Reason: "incomplete: no manifest"})
		case l.ManifestErr != nil:
			ignored = append(ignored, Ignored{Name: l.Name, Reason: "unreadable manifest: " + l.ManifestErr.Error()})
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
// or the one named by --backup (name). A backup whose drill failed is not
// among cands; named with --backup it is used, the failed check in its
// Detail and in the plan's reason. When every committed backup failed its
// drill, the error names them and says to pass --backup. It returns the
// candidates (the forced one added) and the index chosen.
func selectCandidate(clusterID, prefix string, listed []catalog.Listed, cands []Candidate, ignored []Ignored, name string, survivor *Survivor) ([]Candidate, int, error) {
	if survivor != nil && survivor.Backup != "" {
		for i := range cands {
			cands[i].survivor = cands[i].Name == survivor.Backup
		}
		sortCandidates(cands)
	}
	var failed []Candidate
	for _, l := range listed {
		if l.Committed && l.ManifestErr == nil && l.Manifest != nil {
			if c := listedCandidate(l); c.drillFailed() {
				failed = append(failed, c)
			}
		}
	}
	if name != "" {
		if i := findCandidate(cands, name); i >= 0 {
			return cands, i, nil
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
		if c.drillFailed() {
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
	case survivor != nil && survivor.Backup == c.Name:
		fmt.Fprintf(&b, "the pre-restore snapshot just taken of surviving member %s has the highest revision (%d) of %s",
			survivor.Member, c.Revision, plural(len(cands), "candidate"))
		if len(cands) > 1 {
			fmt.Fprintf(&b, "; the newest backup before it, %s, is at revision %d", cands[1].Name, cands[1].Revision)
		}
	default:
		fmt.Fprintf(&b, "highest revision (%d) of %s", c.Revision, plural(len(cands), "committed backup"))
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
// --backup: the first that is not a failed drill added by it (-1: none,
// or it is i).
func firstUnforced(cands []Candidate, i int) int {
	for k, c := range cands {
		if !c.drillFailed() {
			if k == i {
				return -1
			}
			return k
		}
	}
	return -1
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
