package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/store"
)

// Staged copies: a restore via etcd-operator stages the
// verified snapshot UNCOMPRESSED AND UNENCRYPTED (etcd-operator can do
// neither) at <prefix>/_staged/<cluster>/<backup>/snapshot.db (StagedKey,
// layout.go), outside the backup folders; older versions staged it under
// <prefix>/restore/ (LegacyStagedPrefix), still listed and pruned there.
// The restore deletes it once the restored cluster is verified, or when it fails or is cancelled before its
// EtcdRestore exists; after that, a cancel or a failed wait keeps it (etcd-operator's seed member fetches it
// after deleting the reference EtcdCluster), and a rerun's adoption deletes it once the restored cluster is
// verified. A copy left behind (the process was killed, or never rerun) is deleted by prune once older than
// StagedMaxAge, and list shows any that exist.

// StagedMaxAge is the age after which prune deletes a staged copy: a
// restore via etcd-operator is over by then (its wait defaults to 10m).
const StagedMaxAge = time.Hour

// StagedCopy is a plaintext snapshot staged for etcd-operator, found in the
// store.
type StagedCopy struct {
	ClusterID    string        `json:"clusterID"`
	Backup       string        `json:"backup"`
	Key          string        `json:"key"`
	Size         int64         `json:"size"`
	LastModified time.Time     `json:"lastModified"`
	Age          time.Duration `json:"age"`
	// Action (prune): keep (younger than StagedMaxAge), delete (dry run),
	// deleted or FAILED; empty in a listing.
	Action string `json:"action,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Staged copies' prune actions.
const (
	StagedKeep    = "keep"
	StagedDelete  = "delete"
	StagedDeleted = "deleted"
	StagedFailed  = "FAILED"
)

// ListStaged finds the staged copies of the given clusters (every cluster
// when clusterIDs is empty), oldest first, in both places
// (Layout.StagedPrefixes). Any object under a staged folder counts, also
// one not named like a staged snapshot: it is plaintext the tool put
// there; except what Classify does not call a staged copy (the objects of
// a backup folder directly under the legacy folder).
func ListStaged(ctx context.Context, st store.Store, l Layout, clusterIDs []string, now time.Time) ([]StagedCopy, error) {
	prefixes := l.StagedPrefixes("")
	if len(clusterIDs) > 0 {
		prefixes = prefixes[:0]
		for _, id := range clusterIDs {
			prefixes = append(prefixes, l.StagedPrefixes(id)...)
		}
	}
	var out []StagedCopy
	for _, p := range prefixes {
		objs, err := st.List(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("list staged copies under %s: %w", p, err)
		}
		for _, o := range objs {
			ki := l.Classify(o.Key)
			if ki.Kind != KeyStaged {
				continue
			}
			out = append(out, StagedCopy{ClusterID: ki.ClusterID, Backup: ki.Name, Key: o.Key, Size: o.Size,
				LastModified: o.LastModified.UTC(), Age: now.Sub(o.LastModified).Round(time.Second)})
		}
	}
	slices.SortFunc(out, func(a, b StagedCopy) int { return a.LastModified.Compare(b.LastModified) })
	return out, nil
}

// PruneStaged deletes the staged copies of the given clusters (every
// cluster when clusterIDs is empty) older than maxAge (StagedMaxAge when
// zero); dryRun only reports them. Every copy found is returned with its
// action; the error joins the deletions that failed, or is the listing's.
func PruneStaged(ctx context.Context, st store.Store, l Layout, clusterIDs []string, now time.Time, maxAge time.Duration, dryRun bool, log *slog.Logger) ([]StagedCopy, error) {
	if maxAge <= 0 {
		maxAge = StagedMaxAge
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	copies, err := ListStaged(ctx, st, l, clusterIDs, now)
	if err != nil {
		return nil, err
	}
	var old []string
	for i := range copies {
		c := &copies[i]
		switch {
		case now.Sub(c.LastModified) < maxAge:
			c.Action = StagedKeep
		case dryRun:
			c.Action = StagedDelete
		default:
			old = append(old, c.Key)
		}
	}
	if len(old) == 0 {
		return copies, nil
	}
	derr := st.Delete(ctx, old)
	failed := map[string]string{}
	if derr != nil {
		var de *store.DeleteError
		isDE := errors.As(derr, &de)
		for _, k := range old {
			if !isDE {
				failed[k] = derr.Error()
			} else if e, ok := de.Failed[k]; ok {
				failed[k] = e.Error()
			}
		}
	}
	for i := range copies {
		c := &copies[i]
		if c.Action != "" {
			continue
		}
		if msg, ok := failed[c.Key]; ok {
			c.Action, c.Error = StagedFailed, msg
			log.Error("prune: could not delete a staged plaintext snapshot", "cluster", c.ClusterID, "key", c.Key, "age", c.Age, "err", msg)
			continue
		}
		c.Action = StagedDeleted
		log.Info("prune: deleted a staged plaintext snapshot left by a restore via etcd-operator", "cluster", c.ClusterID, "key", c.Key, "age", c.Age)
	}
	if derr != nil {
		return copies, fmt.Errorf("delete staged plaintext snapshots: %w", derr)
	}
	return copies, nil
}

// StagedTable shows staged copies (list, prune).
func StagedTable(copies []StagedCopy) output.Table {
	t := output.Table{
		Header: []string{"CLUSTER", "BACKUP", "KEY", "SIZE", "AGE", "ACTION"}, Title: "Staged plaintext snapshots (restore via etcd-operator; prune deletes them after " + StagedMaxAge.String() + "):\n"}
	for _, c := range copies {
		action := c.Action
		if c.Error != "" {
			action += ": " + c.Error
		}
		t.Rows = append(t.Rows, []string{c.ClusterID, c.Backup, c.Key, output.Bytes(c.Size), c.Age.String(), action})
	}
	return t
}
