package drill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/version"
	"github.com/armada/etcd-recovery/restore"
)

// ProveOptions configure a proof of the journal before a full backup
// (ProveJournal).
type ProveOptions struct {
	ClusterID string
	Store     store.Store
	Layout    catalog.Layout
	// Target is the backup (k+1) whose journal before it is proven; empty:
	// the newest backup with an unproven journal before it
	// (UnprovenTargets).
	Target string
	// Identities decrypt encrypted backups and segments.
	Identities *seal.Identities
	// ScratchDir is the parent of the proof's private scratch dir
	// (default $TMPDIR): room for both databases.
	ScratchDir string
	// Timeout bounds the whole proof (default DefaultProveTimeout).
	Timeout time.Duration
	// NoRecord: the proof is only returned, not written.
	NoRecord bool
	Log      *slog.Logger
	Now      func() time.Time
	// Progress shows each download of the proof (restore.Options'
	// Progress: with its total, from the manifest); nil: none.
	Progress func(label string) restore.Progress
}

// DefaultProveTimeout bounds a proof: two downloads, a replay and two
// walks of the databases.
const DefaultProveTimeout = 30 * time.Minute

// Steps of a proof, in errors.
const (
	ProveStepSelect = "select backups"
	ProveStepFetch  = "fetch target"
	ProveStepBase   = "fetch base"
	ProveStepReplay = "replay journal"
	ProveStepHash   = "hash"
	ProveStepRecord = "record proof"
)

// ProveError is a proof that could not judge the journal: the cluster, the
// target backup, the step and the cause. Nothing was recorded. NoJournal:
// there is no journal (or not a continuous one) between the two backups,
// so nothing to prove; else the proof is inconclusive (a store error, a
// backup that cannot be fetched, the deadline).
type ProveError struct {
	ClusterID string
	Target    string
	At        string
	NoJournal bool
	Err       error
}

func (e *ProveError) Error() string {
	t := e.Target
	if t == "" {
		t = "(newest unproven)"
	}
	what := "inconclusive, nothing recorded"
	if e.NoJournal {
		what = "no journal to prove, nothing recorded"
	}
	return fmt.Sprintf("journal proof of cluster %s before backup %s: %s at step %q: %v", e.ClusterID, t, what, e.At, e.Err)
}

func (e *ProveError) Unwrap() error { return e.Err }

// ProofPair is a backup (Target) and the committed backup before it
// (Base) whose journal between them can be proven.
type ProofPair struct {
	Base, Target *catalog.Manifest
	// Proof is the recorded proof, nil when none.
	Proof *catalog.JournalProof
}

