package restore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
)

// V2Options configure RestoreV2.
type V2Options struct {
	ClusterID string
	Store     store.Store
	Layout    catalog.Layout
	// Backup names the backup whose v2 export is restored; by default the
	// one restore would choose (the highest revision).
	Backup string
	// Etcd is the new, healthy cluster. It must serve the v2 API (etcd 3.4
	// or 3.5 with --enable-v2).
	Etcd etcdconn.Config
	// Concurrency is the number of keys written at a time. Default 8.
	Concurrency int
	// Identities (--identity-file) decrypt an encrypted backup's export.
	Identities *seal.Identities
	// IncludeDeleted (--include-deleted) also considers the backups only
	// object versions hold (deleted or overwritten, on a versioned
	// bucket: prune.VersionedBackups), as restore does; they are
	// considered anyway when no live backup has a v2 export, or when
	// Backup names one that is not live.
	IncludeDeleted bool
	Now            func() time.Time
	Log            *slog.Logger
}

// V2Change is one v2 node that was created, updated, skipped or failed.
type V2Change struct {
	Key    string `json:"key"`
	Dir    bool   `json:"dir,omitempty"`
	Action string `json:"action"` // created, updated, expired, failed
	TTL    int64  `json:"ttl,omitempty"`
	Error  string `json:"error,omitempty"`
}

// V2Report counts what RestoreV2 did. Unchanged nodes are only counted.
type V2Report struct {
	ClusterID string `json:"clusterID"`
	Backup    string `json:"backup"`
	// FromVersions: the backup is deleted or overwritten; its export was
	// read at the version it wrote (Version).
	FromVersions bool          `json:"fromVersions,omitempty"`
	Version      string        `json:"version,omitempty"`
	Endpoint     string        `json:"endpoint"`
	Keys         int           `json:"keys"` // in the export
	Dirs         int           `json:"dirs"`
	Created      int           `json:"created"`
	Updated      int           `json:"updated"`
	Unchanged    int           `json:"unchanged"`
	Expired      int           `json:"expired"` // TTL ran out since the backup: not written
	Failed       int           `json:"failed"`
	Changes      []V2Change    `json:"changes"`
	Duration     time.Duration `json:"duration"`
}

// V2 actions.
const (
	V2Created   = "created"
	V2Updated   = "updated"
	V2Unchanged = "unchanged"
	V2Expired   = "expired"
	V2Failed    = "failed"
)

// Validate checks the options a caller chose, before anything is
// contacted; its errors are usage errors (internal/usage). RestoreV2
// calls it first.
func (o V2Options) Validate() error {
	if o.ClusterID == "" {
		return usage.Errorf("--cluster-id is required")
	}
	if err := catalog.ValidateClusterID(o.ClusterID); err != nil {
		return usage.Wrap(err)
	}
	if o.Backup != "" {
		if _, _, err := catalog.ParseBackupName(o.Backup); err != nil {
			return usage.Errorf("--backup: %w", err)
		}
	}
	return usage.Wrap(o.Etcd.Validate())
}

// RestoreV2 writes a backup's v2 keyspace (directories, keys, values and
// the TTLs they have left) into a healthy cluster through the v2 HTTP API.
// It compares first and writes only what differs, so running it twice
// changes nothing the second time.
func RestoreV2(ctx context.Context, opts V2Options) (*V2Report, error) {
	r := &v2Run{start: time.Now(), opts: opts,
		rep: &V2Report{ClusterID: opts.ClusterID, Backup: opts.Backup, Changes: []V2Change{}}}
	if err := r.setUp(); err != nil {
		return r.rep, err
	}
	m, err := r.chooseBackup(ctx)
	if err != nil {
		return r.rep, err
	}
	exp, err := r.fetchExport(ctx, m)
	if err != nil {
		return r.rep, err
	}
	hc, err := r.opts.Etcd.HTTPClient()
	if err != nil {
		return r.rep, r.fail(StepValidate, err)
	}
	defer hc.CloseIdleConnections()
	existing, err := r.readCluster(ctx, hc)
	if err != nil {
		return r.rep, err
	}
	if err := r.writeNodes(ctx, hc, exp, existing); err != nil {
		return r.rep, err
	}
	return r.rep, r.result(ctx, m, exp)
}

