package undelete

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/restore"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Action is what an undelete did (or, in a dry run, would do) with a key
// that existed at the point.
type Action string

const (
	// ActionRestored: absent now, written back with its bytes from the
	// point (ActionWouldRestore in a dry run).
	ActionRestored     Action = "restored"
	ActionWouldRestore Action = "would-restore"
	// ActionPresent: exists now with the same bytes; nothing to do (a
	// second run finds every key so).
	ActionPresent Action = "present"
	// ActionDiffers: exists now with other bytes; left alone (without
	// Replace).
	ActionDiffers Action = "differs"
	// ActionReplaced: exists now with other bytes, replaced (Replace;
	// ActionWouldReplace in a dry run).
	ActionReplaced     Action = "replaced"
	ActionWouldReplace Action = "would-replace"
	// ActionLeased: attached to a lease at the point (Events, leases):
	// skipped. The lease is gone; the key would never expire.
	ActionLeased Action = "leased"
	// ActionAppeared: absent when read, then created (or, with Replace,
	// changed) by someone else before the guarded write: left alone.
	ActionAppeared Action = "appeared"
	// ActionTerminating: a Kubernetes object (not a namespace or a
	// custom resource definition) that was already being deleted at the
	// point (a pod in its grace period): skipped, as it would be deleted
	// again (--accept-terminating writes it).
	ActionTerminating Action = "terminating"
	// ActionConflict: a Service whose cluster IP or node port another
	// live Service holds now: left alone (two Services on one IP is a
	// state that never existed).
	ActionConflict Action = "conflict"
	// ActionDeletedAgain: written, then deleted again before the run
	// ended (the namespace controller, the garbage collector, or
	// someone): the run fails.
	ActionDeletedAgain Action = "deleted-again"
	// ActionPending: to be written, but the run stopped first (a signal,
	// the cluster unreachable): a rerun writes it.
	ActionPending Action = "pending"
	// ActionFailed: could not be written (for example a key larger than
	// the server accepts); the run fails.
	ActionFailed Action = "failed"
)

// Key is one key that existed at the point under the prefixes.
type Key struct {
	Key    string `json:"key"`
	Action Action `json:"action"`
	Reason string `json:"reason,omitempty"`
	// ModRevision is the key's revision at the point.
	ModRevision int64 `json:"modRevision"`
	// Written is the revision the run wrote it at (0: not written).
	Written int64 `json:"written,omitempty"`
	// Size is its value's size at the point.
	Size int `json:"size"`
}

