package restore

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/backup"
)

// Candidate is a committed backup the cluster could be rebuilt from.
type Candidate struct {
	Name          string      `json:"name"`
	Kind          backup.Kind `json:"kind"`
	Time          time.Time   `json:"time"`
	Revision      int64       `json:"revision"`
	Source        string      `json:"source,omitempty"`
	ServerVersion string      `json:"serverVersion,omitempty"`
	RawSize       int64       `json:"rawSize,omitempty"`
	V2Keys        *int        `json:"v2Keys,omitempty"`
	// Status: chosen, verified, failed (with Detail), or empty when not
	// looked at; "planned" for the survivor snapshot a dry run would take.
	Status string `json:"status,omitempty"`
	Detail string `json:"detail,omitempty"`

	// Planned marks, in a dry run, the survivor snapshot that would be taken.
	Planned bool `json:"planned,omitempty"`

	manifest *backup.Manifest
}

// Ignored is a backup folder that cannot be restored from.
type Ignored struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

func candidateOf(m *backup.Manifest) Candidate {
	c := Candidate{Name: m.Name, Kind: m.Kind, Time: m.StartedAt, Revision: m.Revision(), Source: m.Source.Name,
		ServerVersion: m.ServerVersion, RawSize: m.Snapshot.RawSize, manifest: m}
	if t, _, err := backup.ParseBackupName(m.Name); err == nil {
		c.Time = t
	}
	if m.V2 != nil {
		k := m.V2.Keys
		c.V2Keys = &k
	}
	return c
}

// rankCandidates orders the committed backups best first: the highest
// revision wins (the manifest's revision before the snapshot stream, a
// lower bound of what the snapshot holds), the newer time breaks ties.
// Incomplete and unreadable backups are set aside with the reason.
func rankCandidates(listed []backup.Listed) ([]Candidate, []Ignored) {
	var cands []Candidate
	var ignored []Ignored
	for _, l := range listed {
		switch {
		case !l.Committed:
			ignored = append(ignored, Ignored{Name: l.Name, Reason: "incomplete: no manifest"})
		case l.ManifestErr != nil:
			ignored = append(ignored, Ignored{Name: l.Name, Reason: "unreadable manifest: " + l.ManifestErr.Error()})
		default:
			cands = append(cands, candidateOf(l.Manifest))
		}
	}
	sortCandidates(cands)
	return cands, ignored
}

func sortCandidates(cands []Candidate) {
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.Revision != b.Revision {
			return a.Revision > b.Revision
		}
		if !a.Time.Equal(b.Time) {
			return a.Time.After(b.Time)
		}
		return a.Name > b.Name
	})
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
		if i > 0 {
			fmt.Fprintf(&b, "; the newest candidate would have been %s at revision %d", cands[0].Name, cands[0].Revision)
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
			fmt.Fprintf(&b, "; ties with %s, and is newer", cands[i+1].Name)
		}
		if survivor != nil && survivor.Skipped != "" {
			fmt.Fprintf(&b, "; no survivor snapshot: %s", survivor.Skipped)
		}
	}
	return b.String()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
