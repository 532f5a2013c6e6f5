package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/store"
)

// Staged copies: a restore via etcd-operator stages the
// verified snapshot UNCOMPRESSED AND UNENCRYPTED (etcd-operator can do
// neither) at <prefix>/restore/<cluster>/<backup>/snapshot.db, outside the
// backup folders. The restore deletes it once the restored cluster is
// verified, or when it fails or is cancelled; a copy left behind (the
// process was killed) is deleted by prune once older than StagedMaxAge,
// and list shows any that exist.

// StagedMaxAge is the age after which prune deletes a staged copy: a
// restore via etcd-operator is over by then (its wait defaults to 10m).
const StagedMaxAge = time.Hour

// stagedDir is the folder under the root prefix that holds staged copies.
const stagedDir = "restore/"

// StagedPrefix is the key prefix of the staged copies of a cluster,
// ending in '/'; of every cluster when clusterID is empty.
func (l Layout) StagedPrefix(clusterID string) string {
	if clusterID == "" {
		return l.RootPrefix() + stagedDir
	}
	return l.RootPrefix() + stagedDir + clusterID + "/"
}

// StagedKey is where a restore via etcd-operator stages the uncompressed
// snapshot of a backup: <prefix>/restore/<cluster>/<backup>/snapshot.db.
func (l Layout) StagedKey(clusterID, backupName string) string {
	return l.StagedPrefix(clusterID) + backupName + "/" + SnapshotObjectRaw
}

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
// when clusterIDs is empty), oldest first. Any object under the staged
// folder counts, also one not named like a staged snapshot: it is
// plaintext the tool put there; except the objects of a backup folder
// directly under it (isBackupObject).
func ListStaged(ctx context.Context, st store.Store, l Layout, clusterIDs []string, now time.Time) ([]StagedCopy, error) {
	prefixes := []string{l.StagedPrefix("")}
	if len(clusterIDs) > 0 {
		prefixes = prefixes[:0]
		for _, id := range clusterIDs {
			prefixes = append(prefixes, l.StagedPrefix(id))
		}
	}
	var out []StagedCopy
	for _, p := range prefixes {
		objs, err := st.List(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("list staged copies under %s: %w", p, err)
		}
		for _, o := range objs {
			rest := strings.TrimPrefix(o.Key, l.StagedPrefix(""))
			if isBackupObject(rest) {
				continue
			}
			cluster, backup, _ := strings.Cut(rest, "/")
			backup, _, _ = strings.Cut(backup, "/")
			out = append(out, StagedCopy{ClusterID: cluster, Backup: backup, Key: o.Key, Size: o.Size,
				LastModified: o.LastModified.UTC(), Age: now.Sub(o.LastModified).Round(time.Second)})
		}
	}
	slices.SortFunc(out, func(a, b StagedCopy) int { return a.LastModified.Compare(b.LastModified) })
	return out, nil
}

// isBackupObject says whether rest, a key under the staged folder without
// that folder, is <backup>/<object>: an object of a backup of a cluster
// named like the staged folder (an id now reserved, written by a version
// that accepted it), never a staged copy (<cluster>/<backup>/snapshot.db).
// It is left alone: deleting it would bypass manifest-first deletion and
// retention's guards.
func isBackupObject(rest string) bool {
	parts := strings.Split(rest, "/")
	if len(parts) != 2 || parts[1] == "" {
		return false
	}
	_, _, err := ParseBackupName(parts[0])
	return err == nil
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
