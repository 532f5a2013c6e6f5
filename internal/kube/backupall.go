package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/output"
)

// DefaultParallel is how many clusters BackupAll backs up at once.
const DefaultParallel = 4

// BackupAllOptions configure a backup of several EtcdClusters of one
// namespace.
type BackupAllOptions struct {
	Kube *Client
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

	Manifest *backup.Manifest    `json:"manifest,omitempty"`
	Prune    *backup.PruneReport `json:"prune,omitempty"`
	Err      error               `json:"-"`
}

// BackupAllReport is the outcome of BackupAll, one result per cluster in
// name order.
type BackupAllReport struct {
	Namespace string          `json:"namespace"`
	Parallel  int             `json:"parallel"`
	Clusters  []ClusterResult `json:"clusters"`
	Failed    []string        `json:"failed"`
	Duration  time.Duration   `json:"-"`
	Seconds   float64         `json:"durationSeconds"`
}

// Table is the summary printed at the end.
func (r *BackupAllReport) Table() output.Table {
	// STORED is the snapshot object's size as stored, as in backup and list.
	t := output.Table{Header: []string{"CLUSTER", "RESULT", "BACKUP", "REVISION", "STORED", "DURATION", "PRUNED", "ERROR"},
		Wide: []string{"REVISION", "DURATION"}, Long: []string{"ERROR"}}
	for _, c := range r.Clusters {
		rev, size, pruned := "-", "-", "-"
		if c.Result == ResultOK {
			rev, size = fmt.Sprint(c.Revision), output.Bytes(c.Size)
			if c.Prune != nil {
				pruned = fmt.Sprint(c.Pruned)
			}
		}
		errText := c.Error
		t.Rows = append(t.Rows, []string{c.Cluster, c.Result, dash(c.Backup), rev, size,
			c.Duration.Round(time.Millisecond).String(), pruned, dash(errText)})
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
	Err       error // discovery error; nil when some backups failed
}

func (e *BackupAllError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("backup of etcdclusters in %s: %v", e.Namespace, e.Err)
	}
	return fmt.Sprintf("backup failed for %d etcdcluster(s) in %s: %s", len(e.Failed), e.Namespace, strings.Join(e.Failed, ", "))
}

func (e *BackupAllError) Unwrap() error { return e.Err }

// BackupAll backs up the EtcdClusters of the namespace (all, or Names),
// at most Parallel at once. One cluster's failure does not stop the
// others. Each outcome is recorded as an Event on its EtcdCluster. The
// report holds every cluster; the error, a *BackupAllError, names the
// failed ones.
func BackupAll(ctx context.Context, opts BackupAllOptions) (*BackupAllReport, error) {
	start := time.Now()
	k := opts.Kube
	if k == nil {
		return nil, errors.New("no kubernetes client")
	}
	if opts.Parallel <= 0 {
		opts.Parallel = DefaultParallel
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rep := &BackupAllReport{Namespace: k.Namespace, Parallel: opts.Parallel, Failed: []string{}}
	clusters, err := k.Clusters(ctx, opts.Names...)
	if err != nil {
		return rep, &BackupAllError{Namespace: k.Namespace, Err: err}
	}
	if len(clusters) == 0 {
		log.Warn("no etcdclusters in the namespace", "namespace", k.Namespace)
	}
	log.Info("backing up etcdclusters", "namespace", k.Namespace, "clusters", len(clusters), "parallel", opts.Parallel)
	rep.Clusters = make([]ClusterResult, len(clusters))
	sem := make(chan struct{}, opts.Parallel)
	var wg sync.WaitGroup
	for i, c := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				rep.Clusters[i] = ClusterResult{Cluster: c.Name, Result: ResultFailed, Err: ctx.Err(), Error: ctx.Err().Error(), Endpoints: c.Endpoints}
				return
			}
			defer func() { <-sem }()
			rep.Clusters[i] = backupOne(ctx, k, c, opts, log)
		}()
	}
	wg.Wait()
	for i := range rep.Clusters {
		r := &rep.Clusters[i]
		r.Seconds = r.Duration.Seconds()
		if r.Result != ResultOK {
			rep.Failed = append(rep.Failed, r.Cluster)
		}
	}
	rep.Duration = time.Since(start)
	rep.Seconds = rep.Duration.Seconds()
	if len(rep.Failed) > 0 {
		return rep, &BackupAllError{Namespace: k.Namespace, Failed: rep.Failed}
	}
	return rep, nil
}

func backupOne(ctx context.Context, k *Client, c Cluster, opts BackupAllOptions, log *slog.Logger) (res ClusterResult) {
	start := time.Now()
	res = ClusterResult{Cluster: c.Name, Result: ResultFailed, Endpoints: c.Endpoints}
	clog := log.With("cluster", c.Name)
	defer func() {
		res.Duration = time.Since(start)
		if opts.NoEvents {
			return
		}
		typ, reason, msg := corev1.EventTypeNormal, ReasonBackupSucceeded, successMessage(res)
		if res.Result != ResultOK {
			typ, reason, msg = corev1.EventTypeWarning, ReasonBackupFailed, res.Error
		}
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := k.RecordEvent(ectx, c, typ, reason, msg); err != nil {
			res.EventError = err.Error()
			clog.Warn("could not record the event", "err", err)
		}
	}()
	fail := func(err error) ClusterResult {
		res.Err, res.Error = err, err.Error()
		clog.Error("backup failed", "err", err)
		return res
	}
	if err := backup.ValidateClusterID(c.Name); err != nil {
		return fail(err)
	}
	ecfg, release, err := k.Connect(ctx, c, opts.DialTimeout)
	defer release()
	if err != nil {
		return fail(&backup.Error{ClusterID: c.Name, Step: "read client TLS", Err: err})
	}
	bo := opts.Template
	bo.ClusterID = c.Name
	bo.Etcd = ecfg
	bo.Log = clog
	bo.Progress = nil
	r, err := backup.Run(ctx, bo)
	if r != nil {
		m := r.Manifest
		res.Manifest = m
		res.Backup = m.Name
		res.Revision = m.RevisionBefore
		res.RawSize = m.Snapshot.RawSize
		res.Size = m.Snapshot.StoredSize
		res.Source = m.Source.Name
		res.Prune = r.Pruned
		if r.Pruned != nil {
			res.Pruned = r.Pruned.Deleted
		}
	}
	if err != nil {
		return fail(err)
	}
	res.Result = ResultOK
	clog.Info("backup committed", "backup", res.Backup, "revision", res.Revision, "stored", res.Size, "pruned", res.Pruned)
	return res
}

func successMessage(r ClusterResult) string {
	s := fmt.Sprintf("backup %s committed: revision %d, %s stored (%s raw), from member %s, in %s",
		r.Backup, r.Revision, output.Bytes(r.Size), output.Bytes(r.RawSize), r.Source, r.Duration.Round(time.Millisecond))
	if r.Prune != nil {
		s += fmt.Sprintf("; pruned %d old backup(s)", r.Pruned)
	}
	return s
}
