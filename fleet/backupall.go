package fleet

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/backup/drilled"
	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/kube"
)

// DefaultParallel is how many clusters BackupAll backs up at once.
const DefaultParallel = 4

// BackupAllOptions configure a backup of several EtcdClusters of one
// namespace.
type BackupAllOptions struct {
	Kube *kube.Client
	// Names of the EtcdClusters; empty means every one in the namespace.
	Names []string
	// Parallel bounds the backups running at once (default 4).
	Parallel int
	// Template is the backup of one cluster: Kind, V2, Compression, Store,
	// Layout, ProbeTimeout, Prune, Log. ClusterID and Etcd are set per
	// cluster: the cluster id in the store is the EtcdCluster's name.
	Template backup.Options
	// DialTimeout of the etcd connections (default 5s).
	DialTimeout time.Duration
	// NoEvents disables the Kubernetes Events.
	NoEvents bool
	Log      *slog.Logger
	// Drill, when set, drills the new backup of the clusters this run
	// chooses (drill.Run), right after each one's backup and before
	// its prune (backup/drilled).
	Drill *DrillShare
	// Now is the clock (tests: the drill share's slot); default time.Now.
	Now func() time.Time
	// Orphans, with every EtcdCluster (Names empty), runs the orphan pass
	// after the backups (backup --all --prune): see Orphans. Ignored with
	// Names: that listing is not the whole namespace.
	Orphans *OrphanOptions
}

// DrillShare is how BackupAll drills the backups it takes: which share
// of the clusters, how many at once, with which etcd and scratch space.
type DrillShare struct {
	// Share: only 1/Share of the clusters are drilled per run, chosen by
	// DrillChosen (the run's 8-hour UTC slot): with the CronJob's three
	// runs a day and Share 3, each cluster's newest backup is drilled once
	// a day. 1 (or 0) drills every cluster.
	Share int
	// Parallel bounds the drills running at once (default 1): each one
	// runs an etcd on a copy of the database and needs the database's
	// size of scratch disk twice.
	Parallel int
	// EtcdBinDir and ScratchDir are drill.Options'.
	EtcdBinDir string
	ScratchDir string
}

// DrillSlotLength is the period of the drill share's rotation: the
// CronJob's runs are 8 hours apart, one per slot.
const DrillSlotLength = 8 * time.Hour

// DrillSlot is the number of the 8-hour UTC slot (since the Unix epoch)
// that t falls in: 00:00-08:00, 08:00-16:00, 16:00-24:00 UTC.
func DrillSlot(t time.Time) int64 {
	s := t.Unix()
	n := int64(DrillSlotLength / time.Second)
	if s < 0 {
		return (s - n + 1) / n
	}
	return s / n
}

// DrillChosen says whether the cluster's backup is drilled by a run in
// the slot of t when 1/share of the clusters are drilled per run: a stable
// hash of the cluster id (FNV-1a), plus the slot number, modulo share. So
// over any share consecutive slots every cluster is chosen exactly once,
// and about 1/share of the clusters in each. share <= 1 chooses all.
func DrillChosen(clusterID string, t time.Time, share int) bool {
	if share <= 1 {
		return true
	}
	h := fnv.New32a()
	h.Write([]byte(clusterID))
	n := int64(share)
	r := (int64(h.Sum32())%n + DrillSlot(t)%n) % n
	if r < 0 {
		r += n
	}
	return r == 0
}

// Drill results of one cluster (drill.Outcome.Result, drill.Result.Result):
// drill's outcomes, and the fleet's own (not chosen).
const (
	DrillPassed = drill.Passed
	DrillFailed = drill.Failed // the backup failed a check: it is not proven
	DrillNotRun = drill.NotRun // the drill could not run (no etcd of its version, the store failed)
	// DrillInconclusive: see drill.Inconclusive.
	DrillInconclusive = drill.Inconclusive
	DrillSkipped      = "not chosen" // not in this run's share
	// DrillNoBackup: the backup failed (backup --drill) or there is none
	// (drill --all): nothing to drill.
	DrillNoBackup = drill.NoBackup
)

