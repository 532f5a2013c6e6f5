package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
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
	// ExpectedLeasedKeys, when set, is how many of ExpectedKeys are
	// attached to a lease in the snapshot (SnapshotFacts.Expect sets both
	// from SnapshotFacts.AttachedKeys). etcd may expire those once the
	// cluster runs, so only the keys on no live lease must match exactly
	// (ExpectedKeys - *ExpectedLeasedKeys); the leased ones are reported,
	// not checked. Nil: the total must match.
	ExpectedLeasedKeys *int64
	// ExpectedMembers: the member list must have this many members. 0
	// skips the check.
	ExpectedMembers int
	// ProbeTimeout bounds each request. Default 5s.
	ProbeTimeout time.Duration
	Log          *slog.Logger

	// afterHealthy, in tests, runs once the members were judged healthy
	// and before the data is read (export_test.go).
	afterHealthy func()
	// orphanLeases are the leases that live keys of the snapshot name but
	// its lease bucket does not hold, and orphansUpTo the snapshot's
	// revision (SnapshotFacts.Expect sets both): a key restored on one of
	// them (its mod revision not above orphansUpTo) is attached to no
	// lease, and the key scan counts it with the keys on none.
	orphanLeases map[int64]bool
	orphansUpTo  int64

	// countByScan, in tests, counts the keys on leases by the key scan
	// alone; betweenCounts runs between the index count's two counts, and
	// an error it returns is the index count's (export_test.go).
	countByScan   bool
	betweenCounts func(attempt int) error
}

// MemberRow is one member of the rebuilt cluster, the verify report's
// row (inspect.MemberHealth is inspect's, with its own JSON): built from
// inspect's row for the member (inspect.Probe), Healthy is
// probe.Member.Healthy (serves a linearizable read through itself alone,
// no alarm) and Error says why not, alarms first.
type MemberRow struct {
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
	Members      []MemberRow `json:"members"`
	Revision     int64       `json:"revision"`
	MinRevision  int64       `json:"minRevision,omitempty"`
	Keys         int64       `json:"keys"`
	ExpectedKeys *int64      `json:"expectedKeys,omitempty"`
	// With ExpectedLeasedKeys: the live keys attached to a live lease now
	// and in the snapshot, and the keys on none (now and expected). A key
	// that names a lease its database does not hold is attached to none
	// (etcd's start attaches a key only to a lease it has), can never
	// expire, and counts with the keys on no lease.
	LeasedKeys           int64  `json:"leasedKeys,omitempty"`
	SnapshotLeasedKeys   *int64 `json:"snapshotLeasedKeys,omitempty"`
	UnleasedKeys         int64  `json:"unleasedKeys,omitempty"`
	ExpectedUnleasedKeys *int64 `json:"expectedUnleasedKeys,omitempty"`
	// CountedBy says how the keys on leases were counted: "index" (etcd's
	// index and the leases, no value read) or "scan" (every key's entry).
	CountedBy string        `json:"countedBy,omitempty"`
	Checks    []Check       `json:"checks"`
	Verified  bool          `json:"verified"`
	Waited    time.Duration `json:"waited"`

	// unread: the members were healthy but the data could not be read
	// (a timeout, a leader change): not a verdict on the data, so the
	// wait goes on.
	unread bool
}

// Names of the checks of a rebuilt cluster.
const (
	CheckHealthy  = "all members healthy"
	CheckMembers  = "member count"
	CheckRevision = "revision not behind"
	CheckKeys     = "live key count"
	// CheckUnleasedKeys replaces CheckKeys when the snapshot's leased
	// keys are known; CheckLeasedKeys is information, never a failure.
	CheckUnleasedKeys = "live keys without a lease"
	CheckLeasedKeys   = "keys on leases"
)

// CheckInfo is the status of a check that reports and never fails.
const CheckInfo = "info"

// VerifyError is a rebuilt cluster that failed its checks.
type VerifyError struct{ Failed []Check }

func (e *VerifyError) Error() string {
	var parts []string
	for _, c := range e.Failed {
		parts = append(parts, c.Name+": "+c.Detail)
	}
	return "the rebuilt cluster failed verification: " + strings.Join(parts, "; ")
}

