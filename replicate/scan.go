package replicate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
)

// idFirst are the characters a cluster id may start with that sort
// before the tool's folders ('_'): their clusters are listed by prefix,
// so that the full scan never lists the journal (its segments are the
// polls'), only what sorts after it and these.
const idFirst = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"

// listOutsideJournal lists the primary's prefix without its journal
// folder (and without the escrow folder: escrows are copied as their
// manifests name them): the backup folders, the owner record, and the
// tool's other folders (left alone).
func (c *copier) listOutsideJournal(ctx context.Context) ([]store.ObjectInfo, error) {
	root := c.o.PrimaryLayout.RootPrefix()
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	// '0' sorts right after '/': every key after root+"_journal0" is past
	// the journal folder.
	out, err := store.ListAfterOf(ctx, c.o.Primary, root, c.o.PrimaryLayout.JournalPrefix("")[:len(c.o.PrimaryLayout.JournalPrefix(""))-1]+"0")
	if err != nil {
		return nil, &siteError{sitePrimary, err}
	}
	for _, ch := range idFirst {
		objs, err := c.o.Primary.List(ctx, root+string(ch))
		if err != nil {
			return nil, &siteError{sitePrimary, err}
		}
		out = append(out, objs...)
	}
	return out, nil
}

// scan copies every committed backup folder (with its escrow and drill
// record) and the owner record, and learns the clusters to poll. listed
// says whether it listed the primary (every folder there was met).
func (c *copier) scan(ctx context.Context, t *tally) (listed bool, err error) {
	objs, err := c.listOutsideJournal(ctx)
	if err != nil {
		t.error(fmt.Errorf("listing the primary: %w", err))
		return false, err
	}
	owner := catalog.OwnerKey(c.o.PrimaryLayout)
	var ownerErr error
	for _, o := range objs {
		if o.Key == owner && !c.isVerified(o.Key, o.LastModified) {
			r, err := c.copyObject(ctx, o.Key, c.dst(o.Key), nil, nil, true)
			if ownerErr = c.settle(t, "", kindRecord, o.Key, r, err); ownerErr == nil {
				c.markVerified(o.Key, o.LastModified)
			}
		}
	}
	groups := catalog.GroupEntries(c.o.PrimaryLayout, objs)
	type job struct {
		e       catalog.Entry
		entries []catalog.Entry
	}
	var jobs []job
	c.mu.Lock()
	for id, entries := range groups {
		cl := c.cluster(id)
		cl.backupPending, cl.backupBytes, cl.backupOldest = 0, 0, time.Time{}
		for _, e := range entries {
			if e.Committed {
				jobs = append(jobs, job{e, entries})
				if _, done := c.metLocked(folderKey(c.o.PrimaryLayout, e)); !done {
					cl.backupPending += len(e.Objects)
					cl.backupBytes += objectBytes(e)
					if cl.backupOldest.IsZero() || e.Time.Before(cl.backupOldest) {
						cl.backupOldest = e.Time
					}
				}
			}
		}
	}
	c.mu.Unlock()
	// Oldest first: a backlog catches up in the order it was written.
	slices.SortFunc(jobs, func(a, b job) int { return a.e.Time.Compare(b.e.Time) })
	errs := make([]error, len(jobs))
	fanout.ForEach(ctx, len(jobs), c.o.Parallel, func(ctx context.Context, i int) {
		errs[i] = c.copyFolder(ctx, jobs[i].e, jobs[i].entries, t)
	})
	gone := map[string]bool{}
	for i, err := range errs {
		if errors.Is(err, errFolderGone) {
			gone[folderKey(c.o.PrimaryLayout, jobs[i].e)], errs[i] = true, nil
		}
	}
	c.mu.Lock()
	for id, entries := range groups {
		cl := c.cluster(id)
		cl.backupPending, cl.backupBytes, cl.backupOldest = 0, 0, time.Time{}
		for _, e := range entries { // newest first
			if !e.Committed || gone[folderKey(c.o.PrimaryLayout, e)] {
				continue
			}
			if _, done := c.metLocked(folderKey(c.o.PrimaryLayout, e)); done {
				if cl.newestBackup == "" || e.Name > cl.newestBackup {
					cl.newestBackup = e.Name
				}
				continue
			}
			cl.backupPending += len(e.Objects)
			cl.backupBytes += objectBytes(e)
			if cl.backupOldest.IsZero() || e.Time.Before(cl.backupOldest) {
				cl.backupOldest = e.Time
			}
		}
	}
	c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return true, err
	}
	return true, errors.Join(append(errs, ownerErr)...)
}

// objectBytes is the stored size of a folder's objects.
func objectBytes(e catalog.Entry) int64 {
	var n int64
	for _, o := range e.Objects {
		n += o.Size
	}
	return n
}

// errFolderGone is a folder whose manifest was deleted on the primary
// since the listing: nothing is copied, and it is neither verified nor
// pending.
var errFolderGone = errors.New("the backup's manifest was deleted on the primary since the listing")

// folderKey is the verified-map key of a backup folder.
func folderKey(l catalog.Layout, e catalog.Entry) string { return l.BackupPrefix(e.ClusterID, e.Name) }