// drillEvent is the drill's Event: its type, reason and message.
func drillEvent(d *drill.Outcome, backupName string) (string, string, string) {
	switch d.Result {
	case DrillPassed:
		msg := fmt.Sprintf("restore drill of backup %s passed in %s", backupName, d.Duration.Round(time.Second))
		if r := d.Record; r != nil {
			c := r.Comparison
			if c.Mode == catalog.CompareSource && c.SourceHash != nil {
				msg += fmt.Sprintf(": restored keyspace equals the source's (HashKV %08x at revision %d, member %s)", *c.SourceHash, c.Revision, c.Endpoint)
			} else {
				msg += ": self-consistency only"
				if c.Detail != "" {
					msg += " (" + c.Detail + ")"
				}
			}
			msg += fmt.Sprintf("; etcd %s, revision %d", r.EtcdVersion, r.Revision)
		}
		return corev1.EventTypeNormal, kube.ReasonDrillPassed, msg
	case DrillFailed:
		return corev1.EventTypeWarning, kube.ReasonDrillFailed, fmt.Sprintf("restore drill of backup %s FAILED (the backup is committed but not proven restorable): %s", backupName, d.Error)
	}
	if d.Result == DrillInconclusive {
		return corev1.EventTypeWarning, kube.ReasonDrillInconclusive, fmt.Sprintf("restore drill of backup %s inconclusive, nothing recorded "+
			"(the node, not the backup: the backup is committed, not proven, and restore does not skip it): %s", backupName, d.Error)
	}
	return corev1.EventTypeWarning, kube.ReasonDrillNotRun, fmt.Sprintf("restore drill of backup %s could not run (the backup is committed, not proven): %s", backupName, d.Error)
}

// Results of one cluster.
const (
	ResultOK     = "ok"
	ResultFailed = "failed"
)

// ClusterResult is the outcome for one EtcdCluster.
type ClusterResult struct {
	Cluster   string        `json:"cluster"`
	Result    string        `json:"result"`
	Backup    string        `json:"backup,omitempty"`
	Revision  int64         `json:"revision,omitempty"`
	RawSize   int64         `json:"rawSize,omitempty"`
	Size      int64         `json:"size,omitempty"` // stored
	Source    string        `json:"source,omitempty"`
	Duration  time.Duration `json:"-"`
	Seconds   float64       `json:"durationSeconds"`
	Pruned    int           `json:"pruned"`
	Endpoints []string      `json:"endpoints,omitempty"`
	Error     string        `json:"error,omitempty"`
	// EventError says why the Event could not be recorded.
	EventError string `json:"eventError,omitempty"`
	// Escrow is the new backup's escrow state (present, mismatch,
	// missing, none; the manifest's escrow has the rest).
	Escrow catalog.EscrowState `json:"escrow,omitempty"`

	// Drill is the drill of the new backup (backup --drill): nil when no
	// drill was asked for.
	Drill *drill.Outcome `json:"drill,omitempty"`

	Manifest *catalog.Manifest  `json:"manifest,omitempty"`
	Prune    *prune.PruneReport `json:"prune,omitempty"`
	Err      error              `json:"-"`
}

// BackupAllReport is the outcome of BackupAll, one result per cluster in
// name order.
type BackupAllReport struct {
	Namespace string          `json:"namespace"`
	Parallel  int             `json:"parallel"`
	Clusters  []ClusterResult `json:"clusters"`
	Failed    []string        `json:"failed"`
	// With a drill: the share, the slot and the clusters whose drill
	// failed or could not run (their backups are committed).
	DrillShare    int      `json:"drillShare,omitempty"`
	DrillParallel int      `json:"drillParallel,omitempty"`
	DrillSlot     int64    `json:"drillSlot,omitempty"`
	DrillFailed   []string `json:"drillFailed,omitempty"`
	// Orphans is the orphan pass (backup --all --prune); OrphanError says
	// why it failed (nothing of it deleted when a listing failed).
	Orphans     *prune.OrphanReport `json:"orphans,omitempty"`
	OrphanError string              `json:"orphanError,omitempty"`
	Duration    time.Duration       `json:"-"`
	Seconds     float64             `json:"durationSeconds"`
}

