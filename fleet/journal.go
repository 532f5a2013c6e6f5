package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/kube"
)

// The journal job (etcd-recovery journal): JournalAll runs one capture
// (journal.Capture) per cluster, for one cluster given by its endpoints or
// for every EtcdCluster of a namespace, until its context ends. Each
// cluster's capture starts from the base JournalBase chooses; when the
// journal cannot continue exactly (a *journal.GapError, or no base at
// all) the gap is recorded (JournalGap, create-only at
// catalog.Layout.JournalGapKey, an Event JournalGap on the EtcdCluster,
// an error log), a full backup is taken at once (backup.Run, kind
// Options.Backup.Kind, scheduled by default) and the journal starts again
// from it. Any other failure restarts the cluster's capture after a
// bounded exponential backoff; one cluster never stops another.

// Defaults of JournalAllOptions.
const (
	DefaultRediscover        = time.Minute
	DefaultJournalMaxBackoff = time.Minute
	// DefaultGapBackups bounds the gap backups running at once: each
	// streams a snapshot (see backup.Run's memory bound).
	DefaultGapBackups = 2
	// ReasonJournalGap is the Event recorded on an EtcdCluster whose
	// journal has a gap.
	ReasonJournalGap = "JournalGap"

	journalMinBackoff  = time.Second
	journalListTimeout = 30 * time.Second
	journalGapTimeout  = 30 * time.Second
	journalGapAttempts = 5
)

// Steps of a cluster's journal, named in its errors and logs.
const (
	JournalStepBase    = "choose the base backup"
	JournalStepConnect = "connect to etcd"
	JournalStepCapture = "capture"
	JournalStepBackup  = "full backup after a gap"
)

// ErrNoJournalBase is a cluster without a committed full backup: its
// journal has nothing to continue (JournalAll takes one, as for a gap).
var ErrNoJournalBase = errors.New("no committed full backup to continue")

// JournalAllOptions configure JournalAll: one cluster (ClusterID and
// Etcd) or every EtcdCluster of Kube's namespace (Kube, ClusterID empty;
// the cluster id is the EtcdCluster's name).
type JournalAllOptions struct {
	ClusterID string
	Etcd      etcdconn.Config
	Kube      *kube.Client
	// Rediscover is how often the EtcdClusters are listed again (default
	// 1m): a new one starts, a deleted one stops (its capture writes what
	// it holds first).
	Rediscover time.Duration
	// DialTimeout of the etcd connections of discovered clusters (default
	// 5s).
	DialTimeout time.Duration
	// NoEvents disables the Kubernetes Events.
	NoEvents bool

	Store  store.Store
	Layout catalog.Layout
	// Capture is every cluster's capture: Encoding, Identities,
	// SegmentInterval, SegmentSize, UploadTimeout, FrozenAfter,
	// FinalFlush, OnSegment (called with each cluster's segments: check
	// SegmentInfo.Key), Metrics (a cluster's series are forgotten when
	// its EtcdCluster is gone). Client, ClusterID, BaseBackup, BaseRev, Store,
	// Layout, Log and Fence are set per cluster.
	Capture journal.CaptureOptions
	// Backup is the full backup taken after a gap: Kind (default
	// scheduled: retention keeps it as the CronJob's), V2, Compression,
	// Recipients, RequireEncryption, ProbeTimeout, Lock, LockRetention.
	// ClusterID, Etcd, Store and Layout are set per cluster; it is never
	// pruned nor drilled here.
	Backup backup.Options
	// GapBackups bounds the gap backups at once (default 2).
	GapBackups int
	// Fence, when set, is passed to each capture (CaptureOptions.Fence):
	// called before each segment upload, an error stops that capture.
	Fence func() error
	// MaxBackoff caps a cluster's restart backoff (default 1m; it starts
	// at 1s and doubles, each delay jittered between half of that and
	// all of it: journal.Backoff).
	MaxBackoff time.Duration
	// OnGap, when set, is called with each gap once it is handled (its
	// record written or not).
	OnGap func(JournalGap)
	Log   *slog.Logger
	Now   func() time.Time
}