// v2Run is the state of one RestoreV2: its options and its report.
type v2Run struct {
	start time.Time
	opts  V2Options
	log   *slog.Logger
	rep   *V2Report
	mu    sync.Mutex // guards rep while keys are written
	// version is the v2 export's object version when the backup is read
	// from versions ("" for a live one).
	version string
}

// fail is the run's failure at step.
func (r *v2Run) fail(step string, err error) error {
	return &Error{ClusterID: r.opts.ClusterID, At: step, Err: err}
}

// setUp is the validate step: the options checked, then defaulted.
func (r *v2Run) setUp() error {
	if err := r.opts.Validate(); err != nil {
		return r.fail(StepValidate, err)
	}
	if r.opts.Store == nil {
		return r.fail(StepValidate, errors.New("no object store"))
	}
	if r.opts.Concurrency <= 0 {
		r.opts.Concurrency = 8
	}
	if r.opts.Now == nil {
		r.opts.Now = time.Now
	}
	if r.opts.Log == nil {
		r.opts.Log = slog.New(slog.DiscardHandler)
	}
	r.log = r.opts.Log.With("cluster", r.opts.ClusterID)
	return nil
}

// chooseBackup is the select step: the backup asked for, or the newest
// committed one; it must hold a v2 export.
func (r *v2Run) chooseBackup(ctx context.Context) (*catalog.Manifest, error) {
	opts := r.opts
	var m *catalog.Manifest
	if opts.Backup != "" {
		var err error
		if m, err = catalog.LoadManifest(ctx, opts.Store, opts.Layout, opts.ClusterID, opts.Backup); err != nil {
			vb := r.versioned(ctx, func(b prune.VersionedBackup) bool { return b.Name == opts.Backup })
			if vb == nil {
				return nil, r.fail(StepSelect, fmt.Errorf("--backup %s: %w", opts.Backup, err))
			}
			m = r.fromVersions(vb)
		}
	} else {
		listed, err := catalog.ListBackups(ctx, opts.Store, opts.Layout, opts.ClusterID)
		if err != nil {
			return nil, r.fail(StepList, err)
		}
		cands, _ := rankCandidates(listed)
		var live *catalog.Manifest
		if len(cands) > 0 {
			live = cands[0].manifest
		}
		if live == nil || opts.IncludeDeleted {
			// The backups only versions hold: the newest with an export,
			// when it is newer than the newest live one with one.
			vb := r.versioned(ctx, func(b prune.VersionedBackup) bool {
				return b.Manifest.V2 != nil && (live == nil || b.Manifest.Revision() > live.Revision())
			})
			if vb != nil {
				live = r.fromVersions(vb)
			}
		}
		if live == nil {
			return nil, r.fail(StepSelect, fmt.Errorf("no committed backup of cluster %s", opts.ClusterID))
		}
		m = live
		r.log.Info("restoring the v2 keys of the newest backup", "backup", m.Name, "revision", m.Revision())
	}
	r.rep.Backup = m.Name
	if m.V2 == nil {
		return nil, r.fail(StepSelect, r.noExport(ctx, m))
	}
	return m, nil
}