// Table is the summary printed at the end.
func (r *BackupAllReport) Table() output.Table {
	// STORED is the snapshot object's size as stored, as in backup and list.
	t := output.Table{Header: []string{"CLUSTER", "RESULT", "BACKUP", "REVISION", "STORED", "DURATION", "PRUNED", "ESCROW", "ERROR"},
		Wide: []string{"REVISION", "DURATION"}, Long: []string{"ERROR"}}
	drill := r.DrillShare > 0
	if drill {
		t.Header = []string{"CLUSTER", "RESULT", "BACKUP", "REVISION", "STORED", "DURATION", "PRUNED", "ESCROW", "DRILL", "ERROR"}
	}
	for _, c := range r.Clusters {
		rev, size, pruned := "-", "-", "-"
		if c.Result == ResultOK {
			rev, size = fmt.Sprint(c.Revision), output.Bytes(c.Size)
			if c.Prune != nil {
				pruned = fmt.Sprint(c.Pruned)
			}
		}
		errText := c.Error
		if e := c.Manifest; e != nil && e.Escrow != nil && (e.Escrow.State == catalog.EscrowMismatch || e.Escrow.State == catalog.EscrowMissing) {
			// The backup is committed; its escrow is not usable: why.
			errText = strings.TrimPrefix(errText+"; "+backup.EscrowLine(e.Escrow), "; ")
		}
		row := []string{c.Cluster, c.Result, dash(c.Backup), rev, size, c.Duration.Round(time.Millisecond).String(), pruned, dash(string(c.Escrow))}
		if drill {
			row = append(row, c.Drill.Text())
			if c.Drill != nil && c.Drill.Error != "" && !strings.Contains(errText, c.Drill.Error) {
				errText = strings.TrimPrefix(errText+"; drill: "+c.Drill.Error, "; ")
			}
		}
		t.Rows = append(t.Rows, append(row, dash(errText)))
	}
	return t
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// BackupAllError is returned when any cluster failed (the others were
// still backed up) or when discovery itself failed.
type BackupAllError struct {
	Namespace string
	Failed    []string
	// DrillFailed names the clusters whose backup was committed but whose
	// drill failed or could not run, each with its backup and failure.
	DrillFailed []string
	// Orphans is the orphan pass's failure.
	Orphans error
	Err     error // discovery error; nil when some backups failed
}

func (e *BackupAllError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("backup of etcdclusters in %s: %v", e.Namespace, e.Err)
	}
	var parts []string
	if len(e.Failed) > 0 {
		parts = append(parts, fmt.Sprintf("backup failed for %d etcdcluster(s) in %s: %s", len(e.Failed), e.Namespace, strings.Join(e.Failed, ", ")))
	}
	if len(e.DrillFailed) > 0 {
		parts = append(parts, fmt.Sprintf("restore drill failed for %d etcdcluster(s) in %s (backups committed): %s", len(e.DrillFailed), e.Namespace, strings.Join(e.DrillFailed, "; ")))
	}
	if e.Orphans != nil {
		parts = append(parts, fmt.Sprintf("orphans in %s: %v", e.Namespace, e.Orphans))
	}
	return strings.Join(parts, "; ")
}

func (e *BackupAllError) Unwrap() error { return e.Err }

