package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/kube"
)

// DefaultInspectParallel is how many clusters InspectAll inspects at once:
// the same bound as backups (the CLI has one --parallel).
const DefaultInspectParallel = DefaultParallel

// InspectAllOptions configure an inspection of several EtcdClusters of one
// namespace.
type InspectAllOptions struct {
	Kube *kube.Client
	// Names of the EtcdClusters; empty means every one in the namespace.
	Names []string
	// Parallel bounds the inspections running at once (default 8).
	Parallel int
	// Template is the inspection of one cluster: Timeout, Thresholds,
	// Store, Layout, Location, MaxBackupAge, Now. Etcd and ClusterID are set
	// per cluster: the cluster id in the store is the EtcdCluster's name.
	Template inspect.Options
	// DialTimeout of the etcd connections (default: the probe timeout).
	DialTimeout time.Duration
	// NoReports leaves the full per-cluster reports out of the rows.
	NoReports bool
	// Orphans: with a store and every cluster of the namespace (no Names),
	// also list the orphans of the prefix (cluster ids with backups and no
	// EtcdCluster) the way the orphan pass would treat them, read-only.
	Orphans bool
	// OrphanGrace is the orphan pass's grace (default
	// prune.DefaultOrphanGrace): when the orphans' backups go.
	OrphanGrace time.Duration
	// OrphanTimeout bounds the orphan listing (default 3 × the probe
	// timeout, at least MinOrphanCheckTimeout); it runs beside the
	// inspections. A failure is a note: never the verdict or exit code.
	OrphanTimeout time.Duration
	// Identities, when set (the toolkit's --identity-file; empty when its
	// secret is not mounted), are tried on the age header of each
	// cluster's newest encrypted backup (catalog.NewestEncrypted,
	// CheckDecrypts): InspectRow.Decrypt. With a store only; never the
	// verdict or exit code.
	Identities *seal.Identities
}

// Backup column values besides inspect's backup states.
const BackupNotChecked = "not-checked"

// InspectRow is one cluster's line of the namespace's DR posture.
type InspectRow struct {
	Cluster  string              `json:"cluster"`
	Verdict  inspect.VerdictKind `json:"verdict"`
	ExitCode int                 `json:"exitCode"`
	// Up of Voting members serve linearizable reads; Members is "Up/Voting".
	Up      int    `json:"up"`
	Voting  int    `json:"voting"`
	Members string `json:"members"`
	Leader  string `json:"leader,omitempty"`
	// DBSize is the largest DB size any member reported.
	DBSize int64 `json:"dbSize"`
	// Backup is the freshness state: ok, stale, missing, unknown or
	// not-checked (no store).
	Backup           string `json:"backup"`
	BackupName       string `json:"backupName,omitempty"`
	BackupAge        string `json:"backupAge,omitempty"`
	BackupAgeSeconds int64  `json:"backupAgeSeconds,omitempty"`
	// Drill is the restore-drill state: ok, old, never, failed, unknown or
	// not-checked (no store). DrillProven* describe the newest backup
	// proven restorable (its age is the backup's); DrillLast* the newest
	// drill of any backup.
	Drill                 string    `json:"drill"`
	DrillProven           string    `json:"drillProven,omitempty"`
	DrillProvenTime       time.Time `json:"drillProvenTime,omitzero"`
	DrillProvenAge        string    `json:"drillProvenAge,omitempty"`
	DrillProvenAgeSeconds int64     `json:"drillProvenAgeSeconds,omitempty"`
	DrillLastBackup       string    `json:"drillLastBackup,omitempty"`
	DrillLastResult       string    `json:"drillLastResult,omitempty"`
	DrillLastTime         time.Time `json:"drillLastTime,omitzero"`
	DrillLastFailed       string    `json:"drillLastFailed,omitempty"`
	DrillLastMode         string    `json:"drillLastMode,omitempty"`
	// Decrypt says whether an identity of InspectAllOptions.Identities
	// opens the newest encrypted backup (DecryptBackup): {state: opens,
	// "no identity opens it", damaged or unknown; error}. Absent when the
	// cluster has no encrypted backup or nothing was checked.
	Decrypt       *prune.DecryptResult `json:"decrypt,omitempty"`
	DecryptBackup string               `json:"decryptBackup,omitempty"`
	// Lock is whether the newest backup (BackupName) is under object-lock
	// retention, and until when (catalog.BackupLock: its manifest's
	// retention). Only when the bucket has object lock
	// (InspectAllReport.ObjectLock) and the cluster has a backup.
	Lock *InspectLock `json:"lock,omitempty"`
	// NextStep is the short form of the report's next step (its action up
	// to the first colon); the report has it in full.
	NextStep string `json:"nextStep"`
	// Error: the cluster could not be inspected at all (its client TLS
	// secret could not be read, the run timed out); the verdict is then
	// UNREACHABLE.
	Error     string          `json:"error,omitempty"`
	Endpoints []string        `json:"endpoints"`
	ElapsedMS int64           `json:"elapsedMs"`
	Report    *inspect.Report `json:"report,omitempty"`
}