// JournalGap is a gap the journal job handled: its record
// (catalog.JournalGap) and whether this handling wrote it.
type JournalGap struct {
	catalog.JournalGap
	// Recorded: the record was written by this gap's handling (false when
	// one was there already, or the write failed: RecordError).
	Recorded    bool   `json:"-"`
	RecordError string `json:"-"`
}

// JournalError is a cluster's journal failing at a step, with its cause.
type JournalError struct {
	ClusterID string
	Step      string
	Err       error
}

func (e *JournalError) Error() string {
	return fmt.Sprintf("journal of cluster %s: %s: %v", e.ClusterID, e.Step, e.Err)
}

func (e *JournalError) Unwrap() error { return e.Err }

// JournalBase is the base a (re)starting journal of the cluster
// continues: its committed backups (catalog.Inventory, each one's
// manifest for its revision; an unreadable manifest is logged and passed
// over) and its stored segments through journal.ChooseBase. No committed
// backup is ErrNoJournalBase; segments that no backup's journal reaches,
// ChooseBase's *journal.GapError.
func JournalBase(ctx context.Context, st store.Store, layout catalog.Layout, clusterID string, log *slog.Logger) (journal.Base, *journal.Chain, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	entries, err := catalog.Inventory(ctx, st, layout, clusterID)
	if err != nil {
		return journal.Base{}, nil, fmt.Errorf("listing the backups: %w", err)
	}
	var bases []journal.Base
	for _, en := range entries {
		if !en.Committed {
			continue
		}
		m, err := catalog.LoadManifest(ctx, st, layout, clusterID, en.Name)
		if err != nil {
			if ctx.Err() != nil {
				return journal.Base{}, nil, ctx.Err()
			}
			log.Warn("journal: backup passed over: manifest unreadable", "cluster", clusterID, "backup", en.Name, "err", err)
			continue
		}
		bases = append(bases, journal.Base{Name: m.Name, Rev: m.Revision()})
	}
	if len(bases) == 0 {
		return journal.Base{}, nil, ErrNoJournalBase
	}
	return journal.ChooseBase(ctx, st, layout, clusterID, bases)
}

// JournalAll journals the cluster (ClusterID) or every EtcdCluster of the
// namespace (Kube) until ctx ends, then stops every capture (each writes
// what it holds, within CaptureOptions.FinalFlush) and returns nil. It
// returns an error only for options it cannot run with, or, with Kube,
// when the first listing of the EtcdClusters fails; later listings that
// fail are logged and the running set kept.
//
// Bounds: one goroutine and one capture per cluster; a capture holds at
// most two segments (one filling, one uploading: about 2 x SegmentSize
// plus one revision, 4 MiB segments by default, so about 8 MiB), and N
// clusters about N times that. Gap backups run GapBackups at a time.
func JournalAll(ctx context.Context, o JournalAllOptions) error {
	if err := o.defaults(); err != nil {
		return err
	}
	j := &journalAll{o: o, backups: fanout.NewLimiter(o.GapBackups)}
	if o.Kube == nil {
		t := &journalTarget{id: o.ClusterID}
		j.runCluster(ctx, t)
		return nil
	}
	return j.runAll(ctx)
}