// versioned is the newest backup only object versions hold (deleted or
// overwritten) that ok accepts, nil when none (or the bucket keeps no
// versions; a failure to list them is logged).
func (r *v2Run) versioned(ctx context.Context, ok func(prune.VersionedBackup) bool) *prune.VersionedBackup {
	vbs, err := prune.VersionedBackups(ctx, r.opts.Store, r.opts.Layout, r.opts.ClusterID)
	if err != nil {
		r.log.Warn("object versions could not be listed", "cluster", r.opts.ClusterID, "err", err)
		return nil
	}
	for i := range vbs {
		if vbs[i].Recovered() && vbs[i].Manifest != nil && ok(vbs[i]) {
			return &vbs[i]
		}
	}
	return nil
}

// fromVersions takes vb, a backup only versions hold: its export is read
// at the version the backup wrote, and the report and a warning say so.
func (r *v2Run) fromVersions(vb *prune.VersionedBackup) *catalog.Manifest {
	m := vb.Manifest
	if m.V2 != nil {
		r.version = vb.Versions[m.V2.Object]
	}
	r.rep.FromVersions, r.rep.Version = true, r.version
	r.log.Warn("restoring the v2 keys of a backup that only object versions hold", "cluster", r.opts.ClusterID,
		"backup", m.Name, "status", vb.Status, "version", r.version)
	return m
}

// noExport words a backup without a v2 export, naming the backups with
// one.
func (r *v2Run) noExport(ctx context.Context, m *catalog.Manifest) error {
	var with []string
	if listed, err := catalog.ListBackups(ctx, r.opts.Store, r.opts.Layout, r.opts.ClusterID); err == nil {
		for _, l := range listed {
			if l.Manifest != nil && l.Manifest.V2 != nil {
				with = append(with, l.Name)
			}
		}
	}
	msg := fmt.Sprintf("backup %s has no v2 export (%s)", m.Name, m.V2Skipped)
	if len(with) > 0 {
		msg += "; backups with one: " + strings.Join(with, ", ") + " (pass --backup)"
	}
	return errors.New(msg)
}

// fetchExport is the verify step: the identities checked against the
// backup's recipients, the export streamed, verified and decoded.
func (r *v2Run) fetchExport(ctx context.Context, m *catalog.Manifest) (*catalog.V2Export, error) {
	if err := checkIdentity(r.opts.Layout, m, r.opts.Identities); err != nil {
		return nil, r.fail(StepVerifyBackup, err)
	}
	exp, err := fetchV2(ctx, r.opts.Store, r.opts.Layout, m, r.version, r.opts.Identities)
	if err != nil {
		return nil, r.fail(StepVerifyBackup, err)
	}
	r.rep.Keys, r.rep.Dirs = exp.Counts()
	return exp, nil
}

// readCluster reads the cluster's v2 keys as they are, from the first
// endpoint that serves them, by key.
func (r *v2Run) readCluster(ctx context.Context, hc *http.Client) (map[string]catalog.V2Node, error) {
	var cur *catalog.V2Export
	var errs []error
	for _, ep := range r.opts.Etcd.Endpoints {
		u := r.opts.Etcd.URL(ep)
		var err error
		cur, err = catalog.ExportV2(ctx, hc, u)
		if err == nil {
			r.rep.Endpoint = u
			break
		}
		if errors.Is(err, catalog.ErrV2Unavailable) {
			return nil, r.fail(StepV2, fmt.Errorf("%s: %w: start the new members with --enable-v2 (etcd 3.4 or 3.5; 3.6 has no v2 store)", etcdconn.Host(u), err))
		}
		errs = append(errs, fmt.Errorf("%s: %w", etcdconn.Host(u), err))
	}
	if r.rep.Endpoint == "" {
		return nil, r.fail(StepV2, fmt.Errorf("no endpoint served the v2 keys: %w", errors.Join(errs...)))
	}
	existing := make(map[string]catalog.V2Node, len(cur.Nodes))
	for _, n := range cur.Nodes {
		existing[n.Key] = n
	}
	return existing, nil
}

