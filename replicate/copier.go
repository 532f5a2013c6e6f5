package replicate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
)

// copier is the state of a copier process: what it has verified on the
// second site, per cluster, and its counts.
type copier struct {
	o      Options // o.Second is nil: the second site is held as second
	second *site
	log    *slog.Logger
	source string

	mu       sync.Mutex
	clusters map[string]*cluster
	// verified: primary keys (records, escrows, backup folders by their
	// prefix) verified on the second site, with the primary object's time
	// then and the full pass that last met them. A full pass whose scan
	// listed the primary forgets the entries it did not meet (pruned
	// backups, records gone from the primary, escrows no new backup
	// named): the map follows the primary's listing, not the copier's
	// age, and forgetting an entry still there costs only a re-check (a
	// create-only copy finds the object and compares it).
	verified map[string]verifiedEntry
	gen      uint64 // the current full pass, for verifiedEntry.seen
	failures map[string]catalog.ReplicaFailure
	// unconfirmed: failures read from the status record at the start,
	// not found again yet; recheck: their primary keys, compared by the
	// journal audit even when present on the second site. Both are
	// emptied by the first full pass without a site error: a failure
	// not found again then is dropped.
	unconfirmed map[string]bool
	recheck     map[string]bool
	copiedN     int64
	copiedB     int64
	syncedAt    time.Time
	lastErr     error // the last site failure, nil once a round succeeds
}

// verifiedEntry is one verified key.
type verifiedEntry struct {
	mod  time.Time // the primary object's time when verified
	seen uint64    // the full pass that last met the key
}

// cluster is one cluster's progress.
type cluster struct {
	id     string
	pollMu sync.Mutex // one journal poll at a time

	// Under copier.mu:
	lastSeg    string    // the newest segment (primary key) copied and verified
	lastSegMod time.Time // its time on the primary when listed
	lastRev    int64
	// auditedAt is when the whole journal folder was last compared
	// between the two sites (zero: not since the start).
	auditedAt      time.Time
	syncedAt       time.Time
	newestBackup   string
	journalPending int
	journalBytes   int64
	journalOldest  time.Time
	backupPending  int
	backupBytes    int64
	backupOldest   time.Time
}

// newCopier validates o, checks the second site's lock, and reads the
// status record there. The record is a hint, never trusted as input
// (anyone holding the second site's credential may write it): one of
// another source is ignored; of this one, only its cluster ids (each
// journal is audited at its first poll, and the watermarks come from
// comparing the two sites' listings) and its failures, as keys to check
// again (kept until the first full pass without a site error, then
// dropped unless found again).
func newCopier(ctx context.Context, o Options) (*copier, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	c := &copier{
		o: o, second: secondSite(o.Second, o.SecondLayout), log: o.Log,
		source:   catalog.BucketName(o.Primary) + "/" + o.PrimaryLayout.RootPrefix(),
		clusters: map[string]*cluster{}, verified: map[string]verifiedEntry{}, failures: map[string]catalog.ReplicaFailure{},
		unconfirmed: map[string]bool{}, recheck: map[string]bool{},
	}
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := c.checkLock(rctx); err != nil {
		return nil, err
	}
	prev, err := catalog.ReadReplicaStatus(rctx, o.Second, o.SecondLayout)
	switch {
	case err == nil && prev.Source != c.source:
		c.log.Warn("replicate: the status record on the second site is of another source: ignored; every journal is compared between the two sites",
			"second", c.second.name, "record_source", prev.Source, "source", c.source, "record_copier", prev.Copier)
	case err == nil:
		for _, f := range prev.Failures {
			c.failures[f.Key] = f
			c.unconfirmed[f.Key] = true
			c.recheck[c.src(f.Key)] = true
		}
		for id := range prev.Clusters {
			if catalog.ValidateClusterID(id) == nil {
				c.cluster(id)
			}
		}
		c.log.Info("replicate: the status record's clusters are audited, its failures checked again", "second", c.second.name,
			"updated", prev.Updated, "clusters", len(prev.Clusters), "failures", len(prev.Failures))
	case store.IsNotFound(err):
	case ctx.Err() != nil:
		return nil, ctx.Err()
	default:
		// A damaged or unreadable record: start from nothing (every
		// object is compared again) and say so.
		c.log.Warn("replicate: the status record could not be read; verifying everything again", "second", c.second.name, "err", err)
	}
	// From here the copier holds the second site only as a site: it has
	// no store on which Delete could be called.
	c.o.Second = nil
	return c, nil
}