// InspectAllReport is the outcome of InspectAll, one row per cluster in
// name order.
type InspectAllReport struct {
	Namespace string       `json:"namespace"`
	Parallel  int          `json:"parallel"`
	Timeout   string       `json:"timeout"`
	Clusters  []InspectRow `json:"clusters"`
	// Worst is the worst verdict (HEALTHY when there is no cluster);
	// ExitCode its exit code.
	Worst    inspect.VerdictKind `json:"worst"`
	ExitCode int                 `json:"exitCode"`
	// Orphans of the namespace's prefix (with --bucket and --all): see
	// InspectOrphan; OrphanCheck says how they were computed, or why not.
	Orphans     []InspectOrphan `json:"orphans"`
	OrphanCheck OrphanCheck     `json:"orphanCheck"`
	// ObjectLock: the bucket has object lock (then each row with a
	// backup has Lock, and the table a LOCKED column); LockError: its
	// lock configuration could not be read (nothing about locks is
	// shown). Read once, when a cluster has a backup.
	ObjectLock bool   `json:"objectLock,omitempty"`
	LockError  string `json:"lockError,omitempty"`
	ElapsedMS  int64  `json:"elapsedMs"`
}

// InspectLock is the object lock of a cluster's newest backup: Locked
// (its manifest's retention still holds), its Mode (GOVERNANCE or
// COMPLIANCE) and Until; Error when the retention could not be read.
type InspectLock struct {
	Locked bool           `json:"locked"`
	Mode   store.LockMode `json:"mode,omitempty"`
	Until  time.Time      `json:"until,omitzero"`
	Error  string         `json:"error,omitempty"`
}

