package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/etcdconn"
)

// VerifyOptions configure the check of a rebuilt cluster.
type VerifyOptions struct {
	Etcd etcdconn.Config
	// Timeout bounds the wait for every member to come up and be healthy.
	// Default 2m.
	Timeout time.Duration
	// MinRevision: the cluster's revision must be at least this (the
	// snapshot's revision plus the bump). 0 skips the check.
	MinRevision int64
	// ExpectedKeys: the number of live keys must equal this (the
	// snapshot's). Negative skips the check.
	ExpectedKeys int64
	// ExpectedMembers: the member list must have this many members. 0
	// skips the check.
	ExpectedMembers int
	// ProbeTimeout bounds each request. Default 5s.
	ProbeTimeout time.Duration
	Log          *slog.Logger
}

// MemberHealth is one member of the rebuilt cluster.
type MemberHealth struct {
	Name     string `json:"name"`
	ID       string `json:"id"`
	Endpoint string `json:"endpoint"`
	Healthy  bool   `json:"healthy"`
	Version  string `json:"version,omitempty"`
	Revision int64  `json:"revision,omitempty"`
	Error    string `json:"error,omitempty"`
}

// VerifyReport is the state of the rebuilt cluster.
type VerifyReport struct {
	Members      []MemberHealth `json:"members"`
	Revision     int64          `json:"revision"`
	MinRevision  int64          `json:"minRevision,omitempty"`
	Keys         int64          `json:"keys"`
	ExpectedKeys *int64         `json:"expectedKeys,omitempty"`
	Checks       []Check        `json:"checks"`
	Verified     bool           `json:"verified"`
	Waited       time.Duration  `json:"waited"`
}

// Names of the checks of a rebuilt cluster.
const (
	CheckHealthy  = "all members healthy"
	CheckMembers  = "member count"
	CheckRevision = "revision not behind"
	CheckKeys     = "live key count"
)

// VerifyError is a rebuilt cluster that failed its checks.
type VerifyError struct{ Failed []Check }

func (e *VerifyError) Error() string {
	var parts []string
	for _, c := range e.Failed {
		parts = append(parts, c.Name+": "+c.Detail)
	}
	return "the rebuilt cluster failed verification: " + strings.Join(parts, "; ")
}