func (o *JournalAllOptions) defaults() error {
	switch {
	case o.Store == nil:
		return errors.New("journal: no store")
	case o.Kube == nil && o.ClusterID == "":
		return errors.New("journal: no cluster id and no kubernetes client")
	case o.Kube != nil && o.ClusterID != "":
		return errors.New("journal: a cluster id and a kubernetes client are exclusive")
	}
	if o.Kube == nil {
		if err := catalog.ValidateClusterID(o.ClusterID); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	}
	if o.Rediscover <= 0 {
		o.Rediscover = DefaultRediscover
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultJournalMaxBackoff
	}
	if o.GapBackups <= 0 {
		o.GapBackups = DefaultGapBackups
	}
	if o.Backup.Kind == "" {
		o.Backup.Kind = catalog.KindScheduled
	}
	if o.Capture.Encoding.Compression == "" {
		o.Capture.Encoding.Compression = objectio.CompressZstd
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	tmpl := o.Backup
	tmpl.Store, tmpl.Layout = o.Store, o.Layout
	if err := tmpl.ValidateTemplate(); err != nil {
		return fmt.Errorf("journal: the gap backup: %w", err)
	}
	return nil
}

type journalAll struct {
	o       JournalAllOptions
	backups *fanout.Limiter
}

// journalTarget is one cluster being journaled: its id and, with Kube,
// its EtcdCluster as last discovered (endpoints may change between
// restarts).
type journalTarget struct {
	id string
	mu sync.Mutex
	c  *kube.Cluster
	// reconnect ends the running capture (gracefully: it writes what it
	// holds) so that it starts again on the cluster's current endpoints.
	reconnect context.CancelFunc
}

func (t *journalTarget) cluster() *kube.Cluster {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.c
}

// set records the cluster as discovered now; when its endpoints changed
// (member pods replaced, their IPs new) it ends the running capture, whose
// client knows only the old ones (clientv3 never learns new members by
// itself), and reports true: the capture starts again at once on the new
// endpoints, from where the stored segments end.
func (t *journalTarget) set(c kube.Cluster) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := t.c != nil && !sameEndpoints(t.c.Endpoints, c.Endpoints)
	t.c = &c
	if changed && t.reconnect != nil {
		t.reconnect()
		t.reconnect = nil
	}
	return changed
}

// capturing records the running capture's cancel (nil once it ended).
func (t *journalTarget) capturing(cancel context.CancelFunc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reconnect = cancel
}

func sameEndpoints(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// runAll runs a capture per EtcdCluster, listing them every Rediscover.
func (j *journalAll) runAll(ctx context.Context) error {
	k := j.o.Kube
	list := func() ([]kube.Cluster, error) {
		lctx, cancel := context.WithTimeout(ctx, journalListTimeout)
		defer cancel()
		return k.Clusters(lctx)
	}
	clusters, err := list()
	if err != nil {
		return fmt.Errorf("journal: listing the etcdclusters of %s: %w", k.Namespace, err)
	}
	type running struct {
		t      *journalTarget
		cancel context.CancelFunc
		done   chan struct{}
	}
	run := map[string]*running{}
	stop := func(names []string) {
		for _, n := range names {
			run[n].cancel()
		}
		for _, n := range names {
			<-run[n].done
			delete(run, n)
			j.o.Capture.Metrics.Forget(n)
		}
	}
	resync := func(clusters []kube.Cluster) {
		seen := map[string]bool{}
		for _, c := range clusters {
			if err := catalog.ValidateClusterID(c.Name); err != nil {
				j.o.Log.Error("journal: etcdcluster passed over", "cluster", c.Name, "err", err)
				continue
			}
			seen[c.Name] = true
			if r, ok := run[c.Name]; ok {
				if r.t.set(c) {
					j.o.Log.Warn("journal: the etcdcluster's members changed: reconnecting to them", "cluster", c.Name, "namespace", k.Namespace,
						"endpoints", strings.Join(c.Endpoints, ","), "source", c.EndpointSource)
				}
				continue
			}
			t := &journalTarget{id: c.Name}
			t.set(c)
			cctx, cancel := context.WithCancel(ctx)
			r := &running{t: t, cancel: cancel, done: make(chan struct{})}
			run[c.Name] = r
			j.o.Log.Info("journal: etcdcluster found: journaling it", "cluster", c.Name, "namespace", k.Namespace)
			go func() {
				defer close(r.done)
				j.runCluster(cctx, t)
			}()
		}
		var gone []string
		for n := range run {
			if !seen[n] {
				gone = append(gone, n)
			}
		}
		slices.Sort(gone)
		for _, n := range gone {
			j.o.Log.Info("journal: etcdcluster gone: stopping its journal", "cluster", n, "namespace", k.Namespace)
		}
		stop(gone)
	}
	j.o.Log.Info("journal: journaling the etcdclusters of the namespace", "namespace", k.Namespace, "clusters", len(clusters), "rediscover", j.o.Rediscover)
	resync(clusters)
	tick := time.NewTicker(j.o.Rediscover)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			names := make([]string, 0, len(run))
			for n := range run {
				names = append(names, n)
			}
			stop(names)
			return nil
		case <-tick.C:
			clusters, err := list()
			if err != nil {
				if ctx.Err() == nil {
					j.o.Log.Error("journal: listing the etcdclusters failed; the running journals go on", "namespace", k.Namespace, "err", err)
				}
				continue
			}
			resync(clusters)
		}
	}
}

