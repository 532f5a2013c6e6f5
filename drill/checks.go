package drill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/restore"
)

// hashTimeout bounds one pass of a member over its whole database (a
// HashKV, a physical compaction): the probe timeout plus a second per
// 4 MiB of database, a floor of 4 MiB/s a busy node's disk still reads
// (measured in a 1-CPU CronJob pod on a loaded node: 1.2 GiB took up to
// 96 s for a compaction and a hash). A miss is inconclusive, not a failed
// backup (see finish).
func (d *drill) hashTimeout() time.Duration {
	return d.opts.ProbeTimeout + time.Duration(d.chosen.RawSize/(4<<20))*time.Second
}

// sourceEndpoints orders the source members to ask: the manifest's source
// member first when it is one of the source's endpoints, then the others.
// manifestIdx is the index of the manifest's member, -1 when not among them.
func (d *drill) sourceEndpoints() (eps []string, manifestIdx int) {
	cfg := d.opts.Source
	manifestIdx = -1
	var want string
	if d.chosen.Manifest() != nil && d.chosen.Manifest().Source.Endpoint != "" {
		want = cfg.URL(d.chosen.Manifest().Source.Endpoint)
	}
	for _, ep := range cfg.Endpoints {
		u := cfg.URL(ep)
		if slices.Contains(eps, u) {
			continue
		}
		if u == want && manifestIdx < 0 {
			eps = append([]string{u}, eps...)
			manifestIdx = 0
			continue
		}
		eps = append(eps, u)
	}
	return eps, manifestIdx
}

// hashSource asks the source for HashKV at the snapshot's revision. It
// costs the source member a read of its whole database (as a defrag's
// check or etcd's own corruption check does). Whatever goes wrong, the
// drill goes on: the comparison is then self-consistency only, and
// Comparison.Detail says why.
func (d *drill) hashSource(ctx context.Context) {
	rev := d.rec.Revision
	cmp := &d.rec.Comparison
	cmp.Mode, cmp.Revision = catalog.CompareSelf, rev
	eps, mi := d.sourceEndpoints()
	if len(eps) == 0 {
		cmp.Detail = "no source endpoints given: the restored member was checked for self-consistency only"
		return
	}
	var whys []string
	for i, ep := range eps {
		if ctx.Err() != nil {
			return
		}
		cli, err := d.opts.Source.Client(ctx, ep)
		if err != nil {
			whys = append(whys, fmt.Sprintf("%s: %v", ep, err))
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, d.hashTimeout())
		resp, err := cli.HashKV(hctx, ep, rev)
		cancel()
		cli.Close()
		switch {
		case err == nil:
			d.src = &sourceHash{endpoint: ep, manifest: i == mi, hash: resp.Hash, compact: resp.CompactRevision}
			cmp.Endpoint = ep
			d.log.Info("source hashed", "endpoint", ep, "revision", rev, "compact_revision", resp.CompactRevision, "hash", resp.Hash)
			return
		case errors.Is(err, rpctypes.ErrCompacted):
			cmp.Endpoint = ep
			cmp.Detail = fmt.Sprintf("the source (%s) compacted revision %d away before the drill asked: "+
				"the restored member was checked for self-consistency only", ep, rev)
			d.log.Warn("source compacted the snapshot's revision: self-consistency only", "endpoint", ep, "revision", rev)
			return
		case errors.Is(err, rpctypes.ErrFutureRev):
			whys = append(whys, fmt.Sprintf("%s is behind revision %d", ep, rev))
		default:
			whys = append(whys, fmt.Sprintf("%s: %v", ep, err))
		}
	}
	cmp.Detail = "no source member answered HashKV at revision " + fmt.Sprint(rev) + " (" + strings.Join(whys, "; ") +
		"): the restored member was checked for self-consistency only"
	d.log.Warn("source did not answer HashKV: self-consistency only", "revision", rev, "why", strings.Join(whys, "; "))
}

// prefixKeys is the restored member's keys counted per prefix.
type prefixKeys struct {
	rev           int64
	total, leased int64
	prefixes      map[string]restore.PrefixCount
}

// scanPageBytes bounds what one page of scanKeys costs the drill's etcd:
// a keys-only range still reads every value from its database.
const scanPageBytes = 8 << 20