// BackupAll backs up the EtcdClusters of the namespace (all, or Names),
// at most Parallel at once. One cluster's failure does not stop the
// others. Each outcome is recorded as an Event on its EtcdCluster. The
// report holds every cluster; the error, a *BackupAllError, names the
// failed ones.
func BackupAll(ctx context.Context, opts BackupAllOptions) (*BackupAllReport, error) {
	start := time.Now()
	if opts.Kube == nil {
		return nil, errors.New("no kubernetes client")
	}
	r := newBackupAll(opts)
	if err := r.opts.Template.ValidateTemplate(); err != nil {
		// --require-encryption without recipients, a bad kind: no cluster
		// is backed up (the CLI exits 4).
		return r.rep, &BackupAllError{Namespace: r.k.Namespace, Err: err}
	}
	r.drillShare()
	clusters, err := r.listClusters(ctx)
	if err != nil {
		return r.rep, &BackupAllError{Namespace: r.k.Namespace, Err: err}
	}
	r.backupEach(ctx, clusters)
	r.tally()
	orphanErr := r.orphanPass(ctx)
	return r.finish(start, orphanErr)
}

// backupAll is one BackupAll's state: its options (defaults set), the
// drill slots and the report being filled.
type backupAll struct {
	opts     BackupAllOptions
	k        *kube.Client
	log      *slog.Logger
	rep      *BackupAllReport
	now      time.Time       // the run's time (drillShare)
	drillLim *fanout.Limiter // nil without a drill
}

// newBackupAll is the first step: the options' defaults and an empty
// report.
func newBackupAll(opts BackupAllOptions) *backupAll {
	if opts.Parallel <= 0 {
		opts.Parallel = DefaultParallel
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := opts.Kube
	rep := &BackupAllReport{Namespace: k.Namespace, Parallel: opts.Parallel, Failed: []string{}}
	return &backupAll{opts: opts, k: k, log: log, rep: rep}
}

// drillShare fixes the run's time (which clusters a drill is due for),
// and sets the drill's share and parallelism (at least 1 each), its slot
// in the report and the drill slots' limiter (nothing without a drill).
func (r *backupAll) drillShare() {
	r.now = r.opts.Now()
	d := r.opts.Drill
	if d == nil {
		return
	}
	share := *d
	if share.Share < 1 {
		share.Share = 1
	}
	if share.Parallel < 1 {
		share.Parallel = 1
	}
	r.opts.Drill = &share
	r.rep.DrillShare, r.rep.DrillParallel, r.rep.DrillSlot = share.Share, share.Parallel, DrillSlot(r.now)
	r.drillLim = fanout.NewLimiter(share.Parallel)
}

// listClusters lists the namespace's EtcdClusters (all, or Names).
func (r *backupAll) listClusters(ctx context.Context) ([]kube.Cluster, error) {
	clusters, err := r.k.Clusters(ctx, r.opts.Names...)
	if err != nil {
		return nil, err
	}
	if len(clusters) == 0 {
		r.log.Warn("no etcdclusters in the namespace", "namespace", r.k.Namespace)
	}
	r.log.Info("backing up etcdclusters", "namespace", r.k.Namespace, "clusters", len(clusters), "parallel", r.opts.Parallel)
	return clusters, nil
}

// backupEach backs up every cluster, Parallel at a time, those chosen for
// a drill each holding a drill slot; it waits for them all.
func (r *backupAll) backupEach(ctx context.Context, clusters []kube.Cluster) {
	opts, rep := r.opts, r.rep
	rep.Clusters = make([]ClusterResult, len(clusters))
	lim := fanout.NewLimiter(opts.Parallel)
	var wg sync.WaitGroup
	for i, c := range clusters {
		drill := opts.Drill != nil && DrillChosen(c.Name, r.now, opts.Drill.Share)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cancelled := func() {
				rep.Clusters[i] = ClusterResult{Cluster: c.Name, Result: ResultFailed, Err: ctx.Err(), Error: ctx.Err().Error(), Endpoints: c.Endpoints}
			}
			// A drilled cluster takes its drill slot before its backup
			// starts, so that the drill follows the backup at once: the
			// source must still answer HashKV at the snapshot's revision
			// (a Kubernetes apiserver compacts every 5 minutes). Its
			// backup slot is given back as the drill starts.
			if drill {
				drillSlot, err := r.drillLim.Acquire(ctx)
				if err != nil {
					cancelled()
					return
				}
				defer drillSlot.Release()
			}
			backupSlot, err := lim.Acquire(ctx)
			if err != nil {
				cancelled()
				return
			}
			defer backupSlot.Release()
			rep.Clusters[i] = backupOne(ctx, r.k, c, opts, drill, backupSlot, r.log)
		}()
	}
	wg.Wait()
}

