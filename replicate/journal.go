package replicate

import (
	"context"
	"errors"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// pollJournal copies a cluster's new journal objects: the segments after
// the last one copied (in key order, which is revision order), and its gap
// and proof records not yet verified. With wait false it skips a cluster
// whose poll is running (the full pass waits for it instead). Its
// JournalSyncedAt becomes the listing's time once everything listed is on
// the second site.
func (c *copier) pollJournal(ctx context.Context, cl *cluster, t *tally, wait bool) error {
	if wait {
		cl.pollMu.Lock()
	} else if !cl.pollMu.TryLock() {
		return nil
	}
	defer cl.pollMu.Unlock()
	l := c.o.PrimaryLayout
	c.mu.Lock()
	after := cl.lastSeg
	c.mu.Unlock()
	listed := c.o.Now().UTC()
	lctx, cancel := context.WithTimeout(ctx, callTimeout)
	objs, err := store.ListAfterOf(lctx, c.o.Primary, l.JournalPrefix(cl.id), after)
	cancel()
	if err != nil {
		err = &siteError{sitePrimary, err}
		t.error(err)
		return err
	}
	var segs, records []store.ObjectInfo
	for _, o := range objs {
		switch l.Classify(o.Key).Kind {
		case catalog.KeyJournal:
			segs = append(segs, o)
		case catalog.KeyJournalGap, catalog.KeyJournalProof:
			if !c.isVerified(o.Key, o.LastModified) {
				records = append(records, o)
			}
		}
	}
	pending := func(rest []store.ObjectInfo, more int) {
		c.mu.Lock()
		defer c.mu.Unlock()
		cl.journalPending, cl.journalOldest = len(rest)+more, time.Time{}
		if len(rest) > 0 {
			cl.journalOldest = rest[0].LastModified
		}
	}
	pending(segs, len(records))
	for i, s := range segs {
		r, err := c.copyObject(ctx, s.Key, c.dst(s.Key), nil, c.journalRetention(s.LastModified), false)
		var ve *VerifyError
		if err := c.settle(t, cl.id, kindSegment, s.Key, r, err); err != nil && !errors.As(err, &ve) {
			pending(segs[i:], len(records))
			return err
		}
		// Copied, or a verification failure (kept and recorded): the
		// watermark moves on either way.
		ki := l.Classify(s.Key)
		c.mu.Lock()
		cl.lastSeg, cl.lastRev = s.Key, ki.LastRev
		c.mu.Unlock()
		pending(segs[i+1:], len(records))
	}
	var failed error
	for _, o := range records {
		r, err := c.copyObject(ctx, o.Key, c.dst(o.Key), nil, c.journalRetention(o.LastModified), false)
		var ve *VerifyError
		switch err := c.settle(t, cl.id, kindRecord, o.Key, r, err); {
		case err == nil || errors.As(err, &ve):
			c.markVerified(o.Key, o.LastModified)
		case failed == nil:
			failed = err
		}
	}
	if failed != nil {
		return failed
	}
	c.mu.Lock()
	cl.syncedAt, cl.journalPending, cl.journalOldest = listed, 0, time.Time{}
	c.mu.Unlock()
	return nil
}
