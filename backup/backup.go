// Package backup takes one etcd backup into an object store, and nothing
// else: Run chooses the member to snapshot (a healthy one, preferring a
// follower), streams its snapshot compressed and hashed into the store,
// optionally exports the v2 store (ExportV2), and writes the manifest last,
// through internal/catalog, so the backup exists only once it is complete.
// With Options.Prune it then applies the retention policy to the cluster
// (catalog.Prune). The object layout, the manifest, listing, retention,
// prune and delete live in internal/catalog.
package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/ctxerr"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/probe"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/version"
)

// Options configure one backup run of one cluster.
type Options struct {
	ClusterID   string
	Kind        catalog.Kind
	V2          V2Mode
	Compression catalog.Compression
	Etcd        etcdconn.Config
	Store       store.Store
	Layout      catalog.Layout

	// ProbeTimeout bounds each member probe. Default 5s.
	ProbeTimeout time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Progress is called with the raw bytes streamed so far.
	Progress func(int64)
	// OnSource is called when a snapshot stream from a member starts.
	OnSource func(probe.Member)
	Log      *slog.Logger

	// Prune, when set, applies this retention policy to the cluster once
	// the backup is committed (never after a failed backup).
	Prune *catalog.Policy

	// Drill, when set, is called once the backup is committed and before
	// Prune runs, with the committed manifest: the CLI wires a restore
	// drill of the new backup into it (restore.Drill; this package does
	// not import restore), so the drill follows the backup while the
	// source can still answer for the snapshot's revision, and the
	// retention rule `drilled` sees its record. It returns the drill's
	// record (nil when the drill could not run) and its error. A failed
	// drill never undoes the backup (it is committed); Run then returns
	// the Result, with the record, and an *Error at StepDrill. Prune
	// still runs after a failed drill (unless the run was cancelled).
	Drill func(ctx context.Context, m *catalog.Manifest) (*catalog.DrillRecord, error)

	// chunkHook, when set, sees (and may change) each snapshot chunk as it
	// arrives, before it is hashed: tests inject a damaged stream with it
	// (export_test.go).
	chunkHook func([]byte)
}

// Result is a committed backup.
type Result struct {
	Manifest *catalog.Manifest
	Prefix   string // the backup's folder
	Duration time.Duration
	// Pruned is the prune that followed the backup (Options.Prune).
	Pruned *catalog.PruneReport
	// Drill is the record of the drill that followed the backup
	// (Options.Drill): nil when none ran or it could not run. DrillErr is
	// the drill's error (nil when it passed).
	Drill    *catalog.DrillRecord
	DrillErr error
}

// Step names, used in errors so an SRE sees where a backup failed.
const (
	StepValidate = "validate"
	StepStore    = "check object store"
	StepMembers  = "find a member"
	StepSnapshot = "stream snapshot"
	StepUpload   = "upload snapshot"
	StepV2       = "export v2 keys"
	StepObjects  = "check stored objects"
	StepManifest = "write manifest"
	StepPrune    = "prune"
	StepDrill    = "drill"
)

// Error is a failed backup: the cluster, the step and the cause.
type Error struct {
	ClusterID string
	Step      string
	Err       error
}