// tally names the failed backups and the failed drills in the report.
func (r *backupAll) tally() {
	rep := r.rep
	for i := range rep.Clusters {
		c := &rep.Clusters[i]
		c.Seconds = c.Duration.Seconds()
		if c.Result != ResultOK {
			rep.Failed = append(rep.Failed, c.Cluster)
		}
		if d := c.Drill; d != nil && (d.Result == DrillFailed || d.Result == DrillNotRun || d.Result == DrillInconclusive) {
			rep.DrillFailed = append(rep.DrillFailed, fmt.Sprintf("%s (backup %s, drill %s: %s)", c.Cluster, c.Backup, d.Result, d.Error))
		}
	}
}

// orphanPass runs the orphan pass (backup --all --prune, over the whole
// namespace, not cancelled) and returns its failure.
func (r *backupAll) orphanPass(ctx context.Context) error {
	opts := r.opts
	if opts.Orphans == nil || len(opts.Names) != 0 || ctx.Err() != nil {
		return nil
	}
	// After the backups, from fresh listings: the store first, then the
	// EtcdClusters and EtcdRestores (see prune.Orphans).
	orphans := *opts.Orphans
	if orphans.Now == nil {
		orphans.Now = opts.Now
	}
	var orphanErr error
	r.rep.Orphans, orphanErr = Orphans(ctx, r.k, opts.Template.Store, opts.Template.Layout, orphans, r.log)
	if orphanErr != nil {
		r.rep.OrphanError = orphanErr.Error()
		r.log.Error("orphan pass failed", "err", orphanErr)
	}
	return orphanErr
}

// finish is the last step: the run's duration, and the error naming the
// failed backups, drills and orphan pass.
func (r *backupAll) finish(start time.Time, orphanErr error) (*BackupAllReport, error) {
	rep := r.rep
	rep.Duration = time.Since(start)
	rep.Seconds = rep.Duration.Seconds()
	if len(rep.Failed) > 0 || len(rep.DrillFailed) > 0 || orphanErr != nil {
		return rep, &BackupAllError{Namespace: r.k.Namespace, Failed: rep.Failed, DrillFailed: rep.DrillFailed, Orphans: orphanErr}
	}
	return rep, nil
}

