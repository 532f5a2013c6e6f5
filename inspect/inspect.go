package inspect

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/probe"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
)

// Options configure one inspection.
type Options struct {
	Etcd etcdconn.Config
	// Timeout bounds every probe (default 3s). Probes run concurrently and
	// the whole run, member list and backup check included, is bounded by
	// twice the timeout.
	Timeout    time.Duration
	Thresholds Thresholds

	// Backup freshness is checked when Store is set.
	Store     store.Store
	Layout    catalog.Layout
	ClusterID string
	// Location names the store in messages (e.g. the bucket).
	Location string
	// MaxBackupAge: an older newest backup is flagged stale. Default 9h.
	MaxBackupAge time.Duration
	// MaxDrillAge: the newest backup proven restorable by a drill is
	// flagged when older. Default 26h.
	MaxDrillAge time.Duration
	// JournalLagBound: a journal (when the cluster has one) whose newest
	// stored revision was received longer ago is flagged lagging.
	// Default DefaultJournalLagBound (journal.go).
	JournalLagBound time.Duration

	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Validate checks the options without touching the network. Its errors
// are usage errors (internal/usage: the CLI exits 4), named by the CLI's
// flags. Zero durations and thresholds are the defaults; negative ones are
// refused. Run calls it first.
func (o Options) Validate() error {
	if err := o.Etcd.Validate(); err != nil {
		return usage.Wrap(err)
	}
	if err := o.ValidateTemplate(); err != nil {
		return err
	}
	if o.Store != nil && o.ClusterID == "" {
		return usage.Errorf("inspect: --bucket needs --cluster-id to check the cluster's backups")
	}
	if o.ClusterID != "" {
		if err := catalog.ValidateClusterID(o.ClusterID); err != nil {
			return usage.Wrap(fmt.Errorf("inspect: %w", err))
		}
	}
	return nil
}

// ValidateTemplate checks the settings shared by every cluster inspected
// with these options (timeouts, ages, thresholds), not the cluster itself
// (endpoints, cluster id): the check of a template for many clusters
// (fleet.InspectAll), before any is known.
func (o Options) ValidateTemplate() error {
	switch {
	case o.Timeout < 0:
		return usage.Errorf("inspect: --probe-timeout %v: must be positive", o.Timeout)
	case o.MaxBackupAge < 0:
		return usage.Errorf("inspect: --max-backup-age %v: must be positive", o.MaxBackupAge)
	case o.MaxDrillAge < 0:
		return usage.Errorf("inspect: --max-drill-age %v: must be positive", o.MaxDrillAge)
	case o.JournalLagBound < 0:
		return usage.Errorf("inspect: --journal-lag-bound %v: must be positive", o.JournalLagBound)
	case o.Thresholds.QuotaBytes < 0:
		return usage.Errorf("inspect: --quota-backend-bytes %d: must be positive", o.Thresholds.QuotaBytes)
	}
	return nil
}

func (o *Options) defaults() {
	o.Timeout = cmp.Or(o.Timeout, DefaultTimeout)
	o.MaxBackupAge = cmp.Or(o.MaxBackupAge, DefaultMaxBackupAge)
	o.MaxDrillAge = cmp.Or(o.MaxDrillAge, DefaultMaxDrillAge)
	o.JournalLagBound = cmp.Or(o.JournalLagBound, DefaultJournalLagBound)
	o.Thresholds = o.Thresholds.withDefaults()
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Run inspects the cluster. It fails only on invalid options or when ctx is
// cancelled: everything the cluster or the store does wrong is in the
// report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.defaults()
	start := time.Now()
	rep := &Report{
		CheckedAt: opts.Now().UTC(),
		Timeout:   opts.Timeout.String(),
		MaxLag:    opts.Thresholds.MaxLag, QuotaBytes: opts.Thresholds.QuotaBytes,
	}
	rctx, cancel := context.WithTimeout(ctx, 2*opts.Timeout)
	defer cancel()

	// The backup check runs alongside the probes.
	// It answers on a buffered channel, so a store call that ignored its
	// context can never hold the report: past the run's deadline the
	// freshness is "unknown" and the goroutine's late answer is dropped.
	var bs *BackupStatus
	bch := make(chan *BackupStatus, 1)
	if opts.Store != nil {
		go func() { bch <- checkBackup(rctx, opts) }()
	}

	pc := probeCluster(rctx, opts.Etcd, opts.Timeout)
	rep.Endpoints, rep.MemberList = pc.Endpoints, pc.MemberList
	rep.Warnings = append(rep.Warnings, pc.Warnings...)
	if opts.Store != nil {
		select {
		case bs = <-bch:
		case <-rctx.Done():
			bs = &BackupStatus{ClusterID: opts.ClusterID, Location: opts.Location, MaxAge: opts.MaxBackupAge,
				Error: "the object store gave no answer within the run's deadline (2 × --probe-timeout)"}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	rep.Assessment = Verdict(pc.Members, bs, opts.Thresholds)
	rep.ElapsedMS = time.Since(start).Milliseconds()
	return rep, nil
}

// Probed is what the probes of a cluster saw: one row per member, ready
// for Verdict.
type Probed struct {
	Members []MemberHealth
	// Endpoints are the endpoints as probed (normalised URLs).
	Endpoints []string
	// MemberList says where the member list came from; ListErr is why no
	// endpoint returned it (Members are then the endpoints as given).
	MemberList string
	ListErr    error
	Warnings   []string
}

// Probe is the network half of Run without the backup check: it reads the
// member list and probes every member and endpoint concurrently with
// probe.Endpoint, all bounded by 2 × timeout (default DefaultTimeout),
// and builds the rows Verdict judges. restore's verification of a rebuilt
// cluster calls it and Verdict, so both judge a cluster the same way.
func Probe(ctx context.Context, cfg etcdconn.Config, timeout time.Duration) *Probed {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, 2*timeout)
	defer cancel()
	return probeCluster(ctx, cfg, timeout)
}

// probeCluster probes the endpoints as given at once, and asks them for
// the member list meanwhile; members missing from the endpoints are probed
// as soon as the list arrives. ctx bounds it all.
func probeCluster(ctx context.Context, cfg etcdconn.Config, timeout time.Duration) *Probed {
	pc := &Probed{}
	pr := &prober{ctx: ctx, cfg: cfg, timeout: timeout, probes: map[string]*probe.Member{}}
	for _, ep := range cfg.Endpoints {
		u := normURL(cfg, ep)
		if !slices.Contains(pc.Endpoints, u) {
			pc.Endpoints = append(pc.Endpoints, u)
		}
		pr.start(u)
	}
	listed, listErr := listMembers(ctx, cfg, timeout)
	if listErr == nil {
		for _, m := range listed {
			if m.ClientURL != "" {
				pr.start(normURL(cfg, m.ClientURL))
			}
		}
		pc.MemberList = "from the cluster"
	} else {
		pc.MemberList = "unavailable; checked the --endpoints as given"
		pc.ListErr = listErr
		// Each endpoint's own error is in its row.
		pc.Warnings = append(pc.Warnings, "no endpoint returned the member list: members missing from --endpoints are not checked")
	}
	probes := pr.wait()
	var warnings []string
	pc.Members, warnings = merge(cfg, listed, listErr == nil, pc.Endpoints, probes)
	pc.Warnings = append(pc.Warnings, warnings...)
	return pc
}

// listMembers asks the endpoints for the member list (serializably: a
// member without quorum answers too), bounded by ctx.
func listMembers(ctx context.Context, cfg etcdconn.Config, timeout time.Duration) ([]probe.Member, error) {
	type answer struct {
		ms  []probe.Member
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		ms, err := probe.List(ctx, cfg, timeout)
		ch <- answer{ms, err}
	}()
	select {
	case a := <-ch:
		return a.ms, a.err
	case <-ctx.Done():
		return nil, fmt.Errorf("member list: %w", ctx.Err())
	}
}

// merge builds the member rows: one per listed member (probed at its
// client URL, or at an endpoint that answered with its id), plus endpoints
// that answer as members not in the list. Without a list, one row per
// endpoint. The cluster's alarms are then set on the rows (mergeAlarms).
func merge(cfg etcdconn.Config, listed []probe.Member, haveList bool, endpoints []string, probes map[string]*probe.Member) ([]MemberHealth, []string) {
	var out []MemberHealth
	var warnings []string
	if haveList {
		out, warnings = listedRows(cfg, listed, endpoints, probes)
	} else {
		for _, u := range endpoints {
			out = append(out, row(probes[u], MemberHealth{ClientURL: u}))
		}
	}
	warnings = append(warnings, mergeAlarms(out, probes)...)
	return out, warnings
}

// listedRows is one row per listed member, then one per endpoint that
// answers as a member not in the list; an endpoint that neither answered
// nor is a member's client URL is a warning.
func listedRows(cfg etcdconn.Config, listed []probe.Member, endpoints []string, probes map[string]*probe.Member) ([]MemberHealth, []string) {
	byMemberID := map[uint64]*probe.Member{}
	for _, u := range endpoints {
		if p := probes[u]; answered(p) && p.HeaderMemberID != 0 && byMemberID[p.HeaderMemberID] == nil {
			byMemberID[p.HeaderMemberID] = p
		}
	}
	used := map[*probe.Member]bool{}
	listedIDs := map[uint64]bool{}
	var out []MemberHealth
	for _, lm := range listed {
		listedIDs[lm.ID] = true
		m := MemberHealth{Name: lm.Name, ID: probe.HexID(lm.ID), ClientURL: lm.ClientURL, Learner: lm.IsLearner}
		if lm.ClientURL == "" {
			m.Health = HealthDown
			m.Error = "member has no client URL: added to the cluster but never started"
			out = append(out, m)
			continue
		}
		p := probes[normURL(cfg, lm.ClientURL)]
		if alt := byMemberID[lm.ID]; !answered(p) && alt != nil {
			p = alt // reached under another name in --endpoints
		}
		used[p] = true
		out = append(out, row(p, m))
	}
	var warnings []string
	for _, u := range endpoints {
		p := probes[u]
		if p == nil || used[p] {
			continue
		}
		switch {
		case p.Answered() && listedIDs[p.HeaderMemberID]:
			// the same member under another address: already shown
		case p.Answered():
			out = append(out, row(p, MemberHealth{ClientURL: u, Unlisted: true}))
		default:
			warnings = append(warnings, fmt.Sprintf("endpoint %s did not answer and is no member's client URL: %s", u, p.ErrorText()))
		}
	}
	return out, warnings
}

// mergeAlarms sets the cluster's alarms on the rows of the members they
// are raised on. Alarms are cluster-wide: any member that answers lists
// all of them. An alarm raised by a member not in the rows is a warning
// and is set on every member that answers.
func mergeAlarms(out []MemberHealth, probes map[string]*probe.Member) []string {
	var warnings []string
	for _, a := range clusterAlarms(probes) {
		found := false
		for i := range out {
			if out[i].ID == probe.HexID(a.Member) {
				out[i].Alarms = append(out[i].Alarms, a.Alarm)
				found = true
			}
		}
		if !found {
			// Raised by a member no longer listed: it still blocks the
			// cluster, so show it on every member that answers.
			warnings = append(warnings, fmt.Sprintf("alarm %s was raised by member %s, which is not in the member list", a.Alarm, probe.HexID(a.Member)))
			for i := range out {
				if out[i].Alive() && !slices.Contains(out[i].Alarms, a.Alarm) {
					out[i].Alarms = append(out[i].Alarms, a.Alarm)
				}
			}
		}
	}
	return warnings
}

// clusterAlarms are the alarms any probe saw, once each, sorted by member
// and alarm.
func clusterAlarms(probes map[string]*probe.Member) []probe.Alarm {
	alarmSet := map[probe.Alarm]bool{}
	var alarms []probe.Alarm
	for _, p := range probes {
		if p == nil {
			continue
		}
		for _, a := range p.Alarms() {
			if !alarmSet[a] {
				alarmSet[a] = true
				alarms = append(alarms, a)
			}
		}
	}
	sort.Slice(alarms, func(i, j int) bool {
		if alarms[i].Member != alarms[j].Member {
			return alarms[i].Member < alarms[j].Member
		}
		return alarms[i].Alarm < alarms[j].Alarm
	})
	return alarms
}

func normURL(cfg etcdconn.Config, ep string) string {
	return strings.TrimRight(cfg.URL(strings.TrimSpace(ep)), "/")
}

// checkBackup finds the newest backup that checks out (its manifest parses
// and every object it names is stored with the recorded size, the same check
// retention uses) and its age. Damaged backups newer than it are listed in
// Unreadable. It then reads the drill records (checkDrills). A store
// failure is reported in the status, never returned.
func checkBackup(ctx context.Context, opts Options) *BackupStatus {
	bs := &BackupStatus{ClusterID: opts.ClusterID, Location: opts.Location, MaxAge: opts.MaxBackupAge}
	entries, err := catalog.Inventory(ctx, opts.Store, opts.Layout, opts.ClusterID)
	if err != nil {
		bs.Error = output.OneLine(err)
		return bs
	}
	const maxUnreadable = 3
	checked := make([]bool, len(entries))
newest:
	for i := range entries {
		if !entries[i].Committed {
			continue
		}
		ms, _, err := catalog.CheckEntries(ctx, opts.Store, opts.Layout, entries[i:i+1], 1)
		checked[i] = true
		e := entries[i]
		switch {
		case err != nil:
			bs.Error = output.OneLine(err)
			return bs
		case e.Damaged != "":
			bs.Unreadable = append(bs.Unreadable, e.Name+" (damaged: "+e.Damaged+")")
			if len(bs.Unreadable) >= maxUnreadable {
				break newest
			}
			continue
		}
		m := ms[0]
		bs.Newest = &BackupInfo{Name: e.Name, Kind: string(e.Kind), Time: e.Time, Revision: m.Revision(), Source: m.Source.Name}
		bs.Age = opts.Now().Sub(e.Time)
		bs.Escrow = escrowStatus(e.Name, m.Escrow, opts.Now())
		break
	}
	bs.Drill = checkDrills(ctx, opts, entries, checked)
	bs.Journal = checkJournal(ctx, opts)
	return bs
}

// checkDrills reads the drill records of the committed backups (drill.json,
// next to the manifest; the listing says which have one) and finds the
// newest drill of any backup, by when it finished, and the newest backup
// that checks out whose drill passed (catalog.DrillSummary.Proven): the
// newest proven restore point. checked says which entries CheckEntries
// has already judged. A store failure is reported in the status.
func checkDrills(ctx context.Context, opts Options, entries []catalog.Entry, checked []bool) *DrillStatus {
	ds := &DrillStatus{MaxAge: opts.MaxDrillAge}
	if err := catalog.LoadDrills(ctx, opts.Store, opts.Layout, entries, 0); err != nil {
		ds.Error = output.OneLine(err)
		return ds
	}
	now := opts.Now()
	for _, e := range entries {
		d := e.Drill
		switch {
		case d == nil:
			continue
		case d.Err != "":
			ds.Unreadable = append(ds.Unreadable, e.Name+" ("+d.Err+")")
			continue
		case ds.Last != nil && !d.At.After(ds.Last.At):
			continue
		}
		ds.Last = &DrillInfo{Backup: e.Name, Result: DrillPassed, At: d.At, Failed: d.Failed, Mode: d.Mode, Age: now.Sub(d.At)}
		if !d.Passed {
			ds.Last.Result = DrillFailedResult
			if ds.Last.Failed == "" {
				ds.Last.Failed = "an unnamed check"
			}
		}
	}
	for i := range entries {
		e := &entries[i]
		if !e.Committed || !e.Drill.Proven() {
			continue
		}
		if !checked[i] {
			if _, _, err := catalog.CheckEntries(ctx, opts.Store, opts.Layout, entries[i:i+1], 1); err != nil {
				ds.Error = output.OneLine(err)
				return ds
			}
			checked[i] = true
		}
		if e.Damaged != "" {
			continue // a drill proves nothing about a backup that no longer checks out
		}
		ds.Proven = &ProvenBackup{Name: e.Name, Kind: string(e.Kind), Time: e.Time, DrilledAt: e.Drill.At, Mode: e.Drill.Mode}
		ds.Age = now.Sub(e.Time)
		break
	}
	return ds
}