// Table is one row per cluster. When the bucket has object lock
// (ObjectLock), LOCKED says until when the newest backup is locked
// ("COMPLIANCE until 2026-12-01T03:15Z"), NO when it is not (a note names
// each such cluster), UNKNOWN when its retention could not be read. When
// the age headers were checked
// (InspectAllOptions.Identities), DECRYPTS says whether an identity opens
// each cluster's newest encrypted backup (prune.DecryptCell), and a note
// below the table names each one that does not open, with the cause.
func (r *InspectAllReport) Table() output.Table {
	t := output.Table{Header: []string{"CLUSTER", "VERDICT", "UP", "LEADER", "DB SIZE", "BACKUP AGE", "DRILLED", "NEXT STEP"},
		Wide: []string{"LEADER"}, Long: []string{"NEXT STEP"}}
	decrypts := false
	for _, c := range r.Clusters {
		decrypts = decrypts || c.Decrypt != nil
	}
	if decrypts {
		t.Header = slices.Insert(t.Header, slices.Index(t.Header, "DRILLED")+1, "DECRYPTS")
	}
	if r.ObjectLock {
		t.Header = slices.Insert(t.Header, slices.Index(t.Header, "DRILLED")+1, "LOCKED")
	}
	for _, c := range r.Clusters {
		db := "-"
		if c.DBSize > 0 {
			db = output.Bytes(c.DBSize)
		}
		next := c.NextStep
		if c.Error != "" {
			next += ": " + c.Error
		}
		row := []string{c.Cluster, string(c.Verdict), c.Members, dash(c.Leader), db, c.backupCell(), c.drillCell(), next}
		if r.ObjectLock {
			row = slices.Insert(row, slices.Index(t.Header, "LOCKED"), c.lockCell())
			if l := c.Lock; l != nil && !l.Locked {
				if l.Error != "" {
					t.Notes = append(t.Notes, fmt.Sprintf("cluster %s: newest backup %s: lock unknown: %s", c.Cluster, c.BackupName, l.Error))
				} else {
					t.Notes = append(t.Notes, fmt.Sprintf("cluster %s: newest backup %s is not locked, though the bucket has object lock", c.Cluster, c.BackupName))
				}
			}
		}
		if decrypts {
			row = slices.Insert(row, slices.Index(t.Header, "DECRYPTS"), prune.DecryptCell(c.Decrypt))
			if d := c.Decrypt; d != nil && d.State != prune.DecryptOpens {
				t.Notes = append(t.Notes, fmt.Sprintf("cluster %s: newest encrypted backup %s: %s: %s", c.Cluster, dash(c.DecryptBackup), prune.DecryptCell(d), d.Error))
			}
		}
		t.Rows = append(t.Rows, row)
	}
	if r.LockError != "" {
		t.Notes = append(t.Notes, "object lock: "+r.LockError)
	}
	t.Notes = append(t.Notes, r.orphanNotes()...)
	return t
}

// lockCell is the LOCKED column: "GOVERNANCE until 2026-12-01T03:15Z",
// NO, UNKNOWN (the retention could not be read), or "-" (no backup).
func (c InspectRow) lockCell() string {
	switch l := c.Lock; {
	case l == nil:
		return "-"
	case l.Locked:
		return string(l.Mode) + " until " + l.Until.UTC().Format("2006-01-02T15:04Z")
	case l.Error != "":
		return "UNKNOWN"
	}
	return "NO"
}

func (c InspectRow) backupCell() string {
	switch c.Backup {
	case string(inspect.BackupOK):
		return c.BackupAge
	case string(inspect.BackupStale):
		return c.BackupAge + " STALE"
	case string(inspect.BackupMissing):
		return "MISSING"
	case string(inspect.BackupUnknown):
		return "UNKNOWN"
	}
	return "-"
}

// drillCell is the DRILLED column: the newest proven-restorable backup's
// age ("5h20m", "30h05m OLD"), FAILED when the newest drill failed, NEVER
// when no backup was proven restorable.
func (c InspectRow) drillCell() string {
	switch c.Drill {
	case string(inspect.DrillOK):
		return c.DrillProvenAge
	case string(inspect.DrillOld):
		return c.DrillProvenAge + " OLD"
	case string(inspect.DrillFailed):
		return "FAILED"
	case string(inspect.DrillNever):
		return "NEVER"
	case string(inspect.DrillUnknown):
		return "UNKNOWN"
	}
	return "-"
}