// runCluster journals one cluster until ctx ends: capture, and on a gap
// its record and a full backup; other failures are restarted after a
// backoff.
func (j *journalAll) runCluster(ctx context.Context, t *journalTarget) {
	log := j.o.Log.With("cluster", t.id)
	defer log.Info("journal: stopped")
	// Jittered (journal.Backoff): the clusters of a process that fail
	// together (a store outage) restart at their own moments.
	backoff, gapBackoff := journal.NewBackoff(journalMinBackoff, j.o.MaxBackoff), journal.NewBackoff(journalMinBackoff, j.o.MaxBackoff)
	var lastGap time.Time
	var lastLineage int64 = -1
	for ctx.Err() == nil {
		old, err := j.once(ctx, t, log)
		if ctx.Err() != nil {
			return
		}
		var gap *journal.GapError
		var lin *journal.LineageError
		switch {
		case errors.As(err, &lin):
			// Recorded once per break; checked again every MaxBackoff
			// until a full backup past the old history's end exists.
			if lin.Reach != lastLineage {
				j.lineageBreak(ctx, t, lin, old, log)
				lastLineage = lin.Reach
			} else {
				log.Warn("journal: still another history than the journal's; waiting for a full backup past its end", "reach", lin.Reach, "liveRev", lin.LiveRev, "recheck", j.o.MaxBackoff)
			}
			if !sleepCtx(ctx, j.o.MaxBackoff) {
				return
			}
			continue
		case err == nil:
			// Capture ended without ctx ending (not expected): start again.
			backoff.Reset()
			continue
		case errors.As(err, &gap), errors.Is(err, ErrNoJournalBase):
			// Gaps one after another (a backup that cannot be a base, a
			// watch cancelled at once) are healed after a backoff too.
			if now := time.Now(); now.Sub(lastGap) < j.o.MaxBackoff {
				wait := gapBackoff.Next()
				log.Warn("journal: another gap soon after the last; healing it after a backoff", "backoff", wait)
				if !sleepCtx(ctx, wait) {
					return
				}
			} else {
				gapBackoff.Reset()
			}
			j.heal(ctx, t, err, gap, old, log)
			lastGap = time.Now()
			backoff.Reset()
			continue
		}
		step := JournalStepCapture
		var je *JournalError
		if errors.As(err, &je) {
			step = je.Step
		}
		wait := backoff.Next()
		log.Error("journal failed; restarting after a backoff", "step", step, "backoff", wait, "err", err)
		if !sleepCtx(ctx, wait) {
			return
		}
	}
}

// once chooses the base and runs one capture; it returns the base it
// continued (nil when none) and the capture's end as a *JournalError.
func (j *journalAll) once(ctx context.Context, t *journalTarget, log *slog.Logger) (*journal.Base, error) {
	o := j.o
	lctx, cancel := context.WithTimeout(ctx, journalListTimeout)
	base, chain, err := JournalBase(lctx, o.Store, o.Layout, t.id, log)
	cancel()
	if err != nil {
		return nil, &JournalError{ClusterID: t.id, Step: JournalStepBase, Err: err}
	}
	used := t.cluster()
	cfg, release, err := j.connect(ctx, used)
	defer release()
	if err != nil {
		return &base, &JournalError{ClusterID: t.id, Step: JournalStepConnect, Err: err}
	}
	// The client outlives ctx: after a stop, Capture still reads the
	// cluster's revision and catches up (journal.CaptureOptions.StopCatchUp).
	client, err := cfg.Client(context.WithoutCancel(ctx))
	if err != nil {
		return &base, &JournalError{ClusterID: t.id, Step: JournalStepConnect, Err: err}
	}
	defer client.Close()
	log.Info("journal: continuing backup", "backup", base.Name, "backupRev", base.Rev, "fromRev", chain.Reach+1, "segments", len(chain.Segments))
	co := o.Capture
	co.Client, co.ClusterID, co.BaseBackup, co.BaseRev = client, t.id, base.Name, base.Rev
	// Capture's lines name the cluster themselves.
	co.Store, co.Layout, co.Log, co.Fence = o.Store, o.Layout, o.Log, o.Fence
	// Ended early (set: the members changed), the capture stops as on a
	// graceful stop and runCluster starts it again at once.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t.capturing(cancel)
	defer t.capturing(nil)
	if cur := t.cluster(); used != nil && cur != nil && !sameEndpoints(used.Endpoints, cur.Endpoints) {
		cancel() // the members changed while it connected: again at once
	}
	if err := journal.Capture(cctx, co); err != nil {
		return &base, &JournalError{ClusterID: t.id, Step: JournalStepCapture, Err: err}
	}
	return &base, nil
}

