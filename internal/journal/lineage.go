package journal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/store"
)

// A journal holds one history of a cluster: the revisions etcd committed
// one after the other since the base backup. A cluster restored without
// a revision bump (restore --bump-revision 0, or a tool that does not
// bump), or deleted and recreated under the same name, starts another
// history whose revisions reuse the numbers the journal already holds.
// Continuing the stored chain then would splice two histories into one
// that never existed; every reader would replay it. So the capture
// checks, at its start and while it runs, that the cluster is still the
// one whose history it stores:
//
//   - its revision is never below the last revision the journal holds
//     (the cluster's revision, read linearizably, only ever grows);
//   - its etcd cluster ID (Header.EtcdClusterID, recorded in every
//     segment) is the one of the stored chain's last segment, and of every
//     watch response;
//   - no gap was recorded where the stored chain ends: once a gap or a
//     lineage break sealed a chain, nothing continues it.
//
// A cluster that went back is a *LineageError: the stored journal ends
// where it is (nothing more is written to it, it stays readable for a
// restore of that history), the caller records it as a gap and pages, and
// no segment of the new history is stored until a full backup of it past
// the old history's last revision exists (JournalAll then journals from
// that backup; until then the new history's recovery point is its full
// backups). A cluster whose ID changed but whose revision is past the
// journal's (a restore that bumped the revision) is a *GapError: the
// journal cannot continue exactly, and a full backup heals it.
//
// Restore's replay is the second line: a journal that is not a history
// of the backup it is applied to is refused key by key
// (etcdinternals.HistoryError).

// LineageError is a cluster whose history is not the stored journal's:
// it went back to a revision at or below the journal's last (Reach), or
// its etcd cluster ID changed at or below it.
type LineageError struct {
	ClusterID string
	// Reach is the last revision the stored journal holds; LiveRev the
	// cluster's revision when it was found (0: not read).
	Reach, LiveRev int64
	// StoredID and LiveID are the etcd cluster IDs (hex) of the stored
	// journal and of the cluster ("" where unknown).
	StoredID, LiveID string
	Reason           string
}

func (e *LineageError) Error() string {
	return fmt.Sprintf("journal of cluster %s: the cluster's history is not the journal's (%s): "+
		"the journal ends at revision %d and is not continued, so two histories are never spliced; "+
		"it starts again from a full backup of the new history past revision %d "+
		"(a restore without a revision bump, or a cluster recreated under the same name)",
		e.ClusterID, e.Reason, e.Reach, e.Reach)
}

// EtcdID is etcd's cluster ID as the journal records it (hex, as etcdctl
// prints it); "" for 0.
func EtcdID(id uint64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatUint(id, 16)
}

// probeKey is the key the journal reads (count only) for the cluster's
// revision and ID: it never exists.
const probeKey = "\x00etcd-recovery-journal-probe"

// lineageTimeout bounds the start's read of the cluster's revision.
const lineageTimeout = 10 * time.Second

// checkStart checks, before the capture watches, that the cluster still
// has the history the stored chain holds up to reach, whose last
// segment names storedID ("" unknown: a segment written before segments
// recorded it, or none). A cluster that does not answer is not judged
// here (the watch and its probes judge it later).
func (c *capture) checkStart(ctx context.Context, reach int64, segments int, storedID string) error {
	// A gap record seals stored segments; a journal starting afresh from
	// a backup (no segment after it yet) continues nothing, even when a
	// gap was recorded right after the backup's revision (the heal
	// backup of an idle cluster is at the gap's start).
	sealed := false
	if segments > 0 {
		var err error
		if sealed, err = c.sealed(ctx, reach); err != nil {
			return err
		}
	}
	gctx, cancel := context.WithTimeout(ctx, lineageTimeout)
	r, err := c.o.Client.Get(gctx, probeKey, clientv3.WithCountOnly())
	cancel()
	if err != nil {
		if sealed {
			return &GapError{ClusterID: c.o.ClusterID, From: reach + 1, Reason: "a gap is recorded where the stored segments end: they are not continued"}
		}
		c.o.Log.Warn("journal: the cluster's revision could not be read at the start; its history is checked by the watch's probes", "cluster", c.o.ClusterID, "err", err)
		c.etcdID = storedID
		return nil
	}
	live, liveID := r.Header.Revision, EtcdID(r.Header.ClusterId)
	lin := &LineageError{ClusterID: c.o.ClusterID, Reach: reach, LiveRev: live, StoredID: storedID, LiveID: liveID}
	switch {
	case live < reach:
		lin.Reason = fmt.Sprintf("the cluster is at revision %d, the journal holds through %d", live, reach)
		return lin
	case storedID != "" && liveID != "" && liveID != storedID:
		c.etcdID = storedID
		return c.otherCluster(reach, live, liveID, fmt.Sprintf("etcd cluster ID %s at revision %d, the journal's is %s", liveID, live, storedID))
	case sealed && live <= reach:
		lin.Reason = fmt.Sprintf("a gap is recorded where the journal ends (revision %d) and the cluster is not past it (revision %d)", reach, live)
		return lin
	case sealed:
		return &GapError{ClusterID: c.o.ClusterID, From: reach + 1, Reason: "a gap is recorded where the stored segments end: they are not continued"}
	}
	c.etcdID = liveID
	return nil
}

