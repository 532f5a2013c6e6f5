package replicate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/store"
)

// Tables are a pass's clusters and its failures.
func (p *Pass) Tables() []output.Table {
	t := output.Table{Header: []string{"CLUSTER", "BACKUPS", "SEGMENTS", "RECORDS", "ALREADY", "FAILURES", "PENDING", "JOURNAL REVISION", "NEWEST BACKUP"},
		Wide: []string{"ALREADY", "NEWEST BACKUP"}}
	for _, c := range p.Clusters {
		t.Rows = append(t.Rows, []string{c.ClusterID, fmt.Sprint(c.Backups), fmt.Sprint(c.Segments), fmt.Sprint(c.Records),
			fmt.Sprint(c.Already), fmt.Sprint(c.Failures), fmt.Sprint(c.Pending), revision(c.JournalLastRevision), dash(c.NewestBackup)})
	}
	t.Footer = fmt.Sprintf("%s copied (%s), %d already there, %d superseded; read back %s in %.1fs; %s\n",
		output.Count(p.Copied, "object"), output.Bytes(p.CopiedBytes), p.Already, p.Superseded,
		output.Bytes(p.VerifyBytes), p.VerifySeconds, p.Finished.Sub(p.Started).Round(time.Millisecond))
	for _, e := range p.Errors {
		t.Notes = append(t.Notes, "ERROR: "+e)
	}
	return append([]output.Table{t}, failuresTable(p.Failures)...)
}

func failuresTable(fs []catalog.ReplicaFailure) []output.Table {
	if len(fs) == 0 {
		return nil
	}
	t := output.Table{Title: "Verification failures (kept, never overwritten):\n", Header: []string{"KEY", "AT", "REASON"}, Long: []string{"REASON"}}
	for _, f := range fs {
		t.Rows = append(t.Rows, []string{f.Key, f.At.UTC().Format(time.RFC3339), f.Reason})
	}
	return []output.Table{t}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func revision(r int64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprint(r)
}

// StatusReport is the copier's status record as read from the second
// site, with the lags at the time it was read (replicate status).
type StatusReport struct {
	catalog.ReplicaStatus
	// Read is when it was read; Age how old the record was then.
	Read       time.Time `json:"read"`
	AgeSeconds float64   `json:"ageSeconds"`
	// LagSeconds: now - SyncedAt, the backups' lag (absent before a full
	// pass completed).
	LagSeconds *float64 `json:"lagSeconds,omitempty"`
	// Rows are the clusters, by id, each with its journal's lag.
	Rows []StatusRow `json:"rows"`
}

// StatusRow is one cluster's progress and lag.
type StatusRow struct {
	ClusterID string `json:"clusterID"`
	catalog.ReplicaCluster
	// JournalLagSeconds: now - JournalSyncedAt (absent when never synced).
	JournalLagSeconds *float64 `json:"journalLagSeconds,omitempty"`
}

// ReadStatus reads the copier's status record from the second site alone
// (store.ErrNotFound, wrapped, when no copier wrote one).
func ReadStatus(ctx context.Context, st store.Store, l catalog.Layout, now time.Time) (*StatusReport, error) {
	s, err := catalog.ReadReplicaStatus(ctx, st, l)
	if err != nil {
		return nil, err
	}
	r := &StatusReport{ReplicaStatus: s, Read: now.UTC(), AgeSeconds: now.Sub(s.Updated).Seconds()}
	if !s.SyncedAt.IsZero() {
		lag := now.Sub(s.SyncedAt).Seconds()
		r.LagSeconds = &lag
	}
	for id, c := range s.Clusters {
		row := StatusRow{ClusterID: id, ReplicaCluster: c}
		if !c.JournalSyncedAt.IsZero() {
			lag := now.Sub(c.JournalSyncedAt).Seconds()
			row.JournalLagSeconds = &lag
		}
		r.Rows = append(r.Rows, row)
	}
	slices.SortFunc(r.Rows, func(a, b StatusRow) int { return strings.Compare(a.ClusterID, b.ClusterID) })
	return r, nil
}

// Tables are the clusters' progress, then the failures.
func (r *StatusReport) Tables() []output.Table {
	synced := "never (no full pass completed yet)"
	if r.LagSeconds != nil {
		synced = r.SyncedAt.UTC().Format(time.RFC3339) + " (" + output.Age(time.Duration(*r.LagSeconds*float64(time.Second))) + " ago)"
	}
	title := fmt.Sprintf("Copier %s from %s; record written %s (%s ago)\nFull pass synced: %s\nPending: %s; copied since start: %s (%s); failures: %d\n",
		dash(r.Copier), r.Source, r.Updated.UTC().Format(time.RFC3339), output.Age(time.Duration(r.AgeSeconds*float64(time.Second))),
		synced, output.Count(r.Pending, "object"), output.Count(int(r.Copied), "object"), output.Bytes(r.CopiedBytes), len(r.Failures))
	t := output.Table{Title: title, Header: []string{"CLUSTER", "JOURNAL SYNCED", "JOURNAL LAG", "LAST REVISION", "NEWEST BACKUP", "PENDING"},
		Wide: []string{"JOURNAL SYNCED"}}
	for _, row := range r.Rows {
		synced, lag := "-", "-"
		if row.JournalLagSeconds != nil {
			synced = row.JournalSyncedAt.UTC().Format(time.RFC3339)
			lag = output.Age(time.Duration(*row.JournalLagSeconds * float64(time.Second)))
		}
		t.Rows = append(t.Rows, []string{row.ClusterID, synced, lag, revision(row.JournalLastRevision), dash(row.NewestBackup), fmt.Sprint(row.Pending)})
	}
	return append([]output.Table{t}, failuresTable(r.Failures)...)
}