// copyFolder copies one committed backup folder: the objects its manifest
// names (checked against it), its other objects and its escrow, then the
// manifest, then the drill record. A folder whose manifest is on the
// second site already is compared by its manifest alone (the copier
// writes a manifest only after every object it names was verified).
func (c *copier) copyFolder(ctx context.Context, e catalog.Entry, entries []catalog.Entry, t *tally) error {
	l := c.o.PrimaryLayout
	id := e.ClusterID
	fk := folderKey(l, e)
	mkey := l.Key(id, e.Name, catalog.ManifestObject)
	var drill *store.ObjectInfo
	for i, o := range e.Objects {
		if o.Key == l.Key(id, e.Name, catalog.DrillObject) {
			drill = &e.Objects[i]
		}
	}
	c.mu.Lock()
	_, done := c.metLocked(fk)
	c.mu.Unlock()
	if !done {
		if err := c.copyBackup(ctx, e, entries, mkey, t); err != nil {
			return err
		}
		c.markVerified(fk, time.Time{})
		c.log.Info("replicate: backup on the second site", "cluster", id, "backup", e.Name)
	}
	if drill != nil && !c.isVerified(drill.Key, drill.LastModified) {
		r, err := c.copyObject(ctx, drill.Key, c.dst(drill.Key), nil, nil, true)
		if err := c.settle(t, id, kindRecord, drill.Key, r, err); err != nil {
			return err
		}
		c.markVerified(drill.Key, drill.LastModified)
	}
	return nil
}

// copyBackup copies a folder's objects and then its manifest.
func (c *copier) copyBackup(ctx context.Context, e catalog.Entry, entries []catalog.Entry, mkey string, t *tally) error {
	id := e.ClusterID
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	b, err := objectio.ReadRecordBytes(rctx, c.o.Primary, mkey, objectio.RecordOptions{Max: catalog.MaxManifestBytes})
	cancel()
	switch {
	case store.IsNotFound(err) && ctx.Err() == nil:
		c.log.Info("replicate: a backup deleted on the primary since the listing: not copied", "cluster", id, "backup", e.Name)
		return errFolderGone
	case errors.Is(err, objectio.ErrDamagedRecord):
		return c.settle(t, id, kindManifest, mkey, copyResult{}, &VerifyError{Key: mkey, Reason: "the primary's manifest is damaged: " + err.Error() + "; the backup is not copied"})
	case err != nil:
		return c.settle(t, id, kindManifest, mkey, copyResult{}, &siteError{sitePrimary, err})
	}
	m, err := catalog.UnmarshalManifest(b)
	if err == nil && (m.ClusterID != id || m.Name != e.Name) {
		err = fmt.Errorf("it names cluster %q backup %q", m.ClusterID, m.Name)
	}
	if err != nil {
		return c.settle(t, id, kindManifest, mkey, copyResult{}, &VerifyError{Key: mkey, Reason: "the primary's manifest is damaged: " + err.Error() + "; the backup is not copied"})
	}
	sum := sha256.Sum256(b)
	manifestWant := &want{size: int64(len(b)), sha: hex.EncodeToString(sum[:])}
	ret := c.backupRetention(e, entries)
	l := c.o.PrimaryLayout
	named := map[string]want{l.Key(id, e.Name, m.Snapshot.Object): {m.Snapshot.StoredSize, m.Snapshot.StoredSHA256}}
	if m.V2 != nil {
		named[l.Key(id, e.Name, m.V2.Object)] = want{m.V2.StoredSize, m.V2.StoredSHA256}
	}
	listed := map[string]bool{}
	for _, o := range e.Objects {
		listed[o.Key] = true
	}
	for key := range named {
		if !listed[key] {
			return c.settle(t, id, kindBackupObject, key, copyResult{}, &VerifyError{Key: key, Reason: "named by its manifest, missing on the primary: the backup is damaged and not copied"})
		}
	}
	// The escrow the manifest names, before the manifest (and compared
	// when the folder was copied before: a small object): missing on the
	// primary, it is a failure, and the backup is copied without it.
	if ref := m.Escrow; ref != nil && ref.Address != "" {
		key := l.EscrowKey(id, ref.Address)
		if !c.isVerified(key, time.Time{}) {
			r, err := c.copyObject(ctx, key, c.dst(key), &want{ref.StoredSize, ref.StoredSHA256}, ret, false)
			if store.IsNotFound(err) && ctx.Err() == nil {
				c.settle(t, id, kindRecord, key, r, &VerifyError{Key: key, Reason: fmt.Sprintf(
					"cluster %s: the escrow the manifest of backup %s names is not on the primary: the backup is copied without it", id, e.Name)})
			} else if err := c.settle(t, id, kindRecord, key, r, err); err != nil {
				return err
			} else {
				c.markVerified(key, time.Time{})
			}
		}
	}
	// The manifest already on the second site: the folder was copied
	// whole before (a restart); compare the manifest only.
	r, err := c.copyIfManifestThere(ctx, mkey, manifestWant)
	if r.outcome == already || err != nil {
		return c.settle(t, id, kindManifest, mkey, r, err)
	}
	for _, o := range e.Objects {
		if o.Key == mkey || o.Key == l.Key(id, e.Name, catalog.DrillObject) {
			continue
		}
		var w *want
		if nw, ok := named[o.Key]; ok {
			w = &nw
		}
		r, err := c.copyObject(ctx, o.Key, c.dst(o.Key), w, ret, false)
		if err := c.settle(t, id, kindBackupObject, o.Key, r, err); err != nil {
			return err
		}
	}
	r, err = c.copyObject(ctx, mkey, c.dst(mkey), manifestWant, ret, false)
	return c.settle(t, id, kindManifest, mkey, r, err)
}

// copyIfManifestThere compares the manifest on the second site, when
// there is one, with the primary's: already when the same.
func (c *copier) copyIfManifestThere(ctx context.Context, mkey string, w *want) (copyResult, error) {
	lctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	dst := c.dst(mkey)
	objs, err := c.second.listAfter(lctx, dst, "")
	if err != nil {
		return copyResult{}, &siteError{siteSecond, err}
	}
	if !slices.ContainsFunc(objs, func(o store.ObjectInfo) bool { return o.Key == dst }) {
		return copyResult{}, nil
	}
	return c.compareExisting(ctx, mkey, dst, w, false)
}