// sealed reports whether a gap record exists where the chain ends
// (catalog.Layout.JournalGapKey at reach + 1).
func (c *capture) sealed(ctx context.Context, reach int64) (bool, error) {
	gctx, cancel := context.WithTimeout(ctx, c.o.UploadTimeout)
	defer cancel()
	rc, err := c.o.Store.Get(gctx, c.o.Layout.JournalGapKey(c.o.ClusterID, reach+1))
	if err == nil {
		rc.Close()
		return true, nil
	}
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return false, &SegmentError{Key: c.o.Layout.JournalGapKey(c.o.ClusterID, reach+1), Reason: ReasonStore, Detail: "reading whether a gap seals the stored segments", Err: err}
}

// checkResponse is the watch's part: a response from another etcd
// cluster than the one journaled is a lineage break (nothing of it is
// taken).
func (c *capture) checkResponse(resp clientv3.WatchResponse) error {
	if rev := resp.Header.Revision; rev > 0 && rev < c.next-1 && c.wd.wctx != nil && c.wd.probeAt.IsZero() {
		// The member answering is behind what the watch delivered: a
		// member catching up, or a cluster that went back. The probe's
		// linearizable read decides, now rather than after a silence.
		c.probe(c.o.Now(), c.watchStallTimeout())
	}
	id := EtcdID(resp.Header.ClusterId)
	switch {
	case id == "":
		return nil
	case c.etcdID == "":
		c.etcdID = id
		return nil
	case id != c.etcdID:
		return c.otherCluster(c.from()-1, resp.Header.Revision, id, fmt.Sprintf("a watch response from etcd cluster %s at revision %d, the journal's is %s", id, resp.Header.Revision, c.etcdID))
	}
	return nil
}

// otherCluster is the error for a cluster whose etcd ID is not the
// journal's: a lineage break when its revision is not past reach (its
// revisions reuse the journal's), a gap when it is (a bumped restore: the
// journal cannot continue exactly, a full backup heals it).
func (c *capture) otherCluster(reach, live int64, liveID, reason string) error {
	if live > reach {
		return &GapError{ClusterID: c.o.ClusterID, From: reach + 1, To: live, Reason: reason + ": the cluster was restored with a revision bump or recreated"}
	}
	return &LineageError{ClusterID: c.o.ClusterID, Reach: reach, LiveRev: live, StoredID: c.etcdID, LiveID: liveID, Reason: reason}
}

// checkProbe is the probes' part: the cluster's revision, read
// linearizably after the watch had delivered through reach, below reach
// means the cluster went back (it never does otherwise); another etcd
// cluster ID, that it is another cluster.
func (c *capture) checkProbe(reach, rev int64, id uint64) error {
	liveID := EtcdID(id)
	switch {
	case rev <= 0:
		return nil
	case rev < reach:
		return &LineageError{ClusterID: c.o.ClusterID, Reach: reach, LiveRev: rev, StoredID: c.etcdID, LiveID: liveID,
			Reason: fmt.Sprintf("the cluster is at revision %d, the journal had received through %d", rev, reach)}
	case liveID != "" && c.etcdID != "" && liveID != c.etcdID:
		return c.otherCluster(reach, rev, liveID, fmt.Sprintf("etcd cluster ID %s, the journal's is %s", liveID, c.etcdID))
	}
	return nil
}