// checkLock checks the second bucket's object lock against o.Lock.
func (c *copier) checkLock(ctx context.Context) error {
	lp := c.o.Lock
	if !lp.Enabled() {
		// Create-only writes keep the copier itself from replacing a copy,
		// but not whoever else holds a credential that may write the
		// bucket: only object lock makes the copies immutable.
		c.log.Warn("replicate: the second site's copies are not locked (--second-lock-mode off): "+
			"a credential that can write its bucket can replace or delete them; use a bucket with object lock",
			"second", c.second.name)
		return nil
	}
	info, err := c.second.lockConfig(ctx)
	if err != nil {
		return fmt.Errorf("replicate: the second site's object lock: %w", err)
	}
	switch {
	case !info.Enabled:
		return usage.Errorf("replicate: --second-lock-mode %s: %s has no object lock", lp.Mode, c.second.name)
	case lp.Mode == catalog.LockBucketDefault && (info.DefaultMode == "" || info.DefaultPeriod <= 0):
		return usage.Errorf("replicate: --second-lock-mode %s: %s has object lock but no default retention", lp.Mode, c.second.name)
	}
	return nil
}

// cluster is id's state (c.mu held, or before the copier runs).
func (c *copier) cluster(id string) *cluster {
	cl := c.clusters[id]
	if cl == nil {
		cl = &cluster{id: id}
		c.clusters[id] = cl
	}
	return cl
}

// clusterList is every known cluster, by id.
func (c *copier) clusterList() []*cluster {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*cluster, 0, len(c.clusters))
	for _, cl := range c.clusters {
		out = append(out, cl)
	}
	slices.SortFunc(out, func(a, b *cluster) int { return strings.Compare(a.id, b.id) })
	return out
}

// dst is the second site's key of the primary's key src.
func (c *copier) dst(src string) string {
	return c.o.SecondLayout.RootPrefix() + strings.TrimPrefix(src, c.o.PrimaryLayout.RootPrefix())
}

// src is the primary's key of a key that may be the second site's (a
// failure's key is either).
func (c *copier) src(key string) string {
	if rest, ok := strings.CutPrefix(key, c.o.SecondLayout.RootPrefix()); ok {
		return c.o.PrimaryLayout.RootPrefix() + rest
	}
	return key
}

// dropUnconfirmed drops the failures read from the status record that
// the pass just completed (without a site error) did not find again.
func (c *copier) dropUnconfirmed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.unconfirmed {
		delete(c.failures, k)
		c.log.Info("replicate: a failure of the status record was not found again: dropped", "key", k)
	}
	clear(c.unconfirmed)
	clear(c.recheck)
}

// isVerified says whether key was verified with the primary's object of
// time mod.
func (c *copier) isVerified(key string, mod time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.metLocked(key)
	return ok && e.mod.Equal(mod)
}

// metLocked is key's entry, marked as met by the current pass (c.mu held).
func (c *copier) metLocked(key string) (verifiedEntry, bool) {
	e, ok := c.verified[key]
	if ok && e.seen != c.gen {
		e.seen = c.gen
		c.verified[key] = e
	}
	return e, ok
}

func (c *copier) markVerified(key string, mod time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.verified[key] = verifiedEntry{mod: mod, seen: c.gen}
}

// beginPass starts a full pass's generation and returns it.
func (c *copier) beginPass() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	return c.gen
}

// forgetUnmet forgets the verified entries no step since pass gen began
// met, and returns how many.
func (c *copier) forgetUnmet(gen uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, e := range c.verified {
		if e.seen < gen {
			delete(c.verified, k)
			n++
		}
	}
	return n
}

