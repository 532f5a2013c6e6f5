package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/output"
)

const defaultProbeTimeout = 3 * time.Second

func listCommand() *cli.Command {
	return &cli.Command{
		Name:   "list",
		Usage:  "list a cluster's backups, newest first, incomplete ones marked, with why retention keeps or deletes each",
		Flags:  concat(cosFlags(), []cli.Flag{clusterIDFlag(), outputFlag()}, policyFlags()),
		Action: runList,
	}
}

// listRow is one backup in `list`, for both the table and JSON.
type listRow struct {
	Name       string           `json:"name"`
	Kind       backup.Kind      `json:"kind"`
	Time       time.Time        `json:"time"`
	Status     string           `json:"status"` // committed, incomplete, unreadable
	Revision   int64            `json:"revision,omitempty"`
	RawSize    int64            `json:"rawSize,omitempty"`
	StoredSize int64            `json:"storedSize"`
	V2Keys     *int             `json:"v2Keys,omitempty"`
	Source     string           `json:"source,omitempty"`
	Error      string           `json:"error,omitempty"`
	Manifest   *backup.Manifest `json:"manifest,omitempty"`
	// Retention is what prune would do with the backup now.
	Retention retention `json:"retention"`
}

// retention is the retention decision for one backup in `list`.
type retention struct {
	Keep   bool     `json:"keep"`
	Rules  []string `json:"rules,omitempty"`
	Reason string   `json:"reason"`
}

func (r retention) String() string {
	if r.Keep {
		return "keep: " + r.Reason
	}
	return "would delete: " + r.Reason
}

func runList(c *cli.Context) error {
	clusterID := c.String("cluster-id")
	if clusterID == "" {
		return usagef("list: --cluster-id is required")
	}
	if err := backup.ValidateClusterID(clusterID); err != nil {
		return usageError{err}
	}
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return usageError{err}
	}
	policy, err := policyFromFlags(c)
	if err != nil {
		return err
	}
	store, layout, err := cosStore(c)
	if err != nil {
		return err
	}
	listed, err := backup.ListBackups(c.Context, store, layout, clusterID)
	if err != nil {
		return fmt.Errorf("list cluster %s: %w", clusterID, err)
	}
	// Pure: the plan is only shown, nothing is deleted.
	entries := make([]backup.Entry, len(listed))
	for i, l := range listed {
		entries[i] = l.Entry
	}
	decisions := map[string]backup.Decision{}
	for _, d := range backup.ApplyPolicy(entries, time.Now(), policy).Decisions {
		decisions[d.Entry.Name] = d
	}
	rows := make([]listRow, 0, len(listed))
	t := output.Table{Header: []string{"BACKUP", "KIND", "TIME (UTC)", "STATUS", "REVISION", "RAW", "STORED", "V2 KEYS", "SOURCE", "RULE/REASON"}}
	for _, l := range listed {
		d := decisions[l.Name]
		r := listRow{Name: l.Name, Kind: l.Kind, Time: l.Time, Status: "committed",
			Retention: retention{Keep: d.Keep, Rules: d.Rules, Reason: d.Reason}}
		for _, o := range l.Objects {
			r.StoredSize += o.Size
		}
		switch {
		case !l.Committed:
			r.Status = "incomplete"
		case l.ManifestErr != nil:
			r.Status, r.Error = "unreadable", l.ManifestErr.Error()
		default:
			m := l.Manifest
			r.Revision, r.RawSize, r.Source, r.Manifest = m.RevisionBefore, m.Snapshot.RawSize, m.Source.Name, m
			if m.V2 != nil {
				r.V2Keys = &m.V2.Keys
			}
		}
		rows = append(rows, r)
		v2 := "-"
		if r.V2Keys != nil {
			v2 = fmt.Sprint(*r.V2Keys)
		}
		rev, raw := "-", "-"
		if r.Revision > 0 {
			rev, raw = fmt.Sprint(r.Revision), output.Bytes(r.RawSize)
		}
		t.Rows = append(t.Rows, []string{r.Name, string(r.Kind), r.Time.Format("2006-01-02 15:04:05"), r.Status, rev, raw,
			output.Bytes(r.StoredSize), v2, r.Source, r.Retention.String()})
	}
	return output.Render(c.App.Writer, format, t, rows)
}