// InspectAll inspects the EtcdClusters of the namespace (all, or Names), at
// most Parallel at once, each bounded by its own timeout: with no more
// clusters than Parallel, the run takes about the slowest cluster's time.
// It fails only when the clusters cannot be listed (or a named one does
// not exist) or ctx is cancelled; a cluster that cannot be reached or
// whose TLS secret cannot be read is an UNREACHABLE row.
func InspectAll(ctx context.Context, opts InspectAllOptions) (*InspectAllReport, error) {
	start := time.Now()
	k := opts.Kube
	if k == nil {
		return nil, errors.New("no kubernetes client")
	}
	if err := opts.Template.ValidateTemplate(); err != nil {
		return nil, err
	}
	if opts.Parallel <= 0 {
		opts.Parallel = DefaultInspectParallel
	}
	timeout := opts.Template.Timeout
	if timeout <= 0 {
		timeout = inspect.DefaultTimeout
	}
	opts.Template.Timeout = timeout
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = timeout
	}
	rep := &InspectAllReport{Namespace: k.Namespace, Parallel: opts.Parallel, Timeout: timeout.String(),
		Clusters: []InspectRow{}, Worst: inspect.VerdictHealthy, Orphans: []InspectOrphan{}}
	clusters, err := k.Clusters(ctx, opts.Names...)
	if err != nil {
		return nil, err
	}
	rep.Clusters = make([]InspectRow, len(clusters))
	bl := &bucketLock{st: opts.Template.Store}
	var wg sync.WaitGroup
	if opts.Orphans && opts.Template.Store != nil && len(opts.Names) == 0 {
		// Beside the inspections (store and API reads only), bounded by
		// its own deadline.
		wg.Go(func() { rep.Orphans, rep.OrphanCheck = inspectOrphans(ctx, k, opts) })
	}
	notStarted := fanout.ForEach(ctx, len(clusters), opts.Parallel, func(ctx context.Context, i int) {
		rep.Clusters[i] = inspectOne(ctx, k, clusters[i], opts, bl)
	})
	for _, i := range notStarted {
		rep.Clusters[i] = failedRow(clusters[i], ctx.Err(), 0)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if bl.read {
		rep.ObjectLock = bl.info.Enabled
		if bl.err != nil {
			rep.LockError = output.OneLine(bl.err)
		}
	}
	for i := range rep.Clusters {
		r := &rep.Clusters[i]
		if r.ExitCode > rep.ExitCode {
			rep.ExitCode, rep.Worst = r.ExitCode, r.Verdict
		}
		if opts.NoReports {
			r.Report = nil
		}
	}
	rep.ElapsedMS = time.Since(start).Milliseconds()
	return rep, nil
}

// inspectOne inspects one cluster, bounded by its own deadline: the client
// TLS secret read and the inspection (itself capped at twice the timeout).
func inspectOne(ctx context.Context, k *kube.Client, c kube.Cluster, opts InspectAllOptions, bl *bucketLock) InspectRow {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 3*opts.Template.Timeout)
	defer cancel()
	fail := func(err error) InspectRow { return failedRow(c, err, time.Since(start)) }
	if opts.Template.Store != nil {
		if err := catalog.ValidateClusterID(c.Name); err != nil {
			return fail(err)
		}
	}
	ecfg, release, err := k.Connect(cctx, c, opts.DialTimeout)
	defer release()
	if err != nil {
		return fail(err)
	}
	o := opts.Template
	o.Etcd = ecfg
	if o.Store != nil {
		o.ClusterID = c.Name
	}
	rep, err := inspect.Run(cctx, o)
	if err != nil {
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		if cctx.Err() != nil {
			err = fmt.Errorf("no answer within %v", 3*opts.Template.Timeout)
		}
		return fail(err)
	}
	row := rowOf(c, rep)
	if opts.Identities != nil && o.Store != nil && row.Backup != string(inspect.BackupMissing) {
		row.DecryptBackup, row.Decrypt = newestDecrypts(cctx, o.Store, o.Layout, c.Name, opts.Identities)
	}
	if o.Store != nil && row.BackupName != "" {
		if info, err := bl.get(cctx); err == nil && info.Enabled {
			row.Lock = newestLock(cctx, o, info, c.Name, row.BackupName)
		}
	}
	row.ElapsedMS = time.Since(start).Milliseconds()
	return row
}

