package restore

import (
	"fmt"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/output"
)

// sections builds a report of text and tables in order: text is gathered
// until a table needs it as its Title.
type sections struct {
	out  []output.Table
	text strings.Builder
}

func (s *sections) printf(format string, a ...any) { fmt.Fprintf(&s.text, format, a...) }

// table adds t with the text so far above it.
func (s *sections) table(t output.Table) {
	t.Title = s.text.String()
	s.text.Reset()
	s.out = append(s.out, t)
}

// add adds ts, the text so far above the first.
func (s *sections) add(ts []output.Table) {
	if len(ts) == 0 {
		return
	}
	ts[0].Title = s.text.String() + ts[0].Title
	s.text.Reset()
	s.out = append(s.out, ts...)
}

// done is the sections, the text left over last.
func (s *sections) done() []output.Table {
	if s.text.Len() > 0 {
		s.out = append(s.out, output.Table{Title: s.text.String()})
		s.text.Reset()
	}
	return s.out
}

// Tables are a restore's report for people: the plan (survivor,
// candidates, the choice and its checks), the data dirs, the new cluster's
// settings, and the verification when there was one (output.RenderAll).
func (r *Result) Tables() []output.Table {
	var s sections
	p := &r.Plan
	if p.DryRun {
		s.printf("Restore plan for cluster %s (dry run: nothing was changed)\n\n", p.ClusterID)
	} else {
		s.printf("Restore of cluster %s\n\n", p.ClusterID)
	}
	if p.Site != "" {
		s.printf("Read from the %s\n\n", p.Site)
	}
	s.add(p.SelectionTables())
	if len(p.Members) > 0 {
		s.printf("\nData dirs:\n")
		s.table(p.DataDirsTable())
	}
	s.printf("\nNew cluster: --initial-cluster %s --initial-cluster-token %s --initial-cluster-state new\n", p.InitialCluster, p.Token)
	if p.TokenGenerated {
		s.printf("  (the token was generated: members restored in other runs must use it)\n")
	}
	if p.EtcdVersion != "" {
		s.printf("Start the members with etcd %s, the version the backup was taken from.\n", p.EtcdVersion)
	}
	switch {
	case p.Snapshot != nil:
		s.printf("Expected: revision >= %d (snapshot revision %d + bump %d), %d live keys",
			p.MinRevision, p.Snapshot.Revision, p.BumpRevision, p.Snapshot.LiveKeys)
		if p.Snapshot.AttachedKeys > 0 {
			s.printf(" (%d on leases, which etcd may expire once the cluster runs: verify counts them apart)", p.Snapshot.AttachedKeys)
		}
		if n := p.Snapshot.LeasedKeys - p.Snapshot.AttachedKeys; n > 0 {
			s.printf(" (warning: %d name a lease the snapshot does not hold: etcd attaches them to none, so they will never expire, and verify counts them exactly; delete them by hand if their lease mattered)", n)
		}
		s.printf(".\n")
	case p.Chosen != nil:
		s.printf("Expected: revision >= %d (manifest revision %d + bump %d).\n", p.MinRevision, p.Chosen.Revision, p.BumpRevision)
	}
	for _, pr := range p.Problems {
		s.printf("PROBLEM: %s\n", pr)
	}
	if r.Duration > 0 {
		s.printf("\nData dirs written in %s.\n", r.Duration.Round(time.Millisecond))
	}
	if r.Verify != nil {
		s.printf("\n")
		s.add(r.Verify.Tables())
	}
	if r.TotalToVerified > 0 {
		s.printf("\nTotal time from start to a verified cluster: %s.\n", r.TotalToVerified.Round(time.Millisecond))
	} else if !p.DryRun && r.Duration > 0 && r.Verify == nil && p.Snapshot != nil {
		s.printf("\nOnce the members run: etcd-recovery restore verify --endpoints ... --min-revision %d --expect-keys %d --expect-members %d\n",
			p.MinRevision, p.Snapshot.LiveKeys, len(strings.Split(p.InitialCluster, ",")))
	}
	if !p.DryRun && r.Duration > 0 && p.Chosen != nil && p.Chosen.V2Keys != nil && *p.Chosen.V2Keys > 0 {
		s.printf("The backup holds %d v2 keys: once the cluster runs with --enable-v2, run `etcd-recovery restore v2 --cluster-id %s --backup %s --endpoints ...`.\n",
			*p.Chosen.V2Keys, p.ClusterID, p.Chosen.Name)
	}
	return s.done()
}

// SelectionTables are the survivor, the candidates, the choice and the
// checks of the chosen backup (also the first part of kube's operator
// restore report).
func (p *Plan) SelectionTables() []output.Table {
	var s sections
	p.latestText(&s)
	switch sv := p.Survivor; {
	case sv == nil:
	case sv.Planned:
		s.printf("Survivor: member %s (%s) answers at revision %d: a pre-restore snapshot of it would be committed to COS first.\n",
			sv.Member, sv.Endpoint, sv.Revision)
	case sv.Backup != "":
		s.printf("Survivor: member %s (%s) answered: its snapshot was committed to COS first as %s (revision %d).\n",
			sv.Member, sv.Endpoint, sv.Backup, sv.Revision)
	default:
		s.printf("Survivor: none (%s).\n", sv.Skipped)
	}
	if len(p.Candidates) > 0 {
		s.printf("\nCandidates, best first:\n")
		s.table(p.CandidatesTable())
	}
	for _, ig := range p.Ignored {
		s.printf("Ignored: %s: %s\n", ig.Name, ig.Reason)
	}
	for _, fb := range p.Fallbacks {
		if fb.Next != "" {
			s.printf("Refused at verification: %s: %s; tried next: %s\n", fb.Backup, fb.Reason, fb.Next)
		} else {
			s.printf("Refused at verification: %s: %s; no candidate left\n", fb.Backup, fb.Reason)
		}
	}
	if p.Chosen != nil {
		s.printf("\nChosen: %s, because %s.\n", p.Chosen.Name, p.Reason)
	}
	if len(p.Checks) > 0 {
		s.printf("\nChecks before anything is written:\n")
		s.table(ChecksTable(p.Checks))
	}
	return s.done()
}