// scanPage is how many keys one page of scanKeys asks for when the
// largest entry of the database is maxEntry bytes: restore.CountPage, fewer when
// the values are large, so that etcd's memory for a page stays about
// scanPageBytes whatever the database holds.
func scanPage(maxEntry int64) int64 {
	if maxEntry <= 0 {
		return restore.CountPage
	}
	return min(restore.CountPage, max(16, scanPageBytes/maxEntry))
}

// scanKeys counts the live keys at revision rev, the leased ones and each
// prefix's, with keys-only range requests of page keys: memory is a page
// and the map of prefixes, here and in the member.
func scanKeys(ctx context.Context, cli *clientv3.Client, probe time.Duration, page, rev int64) (*prefixKeys, error) {
	pk := &prefixKeys{prefixes: map[string]restore.PrefixCount{}, rev: rev}
	key := []byte{0}
	for {
		opts := []clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithKeysOnly(), clientv3.WithLimit(page),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithRev(rev), clientv3.WithSerializable()}
		cctx, cancel := context.WithTimeout(ctx, 2*probe)
		resp, err := cli.Get(cctx, string(key), opts...)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			pk.total++
			p := restore.KeyPrefix(kv.Key)
			c := pk.prefixes[p]
			c.Live++
			if kv.Lease != 0 {
				pk.leased++
				c.Leased++
			}
			pk.prefixes[p] = c
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return pk, nil
		}
		last := resp.Kvs[len(resp.Kvs)-1].Key
		key = append(append(key[:0], last...), 0)
	}
}

// checkServing checks the restored member: health, revision, keys, keys
// per prefix, a linearizable read and a write.
//
// Every check of the keyspace reads at one pinned revision: the snapshot's
// last revision plus the bump, the revision the restored member starts at.
// Nothing keeps the backup's leases alive on the drill's etcd, so each
// expires at its TTL after the member starts (kube-apiserver's master
// leases live 15 s, shorter than a drill of a large database) and its
// keys' deletion moves the current revision. An MVCC read at a revision
// that is not compacted answers the same whatever happened after it: the
// drill's compaction comes only after these checks, so reads at the pinned
// revision see exactly what the snapshot holds, leased keys included. The
// revisions after the pinned one must each be the expiry of a lease the
// snapshot held (a delete of keys on a lease, seen in the member's own
// history with a watch from the pinned revision): anything else moving the
// revision fails the revision check.
func (d *drill) checkServing(ctx context.Context, cli *clientv3.Client) {
	probe := d.opts.ProbeTimeout
	ep := d.proc.clientURL
	f := d.facts
	const step = StepChecks
	pinned := f.Revision + int64(restore.DefaultBumpRevision)

	// Health: the member answers a linearizable read, has a leader and
	// raises no alarm.
	cctx, cancel := context.WithTimeout(ctx, probe)
	st, err := cli.Status(cctx, ep)
	cancel()
	var hrev int64
	if err == nil {
		cctx, cancel = context.WithTimeout(ctx, probe)
		var r *clientv3.GetResponse
		r, err = cli.Get(cctx, "health", clientv3.WithCountOnly())
		cancel()
		if err == nil {
			hrev = r.Header.Revision
		}
	}
	switch {
	case err != nil:
		d.check(step, catalog.DrillCheck{Name: CheckHealth, Status: catalog.DrillCheckFailed, Detail: err.Error()})
		return
	case st.Leader == 0 || len(st.Errors) > 0:
		d.check(step, catalog.DrillCheck{Name: CheckHealth, Status: catalog.DrillCheckFailed,
			Detail: fmt.Sprintf("leader %x, errors %v", st.Leader, st.Errors)})
	default:
		d.check(step, catalog.DrillCheck{Name: CheckHealth, Status: catalog.DrillCheckPassed,
			Detail: fmt.Sprintf("etcd %s, leader, no alarm, database %d bytes", st.Version, st.DbSize)})
	}

	// The revision: etcd's restore code bumps the last key's revision by
	// the bump, so the member starts at the pinned revision; each revision
	// after it must be a lease expiry.
	d.check(step, d.revisionCheck(ctx, cli, pinned, hrev))

	// Keys at the pinned revision: exactly the snapshot's, leased ones too.
	pk, err := scanKeys(ctx, cli, probe, scanPage(d.facts.MaxEntryBytes), pinned)
	if err != nil {
		d.check(step, catalog.DrillCheck{Name: CheckKeys, Status: catalog.DrillCheckFailed, Detail: "count: " + err.Error()})
		return
	}
	d.check(step, cmpCheck(CheckKeys, f.LiveKeys, pk.total,
		fmt.Sprintf("live keys at revision %d (the snapshot's last revision plus the bump)", pinned)))
	d.check(step, cmpCheck(CheckLeasedKeys, f.LeasedKeys, pk.leased,
		fmt.Sprintf("keys on a lease at revision %d (leases that expired since do not change it)", pinned)))
	d.check(step, prefixCheck(f.Prefixes, pk.prefixes))

	// A linearizable read: the member serves through raft, at a revision
	// not below the pinned one.
	cctx, cancel = context.WithTimeout(ctx, probe)
	r, err := cli.Get(cctx, "\x00", clientv3.WithFromKey(), clientv3.WithLimit(1))
	cancel()
	switch {
	case err != nil:
		d.check(step, catalog.DrillCheck{Name: CheckRead, Status: catalog.DrillCheckFailed, Detail: err.Error()})
	case r.Header.Revision < pinned:
		d.check(step, catalog.DrillCheck{Name: CheckRead, Status: catalog.DrillCheckFailed, Want: pinned, Got: r.Header.Revision,
			Detail: fmt.Sprintf("a linearizable read answers at revision %d, below the restored revision %d", r.Header.Revision, pinned)})
	default:
		d.check(step, catalog.DrillCheck{Name: CheckRead, Status: catalog.DrillCheckPassed, Want: pinned, Got: r.Header.Revision,
			Detail: fmt.Sprintf("linearizable read of %d key(s) at revision %d", len(r.Kvs), r.Header.Revision)})
	}

	// A write: put, read back, delete a drill-only key.
	var rb [8]byte
	_, _ = rand.Read(rb[:])
	key, val := "/etcd-recovery-drill/"+hex.EncodeToString(rb[:]), "drill "+time.Now().UTC().Format(time.RFC3339Nano)
	werr := func() error {
		cctx, cancel := context.WithTimeout(ctx, probe)
		defer cancel()
		if _, err := cli.Put(cctx, key, val); err != nil {
			return fmt.Errorf("put: %w", err)
		}
		g, err := cli.Get(cctx, key)
		if err != nil {
			return fmt.Errorf("get: %w", err)
		}
		if len(g.Kvs) != 1 || string(g.Kvs[0].Value) != val {
			return fmt.Errorf("the key written reads back as %d key(s)", len(g.Kvs))
		}
		if _, err := cli.Delete(cctx, key); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		return nil
	}()
	if werr != nil {
		d.check(step, catalog.DrillCheck{Name: CheckWrite, Status: catalog.DrillCheckFailed, Detail: werr.Error()})
	} else {
		d.check(step, catalog.DrillCheck{Name: CheckWrite, Status: catalog.DrillCheckPassed, Detail: "put, read back and deleted " + key})
	}
}

