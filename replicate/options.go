package replicate

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
)

// Defaults of Options.
const (
	// DefaultJournalInterval is how often each cluster's journal is polled.
	DefaultJournalInterval = 5 * time.Second
	// DefaultScanInterval is how often the whole prefix is scanned.
	DefaultScanInterval = 30 * time.Second
	// DefaultStatusEvery is how often the status record is written.
	DefaultStatusEvery = 30 * time.Second
	// DefaultAuditInterval is how often each cluster's whole journal
	// folder is compared between the two sites (besides at the start).
	DefaultAuditInterval = 30 * time.Minute
	// DefaultParallel is how many objects are copied at once (by the
	// journal polls, and as many by the full scan).
	DefaultParallel = 4
	// MaxBackoff caps the wait between attempts while a site fails.
	MaxBackoff = time.Minute
	// callTimeout bounds a listing or a record's read or write (a copy's
	// transfer is bounded by the store's stall timeout).
	callTimeout = 2 * time.Minute
)

// Options configure the copier.
type Options struct {
	// Primary is read only; PrimaryLayout is its prefix.
	Primary       store.Store
	PrimaryLayout catalog.Layout
	// Second is the second site: written create-only, never deleted
	// from; SecondLayout is its prefix.
	Second       store.Store
	SecondLayout catalog.Layout
	// Lock is the second site's object lock (its own, not the
	// primary's): with governance or compliance, every copy of a backup
	// is locked as backup locks it (retention.LockPlan from the backup's
	// name, Retention and Lock), and every journal segment, gap and
	// proof record until retention.SegmentLockUntil(its time on the
	// primary, JournalRetention, Lock); with bucket-default, the bucket's
	// default retention applies. The bucket must have object lock.
	Lock retention.LockPolicy
	// Retention is the second site's retention policy the backups' locks
	// derive from (nil: retention.DefaultPolicy()); JournalRetention its
	// journal retention (0: retention.DefaultJournalRetention).
	Retention        *retention.Policy
	JournalRetention time.Duration
	// JournalInterval, ScanInterval and StatusEvery pace Run (defaults
	// DefaultJournalInterval, DefaultScanInterval, DefaultStatusEvery).
	JournalInterval, ScanInterval, StatusEvery time.Duration
	// AuditInterval is how often a cluster's journal poll lists its whole
	// journal folder on both sites and copies every segment and record
	// missing on the second site (DefaultAuditInterval); the first poll
	// after the start does so too, and so does a poll that finds the
	// last segment copied gone from the primary.
	AuditInterval time.Duration
	// Parallel is how many copies run at once (DefaultParallel).
	Parallel int
	// Copier names the process in the status record (its pod or host).
	Copier string
	Log    *slog.Logger
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Validate checks the options before anything is contacted (usage errors)
// and fills the defaults.
func (o *Options) Validate() error {
	switch {
	case o.Primary == nil:
		return usage.Errorf("replicate: no primary store")
	case o.Second == nil:
		return usage.Errorf("replicate: no second store")
	case o.JournalInterval < 0 || o.ScanInterval < 0 || o.StatusEvery < 0 || o.AuditInterval < 0 || o.Parallel < 0 || o.JournalRetention < 0:
		return usage.Errorf("replicate: negative interval, parallelism or retention")
	}
	if _, ok := o.Second.(store.Conditional); !ok {
		return usage.Errorf("replicate: the second site's store (%s) cannot write create-only", catalog.BucketName(o.Second))
	}
	if err := o.Lock.Validate(); err != nil {
		return usage.Wrap(fmt.Errorf("replicate: the second site's lock: %w", err))
	}
	if o.Retention != nil {
		if err := o.Retention.Validate(); err != nil {
			return usage.Wrap(fmt.Errorf("replicate: the second site's retention: %w", err))
		}
	}
	if p, s := catalog.BucketName(o.Primary), catalog.BucketName(o.Second); p == s && o.PrimaryLayout.RootPrefix() == o.SecondLayout.RootPrefix() {
		return usage.Wrap(errors.New("replicate: the second site is the primary (the same bucket and prefix " + p + "/" + o.PrimaryLayout.RootPrefix() + ")"))
	}
	o.JournalInterval = cmp.Or(o.JournalInterval, DefaultJournalInterval)
	o.ScanInterval = cmp.Or(o.ScanInterval, DefaultScanInterval)
	o.StatusEvery = cmp.Or(o.StatusEvery, DefaultStatusEvery)
	o.AuditInterval = cmp.Or(o.AuditInterval, DefaultAuditInterval)
	o.Parallel = cmp.Or(o.Parallel, DefaultParallel)
	o.JournalRetention = cmp.Or(o.JournalRetention, retention.DefaultJournalRetention)
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Lock = o.Lock.WithDefaults()
	return nil
}

// policy is the retention policy the backups' locks derive from.
func (o *Options) policy() retention.Policy {
	if o.Retention != nil {
		return *o.Retention
	}
	return retention.DefaultPolicy()
}