// CandidatesTable is one row per backup considered, best first.
func (p *Plan) CandidatesTable() output.Table {
	t := output.Table{Header: []string{"BACKUP", "KIND", "TIME (UTC)", "REVISION", "SOURCE", "ETCD", "RAW", "V2 KEYS", "STATUS", "DETAIL"},
		Wide: []string{"KIND", "TIME (UTC)", "SOURCE", "ETCD", "V2 KEYS"}, Long: []string{"DETAIL"}}
	for _, cd := range p.Candidates {
		v2, raw := "-", "-"
		if cd.V2Keys != nil {
			v2 = fmt.Sprint(*cd.V2Keys)
		}
		if cd.RawSize > 0 {
			raw = output.Bytes(cd.RawSize)
		}
		t.Rows = append(t.Rows, []string{cd.Name, string(cd.Kind), cd.Time.UTC().Format("2006-01-02 15:04:05"),
			fmt.Sprint(cd.Revision), cd.Source, cd.ServerVersion, raw, v2, cd.Status, cd.Detail})
	}
	return t
}

// DataDirsTable is one row per member: its data dir and what the restore
// did (or would do) with it.
func (p *Plan) DataDirsTable() output.Table {
	t := output.Table{Header: []string{"MEMBER", "PEER URLS", "DATA DIR", "FOUND", "ACTION"},
		Wide: []string{"MEMBER", "PEER URLS"}, Long: []string{"ACTION"}, Key: "DATA DIR"}
	for _, m := range p.Members {
		t.Rows = append(t.Rows, []string{m.Name, strings.Join(m.PeerURLs, ","), m.DataDir, m.State, p.memberAction(m)})
	}
	return t
}

func (p *Plan) memberAction(m Member) string {
	switch {
	case m.Restored && m.MovedTo != "":
		return "moved aside to " + m.MovedTo + ", then written"
	case m.Restored:
		return "written"
	case m.Problem != "":
		return "REFUSED: " + m.Problem
	case m.State == DirNonEmpty && m.MovedTo == "":
		return "REFUSED: not empty (--force moves it aside)"
	case p.DryRun && m.MovedTo != "":
		return "would move aside to " + m.MovedTo + ", then write"
	case p.DryRun:
		return "would write"
	}
	return "not written"
}

// ChecksTable is one row per check.
func ChecksTable(checks []Check) output.Table {
	t := output.Table{Header: []string{"CHECK", "STATUS", "DETAIL"}, Long: []string{"DETAIL"}}
	for _, ck := range checks {
		t.Rows = append(t.Rows, []string{ck.Name, ck.Status, ck.Detail})
	}
	return t
}

// Tables are the rebuilt cluster's members, the checks and the verdict.
func (r *VerifyReport) Tables() []output.Table {
	t := output.Table{Header: []string{"MEMBER", "ID", "ENDPOINT", "HEALTHY", "VERSION", "REVISION", "ERROR"},
		Wide: []string{"ID"}, Long: []string{"ERROR"}}
	for _, m := range r.Members {
		rev := "-"
		if m.Revision > 0 {
			rev = fmt.Sprint(m.Revision)
		}
		t.Rows = append(t.Rows, []string{m.Name, m.ID, m.Endpoint, fmt.Sprint(m.Healthy), m.Version, rev, m.Error})
	}
	ct := ChecksTable(r.Checks)
	verdict := "FAILED"
	if r.Verified {
		verdict = "VERIFIED"
	}
	ct.Footer = fmt.Sprintf("Rebuilt cluster: %s (waited %s)\n", verdict, r.Waited.Round(time.Millisecond))
	return []output.Table{t, ct}
}

// Tables are `restore verify`'s report: where the expectations came from,
// then the verification.
func (c *ClusterCheck) Tables() []output.Table {
	var s sections
	if c.Backup != "" {
		s.printf("Restored from %s of cluster %s", c.Backup, c.ClusterID)
		if c.Snapshot != nil {
			s.printf(": snapshot revision %d, %d live keys (%d on leases", c.Snapshot.Revision, c.Snapshot.LiveKeys, c.Snapshot.AttachedKeys)
			if n := c.Snapshot.LeasedKeys - c.Snapshot.AttachedKeys; n > 0 {
				s.printf("; warning: %d name a lease the snapshot does not hold, will never expire, and are counted with the keys on none", n)
			}
			s.printf(")")
		}
		s.printf("\n")
	}
	if c.VerifyReport != nil {
		s.add(c.VerifyReport.Tables())
	}
	return s.done()
}

// Table is one row: what `restore v2` wrote.
func (r *V2Report) Table() output.Table {
	return output.Table{
		Header: []string{"CLUSTER", "BACKUP", "ENDPOINT", "KEYS", "DIRS", "CREATED", "UPDATED", "UNCHANGED", "EXPIRED", "FAILED"},
		Wide:   []string{"CLUSTER", "ENDPOINT"},
		Rows: [][]string{{r.ClusterID, r.Backup, r.Endpoint, fmt.Sprint(r.Keys), fmt.Sprint(r.Dirs), fmt.Sprint(r.Created),
			fmt.Sprint(r.Updated), fmt.Sprint(r.Unchanged), fmt.Sprint(r.Expired), fmt.Sprint(r.Failed)}},
	}
}