// revisionCheck checks that the member started at the pinned revision and
// that every revision after it, up to hrev (read when the checks began),
// is the expiry of a lease: a delete of keys that were on a lease. It
// reads the member's own history with a watch from pinned+1 (nothing is
// compacted before the checks end).
func (d *drill) revisionCheck(ctx context.Context, cli *clientv3.Client, pinned, hrev int64) catalog.DrillCheck {
	c := catalog.DrillCheck{Name: CheckRevision, Want: pinned, Got: hrev, Status: catalog.DrillCheckPassed}
	base := fmt.Sprintf("the snapshot's last revision %d plus the bump %d", d.facts.Revision, restore.DefaultBumpRevision)
	if hrev < pinned {
		c.Status = catalog.DrillCheckFailed
		c.Detail = fmt.Sprintf("the member is at revision %d, below %d (%s)", hrev, pinned, base)
		return c
	}
	if hrev == pinned {
		c.Detail = fmt.Sprintf("revision %d: %s", hrev, base)
		return c
	}
	wctx, cancel := context.WithTimeout(ctx, d.hashTimeout())
	defer cancel()
	revs := map[int64]bool{}
	var keys, other int
	var firstOther string
	wch := cli.Watch(clientv3.WithRequireLeader(wctx), "\x00", clientv3.WithFromKey(), clientv3.WithRev(pinned+1), clientv3.WithPrevKV())
	var werr error
	for len(revs) < int(hrev-pinned) || !revs[hrev] {
		wr, ok := <-wch
		if !ok {
			werr = wctx.Err()
			if werr == nil {
				werr = errors.New("the watch ended")
			}
			break
		}
		if err := wr.Err(); err != nil {
			werr = err
			break
		}
		for _, ev := range wr.Events {
			rev := ev.Kv.ModRevision
			if rev > hrev {
				continue
			}
			revs[rev] = true
			if ev.Type == clientv3.EventTypeDelete && ev.PrevKv != nil && ev.PrevKv.Lease != 0 {
				keys++
				continue
			}
			other++
			if firstOther == "" {
				firstOther = fmt.Sprintf("%s of %q at revision %d", ev.Type, ev.Kv.Key, rev)
			}
		}
		if len(revs) >= int(hrev-pinned) && revs[hrev] {
			break
		}
	}
	switch {
	case werr != nil:
		c.Status = catalog.DrillCheckFailed
		c.Detail = fmt.Sprintf("the member is at revision %d, past %d (%s), and its history since could not be read: %v", hrev, pinned, base, werr)
	case other > 0:
		c.Status = catalog.DrillCheckFailed
		c.Detail = fmt.Sprintf("the member is at revision %d, past %d (%s), by %d change(s) that are not lease expiries (the first: %s)",
			hrev, pinned, base, other, firstOther)
	default:
		c.Detail = fmt.Sprintf("revision %d: %s; the %d revision(s) since are lease expiries (%d keys on leases deleted)",
			pinned, base, hrev-pinned, keys)
	}
	return c
}