// connect is the cluster's etcd connection: Etcd for one cluster, its
// EtcdCluster's (as last discovered) with Kube. release is never nil.
func (j *journalAll) connect(ctx context.Context, c *kube.Cluster) (etcdconn.Config, func(), error) {
	if c == nil {
		return j.o.Etcd, func() {}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, journalListTimeout)
	defer cancel()
	return j.o.Kube.Connect(cctx, *c, j.o.DialTimeout)
}

// heal handles a gap (or no base): the record, the Event, then a full
// backup, retried with backoff until it is committed or ctx ends.
func (j *journalAll) heal(ctx context.Context, t *journalTarget, cause error, gap *journal.GapError, old *journal.Base, log *slog.Logger) {
	g := JournalGap{JournalGap: catalog.JournalGap{ClusterID: t.id, Time: j.o.Now().UTC(), OldBase: old, Error: trimErr(cause.Error())}}
	if gap != nil {
		g.From, g.To, g.Reason = gap.From, gap.To, gap.Reason
	} else {
		g.Reason = ErrNoJournalBase.Error()
		g.From = j.noBaseFrom(ctx, t.id)
	}
	g.Key = j.o.Layout.JournalGapKey(t.id, g.From)
	j.recordGap(ctx, t, &g, log)
	if j.o.OnGap != nil {
		j.o.OnGap(g)
	}
	backoff := journal.NewBackoff(journalMinBackoff, j.o.MaxBackoff)
	for attempt := 1; ctx.Err() == nil; attempt++ {
		name, rev, err := j.backup(ctx, t)
		if err == nil {
			log.Info("journal: full backup after the gap committed; journaling from it", "backup", name, "revision", rev, "gapFrom", g.From)
			return
		}
		if ctx.Err() != nil {
			return
		}
		wait := backoff.Next()
		log.Error("journal: full backup after a gap failed; retrying after a backoff (the gap stays recorded)",
			"step", JournalStepBackup, "attempt", attempt, "backoff", wait, "err", err)
		if !sleepCtx(ctx, wait) {
			return
		}
	}
}

// lineageBreak handles a cluster whose history is not the journal's: the
// record (a gap from the journal's end, Lineage set) and the Event, and
// no full backup.
func (j *journalAll) lineageBreak(ctx context.Context, t *journalTarget, lin *journal.LineageError, old *journal.Base, log *slog.Logger) {
	g := JournalGap{JournalGap: catalog.JournalGap{ClusterID: t.id, Time: j.o.Now().UTC(), OldBase: old, Error: trimErr(lin.Error()),
		From: lin.Reach + 1, Reason: "lineage: " + lin.Reason, Lineage: true}}
	g.Key = j.o.Layout.JournalGapKey(t.id, g.From)
	j.recordGap(ctx, t, &g, log)
	if j.o.OnGap != nil {
		j.o.OnGap(g)
	}
}

// noBaseFrom is where a cluster without a base backup's journal has its
// gap: after its last stored segment, else from revision 1.
func (j *journalAll) noBaseFrom(ctx context.Context, id string) int64 {
	lctx, cancel := context.WithTimeout(ctx, journalListTimeout)
	defer cancel()
	segs, err := journal.ListSegments(lctx, j.o.Store, j.o.Layout, id, 0)
	from := int64(1)
	if err == nil {
		for _, s := range segs.All {
			from = max(from, s.LastRev+1)
		}
	}
	return from
}