func (e *Error) Error() string {
	if e.Step == StepPrune || e.Step == StepDrill {
		// The backup exists; only retention or its drill failed. Say so first.
		return fmt.Sprintf("backup of cluster %s committed, but step %q failed: %v", e.ClusterID, e.Step, e.Err)
	}
	return fmt.Sprintf("backup of cluster %s failed at step %q: %v", e.ClusterID, e.Step, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

func (o *Options) defaults() error {
	if err := catalog.ValidateClusterID(o.ClusterID); err != nil {
		return err
	}
	// Library callers (the fleet backup, tests) get the CLI's check: a
	// prefix that writes keys the store cannot list back is refused.
	p, err := catalog.ValidatePrefix(o.Layout.Prefix)
	if err != nil {
		return err
	}
	o.Layout.Prefix = p
	if o.Kind == "" {
		o.Kind = catalog.KindManual
	}
	if _, err := catalog.ParseKind(string(o.Kind)); err != nil {
		return err
	}
	if o.V2 == "" {
		o.V2 = V2Auto
	}
	if _, err := ParseV2Mode(string(o.V2)); err != nil {
		return err
	}
	if o.Compression == "" {
		o.Compression = catalog.CompressZstd
	}
	if _, err := catalog.ParseCompression(string(o.Compression)); err != nil {
		return err
	}
	if o.Store == nil {
		return errors.New("no object store")
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o.Etcd.Validate()
}

// Run takes one backup: it picks a member, streams its snapshot into the
// store, exports the v2 keys, and writes the manifest last. On failure it
// leaves nothing that looks like a backup: the multipart upload is aborted,
// objects already written are removed, and no manifest exists.
func Run(ctx context.Context, opts Options) (*Result, error) {
	if err := opts.defaults(); err != nil {
		return nil, &Error{ClusterID: opts.ClusterID, Step: StepValidate, Err: err}
	}
	fail := func(step string, err error) (*Result, error) {
		return nil, &Error{ClusterID: opts.ClusterID, Step: step, Err: ctxerr.Wrap(ctx, err)}
	}
	log := opts.Log.With("cluster", opts.ClusterID)
	start := opts.Now().UTC()

	if c, ok := opts.Store.(store.Checker); ok {
		if err := c.Check(ctx); err != nil {
			return fail(StepStore, err)
		}
	}

	members, listErr := probe.List(ctx, opts.Etcd, opts.ProbeTimeout)
	if listErr != nil {
		log.Warn("no endpoint returned the member list; probing the endpoints as given", "err", listErr)
	}
	members = probe.Members(ctx, opts.Etcd, members, opts.ProbeTimeout)
	quorum := probe.Quorum(members)
	cands := SnapshotCandidates(members, quorum)
	if len(cands) == 0 {
		var errs []error
		for _, m := range members {
			errs = append(errs, fmt.Errorf("%s: %w", etcdconn.Host(m.ClientURL), m.Err()))
		}
		return fail(StepMembers, fmt.Errorf("no member answered: %w", errors.Join(errs...)))
	}
	if !quorum {
		log.Warn("cluster has no quorum; backing up a surviving member", "member", cands[0].Name)
	}

	// A fresh name per run: two runs started in the same millisecond, in
	// one process or many, never share a folder. Every object is written
	// with a conditional create where the store has one, so even a
	// colliding name could not replace another backup's object.
	name := catalog.NewBackupName(start, opts.Kind)
	snapObj := catalog.SnapshotObjectZstd
	if opts.Compression == catalog.CompressNone {
		snapObj = catalog.SnapshotObjectRaw
	}
	snapKey := opts.Layout.Key(opts.ClusterID, name, snapObj)
	m := &catalog.Manifest{
		Format:      catalog.ManifestFormat,
		ClusterID:   opts.ClusterID,
		Name:        name,
		Kind:        opts.Kind,
		StartedAt:   start,
		ToolVersion: version.Version,
	}
	var written []string
	cleanup := func() {
		if len(written) == 0 {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := opts.Store.Delete(cctx, written); err != nil {
			log.Error("could not remove the objects of the failed backup; they have no manifest and prune removes them after 24h",
				"backup", name, "err", err)
		}
	}

	// The folder's first object: from now on prune sees the folder (as
	// incomplete, kept while young) and lists uploads under its exact
	// keys, which finds an upload leaked by a run killed mid-stream.
	startedKey := opts.Layout.Key(opts.ClusterID, name, catalog.StartedObject)
	marker := fmt.Sprintf("{\"startedAt\":%q,\"toolVersion\":%q}\n", start.Format(time.RFC3339Nano), version.Version)
	if _, err := putObject(ctx, opts.Store, startedKey, strings.NewReader(marker)); err != nil {
		return fail(StepStore, err)
	}
	written = append(written, startedKey)

	// Snapshot: try the best member; if its stream breaks (the member died
	// mid-stream), try the next one. A store failure is not retried on
	// another member: the store is the problem.
	var (
		src     probe.Member
		sres    streamResult
		lastErr error
	)
	for i, cand := range cands {
		log.Info("streaming snapshot", "member", cand.Name, "endpoint", cand.ClientURL, "leader", cand.IsLeader(), "quorum", quorum)
		if opts.OnSource != nil {
			opts.OnSource(cand)
		}
		res, revBefore, revAfter, step, err := snapshotMember(ctx, opts, cand, snapKey)
		if err == nil {
			src, sres = cand, res
			m.RevisionBefore, m.RevisionAfter = revBefore, revAfter
			lastErr = nil
			break
		}
		lastErr = fmt.Errorf("member %s (%s): %w", cand.Name, etcdconn.Host(cand.ClientURL), err)
		// A stalled or refusing store is the store's failure, whatever the
		// stream saw meanwhile: another member would meet the same store.
		if step != StepSnapshot || errors.Is(err, store.ErrStalled) || errors.Is(err, store.ErrExists) || ctx.Err() != nil || i == len(cands)-1 {
			cleanup()
			return fail(step, lastErr)
		}
		log.Warn("snapshot stream failed; trying the next member", "member", cand.Name, "err", err)
	}
	if lastErr != nil {
		cleanup()
		return fail(StepSnapshot, lastErr)
	}
	written = append(written, snapKey)
	m.Source = catalog.Member{Name: src.Name, ID: src.IDHex(), Endpoint: src.ClientURL}
	m.Snapshot = catalog.SnapshotInfo{
		Object: snapObj, Compression: opts.Compression,
		RawSize: sres.RawSize, RawSHA256: sres.RawSHA256,
		StoredSize: sres.StoredSize, StoredSHA256: sres.StoredSHA256,
	}
	log.Info("snapshot stored", "key", snapKey, "raw_bytes", sres.RawSize, "stored_bytes", sres.StoredSize,
		"revision", m.RevisionBefore, "member", src.Name)

	hc, err := opts.Etcd.HTTPClient()
	if err != nil {
		cleanup()
		return fail(StepSnapshot, err)
	}
	vctx, cancel := context.WithTimeout(ctx, opts.ProbeTimeout)
	m.ServerVersion, m.ClusterVersion, err = probe.Versions(vctx, hc, src.ClientURL)
	cancel()
	if err != nil {
		log.Warn("could not read /version; taking the server version from status", "err", err)
		m.ServerVersion = src.Status.Version
	}

	if opts.V2 == V2Off {
		m.V2Skipped = "--v2 off"
	} else {
		info, err := exportV2(ctx, opts, hc, src.ClientURL, name)
		switch {
		case errors.Is(err, ErrV2Unavailable) && opts.V2 == V2Auto:
			m.V2Skipped = ErrV2Unavailable.Error()
			log.Info("skipping v2 export: the member does not serve the v2 API", "member", src.Name, "version", m.ServerVersion)
		case err != nil:
			if info != nil {
				written = append(written, opts.Layout.Key(opts.ClusterID, name, info.Object))
			}
			cleanup()
			return fail(StepV2, err)
		default:
			written = append(written, opts.Layout.Key(opts.ClusterID, name, info.Object))
			m.V2 = info
			log.Info("v2 keys stored", "keys", info.Keys, "dirs", info.Dirs)
		}
	}

	// A manifest is never written for objects that are not there: each
	// object it names must be stored with the size recorded (a prune or a
	// lifecycle rule may have removed it while the backup ran).
	if err := checkStored(ctx, opts, name, m); err != nil {
		cleanup()
		return fail(StepObjects, err)
	}

	m.FinishedAt = opts.Now().UTC()
	body, err := catalog.MarshalManifest(m)
	if err != nil {
		cleanup()
		return fail(StepManifest, err)
	}
	mkey := opts.Layout.Key(opts.ClusterID, name, catalog.ManifestObject)
	if _, err := putObject(ctx, opts.Store, mkey, bytes.NewReader(body)); err != nil {
		if !errors.Is(err, store.ErrExists) {
			cleanup()
		}
		return fail(StepManifest, err)
	}
	// Read the manifest back: the backup reports success only if the
	// store now holds exactly what was written.
	if err := readBack(ctx, opts.Store, mkey, body); err != nil {
		if !errors.Is(err, errManifestReplaced) {
			// Unreadable: the backup cannot be shown to restore. Its
			// objects are this run's (the name is unique): remove them,
			// manifest first.
			written = append([]string{mkey}, written...)
			cleanup()
		}
		return fail(StepManifest, err)
	}
	// And check the objects once more: a prune that saw the folder without
	// a manifest may have deleted an object between the first check and
	// the manifest's write. After this check the backup is committed, and
	// prune treats it as one.
	if err := checkStored(ctx, opts, name, m); err != nil {
		written = append([]string{mkey}, written...)
		cleanup()
		return fail(StepObjects, err)
	}
	log.Info("backup committed", "backup", name, "manifest", mkey, "duration", m.FinishedAt.Sub(start).Round(time.Millisecond))
	res := &Result{Manifest: m, Prefix: opts.Layout.BackupPrefix(opts.ClusterID, name), Duration: m.FinishedAt.Sub(start)}
	var drillErr error
	if opts.Drill != nil {
		// After the commit, before the prune: the drill's record is what
		// the retention rule `drilled` reads.
		res.Drill, res.DrillErr = opts.Drill(ctx, m)
		if res.DrillErr != nil {
			// No record: the drill could not run (no etcd of the
			// version, no room, the store failed), which proves nothing
			// either way; with one, the backup failed a check.
			what := "failed"
			if res.Drill == nil {
				what = "could not run"
			}
			drillErr = &Error{ClusterID: opts.ClusterID, Step: StepDrill,
				Err: fmt.Errorf("the backup itself was committed (%s); its restore drill %s: %w", name, what, res.DrillErr)}
			log.Error("restore drill of the new backup "+what, "backup", name, "err", res.DrillErr)
		} else if res.Drill != nil {
			log.Info("restore drill passed", "backup", name, "comparison", res.Drill.Comparison.Mode,
				"duration", res.Drill.FinishedAt.Sub(res.Drill.StartedAt).Round(time.Millisecond))
		}
		if ctx.Err() != nil {
			// Cancelled: nothing is deleted after a drill cut short.
			return res, drillErr
		}
	}
	if opts.Prune == nil {
		return res, drillErr
	}
	// Only a committed backup is followed by deletions.
	rep, err := catalog.Prune(ctx, catalog.PruneOptions{Store: opts.Store, Layout: opts.Layout, ClusterIDs: []string{opts.ClusterID},
		Policy: *opts.Prune, Now: opts.Now(), Log: opts.Log})
	res.Pruned = rep
	if err != nil {
		perr := &Error{ClusterID: opts.ClusterID, Step: StepPrune,
			Err: fmt.Errorf("the backup itself was committed (%s); pruning older backups failed: %w", name, err)}
		if drillErr != nil {
			return res, errors.Join(drillErr, perr)
		}
		return res, perr
	}
	return res, drillErr
}

// snapshotMember streams one member's snapshot into key. The returned step
// says whether the source or the store failed.
func snapshotMember(ctx context.Context, opts Options, cand probe.Member, key string) (res streamResult, revBefore, revAfter int64, step string, err error) {
	cli, err := opts.Etcd.Client(ctx, cand.ClientURL)
	if err != nil {
		return res, 0, 0, StepSnapshot, err
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, opts.ProbeTimeout)
	st, err := cli.Status(sctx, cand.ClientURL)
	cancel()
	if err != nil {
		return res, 0, 0, StepSnapshot, fmt.Errorf("status before snapshot: %w", err)
	}
	revBefore = st.Header.Revision

	// The stream is cancelled with the upload: if the store fails, etcd
	// stops sending.
	streamCtx, cancelStream := context.WithCancel(ctx)
	defer cancelStream()
	stream, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Snapshot(streamCtx, &pb.SnapshotRequest{}, etcdinternals.SnapshotCallOptions()...)
	if err != nil {
		return res, 0, 0, StepSnapshot, fmt.Errorf("open snapshot stream: %w", err)
	}
	raw := NewSnapshotHasher()
	chunks := receive(func() (etcdinternals.SnapshotChunk, error) {
		c, err := etcdinternals.RecvSnapshotChunk(stream)
		if err == nil && opts.chunkHook != nil {
			opts.chunkHook(c.Blob)
		}
		return c, err
	}, raw, opts.Progress)

	pr, pw := io.Pipe()
	type out struct {
		res streamResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := compressStream(chunks, raw, pw, opts.Compression)
		done <- out{r, err}
	}()
	_, putErr := putObject(streamCtx, opts.Store, key, pr)
	if putErr != nil {
		cancelStream()
		pr.CloseWithError(putErr)
	}
	o := <-done
	var srcErr *sourceError
	switch {
	case putErr != nil && (errors.Is(putErr, store.ErrStalled) || errors.Is(putErr, store.ErrExists)):
		// The store stalled (or refused the key): whatever the stream saw
		// since is a consequence, not a member failure.
		return res, 0, 0, StepUpload, putErr
	case errors.As(o.err, &srcErr):
		return res, 0, 0, StepSnapshot, fmt.Errorf("snapshot stream broke after %d bytes: %w", raw.n, srcErr.err)
	case o.err != nil && putErr == nil:
		// A checksum mismatch or compression failure; the upload saw the
		// error through the pipe, so putErr is normally set too.
		return res, 0, 0, StepSnapshot, o.err
	case o.err != nil && !errors.Is(o.err, putErr) && !errors.Is(o.err, io.ErrClosedPipe):
		return res, 0, 0, StepSnapshot, fmt.Errorf("%w (upload: %v)", o.err, putErr)
	case putErr != nil:
		return res, 0, 0, StepUpload, putErr
	}
	sctx, cancel = context.WithTimeout(ctx, opts.ProbeTimeout)
	st, err = cli.Status(sctx, cand.ClientURL)
	cancel()
	if err != nil {
		// The snapshot is complete and verified; the member died after.
		opts.Log.Warn("status after snapshot failed; recording the revision before", "member", cand.Name, "err", err)
		revAfter = revBefore
	} else {
		revAfter = st.Header.Revision
	}
	return o.res, revBefore, revAfter, "", nil
}

// exportV2 exports the v2 keyspace and stores it. v2 data (legacy calico)
// is small, so it is encoded in memory.
func exportV2(ctx context.Context, opts Options, hc *http.Client, clientURL, name string) (*catalog.V2Info, error) {
	exp, err := ExportV2(ctx, hc, clientURL)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(exp)
	if err != nil {
		return nil, err
	}
	rawSum := sha256.Sum256(raw)
	obj := catalog.V2ObjectZstd
	if opts.Compression == catalog.CompressNone {
		obj = catalog.V2ObjectRaw
	}
	var buf bytes.Buffer
	enc, err := encoder(&buf, opts.Compression)
	if err != nil {
		return nil, err
	}
	if _, err := enc.Write(raw); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	storedSum := sha256.Sum256(buf.Bytes())
	keys, dirs := exp.Counts()
	info := &catalog.V2Info{
		Object: obj, Compression: opts.Compression, Keys: keys, Dirs: dirs, EtcdIndex: exp.EtcdIndex,
		SHA256: hex.EncodeToString(rawSum[:]), StoredSize: int64(buf.Len()), StoredSHA256: hex.EncodeToString(storedSum[:]),
	}
	if _, err := putObject(ctx, opts.Store, opts.Layout.Key(opts.ClusterID, name, obj), &buf); err != nil {
		return info, err
	}
	return info, nil
}

// putObject writes key with the store's conditional create when it has one
// (ConditionalStore), so that a backup never replaces an existing object.
func putObject(ctx context.Context, st store.Store, key string, r io.Reader) (int64, error) {
	if cs, ok := st.(store.Conditional); ok {
		return cs.PutIfAbsent(ctx, key, r)
	}
	return st.Put(ctx, key, r)
}

// errObjectVanished and errManifestReplaced fail a backup before or after
// its manifest is written.
var (
	errObjectVanished   = errors.New("object vanished during backup")
	errManifestReplaced = errors.New("the manifest read back differs from the one written: another writer replaced it")
)

// checkStored checks that every object the manifest names is stored with
// the size recorded.
func checkStored(ctx context.Context, opts Options, name string, m *catalog.Manifest) error {
	want := map[string]int64{opts.Layout.Key(opts.ClusterID, name, m.Snapshot.Object): m.Snapshot.StoredSize}
	if m.V2 != nil {
		want[opts.Layout.Key(opts.ClusterID, name, m.V2.Object)] = m.V2.StoredSize
	}
	objs, err := opts.Store.List(ctx, opts.Layout.BackupPrefix(opts.ClusterID, name))
	if err != nil {
		return fmt.Errorf("listing the backup's objects: %w", err)
	}
	got := map[string]int64{}
	for _, o := range objs {
		got[o.Key] = o.Size
	}
	for _, key := range slices.Sorted(maps.Keys(want)) {
		size, ok := got[key]
		switch {
		case !ok:
			return fmt.Errorf("%w: %s is no longer in the store (deleted by a prune or a lifecycle rule?); no manifest written", errObjectVanished, key)
		case size != want[key]:
			return fmt.Errorf("%w: %s is %d bytes in the store, %d were written; no manifest written", errObjectVanished, key, size, want[key])
		}
	}
	return nil
}

// readBack reads key and compares it with want.
func readBack(ctx context.Context, st store.Store, key string, want []byte) error {
	rc, err := st.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading the manifest back: %w", err)
	}
	defer rc.Close()
	got, err := io.ReadAll(io.LimitReader(rc, int64(len(want))+1))
	if err != nil {
		return fmt.Errorf("reading the manifest back: %w", err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s: %w", key, errManifestReplaced)
	}
	return nil
}