func cmpCheck(name string, want, got int64, detail string) catalog.DrillCheck {
	c := catalog.DrillCheck{Name: name, Want: want, Got: got, Status: catalog.DrillCheckPassed, Detail: detail}
	if want != got {
		c.Status = catalog.DrillCheckFailed
		c.Detail = fmt.Sprintf("got %d, want %d: %s", got, want, detail)
	}
	return c
}

// prefixCheck compares the keys per prefix, live and leased, exactly (both
// are counted at the snapshot's revision). Want and Got are live keys per
// prefix.
func prefixCheck(snap, got map[string]restore.PrefixCount) catalog.DrillCheck {
	want, have := map[string]int64{}, map[string]int64{}
	var all []string
	for p, c := range snap {
		want[p] = c.Live
		all = append(all, p)
	}
	for p, c := range got {
		have[p] = c.Live
		if _, ok := snap[p]; !ok {
			all = append(all, p)
		}
	}
	sort.Strings(all)
	var diffs []string
	for _, p := range all {
		s, g := snap[p], got[p]
		if s.Live != g.Live || s.Leased != g.Leased {
			diffs = append(diffs, fmt.Sprintf("%q: %d keys (%d leased), the snapshot has %d (%d leased)", p, g.Live, g.Leased, s.Live, s.Leased))
		}
	}
	c := catalog.DrillCheck{Name: CheckPrefixes, Want: want, Got: have, Status: catalog.DrillCheckPassed,
		Detail: fmt.Sprintf("%d prefixes, counted in the staged database and on the restored member", len(all))}
	if len(diffs) > 0 {
		c.Status = catalog.DrillCheckFailed
		c.Detail = fmt.Sprintf("%d of %d prefixes differ: %s", len(diffs), len(all), strings.Join(diffs[:min(len(diffs), 5)], "; "))
	}
	return c
}