// Verify waits up to Timeout for every member of the cluster to be healthy
// (a linearizable read through each member alone, as `etcdctl endpoint
// health`, and no alarm), then checks the revision and the live key count
// once: a healthy cluster with the wrong data does not get better by
// waiting.
func Verify(ctx context.Context, opts VerifyOptions) (*VerifyReport, error) {
	if err := opts.Etcd.Validate(); err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 5 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	deadline := start.Add(opts.Timeout)
	var rep *VerifyReport
	// Poll every 100 ms for the first ten seconds (members usually come
	// up within a second of being started, and the RTO is measured to the
	// moment they are verified), then once a second.
	pause := 100 * time.Millisecond
	for {
		rep = verifyOnce(ctx, opts)
		rep.Waited = time.Since(start)
		if rep.healthy() || ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		opts.Log.Debug("waiting for the rebuilt cluster", "checks", rep.Checks)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		if time.Since(start) > 10*time.Second {
			pause = time.Second
		}
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	var failed []Check
	for _, c := range rep.Checks {
		if c.Status == CheckFailed {
			failed = append(failed, c)
		}
	}
	if len(failed) > 0 {
		if !rep.healthy() {
			failed[0].Detail += fmt.Sprintf(" (after waiting %v)", opts.Timeout)
		}
		return rep, &VerifyError{Failed: failed}
	}
	rep.Verified = true
	return rep, nil
}

func (r *VerifyReport) healthy() bool {
	for _, c := range r.Checks {
		if (c.Name == CheckHealthy || c.Name == CheckMembers) && c.Status != CheckPassed {
			return false
		}
	}
	return true
}

func verifyOnce(ctx context.Context, opts VerifyOptions) *VerifyReport {
	rep := &VerifyReport{MinRevision: opts.MinRevision}
	members, listErr := backup.ListMembers(ctx, opts.Etcd, opts.ProbeTimeout)
	if listErr != nil {
		rep.Checks = append(rep.Checks, Check{Name: CheckHealthy, Status: CheckFailed, Detail: "no endpoint returned the member list: " + listErr.Error()})
		return rep
	}
	members = backup.ProbeMembers(ctx, opts.Etcd, members, opts.ProbeTimeout)
	var unhealthy []string
	for _, m := range members {
		h := MemberHealth{Name: m.Name, ID: m.IDHex(), Endpoint: m.ClientURL}
		switch {
		case m.Err != nil:
			h.Error = m.Err.Error()
		case len(m.Status.Errors) > 0:
			h.Error = "alarm or error: " + strings.Join(m.Status.Errors, ", ")
		default:
			h.Version = m.Status.Version
			rev, err := linearizableRead(ctx, opts, m.ClientURL)
			if err != nil {
				h.Error = "linearizable read: " + err.Error()
			} else {
				h.Healthy, h.Revision = true, rev
			}
		}
		if !h.Healthy {
			name := h.Name
			if name == "" {
				name = h.Endpoint
			}
			unhealthy = append(unhealthy, name+": "+h.Error)
		}
		rep.Members = append(rep.Members, h)
	}
	if len(unhealthy) > 0 {
		rep.Checks = append(rep.Checks, Check{Name: CheckHealthy, Status: CheckFailed, Detail: strings.Join(unhealthy, "; ")})
	} else {
		rep.Checks = append(rep.Checks, Check{Name: CheckHealthy, Status: CheckPassed, Detail: plural(len(members), "member")})
	}
	if opts.ExpectedMembers > 0 {
		c := Check{Name: CheckMembers, Status: CheckPassed, Detail: plural(len(members), "member")}
		if len(members) != opts.ExpectedMembers {
			c.Status, c.Detail = CheckFailed, fmt.Sprintf("%s, want %d", plural(len(members), "member"), opts.ExpectedMembers)
		}
		rep.Checks = append(rep.Checks, c)
	}
	if !rep.healthy() {
		return rep
	}

	// The data: one linearizable count over the whole keyspace.
	cli, err := opts.Etcd.Client(ctx)
	if err != nil {
		rep.Checks = append(rep.Checks, Check{Name: CheckKeys, Status: CheckFailed, Detail: err.Error()})
		return rep
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*opts.ProbeTimeout)
	resp, err := cli.Get(cctx, "", clientv3.WithFromKey(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		rep.Checks = append(rep.Checks, Check{Name: CheckKeys, Status: CheckFailed, Detail: "count keys: " + err.Error()})
		return rep
	}
	rep.Revision, rep.Keys = resp.Header.Revision, resp.Count
	if opts.MinRevision > 0 {
		c := Check{Name: CheckRevision, Status: CheckPassed, Detail: fmt.Sprintf("revision %d >= %d", rep.Revision, opts.MinRevision)}
		if rep.Revision < opts.MinRevision {
			c.Status, c.Detail = CheckFailed, fmt.Sprintf("revision %d < %d (the snapshot's revision plus the bump): watchers would see revisions go back", rep.Revision, opts.MinRevision)
		}
		rep.Checks = append(rep.Checks, c)
	}
	if opts.ExpectedKeys >= 0 {
		want := opts.ExpectedKeys
		rep.ExpectedKeys = &want
		c := Check{Name: CheckKeys, Status: CheckPassed, Detail: fmt.Sprintf("%d live keys, as in the snapshot", rep.Keys)}
		if rep.Keys != want {
			c.Status, c.Detail = CheckFailed, fmt.Sprintf("%d live keys, the snapshot has %d", rep.Keys, want)
		}
		rep.Checks = append(rep.Checks, c)
	}
	return rep
}

// linearizableRead reads through one member alone and returns its revision.
func linearizableRead(ctx context.Context, opts VerifyOptions, ep string) (int64, error) {
	cli, err := opts.Etcd.Client(ctx, ep)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, opts.ProbeTimeout)
	defer cancel()
	resp, err := cli.Get(cctx, "health-check-etcd-recovery", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// ClusterCheckOptions configure `restore verify`: the expectations come
// from a backup in the store (downloaded, verified and read), from a
// manifest file (revision only), or are given outright.
type ClusterCheckOptions struct {
	VerifyOptions
	ClusterID string
	Store     backup.Store
	Layout    backup.Layout
	// Backup names the backup the cluster was restored from.
	Backup string
	// ManifestFile is a manifest.json on disk, instead of Backup.
	ManifestFile string
	// BumpRevision is the bump the restore applied.
	BumpRevision uint64
	// OverrideMinRevision and OverrideKeys keep MinRevision and
	// ExpectedKeys as given instead of taking them from the backup.
	OverrideMinRevision, OverrideKeys bool
	// TempDir holds the downloaded snapshot while it is read. Default
	// os.TempDir().
	TempDir  string
	Progress func(label string) Progress
}

// ClusterCheck is what `restore verify` found.
type ClusterCheck struct {
	ClusterID string         `json:"clusterID,omitempty"`
	Backup    string         `json:"backup,omitempty"`
	Snapshot  *SnapshotFacts `json:"snapshot,omitempty"`
	*VerifyReport
}

// CheckCluster is `restore verify`: it works out what the rebuilt cluster
// must hold, then runs Verify.
func CheckCluster(ctx context.Context, opts ClusterCheckOptions) (*ClusterCheck, error) {
	out := &ClusterCheck{ClusterID: opts.ClusterID, Backup: opts.Backup}
	givenRev, givenKeys := opts.MinRevision, opts.ExpectedKeys
	if opts.Progress == nil {
		opts.Progress = func(string) Progress { return nopProgress{} }
	}
	switch {
	case opts.Backup != "" && opts.ManifestFile != "":
		return out, errors.New("--backup and --manifest are exclusive")
	case opts.Backup != "":
		if err := backup.ValidateClusterID(opts.ClusterID); err != nil {
			return out, err
		}
		if opts.Store == nil {
			return out, errors.New("no object store")
		}
		m, err := backup.LoadManifest(ctx, opts.Store, opts.Layout, opts.ClusterID, opts.Backup)
		if err != nil {
			return out, fmt.Errorf("backup %s: %w", opts.Backup, err)
		}
		f, err := os.CreateTemp(opts.TempDir, ".etcd-recovery-verify-*.snapshot.db")
		if err != nil {
			return out, err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		prog := opts.Progress("download " + m.Name)
		_, err = fetchSnapshot(ctx, opts.Store, opts.Layout, m, f, prog.Update)
		prog.Done()
		if err != nil {
			return out, fmt.Errorf("backup %s: %w", m.Name, err)
		}
		if err := f.Close(); err != nil {
			return out, err
		}
		facts, err := readSnapshotFacts(f.Name())
		if err != nil {
			return out, fmt.Errorf("backup %s: %w", m.Name, err)
		}
		out.Snapshot = &facts
		opts.MinRevision = facts.Revision + int64(opts.BumpRevision)
		opts.ExpectedKeys = facts.LiveKeys
	case opts.ManifestFile != "":
		b, err := os.ReadFile(opts.ManifestFile)
		if err != nil {
			return out, err
		}
		m, err := backup.UnmarshalManifest(b)
		if err != nil {
			return out, fmt.Errorf("%s: %w", opts.ManifestFile, err)
		}
		out.ClusterID, out.Backup = m.ClusterID, m.Name
		opts.MinRevision = m.Revision() + int64(opts.BumpRevision)
	}
	if opts.OverrideMinRevision {
		opts.MinRevision = givenRev
	}
	if opts.OverrideKeys {
		opts.ExpectedKeys = givenKeys
	}
	rep, err := Verify(ctx, opts.VerifyOptions)
	out.VerifyReport = rep
	return out, err
}
