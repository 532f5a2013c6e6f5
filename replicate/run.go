package replicate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/armada/etcd-recovery/internal/fanout"
)

// Once is one full pass: every committed backup (its objects, escrow,
// manifest and drill record), the owner record, and every journal
// segment, gap and proof record on the primary is copied to the second
// site, or found there with the same bytes, then the status record is
// written. The error (Pass.Err) names what is not on the second site when
// it returns: a verification failure, or a copy a failing site stopped.
func Once(ctx context.Context, o Options) (Pass, error) {
	c, err := newCopier(ctx, o)
	if err != nil {
		return Pass{}, err
	}
	p := c.fullPass(ctx)
	if err := ctx.Err(); err != nil {
		c.finalStatus(ctx)
		return p, err
	}
	if err := c.writeStatus(ctx); err != nil {
		return p, err
	}
	return p, p.Err()
}

// fullPass is a scan, then a poll of every cluster's journal (waiting for
// one in progress; the first after the start is an audit). SyncedAt
// becomes the pass's start when no copy failed for a site's failure: a
// verification failure is kept and alerted on by itself (the status
// record's failures), it does not hold the lag back. The first such pass
// also drops the status record's failures it did not find again.
func (c *copier) fullPass(ctx context.Context) Pass {
	start := c.o.Now().UTC()
	t := newTally(start)
	gen := c.beginPass()
	listed, _ := c.scan(ctx, t) // its site errors are in t
	clusters := c.clusterList()
	fanout.ForEach(ctx, len(clusters), c.o.Parallel, func(ctx context.Context, i int) {
		c.pollJournal(ctx, clusters[i], t, true)
	})
	if listed && ctx.Err() == nil {
		// The scan met every folder on the primary and the polls every
		// cluster's records: what was not met is gone from the primary
		// (or an escrow no new backup named).
		if n := c.forgetUnmet(gen); n > 0 {
			c.log.Debug("replicate: forgot verified keys no longer on the primary", "keys", n)
		}
	}
	p := t.done(c, c.o.Now().UTC())
	if ctx.Err() == nil && len(p.Errors) == 0 {
		c.mu.Lock()
		c.syncedAt = start
		c.mu.Unlock()
		c.dropUnconfirmed()
	}
	c.log.Info("replicate: full pass", "copied", p.Copied, "bytes", p.CopiedBytes, "already", p.Already,
		"failures", len(p.Failures), "errors", len(p.Errors), "read_back_bytes", p.VerifyBytes,
		"read_back", time.Duration(p.VerifySeconds*float64(time.Second)).Round(time.Millisecond), "took", p.Finished.Sub(p.Started).Round(time.Millisecond))
	return p
}

// Run copies until ctx ends: a journal poll of every known cluster every
// JournalInterval, a full pass every ScanInterval (the first at once),
// the status record every StatusEvery and after each full pass. A site
// that fails is retried with a backoff doubling up to MaxBackoff; the
// objects it misses stay pending (counted, with the oldest one's time, in
// the log and the status record) and are copied when it answers. It
// returns ctx's error (after writing the status record once more, within
// a few seconds) or a setup error.
func Run(ctx context.Context, o Options) error {
	c, err := newCopier(ctx, o)
	if err != nil {
		return err
	}
	c.log.Info("replicate: copying", "source", c.source, "second", c.second.name, "journal_interval", c.o.JournalInterval,
		"scan_interval", c.o.ScanInterval, "status_every", c.o.StatusEvery, "parallel", c.o.Parallel)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); c.scanLoop(ctx) }()
	go func() { defer wg.Done(); c.journalLoop(ctx) }()
	go func() { defer wg.Done(); c.statusLoop(ctx) }()
	wg.Wait()
	c.finalStatus(ctx)
	return ctx.Err()
}

// finalStatus writes the status record once more after ctx ended.
func (c *copier) finalStatus(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.writeStatus(sctx); err != nil {
		c.log.Warn("replicate: the last status record was not written", "err", err)
	}
}

// backoff is a capped doubling wait while a site fails.
type backoff struct {
	base, cur time.Duration
}

func (b *backoff) next(failed bool) time.Duration {
	if !failed {
		b.cur = 0
		return b.base
	}
	if b.cur == 0 {
		b.cur = min(b.base, time.Second)
	} else {
		b.cur = min(2*b.cur, MaxBackoff)
	}
	return b.cur
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (c *copier) scanLoop(ctx context.Context) {
	b := backoff{base: c.o.ScanInterval}
	for ctx.Err() == nil {
		p := c.fullPass(ctx)
		if ctx.Err() != nil {
			return
		}
		failed := len(p.Errors) > 0
		c.noteRound(p.Errors)
		if err := c.writeStatus(ctx); err != nil && !failed {
			c.log.Warn("replicate: status record", "err", err)
		}
		if !sleep(ctx, min(b.next(failed), c.o.ScanInterval)) {
			return
		}
	}
}

func (c *copier) journalLoop(ctx context.Context) {
	b := backoff{base: c.o.JournalInterval}
	for ctx.Err() == nil {
		clusters := c.clusterList()
		errs := make([]error, len(clusters))
		fanout.ForEach(ctx, len(clusters), c.o.Parallel, func(ctx context.Context, i int) {
			errs[i] = c.pollJournal(ctx, clusters[i], nil, false)
		})
		if ctx.Err() != nil {
			return
		}
		var msgs []string
		for _, err := range errs {
			if err != nil && failedSite(err) != "" {
				msgs = append(msgs, err.Error())
			}
		}
		c.noteRound(msgs)
		if !sleep(ctx, b.next(len(msgs) > 0)) {
			return
		}
	}
}

// noteRound remembers whether the last round met a failing site.
func (c *copier) noteRound(errs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(errs) == 0 {
		c.lastErr = nil
		return
	}
	c.lastErr = errors.New(errs[0])
}

func (c *copier) statusLoop(ctx context.Context) {
	for sleep(ctx, c.o.StatusEvery) {
		c.mu.Lock()
		lastErr := c.lastErr
		c.mu.Unlock()
		if n, oldest := c.oldestPending(); n > 0 && lastErr != nil {
			c.log.Warn(fmt.Sprintf("replicate: second site behind by %d objects, oldest pending since %s", n, oldest.UTC().Format(time.RFC3339)),
				"pending", n, "oldest", oldest, "err", lastErr)
		}
		// While a site fails, the line above says so: a failed status
		// write is not logged again each time.
		if err := c.writeStatus(ctx); err != nil && ctx.Err() == nil && lastErr == nil {
			c.log.Warn("replicate: status record", "err", err)
		}
	}
}