// compare hashes the restored member at the snapshot's revision, compares
// it with the source's, then applies the compaction restore marks (see
// Run) and checks that the member still serves.
func (d *drill) compare(ctx context.Context, cli *clientv3.Client) {
	const step = StepCompare
	ep := d.proc.clientURL
	rev := d.rec.Revision
	cmp := &d.rec.Comparison
	t := time.Now()
	hash := func() (*clientv3.HashKVResponse, error) {
		hctx, cancel := context.WithTimeout(ctx, d.hashTimeout())
		defer cancel()
		return cli.HashKV(hctx, ep, rev)
	}
	resp, err := hash()
	if err == nil && d.src != nil && d.src.compact > resp.CompactRevision && d.src.compact <= rev {
		// The source compacted since the snapshot: the same compaction
		// here, so both hashes cover the same revisions.
		cctx, cancel := context.WithTimeout(ctx, d.hashTimeout())
		_, err = cli.Compact(cctx, d.src.compact, clientv3.WithCompactPhysical())
		cancel()
		if err == nil {
			resp, err = hash()
		} else {
			err = fmt.Errorf("compact to the source's compact revision %d: %w", d.src.compact, err)
		}
	}
	d.addStep(StepHashRestored, t, err)
	if err != nil {
		d.check(step, catalog.DrillCheck{Name: CheckHashKV, Status: catalog.DrillCheckFailed, Detail: err.Error()})
		return
	}
	d.check(step, catalog.DrillCheck{Name: CheckHashKV, Status: catalog.DrillCheckPassed, Got: resp.Hash,
		Detail: fmt.Sprintf("HashKV at revision %d, compact revision %d", rev, resp.CompactRevision)})
	restored := resp.Hash
	cmp.RestoredHash = &restored
	cmp.CompactRevision = resp.CompactRevision

	switch {
	case d.src == nil:
		d.check(step, catalog.DrillCheck{Name: CheckCompare, Status: catalog.DrillCheckInfo, Detail: cmp.Detail})
	case d.src.compact < resp.CompactRevision && !d.src.manifest:
		cmp.Mode = catalog.CompareSelf
		cmp.Detail = fmt.Sprintf("the member asked (%s) is not the snapshot's source and is compacted at %d, below the snapshot's %d: "+
			"the restored member was checked for self-consistency only", d.src.endpoint, d.src.compact, resp.CompactRevision)
		d.check(step, catalog.DrillCheck{Name: CheckCompare, Status: catalog.DrillCheckInfo, Detail: cmp.Detail})
	default:
		src := d.src.hash
		eq := src == restored && d.src.compact == resp.CompactRevision
		cmp.Mode, cmp.SourceHash, cmp.Equal = catalog.CompareSource, &src, &eq
		c := catalog.DrillCheck{Name: CheckCompare, Want: src, Got: restored, Status: catalog.DrillCheckPassed}
		switch {
		case d.src.compact < resp.CompactRevision:
			c.Status = catalog.DrillCheckFailed
			c.Detail = fmt.Sprintf("the snapshot is compacted at revision %d, past the source member's compact revision %d (%s): "+
				"it is not of this member's history", resp.CompactRevision, d.src.compact, d.src.endpoint)
		case !eq:
			c.Status = catalog.DrillCheckFailed
			c.Detail = fmt.Sprintf("HashKV at revision %d (compact revision %d): the source %s has %d, the restored member %d: "+
				"the backup does not hold what the source had", rev, resp.CompactRevision, d.src.endpoint, src, restored)
		default:
			c.Detail = fmt.Sprintf("HashKV at revision %d (compact revision %d) equals the source's (%s)", rev, resp.CompactRevision, d.src.endpoint)
		}
		cmp.Detail = c.Detail
		d.check(step, c)
	}

	// The compaction restore marks, applied now (see Run): the member
	// must report it and keep serving.
	// Not physical: etcd applies the mark the same way at start-up (the
	// index at once, the database in the background), and waiting for the
	// database to be rewritten would double the drill of a large one.
	target := d.facts.Revision + int64(restore.DefaultBumpRevision)
	cctx, cancel := context.WithTimeout(ctx, d.hashTimeout())
	_, err = cli.Compact(cctx, target)
	cancel()
	if err == nil {
		// Compacted at target: a read just below it is refused as
		// compacted (no second pass over the database for a hash).
		cctx, cancel := context.WithTimeout(ctx, d.opts.ProbeTimeout)
		_, err = cli.Get(cctx, "\x00", clientv3.WithRev(target-1), clientv3.WithLimit(1))
		cancel()
		switch {
		case errors.Is(err, rpctypes.ErrCompacted):
			err = nil
		case err == nil:
			err = fmt.Errorf("a read at revision %d still answers: the compaction did not take", target-1)
		}
	}
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, d.opts.ProbeTimeout)
		_, err = cli.Get(cctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
		cancel()
	}
	if err != nil {
		d.check(step, catalog.DrillCheck{Name: CheckCompaction, Status: catalog.DrillCheckFailed, Want: target,
			Detail: fmt.Sprintf("compact at revision %d: %v", target, err)})
		return
	}
	d.check(step, catalog.DrillCheck{Name: CheckCompaction, Status: catalog.DrillCheckPassed, Want: target, Got: target,
		Detail: "compacted at the snapshot's revision plus the bump, as restore marks it (a read below it is refused as compacted); the member still serves"})
}