func (o *ProveOptions) defaults() error {
	if err := catalog.ValidateClusterID(o.ClusterID); err != nil {
		return err
	}
	if o.Target != "" {
		if _, _, err := catalog.ParseBackupName(o.Target); err != nil {
			return fmt.Errorf("--backup: %w", err)
		}
	}
	if o.Store == nil {
		return errors.New("no object store")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultProveTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// ProofPairs are the cluster's committed, undamaged backups, each paired
// with the backup before it (by revision), oldest first, with the proof
// recorded for each target. The first backup has no pair.
func ProofPairs(ctx context.Context, st store.Store, layout catalog.Layout, clusterID string) ([]ProofPair, error) {
	listed, err := catalog.ListBackups(ctx, st, layout, clusterID)
	if err != nil {
		return nil, err
	}
	var ms []*catalog.Manifest
	for _, l := range listed {
		if l.Good() && l.Manifest != nil {
			ms = append(ms, l.Manifest)
		}
	}
	slices.SortStableFunc(ms, func(a, b *catalog.Manifest) int {
		if a.Revision() != b.Revision() {
			return int(min(max(a.Revision()-b.Revision(), -1), 1))
		}
		return a.StartedAt.Compare(b.StartedAt)
	})
	proofs, err := catalog.ListJournalProofs(ctx, st, layout, clusterID)
	if err != nil {
		return nil, err
	}
	var pairs []ProofPair
	for i := 1; i < len(ms); i++ {
		if ms[i].Revision() <= ms[i-1].Revision() {
			continue
		}
		p := ProofPair{Base: ms[i-1], Target: ms[i]}
		for _, pr := range proofs {
			if pr.Target == ms[i].Name {
				p.Proof = pr
			}
		}
		pairs = append(pairs, p)
	}
	return pairs, nil
}

// UnprovenTargets are the pairs, newest first, that have no proof recorded
// and a journal between them (the journal's segments reach from the base's
// revision to the target's): what `journal prove --all-unproven` proves.
func UnprovenTargets(ctx context.Context, st store.Store, layout catalog.Layout, clusterID string, ids *seal.Identities) ([]ProofPair, error) {
	pairs, err := ProofPairs(ctx, st, layout, clusterID)
	if err != nil {
		return nil, err
	}
	src := journal.NewSource(st, layout, clusterID, ids)
	var out []ProofPair
	for i := len(pairs) - 1; i >= 0; i-- {
		p := pairs[i]
		if p.Proof != nil {
			continue
		}
		if _, err := src.Segments(ctx, p.Base.Revision()+1, p.Target.Revision()); err != nil {
			if noJournal(err) {
				continue
			}
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// noJournal says whether err is a journal that does not hold the window
// (none at all, none holding its start, a chain that stops before its
// end), not a store failure.
func noJournal(err error) bool {
	return !store.IsStoreError(err) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// ProveJournal proves the journal before a full backup (continuously, so
// a broken journal is found while the backups around it still exist, not
// first when a restore needs it): for backup k+1 (opts.Target, or the newest with
// an unproven journal before it) and the committed backup k before it,
// k+1 is fetched and verified, then k, the journal's events after k's
// revision up to k+1's database revision are replayed into k (restore's
// own Fetch and Replay, in a private scratch dir removed on every exit
// path), and etcd's HashKV of both databases, computed offline
// (etcdinternals.HashKV), at k+1's revision and the same compact revision,
// must be equal, as must both revisions.
//
// The compact revision is the larger of the two databases' own
// compactions: k+1's history below its compaction is gone, so hashing k
// plus the journal for its older compaction would count revisions k+1 no
// longer has; hashed for the larger one, both count exactly the revisions
// a member compacted there keeps (HashKV hashes a database not yet
// compacted that far as it would be once compacted).
//
// The result, passed or failed, is recorded create-only at
// Layout.JournalProofKey(cluster, k+1) (unless NoRecord) and returned; a
// failed proof is returned with no error (the verdict is the record's).
// A proof that cannot judge (no journal between k and k+1: NoJournal; a
// store error, a backup that cannot be fetched, the deadline) is a
// *ProveError and records nothing.
func ProveJournal(ctx context.Context, opts ProveOptions) (*catalog.JournalProof, error) {
	if err := opts.defaults(); err != nil {
		return nil, &ProveError{ClusterID: opts.ClusterID, Target: opts.Target, At: StepValidate, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	log := opts.Log.With("cluster", opts.ClusterID, "journal_proof", true)
	fail := func(step string, err error) (*catalog.JournalProof, error) {
		return nil, &ProveError{ClusterID: opts.ClusterID, Target: opts.Target, At: step, Err: err}
	}
	pair, err := choosePair(ctx, opts)
	if err != nil {
		var pe *ProveError
		if errors.As(err, &pe) {
			return nil, pe
		}
		return fail(ProveStepSelect, err)
	}
	opts.Target = pair.Target.Name
	start := time.Now()
	root := restore.ScratchRoot(opts.ScratchDir)
	scratch, err := seal.MkdirTemp(root, ".etcd-recovery-proof-"+opts.ClusterID+"-")
	if err != nil {
		return fail(ProveStepFetch, fmt.Errorf("scratch dir in %s: %w (%s)", root, err, restore.HintScratch))
	}
	defer os.RemoveAll(scratch)

	targetPath, _, err := fetchForProof(ctx, opts, scratch, "target", pair.Target.Name)
	if err != nil {
		return fail(ProveStepFetch, err)
	}
	want, err := etcdinternals.DatabaseRevisions(targetPath)
	if err != nil {
		return fail(ProveStepFetch, err)
	}
	basePath, plan, err := fetchForProof(ctx, opts, scratch, "base", pair.Base.Name)
	if err != nil {
		return fail(ProveStepBase, err)
	}
	src := journal.NewSource(opts.Store, opts.Layout, opts.ClusterID, opts.Identities).ListOnce()
	baseRev := plan.Snapshot.StoreRevision()
	var segs []string
	if want.Revision > baseRev {
		infos, err := src.Segments(ctx, baseRev+1, want.Revision)
		if err != nil {
			if noJournal(err) {
				return nil, &ProveError{ClusterID: opts.ClusterID, Target: opts.Target, At: ProveStepReplay, NoJournal: true, Err: err}
			}
			return fail(ProveStepReplay, err)
		}
		for _, s := range infos {
			segs = append(segs, s.Key)
		}
	}
	if err := restore.Replay(ctx, plan, basePath, restore.Target{Revision: want.Revision, Journal: src}, log); err != nil {
		if !journal.IsReason(err, journal.ReasonForged) {
			return fail(ProveStepReplay, err)
		}
		// A segment that is not the one its chain names is a verdict, not
		// an inconclusive proof: the journal was written over.
		p := &catalog.JournalProof{Format: catalog.JournalProofFormat, ClusterID: opts.ClusterID,
			Base: pair.Base.Name, BaseRevision: baseRev, Target: pair.Target.Name, TargetRevision: want.Revision,
			Segments: segs, Proven: src.Read(), Verdict: catalog.ProofFailed, Detail: "the journal's chain is broken: " + err.Error(),
			Want: catalog.ProofHash{Revision: want.Revision}, Time: opts.Now().UTC(), Duration: time.Since(start), ToolVersion: version.Version}
		return recordProof(ctx, opts, log, p)
	}
	got, err := etcdinternals.DatabaseRevisions(basePath)
	if err != nil {
		return fail(ProveStepHash, err)
	}
	compact := max(got.Compact, want.Compact)
	gotHash, err := etcdinternals.HashKV(basePath, want.Revision, compact)
	if err != nil {
		return fail(ProveStepHash, err)
	}
	wantHash, err := etcdinternals.HashKV(targetPath, want.Revision, compact)
	if err != nil {
		return fail(ProveStepHash, err)
	}
	if err := ctx.Err(); err != nil {
		return fail(ProveStepHash, err)
	}
	p := &catalog.JournalProof{Format: catalog.JournalProofFormat, ClusterID: opts.ClusterID,
		Base: pair.Base.Name, BaseRevision: baseRev, Target: pair.Target.Name, TargetRevision: want.Revision,
		Compact: compact, Segments: segs, Got: catalog.ProofHash{Hash: gotHash.Hash, Revision: got.Revision},
		Want: catalog.ProofHash{Hash: wantHash.Hash, Revision: want.Revision}, Verdict: catalog.ProofPassed,
		Time: opts.Now().UTC(), Duration: time.Since(start), ToolVersion: version.Version}
	if plan.Replay != nil {
		p.Events = plan.Replay.Events
	}
	p.Proven = src.Read()
	for _, r := range src.Replaced() {
		p.Replaced = append(p.Replaced, r.Key)
	}
	if len(p.Replaced) > 0 {
		log.Error("journal segments were written over after the journal wrote them: their own (earliest) versions were proven, the newer ones passed over",
			"segments", p.Replaced)
	}
	switch {
	case got.Revision != want.Revision:
		p.Verdict = catalog.ProofFailed
		p.Detail = fmt.Sprintf("backup %s plus the journal is at revision %d, backup %s at %d", p.Base, got.Revision, p.Target, want.Revision)
	case gotHash.Hash != wantHash.Hash:
		p.Verdict = catalog.ProofFailed
		p.Detail = fmt.Sprintf("HashKV at revision %d (compact revision %d): backup %s plus %d journal events hashes %d, backup %s hashes %d",
			want.Revision, compact, p.Base, p.Events, gotHash.Hash, p.Target, wantHash.Hash)
	}
	return recordProof(ctx, opts, log, p)
}

// recordProof records p (unless opts.NoRecord) and logs its verdict.
func recordProof(ctx context.Context, opts ProveOptions, log *slog.Logger, p *catalog.JournalProof) (*catalog.JournalProof, error) {
	if !opts.NoRecord {
		if err := catalog.PutJournalProof(ctx, opts.Store, opts.Layout, p); err != nil {
			return nil, &ProveError{ClusterID: opts.ClusterID, Target: opts.Target, At: ProveStepRecord, Err: err}
		}
	}
	log.Info("journal proven", "base", p.Base, "target", p.Target, "revision", p.TargetRevision, "compact", p.Compact,
		"events", p.Events, "verdict", p.Verdict, "got_hash", p.Got.Hash, "want_hash", p.Want.Hash, "detail", p.Detail,
		"segments_replaced", len(p.Replaced), "duration", p.Duration.Round(time.Millisecond))
	return p, nil
}

// choosePair is the select step: the pair whose target is opts.Target, or
// the newest unproven one.
func choosePair(ctx context.Context, opts ProveOptions) (ProofPair, error) {
	noJ := func(err error) error {
		return &ProveError{ClusterID: opts.ClusterID, Target: opts.Target, At: ProveStepSelect, NoJournal: true, Err: err}
	}
	if opts.Target == "" {
		un, err := UnprovenTargets(ctx, opts.Store, opts.Layout, opts.ClusterID, opts.Identities)
		if err != nil {
			return ProofPair{}, err
		}
		if len(un) == 0 {
			return ProofPair{}, noJ(fmt.Errorf("no backup of cluster %s has an unproven journal before it", opts.ClusterID))
		}
		return un[0], nil
	}
	pairs, err := ProofPairs(ctx, opts.Store, opts.Layout, opts.ClusterID)
	if err != nil {
		return ProofPair{}, err
	}
	for _, p := range pairs {
		if p.Target.Name == opts.Target {
			return p, nil
		}
	}
	return ProofPair{}, noJ(fmt.Errorf("backup %s is not a committed backup of cluster %s above an older one: no journal before it to prove", opts.Target, opts.ClusterID))
}

// proofRestoreOptions are restore's options for staging backup name in
// scratch/<dir>.
func proofRestoreOptions(opts ProveOptions, scratch, dir, name string) restore.Options {
	return restore.Options{ClusterID: opts.ClusterID, Store: opts.Store, Layout: opts.Layout, NoLive: true, Backup: name,
		Targets:    restore.Targets{InitialCluster: "proof=http://127.0.0.1:2380", DataDir: filepath.Join(scratch, dir, "data")},
		ScratchDir: filepath.Join(scratch, dir), Identities: opts.Identities, Log: opts.Log, Now: opts.Now, Progress: opts.Progress}
}

// fetchForProof stages backup name, verified against its manifest, in
// scratch/<dir> with restore's Select and Fetch.
func fetchForProof(ctx context.Context, opts ProveOptions, scratch, dir, name string) (string, *restore.Plan, error) {
	if err := os.Mkdir(filepath.Join(scratch, dir), 0o700); err != nil {
		return "", nil, err
	}
	ro := proofRestoreOptions(opts, scratch, dir, name)
	cfg, plan, err := restore.Resolve(ctx, ro)
	if err != nil {
		return "", nil, err
	}
	if err := cfg.PlanTargets(plan); err != nil {
		return "", nil, err
	}
	sel, err := cfg.Select(ctx, plan)
	if err != nil {
		return "", nil, err
	}
	path, err := cfg.Fetch(ctx, plan, sel, restore.FetchOptions{Dir: ro.ScratchDir, Prove: true})
	if err != nil {
		return "", nil, err
	}
	if plan.Snapshot == nil {
		return "", nil, fmt.Errorf("backup %s: the staged database was not read", name)
	}
	return path, plan, nil
}