// writeNodes is the write step: directories in order (parents first),
// then keys concurrently, each change recorded in the report.
func (r *v2Run) writeNodes(ctx context.Context, hc *http.Client, exp *catalog.V2Export, existing map[string]catalog.V2Node) error {
	now := r.opts.Now()
	w := &v2Writer{hc: hc, endpoint: r.rep.Endpoint}
	var keys []catalog.V2Node
	for _, n := range exp.Nodes {
		if !n.Dir {
			keys = append(keys, n)
			continue
		}
		if err := ctx.Err(); err != nil {
			return r.fail(StepV2, err)
		}
		r.record(w.apply(ctx, n, existing, now))
	}
	work := make(chan catalog.V2Node)
	var wg sync.WaitGroup
	for range r.opts.Concurrency {
		wg.Go(func() {
			for n := range work {
				r.record(w.apply(ctx, n, existing, now))
			}
		})
	}
	for _, n := range keys {
		select {
		case work <- n:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
	return nil
}

// record counts one change in the report, and lists it unless unchanged.
func (r *v2Run) record(c V2Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := r.rep
	switch c.Action {
	case V2Created:
		rep.Created++
	case V2Updated:
		rep.Updated++
	case V2Unchanged:
		rep.Unchanged++
		return
	case V2Expired:
		rep.Expired++
	case V2Failed:
		rep.Failed++
	}
	rep.Changes = append(rep.Changes, c)
}

// result ends the run: its duration, a cancel, the counts logged, and an
// error naming the first node that could not be written.
func (r *v2Run) result(ctx context.Context, m *catalog.Manifest, exp *catalog.V2Export) error {
	rep := r.rep
	rep.Duration = time.Since(r.start)
	if err := ctx.Err(); err != nil {
		return r.fail(StepV2, err)
	}
	r.log.Info("v2 keys restored", "backup", m.Name, "created", rep.Created, "updated", rep.Updated,
		"unchanged", rep.Unchanged, "expired", rep.Expired, "failed", rep.Failed)
	if rep.Failed > 0 {
		first := ""
		for _, c := range rep.Changes {
			if c.Action == V2Failed {
				first = c.Key + ": " + c.Error
				break
			}
		}
		return r.fail(StepV2, fmt.Errorf("%d of %d v2 nodes could not be written, first: %s", rep.Failed, len(exp.Nodes), first))
	}
	return nil
}

// StepV2 is the step of RestoreV2 that writes the keys.
const StepV2 = "restore v2 keys"

// fetchV2 streams a backup's v2 export through objectio.Open, which checks
// it against the manifest (decrypting an encrypted backup's with ids), and
// decodes it; nothing is buffered whole.
func fetchV2(ctx context.Context, st store.Store, layout catalog.Layout, m *catalog.Manifest, version string, ids *seal.Identities) (*catalog.V2Export, error) {
	key := layout.Key(m.ClusterID, m.Name, m.V2.Object)
	r, err := objectio.Open(ctx, st, key, objectio.Expect{
		VersionID: version, StoredSize: objectio.UnknownSize, StoredSHA256: m.V2.StoredSHA256,
		RawSize: objectio.UnknownSize, RawSHA256: m.V2.SHA256, Compression: m.V2.Compression,
		Encrypted: m.Encryption.Encrypted(), Recipients: m.Recipients(), Identities: ids})
	if err != nil {
		return nil, v2Failed(key, m, err)
	}
	defer r.Close()
	var exp catalog.V2Export
	dec := json.NewDecoder(r)
	jerr := dec.Decode(&exp)
	if jerr == nil {
		if _, err := dec.Token(); err != io.EOF {
			jerr = err
			if err == nil {
				jerr = errors.New("invalid character after top-level value")
			}
		}
	}
	// The checks run at the end of the object: read it to its end (the
	// reader's error is sticky, so one the decoder saw is seen again).
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, v2Failed(key, m, err)
	}
	if jerr != nil {
		return nil, fmt.Errorf("%s: %w", key, jerr)
	}
	if exp.Format != catalog.V2ExportFormat {
		return nil, fmt.Errorf("%s: format %q is not supported (want %s)", key, exp.Format, catalog.V2ExportFormat)
	}
	return &exp, nil
}

// v2Failed words what objectio found in a v2 export.
func v2Failed(key string, m *catalog.Manifest, err error) error {
	var oe *objectio.Error
	if !errors.As(err, &oe) {
		return err
	}
	switch oe.Kind {
	case objectio.KindMissing:
		return oe.Err
	case objectio.KindTampered:
		return tamperedError(key, oe.Err)
	case objectio.KindNoIdentity:
		return fmt.Errorf("%s: %w", key, oe.Err)
	case objectio.KindStoredSHA, objectio.KindStoredSize:
		return fmt.Errorf("%s: stored sha256 %s, manifest says %s: corrupt or truncated", key, oe.Got.StoredSHA256, m.V2.StoredSHA256)
	case objectio.KindDecode:
		return fmt.Errorf("%s: decompress: %w", key, oe.Err)
	case objectio.KindRawSHA, objectio.KindRawSize:
		return fmt.Errorf("%s: sha256 %s, manifest says %s", key, oe.Got.RawSHA256, m.V2.SHA256)
	}
	return err
}

type v2Writer struct {
	hc       *http.Client
	endpoint string
}

// remainingTTL is the TTL a node has left now: 0 for none, negative when
// it has expired since the backup.
func remainingTTL(n catalog.V2Node, now time.Time) int64 {
	if n.Expiration != nil {
		left := n.Expiration.Sub(now).Seconds()
		if left <= 0 {
			return -1
		}
		return int64(math.Ceil(left))
	}
	return n.TTL
}

// apply makes one node of the cluster match the export.
func (w *v2Writer) apply(ctx context.Context, n catalog.V2Node, existing map[string]catalog.V2Node, now time.Time) V2Change {
	c := V2Change{Key: n.Key, Dir: n.Dir}
	ttl := remainingTTL(n, now)
	if ttl < 0 {
		c.Action = V2Expired
		return c
	}
	c.TTL = ttl
	form := url.Values{}
	if ttl > 0 {
		form.Set("ttl", strconv.FormatInt(ttl, 10))
	}
	cur, ok := existing[n.Key]
	switch {
	case ok && cur.Dir != n.Dir:
		c.Action, c.Error = V2Failed, "the cluster holds a key where the backup has a directory, or the reverse: not replaced"
		if cur.Dir {
			c.Error = "the cluster holds a directory where the backup has a key: not replaced"
		}
		return c
	case ok && (!n.Dir && cur.Value == n.Value || n.Dir) && (cur.TTL > 0) == (ttl > 0):
		c.Action = V2Unchanged
		return c
	case ok:
		c.Action = V2Updated
		form.Set("prevExist", "true")
		if ttl == 0 {
			form.Set("ttl", "") // clear a TTL the backup does not have
		}
	default:
		c.Action = V2Created
		form.Set("prevExist", "false")
	}
	if n.Dir {
		form.Set("dir", "true")
	} else {
		form.Set("value", n.Value)
	}
	if err := w.put(ctx, n.Key, form); err != nil {
		c.Action, c.Error = V2Failed, err.Error()
	}
	return c
}

func (w *v2Writer) put(ctx context.Context, key string, form url.Values) error {
	segs := strings.Split(strings.TrimPrefix(key, "/"), "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	u := strings.TrimRight(w.endpoint, "/") + "/v2/keys/" + strings.Join(segs, "/")
	var lastErr error
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 300 * time.Millisecond):
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, strings.NewReader(form.Encode()))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := w.hc.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
			return nil
		}
		lastErr = fmt.Errorf("PUT %s: %s: %s", key, resp.Status, strings.TrimSpace(string(body)))
		if resp.StatusCode < 500 {
			return lastErr
		}
	}
	return lastErr
}
