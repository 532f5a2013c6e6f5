package replicate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// pollJournal copies a cluster's new journal objects: its gap and proof
// records not yet verified (gap records first, so the second site never
// holds a segment past a gap without its record), then the segments after
// the last one copied (in key order, which is revision order). With wait
// false it skips a cluster whose poll is running (the full pass waits for
// it instead). Its JournalSyncedAt becomes the listing's time once
// everything listed is on the second site.
//
// A poll lists from just before the watermark (the last segment copied),
// so it sees, for free, whether that segment is still on the primary. When
// it is gone (the journal deleted by retention or the orphan lifecycle,
// then the cluster recreated or restored without a revision bump: its new
// segments sort before the old watermark), or replaced, and at the first
// poll after the start and every AuditInterval, the poll is an audit: the
// cluster's whole journal folder is listed on both sites, every segment
// and record missing on the second site is copied, and the watermark is
// the last segment of the primary's listing. An object on the second site
// with the primary's size is trusted by the audit (not read again),
// except for the keys of failures the status record named at the start.
func (c *copier) pollJournal(ctx context.Context, cl *cluster, t *tally, wait bool) error {
	if wait {
		cl.pollMu.Lock()
	} else if !cl.pollMu.TryLock() {
		return nil
	}
	defer cl.pollMu.Unlock()
	l := c.o.PrimaryLayout
	prefix := l.JournalPrefix(cl.id)
	c.mu.Lock()
	after, afterMod, auditedAt := cl.lastSeg, cl.lastSegMod, cl.auditedAt
	c.mu.Unlock()
	listed := c.o.Now().UTC()
	audit := auditedAt.IsZero() || listed.Sub(auditedAt) >= c.o.AuditInterval
	var objs []store.ObjectInfo
	if !audit {
		var err error
		if objs, err = c.listPrimary(ctx, cl.id, prefix, watermarkProbe(prefix, after)); err != nil {
			t.error(err)
			return err
		}
		if after != "" {
			i := slicesIndexKey(objs, after)
			if i < 0 || !objs[i].LastModified.Equal(afterMod) {
				c.log.Warn("replicate: the last segment copied is no longer on the primary (or was replaced): comparing the cluster's whole journal folder on both sites",
					"cluster", cl.id, "segment", after)
				audit = true
			} else {
				objs = append(objs[:i:i], objs[i+1:]...)
			}
		}
	}
	var there map[string]int64
	if audit {
		var err error
		if there, err = c.listSecond(ctx, cl.id, c.dst(prefix)); err != nil {
			t.error(err)
			return err
		}
		if objs, err = c.listPrimary(ctx, cl.id, prefix, ""); err != nil {
			t.error(err)
			return err
		}
	}
	// trusted is whether an audit trusts the copy of o on the second
	// site: there, of the same size, and not named by a failure.
	trusted := func(o store.ObjectInfo) bool {
		if size, ok := there[c.dst(o.Key)]; !ok || size != o.Size {
			return false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.recheck[o.Key]
	}
	var segs, gaps, proofs []store.ObjectInfo
	var skip []bool // per segment: trusted by the audit
	for _, o := range objs {
		switch kind := l.Classify(o.Key).Kind; kind {
		case catalog.KeyJournal:
			segs = append(segs, o)
			skip = append(skip, trusted(o))
		case catalog.KeyJournalGap, catalog.KeyJournalProof:
			if trusted(o) {
				c.markVerified(o.Key, o.LastModified)
			}
			switch {
			case c.isVerified(o.Key, o.LastModified):
			case kind == catalog.KeyJournalGap:
				gaps = append(gaps, o)
			default:
				proofs = append(proofs, o)
			}
		}
	}
	records := append(gaps, proofs...)
	// pending counts the segments from i on and the records given.
	pending := func(i int, records []store.ObjectInfo) {
		c.mu.Lock()
		defer c.mu.Unlock()
		cl.journalPending, cl.journalBytes, cl.journalOldest = 0, 0, time.Time{}
		for _, o := range records {
			cl.journalPending++
			cl.journalBytes += o.Size
			if cl.journalOldest.IsZero() || o.LastModified.Before(cl.journalOldest) {
				cl.journalOldest = o.LastModified
			}
		}
		for ; i < len(segs); i++ {
			if o := segs[i]; !skip[i] {
				cl.journalPending++
				cl.journalBytes += o.Size
				if cl.journalOldest.IsZero() || o.LastModified.Before(cl.journalOldest) {
					cl.journalOldest = o.LastModified
				}
			}
		}
	}
	pending(0, records)
	// The records first: a site failing stops the poll before any segment
	// past a gap is copied without its gap record.
	for i, o := range records {
		r, err := c.copyObject(ctx, o.Key, c.dst(o.Key), nil, c.journalRetention(o.LastModified), false)
		var ve *VerifyError
		if err := c.settle(t, cl.id, kindRecord, o.Key, r, err); err != nil && !errors.As(err, &ve) {
			pending(0, records[i:])
			return err
		}
		c.markVerified(o.Key, o.LastModified)
	}
	if audit {
		// The watermark is the primary's, as copied now: every segment
		// before it in key order is on the second site.
		c.mu.Lock()
		cl.lastSeg, cl.lastSegMod, cl.lastRev = "", time.Time{}, 0
		c.mu.Unlock()
	}
	for i, s := range segs {
		if !skip[i] {
			r, err := c.copyObject(ctx, s.Key, c.dst(s.Key), nil, c.journalRetention(s.LastModified), false)
			var ve *VerifyError
			if err := c.settle(t, cl.id, kindSegment, s.Key, r, err); err != nil && !errors.As(err, &ve) {
				pending(i, nil)
				return err
			}
		}
		// Copied, there already, or a verification failure (kept and
		// recorded): the watermark moves on either way.
		ki := l.Classify(s.Key)
		c.mu.Lock()
		if s.Key > cl.lastSeg {
			cl.lastSeg, cl.lastSegMod, cl.lastRev = s.Key, s.LastModified, ki.LastRev
		}
		c.mu.Unlock()
		pending(i+1, nil)
	}
	c.mu.Lock()
	cl.syncedAt, cl.journalPending, cl.journalBytes, cl.journalOldest = listed, 0, 0, time.Time{}
	mark := cl.lastSeg
	if audit {
		cl.auditedAt = listed
	}
	c.mu.Unlock()
	if audit {
		c.log.Info("replicate: journal audited: its whole folder compared on both sites", "cluster", cl.id, "segments", len(segs), "watermark", mark)
	}
	return nil
}

// watermarkProbe is the key a poll lists after: just before the
// watermark's first revision ("<first>-"), so that the listing starts
// with the watermark itself when it is still on the primary ("" when
// there is none).
func watermarkProbe(prefix, lastSeg string) string {
	name, ok := strings.CutPrefix(lastSeg, prefix)
	if !ok {
		return lastSeg
	}
	first, _, ok := strings.Cut(name, "-")
	if !ok {
		return lastSeg
	}
	return prefix + first + "-"
}

func slicesIndexKey(objs []store.ObjectInfo, key string) int {
	for i, o := range objs {
		if o.Key == key {
			return i
		}
		if o.Key > key {
			break
		}
	}
	return -1
}

// listPrimary lists the primary's journal folder of cluster id after a
// key.
func (c *copier) listPrimary(ctx context.Context, id, prefix, after string) ([]store.ObjectInfo, error) {
	lctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	objs, err := store.ListAfterOf(lctx, c.o.Primary, prefix, after)
	if err != nil {
		return nil, &siteError{sitePrimary, fmt.Errorf("cluster %s: listing the journal: %w", id, err)}
	}
	return objs, nil
}

// listSecond is the keys under the second site's prefix, with their
// sizes.
func (c *copier) listSecond(ctx context.Context, id, prefix string) (map[string]int64, error) {
	lctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	objs, err := c.second.listAfter(lctx, prefix, "")
	if err != nil {
		return nil, &siteError{siteSecond, fmt.Errorf("cluster %s: listing the journal for its audit: %w", id, err)}
	}
	out := make(map[string]int64, len(objs))
	for _, o := range objs {
		out[o.Key] = o.Size
	}
	return out, nil
}