// Result is an undelete's report.
type Result struct {
	Run        string    `json:"run,omitempty"`
	ClusterID  string    `json:"clusterID"`
	Prefixes   []string  `json:"prefixes,omitempty"`
	Namespaces []string  `json:"namespaces,omitempty"`
	Revision   int64     `json:"revision"`
	ToTime     time.Time `json:"toTime,omitzero"`
	Backup     string    `json:"backup,omitempty"`
	Site       string    `json:"site,omitempty"`
	DryRun     bool      `json:"dryRun"`
	// LiveRevision is the live cluster's revision when its keys were read.
	LiveRevision int64     `json:"liveRevision,omitempty"`
	Started      time.Time `json:"started"`
	Ended        time.Time `json:"ended"`
	// Keys are every key that existed at the point, sorted by key.
	Keys   []Key          `json:"keys"`
	Counts map[Action]int `json:"counts"`
	// Record is the store key of the run's record ("" in a dry run).
	Record   string   `json:"record,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Accepted are the --accept-* flags that let the run past a check.
	Accepted []string `json:"accepted,omitempty"`
}

// Written is how many keys the run wrote.
func (r *Result) Written() int { return r.Counts[ActionRestored] + r.Counts[ActionReplaced] }

// Steps of an undelete (in its errors).
const (
	StepValidate = "validate"
	StepLive     = "read the live cluster"
	StepCluster  = "check the cluster"
	StepPoint    = "build the point"
	StepKeys     = "read the keys at the point"
	StepCheck    = "check the objects"
	StepRecord   = "record the run"
	StepWrite    = "write"
	StepVerify   = "verify"
)

// Error is an undelete's failure: the cluster, the step and the cause.
type Error struct {
	ClusterID string
	Step      string
	Err       error
}

func (e *Error) Error() string {
	return fmt.Sprintf("undelete of cluster %s failed at step %q: %v", e.ClusterID, e.Step, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// item is a key to act on, with its value at the point and what the live
// cluster holds.
type item struct {
	kv      etcdinternals.KV
	res     *Key
	liveMod int64 // the live key's ModRevision when read (Replace's guard)
	meta    objectMeta
	rank    int
	// retried: a try of its transaction failed (its answer may be lost).
	retried bool
}

// Run brings back into the live cluster the keys that existed at the
// point under the prefixes and namespaces and are absent now, each with
// its bytes from the point, written only while it is still absent. In
// order:
//
//  1. the live cluster is reached, and checked to be the one the journal
//     watches (AcceptOtherCluster skips it);
//  2. the database at the point is built in ScratchDir as a point-in-time
//     restore builds it (restore.SelectSnapshot: the newest backup at or
//     below it, checked, and the journal replayed up to it; a point
//     outside the journal's proven window is refused unless
//     AcceptUnprovenJournal), and its keys under the prefixes read;
//  3. each of them is looked up in the live cluster: absent (to
//     restore), the same bytes (present), other bytes (differs; replaced
//     with Replace), or leased at the point (skipped);
//  4. a Kubernetes object to write that was already being deleted at the
//     point refuses the run, naming the revision to use instead (unless
//     AcceptTerminating);
//  5. a start record is written to the store; the keys are written in
//     transactions of at most MaxTxnOps keys and MaxTxnBytes bytes (halved
//     when the server refuses one as too large), each key guarded by
//     CreateRevision == 0 (Replace: ModRevision == the one read); a
//     transaction whose guard fails is retried key by key, and a key
//     someone created in between is left alone (appeared). Namespaces go
//     first, then custom resource definitions, then owners before their
//     dependents (ownerReferences), so that the garbage collector never
//     sees a dependent without its owner;
//  6. every key written is read back; the end record says what was done
//     with each key.
//
// A cancelled context stops between transactions (each is atomic): the
// end record says interrupted, and a rerun writes the rest (what the
// first wrote is then present). A dry run does steps 1 to 4 and writes
// nothing, neither to the cluster nor to the store.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.defaults()
	u := &run{o: o, res: &Result{ClusterID: o.ClusterID, Prefixes: o.Prefixes, Namespaces: o.Namespaces,
		ToTime: o.ToTime, Site: o.Site, DryRun: o.DryRun, Started: o.Now().UTC(), Counts: map[Action]int{}}}
	err := u.run(ctx)
	u.res.Ended = o.Now().UTC()
	if err != nil && ctx.Err() != nil {
		err = errors.Join(ctx.Err(), err)
	}
	return u.res, err
}

type run struct {
	o     Options
	res   *Result
	cli   *clientv3.Client
	items []*item
	// ops is the current bound of keys per transaction (halved when the
	// server refuses one).
	ops, bytes int
}

func (u *run) fail(step string, err error) error {
	return &Error{ClusterID: u.o.ClusterID, Step: step, Err: err}
}

func (u *run) run(ctx context.Context) error {
	o := u.o
	cctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
	cli, err := o.Etcd.Client(cctx)
	cancel()
	if err != nil {
		return u.fail(StepLive, err)
	}
	defer cli.Close()
	u.cli = cli
	u.ops, u.bytes = o.MaxTxnOps, o.MaxTxnBytes
	if err := u.checkCluster(ctx); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(o.ScratchDir, "etcd-recovery-undelete-")
	if err != nil {
		return u.fail(StepPoint, fmt.Errorf("scratch dir: %w", err))
	}
	defer os.RemoveAll(dir)
	if o.AcceptUnprovenJournal {
		u.accept("--accept-unproven-journal")
	}
	kvs, path, err := u.keysAtPoint(ctx, dir)
	if err != nil {
		return err
	}
	if err := u.classify(ctx, kvs); err != nil {
		return err
	}
	if err := u.checkObjects(ctx, path); err != nil {
		return err
	}
	// The database at the point is not needed any more: its space is
	// given back before anything is written.
	os.RemoveAll(dir)
	if o.DryRun {
		u.tally()
		return nil
	}
	u.res.Run = catalog.NewUndeleteRunID(u.res.Started)
	// The start record lists what the run is about to do: a run killed
	// hard (SIGKILL, its node lost) leaves it, and a rerun's "present"
	// keys are then accounted for.
	u.tally()
	start := u.record()
	start.Keys = u.recordKeys()
	u.res.Counts = map[Action]int{}
	if _, err := catalog.WriteUndeleteRecord(ctx, o.Store, o.Layout, start, true); err != nil {
		return u.fail(StepRecord, fmt.Errorf("nothing was written to the cluster: %w", err))
	}
	werr := u.write(ctx)
	var verr error
	if werr == nil {
		verr = u.verify(ctx)
	}
	for _, it := range u.items {
		if it.res.Action == ActionWouldRestore || it.res.Action == ActionWouldReplace {
			it.res.Action, it.res.Reason = ActionPending, "not written: the run stopped first; a rerun writes it"
		}
	}
	u.tally()
	rec := u.record()
	switch {
	case ctx.Err() != nil:
		rec.Outcome, rec.Error = catalog.UndeleteInterrupted, ctx.Err().Error()
	case werr != nil || verr != nil:
		rec.Outcome, rec.Error = catalog.UndeleteFailed, errors.Join(werr, verr).Error()
	default:
		rec.Outcome = catalog.UndeleteComplete
	}
	rec.Ended = o.Now().UTC()
	rec.Keys = u.recordKeys()
	// The end record is written even after a signal: a bounded context of
	// its own.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	key, rerr := catalog.WriteUndeleteRecord(rctx, o.Store, o.Layout, rec, false)
	rcancel()
	u.res.Record = key
	if rerr != nil {
		rerr = u.fail(StepRecord, rerr)
		o.Log.Error("undelete: the end record was not written", "cluster", o.ClusterID, "record", key, "err", rerr)
	}
	return errors.Join(werr, verr, rerr)
}

// checkCluster refuses a live cluster that is not the one the journal
// watches (the etcd cluster ID in the journal's newest segment), and a
// --to-time after the journal's newest revision (the point would silently
// be that revision, perhaps after the delete: a journal behind or
// stopped, or a wrong clock).
func (u *run) checkCluster(ctx context.Context) error {
	o := u.o
	rctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
	resp, err := u.cli.Get(rctx, "\x00etcd-recovery-undelete-probe", clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return u.fail(StepLive, err)
	}
	live := journal.EtcdID(resp.Header.ClusterId)
	u.res.LiveRevision = resp.Header.Revision
	listed, err := o.Store.List(ctx, o.Layout.JournalPrefix(o.ClusterID))
	if err != nil {
		return u.fail(StepCluster, fmt.Errorf("list the journal: %w", err))
	}
	newest := ""
	for _, obj := range listed {
		name := strings.TrimPrefix(obj.Key, o.Layout.JournalPrefix(o.ClusterID))
		if !strings.Contains(name, "/") && strings.HasSuffix(name, ".seg") && obj.Key > newest {
			newest = obj.Key
		}
	}
	if newest == "" {
		return u.fail(StepCluster, fmt.Errorf("%w of cluster %s under %s: undelete reads the keys' values from it", journal.ErrNoJournal,
			o.ClusterID, o.Layout.JournalPrefix(o.ClusterID)))
	}
	r, err := journal.NewSource(o.Store, o.Layout, o.ClusterID, o.Identities).Open(ctx, newest)
	if err != nil {
		return u.fail(StepCluster, fmt.Errorf("read the journal's newest segment %s: %w", newest, err))
	}
	h := r.Header()
	r.Close()
	if !o.ToTime.IsZero() {
		var last int64
		for _, ms := range h.Received {
			last = max(last, ms)
		}
		if at := time.UnixMilli(last); last > 0 && o.ToTime.After(at.Add(journal.ReceivedEvery)) {
			return u.fail(StepPoint, fmt.Errorf("--to-time %s is after the journal's newest revision %d, received at %s: "+
				"the point would be that revision, perhaps after the delete (the journal behind or stopped, or a clock wrong); "+
				"give the revision before the delete (journal find) with --to-revision", o.ToTime.UTC().Format(time.RFC3339),
				h.LastRev, at.UTC().Format(time.RFC3339)))
		}
	}
	switch {
	case o.AcceptOtherCluster:
		u.accept("--accept-other-cluster")
		u.warn("--accept-other-cluster: the live cluster (etcd cluster ID %s) was not checked against the journal's (%s)", live, h.EtcdClusterID)
	case h.EtcdClusterID == "":
		u.warn("the journal's newest segment %s does not name its etcd cluster ID: the live cluster was not checked against it", newest)
	case h.EtcdClusterID != live:
		return u.fail(StepCluster, fmt.Errorf("the endpoints answer etcd cluster ID %s, but the journal of %s watches %s (its newest segment %s): "+
			"another customer's cluster, or one restored since the journal last wrote? Check the endpoints; --accept-other-cluster writes anyway",
			live, o.ClusterID, h.EtcdClusterID, newest))
	}
	return nil
}

// checkLineage refuses a point before a break in the cluster's history
// (a restore without a revision bump, or a cluster recreated under the
// same name, after it: the journal's gap record says so): the live keys
// do not continue the point's history, and which of them were deleted
// cannot be told.
func (u *run) checkLineage(ctx context.Context) error {
	o := u.o
	gaps, err := catalog.ReadJournalGaps(ctx, o.Store, o.Layout, o.ClusterID)
	if err != nil {
		return u.fail(StepCluster, fmt.Errorf("read the journal's gap records: %w", err))
	}
	for _, g := range gaps {
		if !g.Lineage || g.From <= u.res.Revision {
			continue
		}
		msg := fmt.Sprintf("the cluster's history was replaced after the point (revision %d): the journal found at revision %d, at %s, "+
			"that the cluster went back (a restore without a revision bump, or a cluster recreated under the same name): "+
			"the live keys do not continue the point's", u.res.Revision, g.From, g.Time.UTC().Format(time.RFC3339))
		if !o.AcceptOtherCluster {
			return u.fail(StepCluster, errors.New(msg+"; --accept-other-cluster writes anyway"))
		}
		u.warn("%s", msg)
	}
	return nil
}

func (u *run) warn(format string, args ...any) {
	u.res.Warnings = append(u.res.Warnings, fmt.Sprintf(format, args...))
}

// accept notes an --accept-* flag that let the run past a check.
func (u *run) accept(flag string) {
	if !slices.Contains(u.res.Accepted, flag) {
		u.res.Accepted = append(u.res.Accepted, flag)
	}
}

// keysAtPoint builds the database at the point in dir (as a point-in-time
// restore does), reads the keys the options select, and returns them with
// the database's path.
func (u *run) keysAtPoint(ctx context.Context, dir string) ([]etcdinternals.KV, string, error) {
	o := u.o
	plan, path, err := restore.SelectSnapshot(ctx, restore.Options{ClusterID: o.ClusterID, Store: o.Store, Layout: o.Layout,
		Site: o.Site, NoLive: true, ToRevision: o.ToRevision, ToTime: o.ToTime, JournalInStore: true,
		AcceptUnprovenJournal: o.AcceptUnprovenJournal, Identities: o.Identities, ScratchDir: dir, Log: o.Log, Now: o.Now}, dir)
	if err != nil {
		return nil, "", u.fail(StepPoint, err)
	}
	if plan.Chosen != nil {
		u.res.Backup = plan.Chosen.Name
	}
	switch {
	case plan.Replay != nil:
		u.res.Revision = plan.Replay.ToRevision
	case o.ToRevision > 0:
		u.res.Revision = o.ToRevision
	case plan.Snapshot != nil:
		u.res.Revision = plan.Snapshot.Revision
	}
	if u.res.Revision <= 0 {
		return nil, "", u.fail(StepPoint, errors.New("the point's revision is unknown"))
	}
	if err := u.checkLineage(ctx); err != nil {
		return nil, "", err
	}
	if u.res.LiveRevision > 0 && u.res.Revision > u.res.LiveRevision {
		msg := fmt.Sprintf("the point, revision %d, is after the live cluster's revision %d: not a point in this cluster's past "+
			"(another cluster's endpoints, or a restore without a revision bump since)", u.res.Revision, u.res.LiveRevision)
		if !o.AcceptOtherCluster {
			return nil, "", u.fail(StepPoint, errors.New(msg+"; --accept-other-cluster writes anyway"))
		}
		u.warn("%s", msg)
	}
	m := newMatcher(o)
	kvs, err := etcdinternals.KeysAt(path, u.res.Revision, m.match)
	if err != nil {
		return nil, "", u.fail(StepKeys, err)
	}
	if len(kvs) == 0 {
		return nil, "", u.fail(StepKeys, fmt.Errorf("no key matches at revision %d: the point may be after the delete, or the prefix or "+
			"namespace wrong (journal find --match-prefix shows when the keys were deleted)", u.res.Revision))
	}
	o.Log.Info("undelete: the keys at the point", "cluster", o.ClusterID, "revision", u.res.Revision, "backup", u.res.Backup,
		"keys", len(kvs))
	return kvs, path, nil
}

// classify looks every key of the point up in the live cluster, in
// transactions of Get operations.
func (u *run) classify(ctx context.Context, kvs []etcdinternals.KV) error {
	u.res.Keys = make([]Key, len(kvs))
	for i, kv := range kvs {
		u.res.Keys[i] = Key{Key: string(kv.Key), ModRevision: kv.ModRevision, Size: len(kv.Value)}
	}
	err := u.getAll(ctx, len(kvs), func(i int) string { return string(kvs[i].Key) },
		func(i int) int { return len(kvs[i].Key) + len(kvs[i].Value) }, func(i int, kv *mvccpb.KeyValue) error {
			var live *etcdLive
			if kv != nil {
				live = &etcdLive{value: kv.Value, mod: kv.ModRevision, lease: kv.Lease}
			}
			u.decide(kvs[i], &u.res.Keys[i], live)
			return nil
		})
	if err != nil {
		return u.fail(StepLive, fmt.Errorf("read the keys of the point in the live cluster: %w", err))
	}
	return nil
}

type etcdLive struct {
	value []byte
	mod   int64
	lease int64
}

// decide sets a key's action from its live state.
func (u *run) decide(kv etcdinternals.KV, k *Key, live *etcdLive) {
	o := u.o
	switch {
	case live != nil && bytes.Equal(live.value, kv.Value):
		k.Action = ActionPresent
	case kv.Lease != 0:
		k.Action = ActionLeased
		k.Reason = fmt.Sprintf("attached to lease %x at the point (an Event, a lease): skipped; written without its lease it would never expire", kv.Lease)
	case live == nil:
		k.Action = ActionWouldRestore
		u.items = append(u.items, &item{kv: kv, res: k})
	case o.Replace && live.lease != 0:
		k.Action = ActionDiffers
		k.Reason = fmt.Sprintf("exists now with other bytes, attached to lease %x (revision %d): left alone, even with --replace "+
			"(written without its lease it would never expire)", live.lease, live.mod)
	case o.Replace:
		k.Action = ActionWouldReplace
		k.Reason = fmt.Sprintf("exists now with other bytes (revision %d)", live.mod)
		u.items = append(u.items, &item{kv: kv, res: k, liveMod: live.mod})
	default:
		k.Action = ActionDiffers
		k.Reason = fmt.Sprintf("exists now with other bytes (revision %d): left alone (--replace writes the point's)", live.mod)
	}
}

// checkObjects checks the Kubernetes objects to write (checkKube), then
// orders the writes.
func (u *run) checkObjects(ctx context.Context, path string) error {
	if err := u.checkKube(ctx, path); err != nil {
		return err
	}
	u.order()
	return nil
}

// markedAt is the revision a key's object got its deletionTimestamp: the
// first of the puts, since its last creation, from which every put has
// one. ok is false when the oldest revision the history holds already
// has one (it was marked then or before).
func markedAt(hist []etcdinternals.KV) (int64, bool) {
	i := len(hist) - 1
	for i > 0 && hist[i-1].Value != nil && decodeMeta(hist[i-1].Value).Deleting != "" {
		i--
	}
	if i < 0 {
		return 0, false
	}
	return hist[i].ModRevision, i > 0
}

func more(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" and %d more", n)
}

// order sorts the writes: namespaces, then custom resource definitions,
// then every object after the objects it names as owners (by uid, among
// those written), then by key.
func (u *run) order() {
	ns := u.o.KubePrefix + "/namespaces/"
	crd := u.o.KubePrefix + "/apiextensions.k8s.io/customresourcedefinitions/"
	byUID := map[string]*item{}
	for _, it := range u.items {
		if it.meta.UID != "" {
			byUID[it.meta.UID] = it
		}
	}
	depth := map[*item]int{}
	var depthOf func(it *item, seen map[*item]bool) int
	depthOf = func(it *item, seen map[*item]bool) int {
		if d, ok := depth[it]; ok {
			return d
		}
		if seen[it] { // a cycle of owners: broken here
			return 0
		}
		seen[it] = true
		d := 0
		for _, uid := range it.meta.Owners {
			if owner := byUID[uid]; owner != nil && owner != it {
				d = max(d, depthOf(owner, seen)+1)
			}
		}
		depth[it] = d
		return d
	}
	for _, it := range u.items {
		key := string(it.kv.Key)
		switch {
		case strings.HasPrefix(key, ns):
			it.rank = 0
		case strings.HasPrefix(key, crd):
			it.rank = 1
		default:
			it.rank = 2 + depthOf(it, map[*item]bool{})
		}
	}
	sort.SliceStable(u.items, func(i, j int) bool {
		if u.items[i].rank != u.items[j].rank {
			return u.items[i].rank < u.items[j].rank
		}
		return bytes.Compare(u.items[i].kv.Key, u.items[j].kv.Key) < 0
	})
}

func (u *run) tally() {
	for _, k := range u.res.Keys {
		u.res.Counts[k.Action]++
	}
}

func (u *run) recordKeys() []catalog.UndeleteKey {
	out := make([]catalog.UndeleteKey, 0, len(u.res.Keys))
	for _, k := range u.res.Keys {
		out = append(out, catalog.UndeleteKey{Key: k.Key, Action: string(k.Action), Reason: k.Reason,
			ModRevision: k.ModRevision, Written: k.Written})
	}
	return out
}

func (u *run) record() catalog.UndeleteRecord {
	r := u.res
	counts := map[string]int{}
	for a, n := range r.Counts {
		counts[string(a)] = n
	}
	return catalog.UndeleteRecord{Run: r.Run, ClusterID: r.ClusterID, Operator: u.o.Operator, Host: u.o.Host, Started: r.Started,
		Prefixes: r.Prefixes, Namespaces: r.Namespaces, Revision: r.Revision, ToTime: r.ToTime, Backup: r.Backup, Site: r.Site,
		Replace: u.o.Replace, Counts: counts, LiveRevision: r.LiveRevision, Accepted: r.Accepted, Warnings: r.Warnings}
}