// VerifyRebuilt is the verify stage: it waits up to Timeout for every member of the cluster to be healthy,
// then checks the revision and the live key count once: a healthy cluster
// with the wrong data does not get better by waiting. Data that could not
// be read (the count timed out, as it did on a freshly restored 1.3 GiB
// member of a loaded machine) is no verdict: it is read again, within
// Timeout. The members are
// probed and judged as inspect does (inspect.Probe, inspect.Verdict): the
// cluster is healthy when the verdict is HEALTHY and every member is
// healthy as internal/probe defines it (a linearizable read through the
// member alone, as `etcdctl endpoint health`, and no alarm).
func VerifyRebuilt(ctx context.Context, opts VerifyOptions) (*VerifyReport, error) {
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
	lastLog := start
	opts.Log.Info("waiting for the rebuilt cluster's members to be healthy", "endpoints", strings.Join(opts.Etcd.Endpoints, ","),
		"timeout", opts.Timeout)
	for {
		rep = verifyOnce(ctx, opts)
		rep.Waited = time.Since(start)
		if (rep.healthy() && !rep.unread) || ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		if time.Since(lastLog) >= 10*time.Second {
			// Say what it waits for: a silent wait looks like a hang.
			lastLog = time.Now()
			opts.Log.Info("still waiting for the rebuilt cluster", "endpoints", strings.Join(opts.Etcd.Endpoints, ","),
				"waited", rep.Waited.Round(time.Second), "timeout", opts.Timeout, "not yet", notYet(rep))
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
		if !rep.healthy() || rep.unread {
			failed[0].Detail += fmt.Sprintf(" (after waiting %v)", opts.Timeout)
		}
		return rep, &VerifyError{Failed: failed}
	}
	rep.Verified = true
	return rep, nil
}

// notYet is what the last round found missing, for the log.
func notYet(r *VerifyReport) string {
	var parts []string
	for _, c := range r.Checks {
		if c.Status == CheckFailed {
			parts = append(parts, c.Name+": "+c.Detail)
		}
	}
	return strings.Join(parts, "; ")
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
	// The members, probed and judged as inspect does (one definition of
	// healthy: probe.Member.Healthy), then restore's own checks.
	pc := inspect.Probe(ctx, opts.Etcd, opts.ProbeTimeout)
	if pc.ListErr != nil {
		rep.Checks = append(rep.Checks, Check{Name: CheckHealthy, Status: CheckFailed, Detail: "no endpoint returned the member list: " + pc.ListErr.Error()})
		return rep
	}
	verdict := inspect.Verdict(pc.Members, nil, inspect.Thresholds{})
	members := verdict.Members
	rep.Members = make([]MemberRow, 0, len(members))
	for _, m := range members {
		rep.Members = append(rep.Members, memberRow(m))
	}
	rep.Checks = append(rep.Checks, healthCheck(verdict))
	if opts.ExpectedMembers > 0 {
		c := Check{Name: CheckMembers, Status: CheckPassed, Detail: output.Count(len(members), "member")}
		if len(members) != opts.ExpectedMembers {
			c.Status, c.Detail = CheckFailed, fmt.Sprintf("%s, want %d", output.Count(len(members), "member"), opts.ExpectedMembers)
		}
		rep.Checks = append(rep.Checks, c)
	}
	if !rep.healthy() {
		return rep
	}

	if opts.afterHealthy != nil {
		opts.afterHealthy()
	}

	// The data: one linearizable count over the whole keyspace.
	cli, err := opts.Etcd.Client(ctx)
	if err != nil {
		rep.Checks = append(rep.Checks, Check{Name: CheckKeys, Status: CheckFailed, Detail: err.Error()})
		rep.unread = true
		return rep
	}
	defer cli.Close()
	if opts.ExpectedLeasedKeys != nil {
		rep.Revision, rep.Keys, rep.LeasedKeys, rep.CountedBy, err = countAttached(ctx, cli, opts)
	} else {
		cctx, cancel := context.WithTimeout(ctx, 2*opts.ProbeTimeout)
		var resp *clientv3.GetResponse
		if resp, err = cli.Get(cctx, "", clientv3.WithFromKey(), clientv3.WithCountOnly()); err == nil {
			rep.Revision, rep.Keys = resp.Header.Revision, resp.Count
		}
		cancel()
	}
	if err != nil {
		rep.Checks = append(rep.Checks, Check{Name: CheckKeys, Status: CheckFailed, Detail: "count keys: " + err.Error()})
		rep.unread = true
		return rep
	}
	if opts.MinRevision > 0 {
		c := Check{Name: CheckRevision, Status: CheckPassed, Detail: fmt.Sprintf("revision %d >= %d", rep.Revision, opts.MinRevision)}
		if rep.Revision < opts.MinRevision {
			c.Status, c.Detail = CheckFailed, fmt.Sprintf("revision %d < %d (the snapshot's revision plus the bump): watchers would see revisions go back", rep.Revision, opts.MinRevision)
		}
		rep.Checks = append(rep.Checks, c)
	}
	switch {
	case opts.ExpectedKeys < 0:
	case opts.ExpectedLeasedKeys != nil:
		want := opts.ExpectedKeys
		snapLeased := *opts.ExpectedLeasedKeys
		wantUnleased := want - snapLeased
		rep.ExpectedKeys, rep.SnapshotLeasedKeys, rep.ExpectedUnleasedKeys = &want, &snapLeased, &wantUnleased
		rep.UnleasedKeys = rep.Keys - rep.LeasedKeys
		c := Check{Name: CheckUnleasedKeys, Status: CheckPassed, Detail: fmt.Sprintf("%d, as in the snapshot", rep.UnleasedKeys)}
		if rep.UnleasedKeys != wantUnleased {
			c.Status, c.Detail = CheckFailed, fmt.Sprintf("%d live keys on no live lease, the snapshot has %d", rep.UnleasedKeys, wantUnleased)
		}
		rep.Checks = append(rep.Checks, c)
		detail := fmt.Sprintf("%d now, %d in the snapshot", rep.LeasedKeys, snapLeased)
		switch d := snapLeased - rep.LeasedKeys; {
		case d > 0:
			detail += fmt.Sprintf(": %d expired with their leases since the restore, as etcd does", d)
		case d < 0:
			detail += fmt.Sprintf(": %d attached since the restore", -d)
		}
		rep.Checks = append(rep.Checks, Check{Name: CheckLeasedKeys, Status: CheckInfo, Detail: detail})
	default:
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

// CountPage is how many keys one range request of countKeys (and of a
// drill's key scan) returns: a bound on the memory a page takes (keys
// only, no values).
const CountPage = 2000

// LeaseAskMax bounds how many leases countByIndex asks for their keys, a
// request each (leaseAskParallel at once): a cluster with more leases is
// counted by the key scan. Kubernetes puts the events of a minute on one
// lease, so its clusters hold about a hundred.
const LeaseAskMax = 1000

const leaseAskParallel = 8

// countAttached counts the live keys of the cluster, and those attached to
// a live lease, at one revision, and says how ("index" or "scan"). First
// from etcd's index (countByIndex), which reads no value: the key scan
// (countKeys) reads every key's entry from the database, values included,
// and took 18 s of a 1.2 GiB restore. The index count is made through one
// member (a member's applied state only moves forward, so what it answers
// after its own linearizable count is at least that state), within three
// probe timeouts an attempt. A keyspace that moves under it three times,
// more than LeaseAskMax leases, or any error of its own (a lease whose
// keys are more than a response may carry, a slow leader) is counted by
// the scan, whose pages are bounded.
func countAttached(ctx context.Context, cli *clientv3.Client, opts VerifyOptions) (rev, total, attached int64, by string, err error) {
	if !opts.countByScan {
		why := ""
		one := opts.Etcd
		one.Endpoints = one.Endpoints[:1]
		ocli, cerr := one.Client(ctx)
		if cerr != nil {
			why = cerr.Error()
		} else {
			for attempt := range 3 {
				ictx, cancel := context.WithTimeout(ctx, 3*opts.ProbeTimeout)
				rev, total, attached, why, err = countByIndex(ictx, ocli, opts.ProbeTimeout, attempt, opts.betweenCounts)
				cancel()
				if err == nil && why == "" {
					ocli.Close()
					return rev, total, attached, "index", nil
				}
				if ctx.Err() != nil {
					ocli.Close()
					return 0, 0, 0, "", ctx.Err()
				}
				if err != nil {
					why = err.Error()
					break
				}
				if !strings.HasPrefix(why, "the keyspace moved") {
					break
				}
			}
			ocli.Close()
		}
		opts.Log.Info("counting the keys on leases by a key scan", "why", why)
	}
	rev, total, attached, err = countKeys(ctx, cli, opts.ProbeTimeout, opts.orphanLeases, opts.orphansUpTo)
	return rev, total, attached, "scan", err
}

// countByIndex counts the live keys with a count-only range (etcd answers
// it from its in-memory index), then the keys attached to each live lease
// (LeaseTimeToLive with its keys), then the live keys again. When both
// counts answer at the same revision, nothing attached, detached or
// deleted a key in between (each of those is a write, and every write
// moves the revision; a lease that expires with no key on it moves
// nothing and counts nothing), so the two numbers are of one keyspace.
// notOne says why they are not: the revision moved, or there are more
// than LeaseAskMax leases.
func countByIndex(ctx context.Context, cli *clientv3.Client, probe time.Duration, attempt int, between func(int) error) (rev, total, attached int64, notOne string, err error) {
	count := func() (int64, int64, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*probe)
		defer cancel()
		r, err := cli.Get(cctx, "", clientv3.WithFromKey(), clientv3.WithCountOnly())
		if err != nil {
			return 0, 0, fmt.Errorf("count the live keys: %w", err)
		}
		return r.Header.Revision, r.Count, nil
	}
	if rev, total, err = count(); err != nil {
		return 0, 0, 0, "", err
	}
	ids, err := leaseIDs(ctx, cli, probe)
	if err != nil {
		return 0, 0, 0, "", err
	}
	if len(ids) > LeaseAskMax {
		return 0, 0, 0, fmt.Sprintf("%d leases, more than %d to ask one by one", len(ids), LeaseAskMax), nil
	}
	keys := make([]int64, len(ids))
	errs := make([]error, len(ids))
	fanout.ForEach(ctx, len(ids), leaseAskParallel, func(ctx context.Context, i int) {
		cctx, cancel := context.WithTimeout(ctx, probe)
		defer cancel()
		r, err := cli.TimeToLive(cctx, ids[i], clientv3.WithAttachedKeys())
		if err != nil {
			errs[i] = fmt.Errorf("the keys of lease %x: %w", int64(ids[i]), err)
			return
		}
		keys[i] = int64(len(r.Keys))
	})
	// The first failure says why (the log line stays one line).
	if i := slices.IndexFunc(errs, func(e error) bool { return e != nil }); i >= 0 {
		n := len(slices.DeleteFunc(slices.Clone(errs), func(e error) bool { return e == nil }))
		return 0, 0, 0, "", fmt.Errorf("%w (%d of %d leases failed)", errs[i], n, len(ids))
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, 0, "", fmt.Errorf("the keys of %d leases: %w", len(ids), err)
	}
	for _, n := range keys {
		attached += n
	}
	if between != nil {
		if err := between(attempt); err != nil {
			return 0, 0, 0, "", err
		}
	}
	rev2, _, err := count()
	if err != nil {
		return 0, 0, 0, "", err
	}
	if rev2 != rev {
		return 0, 0, 0, fmt.Sprintf("the keyspace moved under the count (revision %d, then %d)", rev, rev2), nil
	}
	return rev, total, attached, "", nil
}

// leaseIDs are the live leases of the member cli reaches.
func leaseIDs(ctx context.Context, cli *clientv3.Client, probe time.Duration) ([]clientv3.LeaseID, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*probe)
	defer cancel()
	r, err := cli.Leases(cctx)
	if err != nil {
		return nil, fmt.Errorf("list the leases: %w", err)
	}
	ids := make([]clientv3.LeaseID, len(r.Leases))
	for i, l := range r.Leases {
		ids[i] = l.ID
	}
	return ids, nil
}

// countKeys counts the live keys of the cluster, and those attached to a
// live lease, with linearizable keys-only range requests of CountPage
// keys, all at the revision of the first, so the count is of one
// consistent keyspace. A keys-only response still carries each key's
// lease and mod revision. A live key that names a lease is attached to it
// (etcd refuses a put on a lease it does not have, and a lease's end
// deletes its keys), except a key restored on a lease its snapshot did
// not hold (orphans, at a mod revision not above upTo): etcd's start
// attached it to none. (Should a lease of an orphan's ID be granted again
// by hand and a member then restart, that member's start attaches the old
// keys to it, and the index count says so where this one does not: the
// verify then fails, it does not pass.)
func countKeys(ctx context.Context, cli *clientv3.Client, probe time.Duration, orphans map[int64]bool, upTo int64) (rev, total, attached int64, err error) {
	for attempt := 0; ; attempt++ {
		rev, total, attached, err = countKeysOnce(ctx, cli, probe, orphans, upTo)
		if !errors.Is(err, rpctypes.ErrCompacted) || attempt >= 2 {
			return rev, total, attached, err
		}
	}
}

func countKeysOnce(ctx context.Context, cli *clientv3.Client, probe time.Duration, orphans map[int64]bool, upTo int64) (rev, total, attached int64, err error) {
	key := []byte{0}
	first := true
	for {
		opts := []clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithKeysOnly(), clientv3.WithLimit(CountPage),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
		if !first {
			opts = append(opts, clientv3.WithRev(rev))
		}
		cctx, cancel := context.WithTimeout(ctx, 2*probe)
		resp, err := cli.Get(cctx, string(key), opts...)
		cancel()
		if err != nil {
			return 0, 0, 0, err
		}
		if first {
			rev, first = resp.Header.Revision, false
		}
		for _, kv := range resp.Kvs {
			total++
			if kv.Lease != 0 && !(orphans[kv.Lease] && kv.ModRevision <= upTo) {
				attached++
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, total, attached, nil
		}
		last := resp.Kvs[len(resp.Kvs)-1].Key
		key = append(append(key[:0], last...), 0)
	}
}

// memberRow is the verify report's row for an inspected member.
func memberRow(m inspect.MemberHealth) MemberRow {
	h := MemberRow{Name: m.Name, ID: m.ID, Endpoint: m.ClientURL, Healthy: m.Healthy(), Version: m.Version, Revision: m.Revision, Error: m.Error}
	if len(m.Alarms) > 0 {
		alarm := "alarm " + strings.Join(m.Alarms, ", ") + " active"
		if h.Error == "" {
			h.Error = alarm
		} else {
			h.Error = alarm + "; " + h.Error
		}
	}
	return h
}

// healthCheck is CheckHealthy from inspect's verdict: it passes when the
// verdict is HEALTHY (every voting member serves linearizable reads, no
// alarm, no split-brain sign) and every member, learners included, is
// healthy (probe.Member.Healthy).
func healthCheck(a inspect.Assessment) Check {
	var unhealthy []string
	for _, m := range a.Members {
		if !m.Healthy() {
			unhealthy = append(unhealthy, m.Label()+": "+memberRow(m).Error)
		}
	}
	if a.Verdict == inspect.VerdictHealthy && len(unhealthy) == 0 {
		return Check{Name: CheckHealthy, Status: CheckPassed, Detail: output.Count(len(a.Members), "member")}
	}
	detail := strings.Join(unhealthy, "; ")
	if detail == "" {
		detail = string(a.Verdict) + ": " + a.Summary
	}
	return Check{Name: CheckHealthy, Status: CheckFailed, Detail: detail}
}

// ClusterCheckOptions configure `restore verify`: the expectations come
// from a backup in the store (downloaded, verified and read), from a
// manifest file (revision only), or are given outright.
type ClusterCheckOptions struct {
	VerifyOptions
	ClusterID string
	Store     store.Store
	Layout    catalog.Layout
	// Backup names the backup the cluster was restored from.
	Backup string
	// ManifestFile is a manifest.json on disk, instead of Backup.
	ManifestFile string
	// BumpRevision is the bump the restore applied.
	BumpRevision uint64
	// OverrideMinRevision and OverrideKeys keep MinRevision and
	// ExpectedKeys as given instead of taking them from the backup.
	OverrideMinRevision, OverrideKeys bool
	// TempDir (--temp-dir) holds the downloaded snapshot while it is
	// read. Default os.TempDir() ($TMPDIR, else /tmp).
	TempDir string
	// Identities (--identity-file) decrypt an encrypted --backup.
	Identities *seal.Identities
	Progress   func(label string) Progress
}

// ClusterCheck is what `restore verify` found.
type ClusterCheck struct {
	ClusterID string         `json:"clusterID,omitempty"`
	Backup    string         `json:"backup,omitempty"`
	Snapshot  *SnapshotFacts `json:"snapshot,omitempty"`
	*VerifyReport
}

// Validate checks what `restore verify` was asked: --backup or --manifest,
// not both; --backup with a valid cluster id and a backup name; endpoints;
// a timeout that is not negative (0 is the default). It returns usage
// errors (internal/usage); CheckCluster calls it first.
func (o ClusterCheckOptions) Validate() error {
	switch {
	case o.Timeout < 0:
		return usage.Errorf("restore verify: --verify-timeout must be positive, got %s", o.Timeout)
	case o.Backup != "" && o.ManifestFile != "":
		return usage.Errorf("restore verify: --backup and --manifest are exclusive")
	case o.Backup != "" && o.ClusterID == "":
		return usage.Errorf("restore verify: --backup needs --cluster-id")
	case o.Backup != "":
		if err := catalog.ValidateClusterID(o.ClusterID); err != nil {
			return usage.Wrap(fmt.Errorf("restore verify: %w", err))
		}
		if _, _, err := catalog.ParseBackupName(o.Backup); err != nil {
			return usage.Errorf("restore verify: --backup: %w", err)
		}
	}
	if len(o.Etcd.Endpoints) == 0 {
		return usage.Errorf("restore verify: --endpoints (the rebuilt cluster's client URLs, or ETCDCTL_ENDPOINTS) is required")
	}
	return nil
}

// CheckCluster is `restore verify`: it works out what the rebuilt cluster
// must hold, then runs VerifyRebuilt. Its options are checked first (Validate).
func CheckCluster(ctx context.Context, opts ClusterCheckOptions) (*ClusterCheck, error) {
	out := &ClusterCheck{ClusterID: opts.ClusterID, Backup: opts.Backup}
	if err := opts.Validate(); err != nil {
		return out, err
	}
	givenRev, givenKeys := opts.MinRevision, opts.ExpectedKeys
	if opts.Progress == nil {
		opts.Progress = func(string) Progress { return nopProgress{} }
	}
	switch {
	case opts.Backup != "" && opts.ManifestFile != "":
		return out, errors.New("--backup and --manifest are exclusive")
	case opts.Backup != "":
		if err := catalog.ValidateClusterID(opts.ClusterID); err != nil {
			return out, err
		}
		if opts.Store == nil {
			return out, errors.New("no object store")
		}
		m, err := catalog.LoadManifest(ctx, opts.Store, opts.Layout, opts.ClusterID, opts.Backup)
		if err != nil {
			return out, fmt.Errorf("backup %s: %w", opts.Backup, err)
		}
		if err := checkIdentity(opts.Layout, m, opts.Identities); err != nil {
			return out, &Error{ClusterID: opts.ClusterID, At: StepVerifyBackup, Err: err}
		}
		root := ScratchRoot(opts.TempDir)
		if err := CheckSpace([]SpaceNeed{{Path: root, Bytes: StagedBytes(m.Snapshot.RawSize), Hint: HintScratch,
			What: fmt.Sprintf("the snapshot of backup %s, uncompressed, read to count its keys", m.Name)}}); err != nil {
			return out, &Error{ClusterID: opts.ClusterID, At: StepSpace, Err: err}
		}
		// Plaintext of an encrypted backup: tagged and registered, so that a
		// second signal or the next start removes it (seal.CreateTemp).
		f, err := seal.CreateTemp(root, ".etcd-recovery-verify-", ".snapshot.db")
		if err != nil {
			return out, err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		prog := withTotal(opts.Progress("download "+m.Name), m)
		_, err = fetchSnapshot(ctx, opts.Store, opts.Layout, m, "", opts.Identities, f, prog.Update)
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
		facts.Expect(&opts.VerifyOptions)
	case opts.ManifestFile != "":
		b, err := os.ReadFile(opts.ManifestFile)
		if err != nil {
			return out, err
		}
		m, err := catalog.UnmarshalManifest(b)
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
		opts.ExpectedKeys, opts.ExpectedLeasedKeys = givenKeys, nil
	}
	rep, err := VerifyRebuilt(ctx, opts.VerifyOptions)
	out.VerifyReport = rep
	return out, err
}