// recordGap writes the gap's record (create-only, a few attempts), logs
// the gap as an error and, with Kube, records the Event JournalGap.
func (j *journalAll) recordGap(ctx context.Context, t *journalTarget, g *JournalGap, log *slog.Logger) {
	to := "the next full backup"
	if g.To > 0 {
		to = fmt.Sprint(g.To)
	}
	if g.Lineage {
		log.Error("journal: the cluster's history is not the journal's: the journal ends here and is not continued; it starts again from a full backup past its end",
			"journalEnds", g.From-1, "reason", g.Reason, "key", g.Key, "err", g.Error)
	} else {
		log.Error("journal: gap: revisions not captured; taking a full backup", "from", g.From, "to", to, "reason", g.Reason, "key", g.Key, "err", g.Error)
	}
	backoff := 500 * time.Millisecond
	for attempt := 1; attempt <= journalGapAttempts && ctx.Err() == nil; attempt++ {
		wctx, cancel := context.WithTimeout(ctx, journalGapTimeout)
		err := catalog.WriteJournalGap(wctx, j.o.Store, g.JournalGap)
		cancel()
		if err == nil {
			g.Recorded = true
			break
		}
		if errors.Is(err, store.ErrExists) {
			log.Info("journal: the gap's record exists already (a restart found the same gap)", "key", g.Key)
			break
		}
		g.RecordError = err.Error()
		log.Warn("journal: writing the gap's record failed", "key", g.Key, "attempt", attempt, "err", err)
		if attempt < journalGapAttempts && !sleepCtx(ctx, backoff) {
			break
		}
		backoff *= 2
	}
	if c := t.cluster(); c != nil && !j.o.NoEvents {
		msg := fmt.Sprintf("journal gap: revisions %d to %s not captured (%s); a full backup is taken and the journal starts again from it; record %s",
			g.From, to, g.Reason, g.Key)
		if g.Lineage {
			msg = fmt.Sprintf("journal lineage break: the cluster's history is not the journal's (%s), a restore without a revision bump or a cluster recreated under the same name; "+
				"the journal ends at revision %d and is not continued (two histories are never spliced); it starts again from the first full backup past revision %d; record %s",
				g.Reason, g.From-1, g.From-1, g.Key)
		}
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := j.o.Kube.RecordEvent(ectx, *c, "Warning", ReasonJournalGap, msg); err != nil {
			log.Warn("could not record the event", "reason", ReasonJournalGap, "err", err)
		}
	}
}

// backup takes the full backup after a gap, GapBackups at a time: with
// Kube as backup --all does for one cluster (its Event included).
func (j *journalAll) backup(ctx context.Context, t *journalTarget) (string, int64, error) {
	slot, err := j.backups.Acquire(ctx)
	if err != nil {
		return "", 0, err
	}
	defer slot.Release()
	tmpl := j.o.Backup
	tmpl.Store, tmpl.Layout, tmpl.Prune, tmpl.Progress = j.o.Store, j.o.Layout, nil, nil
	if c := t.cluster(); c != nil {
		// backupOne's and backup.Run's lines name the cluster themselves.
		res := backupOne(ctx, j.o.Kube, *c, BackupAllOptions{Template: tmpl, DialTimeout: j.o.DialTimeout, NoEvents: j.o.NoEvents}, false, slot, j.o.Log)
		if res.Result != ResultOK {
			return "", 0, &JournalError{ClusterID: t.id, Step: JournalStepBackup, Err: res.Err}
		}
		return res.Backup, res.Revision, nil
	}
	tmpl.ClusterID, tmpl.Etcd, tmpl.Log = t.id, j.o.Etcd, j.o.Log
	tmpl.NoEscrow = backup.NoKubeClient // one cluster by --endpoints: no EtcdCluster to escrow
	r, err := backup.Run(ctx, tmpl)
	if err != nil {
		return "", 0, &JournalError{ClusterID: t.id, Step: JournalStepBackup, Err: err}
	}
	return r.Manifest.Name, r.Manifest.RevisionBefore, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// trimErr keeps an error's text on one line for a record.
func trimErr(s string) string { return strings.ReplaceAll(s, "\n", " ") }