func backupOne(ctx context.Context, k *kube.Client, c kube.Cluster, opts BackupAllOptions, withDrill bool, backupSlot *fanout.Slot, log *slog.Logger) (res ClusterResult) {
	start := time.Now()
	res = ClusterResult{Cluster: c.Name, Result: ResultFailed, Endpoints: c.Endpoints}
	clog := log.With("cluster", c.Name)
	if opts.Drill != nil && !withDrill {
		res.Drill = &drill.Outcome{Result: DrillSkipped}
	}
	defer func() {
		res.Duration = time.Since(start)
		if opts.NoEvents {
			return
		}
		typ, reason, msg := corev1.EventTypeNormal, kube.ReasonBackupSucceeded, successMessage(res)
		if res.Result != ResultOK {
			typ, reason, msg = corev1.EventTypeWarning, kube.ReasonBackupFailed, res.Error
		}
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := k.RecordEvent(ectx, c, typ, reason, msg); err != nil {
			res.EventError = err.Error()
			clog.Warn("could not record the event", "err", err)
		}
		if d := res.Drill; d != nil && res.Manifest != nil && (d.Result == DrillPassed || d.Result == DrillFailed || d.Result == DrillNotRun || d.Result == DrillInconclusive) {
			typ, reason, msg := drillEvent(d, res.Backup)
			if err := k.RecordEvent(ectx, c, typ, reason, msg); err != nil {
				res.EventError = strings.TrimPrefix(res.EventError+"; "+err.Error(), "; ")
				clog.Warn("could not record the drill's event", "err", err)
			}
		}
	}()
	fail := func(err error) ClusterResult {
		res.Err, res.Error = err, err.Error()
		clog.Error("backup failed", "err", err)
		if withDrill && res.Drill == nil {
			res.Drill = &drill.Outcome{Result: DrillNoBackup}
		}
		return res
	}
	if err := catalog.ValidateClusterID(c.Name); err != nil {
		return fail(err)
	}
	ecfg, release, err := k.Connect(ctx, c, opts.DialTimeout)
	defer release()
	if err != nil {
		return fail(&backup.Error{ClusterID: c.Name, At: "read client TLS", Err: err})
	}
	bo := opts.Template
	bo.ClusterID = c.Name
	bo.Etcd = ecfg
	bo.Escrow = func(ctx context.Context) (*catalog.EscrowList, []string, error) { return k.CaptureEscrow(ctx, c) }
	bo.Log = clog
	bo.Progress = nil
	var r *backup.Result
	if withDrill {
		var dr *drilled.Result
		dr, err = drilled.Run(ctx, bo, func(ctx context.Context, m *catalog.Manifest, plaintext string) (*catalog.DrillRecord, error) {
			// The backup's buffers are freed: its slot goes to the next
			// backup while this drill runs (bounded by the drill slot).
			backupSlot.Release()
			clog.Info("restore drill of the new backup", "backup", m.Name)
			// The drill's log lines carry the cluster themselves.
			return drill.Run(ctx, drill.ForBackup(m, plaintext, opts.Template.Store, opts.Template.Layout, ecfg,
				opts.Drill.EtcdBinDir, opts.Drill.ScratchDir, log))
		})
		if dr != nil {
			r, res.Drill = dr.Result, dr.Outcome()
		}
	} else {
		r, err = backup.Run(ctx, bo)
	}
	if r != nil {
		m := r.Manifest
		res.Manifest = m
		res.Backup = m.Name
		res.Revision = m.RevisionBefore
		res.RawSize = m.Snapshot.RawSize
		res.Size = m.Snapshot.StoredSize
		res.Source = m.Source.Name
		res.Escrow = catalog.StateOf(m)
		res.Prune = r.Pruned
		if r.Pruned != nil {
			res.Pruned = r.Pruned.Deleted
		}
	}
	if err != nil && r != nil && onlyDrill(err) {
		// The backup is committed and pruned; only its drill failed: the
		// drill's outcome says so (and the exit is 1, see BackupAllError).
		res.Result = ResultOK
		clog.Info("backup committed", "backup", res.Backup, "revision", res.Revision, "stored", res.Size, "pruned", res.Pruned,
			"drill", res.Drill.Result)
		return res
	}
	if err != nil {
		return fail(err)
	}
	res.Result = ResultOK
	clog.Info("backup committed", "backup", res.Backup, "revision", res.Revision, "stored", res.Size, "pruned", res.Pruned)
	return res
}

// onlyDrill is true when err is a backup.Error at StepDrill alone (not
// joined with a prune failure).
func onlyDrill(err error) bool {
	var be *backup.Error
	if !errors.As(err, &be) || be.Step() != backup.StepDrill {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 1 {
		return false
	}
	return true
}

func successMessage(r ClusterResult) string {
	s := fmt.Sprintf("backup %s committed: revision %d, %s stored (%s raw), from member %s, in %s",
		r.Backup, r.Revision, output.Bytes(r.Size), output.Bytes(r.RawSize), r.Source, r.Duration.Round(time.Millisecond))
	if r.Prune != nil {
		s += fmt.Sprintf("; pruned %d old backup(s)", r.Pruned)
	}
	return s
}