// newestDecrypts opens the age header of the cluster's newest encrypted
// backup (catalog.NewestEncrypted) with ids: a listing, its manifests,
// then a few KiB of the snapshot object. Nil when the cluster has no
// encrypted backup.
func newestDecrypts(ctx context.Context, st store.Store, layout catalog.Layout, id string, ids *seal.Identities) (string, *prune.DecryptResult) {
	m, err := catalog.NewestEncrypted(ctx, st, layout, id)
	if err != nil {
		return "", &prune.DecryptResult{State: prune.DecryptUnknown,
			Error: fmt.Sprintf("cluster %s: %s: find the newest encrypted backup: %v", id, catalog.StepCheckDecrypts, err)}
	}
	if m == nil {
		return "", nil
	}
	d, _ := prune.DecryptResultOf(catalog.CheckDecrypts(ctx, st, layout, m, ids))
	return m.Name, d
}

// bucketLock is the bucket's object-lock configuration, read once, by
// the first inspection that found a backup (within its deadline): a
// bucket's object lock cannot be undone, and a run whose store has no
// backup or does not answer reads nothing more.
type bucketLock struct {
	st   store.Store
	once sync.Once
	read bool
	info store.LockInfo
	err  error
}

func (b *bucketLock) get(ctx context.Context) (store.LockInfo, error) {
	b.once.Do(func() {
		b.read = true
		b.info, b.err = catalog.BucketLock(ctx, b.st)
	})
	return b.info, b.err
}

// newestLock reads the retention of the newest backup's manifest
// (catalog.BackupLock), judged at the inspection's clock.
func newestLock(ctx context.Context, o inspect.Options, bucket store.LockInfo, id, name string) *InspectLock {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	ls, err := catalog.BackupLock(ctx, o.Store, o.Layout, bucket, id, name, now())
	if err != nil {
		return &InspectLock{Error: output.OneLine(err)}
	}
	return &InspectLock{Locked: ls.Locked, Mode: ls.Mode, Until: ls.Until}
}

func failedRow(c kube.Cluster, err error, elapsed time.Duration) InspectRow {
	return InspectRow{Cluster: c.Name, Verdict: inspect.VerdictUnreachable, ExitCode: inspect.ExitUnreachable,
		Members: "?", Backup: BackupNotChecked, Drill: BackupNotChecked, NextStep: "not inspected", Error: output.OneLine(err),
		Endpoints: c.Endpoints, ElapsedMS: elapsed.Milliseconds()}
}

// rowOf summarizes a report.
func rowOf(c kube.Cluster, rep *inspect.Report) InspectRow {
	row := InspectRow{Cluster: c.Name, Verdict: rep.Verdict, ExitCode: rep.ExitCode(),
		Up: rep.Up, Voting: rep.Voting, Members: fmt.Sprintf("%d/%d", rep.Up, rep.Voting),
		Leader: rep.Leader, Backup: BackupNotChecked, Drill: BackupNotChecked, NextStep: shortStep(rep.NextStep.Action),
		Endpoints: c.Endpoints, Report: rep}
	for _, m := range rep.Members {
		if m.StatusOK && m.DBSize > row.DBSize {
			row.DBSize = m.DBSize
		}
	}
	if b := rep.Backup; b != nil {
		row.Backup = string(b.State)
		if b.Newest != nil {
			row.BackupName, row.BackupAge, row.BackupAgeSeconds = b.Newest.Name, b.AgeText, b.AgeSeconds
		}
		if d := b.Drill; d != nil {
			row.Drill = string(d.State)
			if p := d.Proven; p != nil {
				row.DrillProven, row.DrillProvenTime, row.DrillProvenAge, row.DrillProvenAgeSeconds = p.Name, p.Time, d.AgeText, d.AgeSeconds
			}
			if l := d.Last; l != nil {
				row.DrillLastBackup, row.DrillLastResult, row.DrillLastTime, row.DrillLastFailed, row.DrillLastMode = l.Backup, l.Result, l.At, l.Failed, l.Mode
			}
		} else if b.State == inspect.BackupUnknown {
			row.Drill = string(inspect.DrillUnknown) // the store failed
		}
	}
	return row
}

// shortStep is the next step's action up to its first colon ("minority
// failure", "backup missing", "none").
func shortStep(action string) string {
	s, _, _ := strings.Cut(action, ":")
	return s
}