// settle records a copy's outcome: counts, a verification failure (kept
// and logged with the key and the hashes), a failure resolved.
func (c *copier) settle(t *tally, id string, k objectKind, key string, r copyResult, err error) error {
	var ve *VerifyError
	switch {
	case err == nil:
		t.add(id, k, r)
		c.mu.Lock()
		if r.outcome == copied {
			c.copiedN++
			c.copiedB += r.bytes
		}
		delete(c.failures, c.dst(key))
		delete(c.failures, key)
		delete(c.unconfirmed, c.dst(key))
		delete(c.unconfirmed, key)
		c.mu.Unlock()
		if r.outcome == superseded {
			c.log.Warn("replicate: a record replaced on the primary since its copy: the second site keeps the first", "cluster", id, "key", key)
		}
		return nil
	case errors.As(err, &ve):
		f := catalog.ReplicaFailure{Key: ve.Key, Reason: ve.Reason, At: c.o.Now().UTC()}
		c.mu.Lock()
		_, known := c.failures[f.Key]
		known = known && !c.unconfirmed[f.Key]
		c.failures[f.Key] = f
		delete(c.unconfirmed, f.Key)
		c.mu.Unlock()
		t.failure(id, f)
		if !known {
			c.log.Error("replicate: verification failed", "cluster", id, "key", ve.Key, "reason", ve.Reason)
		}
		return err
	default:
		err = fmt.Errorf("cluster %s: copying %s: %w", id, key, err)
		t.error(err)
		return err
	}
}

// backupRetention is the second site's lock of a backup's objects (nil:
// none): as backup locks it, from its name's time and kind.
func (c *copier) backupRetention(e catalog.Entry, entries []catalog.Entry) *store.Retention {
	lp := c.o.Lock
	if !lp.Mode.Explicit() {
		return nil
	}
	term := retention.LockPlan(e.Kind, e.Time, retention.AnchorCandidate(entries, e.Time), c.o.policy(), lp)
	if !term.Locked() || !term.Until.After(c.o.Now()) {
		return nil
	}
	return &store.Retention{Mode: lp.Mode.StoreMode(), Until: term.Until}
}

// journalRetention is the second site's lock of a journal object stored
// on the primary at mod (nil: none).
func (c *copier) journalRetention(mod time.Time) *store.Retention {
	until := retention.SegmentLockUntil(mod, c.o.JournalRetention, c.o.Lock)
	if until.IsZero() || !until.After(c.o.Now()) {
		return nil
	}
	return &store.Retention{Mode: c.o.Lock.Mode.StoreMode(), Until: until}
}

// status is the status record now.
func (c *copier) status() catalog.ReplicaStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := catalog.ReplicaStatus{
		Copier: c.o.Copier, Source: c.source, Updated: c.o.Now().UTC(), SyncedAt: c.syncedAt,
		Copied: c.copiedN, CopiedBytes: c.copiedB, Clusters: map[string]catalog.ReplicaCluster{},
	}
	for id, cl := range c.clusters {
		pending := cl.journalPending + cl.backupPending
		s.Pending += pending
		s.PendingBytes += cl.journalBytes + cl.backupBytes
		s.Clusters[id] = catalog.ReplicaCluster{
			JournalSyncedAt: cl.syncedAt, JournalLastRevision: cl.lastRev, JournalLastSegment: cl.lastSeg,
			NewestBackup: cl.newestBackup, Pending: pending,
		}
	}
	for _, f := range c.failures {
		s.Failures = append(s.Failures, f)
	}
	slices.SortFunc(s.Failures, func(a, b catalog.ReplicaFailure) int {
		if d := a.At.Compare(b.At); d != 0 {
			return d
		}
		return strings.Compare(a.Key, b.Key)
	})
	if n := len(s.Failures); n > catalog.MaxReplicaFailures {
		s.Failures = s.Failures[n-catalog.MaxReplicaFailures:]
	}
	return s
}

// oldestPending is how many objects are pending and since when (the
// oldest one's time on the primary).
func (c *copier) oldestPending() (int, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, oldest := 0, time.Time{}
	for _, cl := range c.clusters {
		n += cl.journalPending + cl.backupPending
		for _, t := range []time.Time{cl.journalOldest, cl.backupOldest} {
			if !t.IsZero() && (oldest.IsZero() || t.Before(oldest)) {
				oldest = t
			}
		}
	}
	return n, oldest
}

// writeStatus writes the status record, bounded by callTimeout.
func (c *copier) writeStatus(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := c.second.putStatus(ctx, c.status()); err != nil {
		return fmt.Errorf("replicate: writing the status record on the second site: %w", err)
	}
	return nil
}
