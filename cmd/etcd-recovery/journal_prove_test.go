package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/metrics"
	"github.com/armada/etcd-recovery/restore"
)

// proofWorld is a cluster with two full backups and the journal between
// them, in its own bucket and prefix.
type proofWorld struct {
	etcd             *testenv.EtcdCluster
	id               string
	cos              []string
	st               store.Store
	layout           catalog.Layout
	baseRev, lastRev int64
	compact          int64
	// overKey is a key overwritten between the backups.
	overKey string
}

// newProofWorld: a real etcd 3.5 and MinIO; a full backup, the journal
// (1 s segments) through puts, overwrites, deletes, txns, leased keys and
// a compaction, then a second full backup.
func newProofWorld(tb testing.TB, ctx context.Context, id string) *proofWorld {
	tb.Helper()
	return newProofWorldIn(tb, ctx, id, "")
}

// newProofWorldIn is newProofWorld in bucket (""; a new plain one), the
// journal run with journalArgs too.
func newProofWorldIn(tb testing.TB, ctx context.Context, id, bucket string, journalArgs ...string) *proofWorld {
	tb.Helper()
	c := testenv.StartEtcd(tb, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(tb)
	testenv.PutKeys(tb, cli, "/p/a/", 30, 32)
	m := testenv.SharedMinIO(tb)
	if bucket == "" {
		bucket = m.NewBucket(tb)
	}
	prefix := testenv.Prefix(tb)
	w := &proofWorld{etcd: c, id: id, cos: cosArgs(tb, m, bucket, prefix), st: testfix.Store(tb, m, bucket),
		layout: catalog.Layout{Prefix: prefix}, overKey: "/p/a/key000001"}
	backup := func() {
		tb.Helper()
		backupCLI(tb, ctx, c, w.cos, id)
	}
	backup()
	r, err := cli.Get(ctx, "/")
	if err != nil {
		tb.Fatal(err)
	}
	w.baseRev = r.Header.Revision

	jctx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	var jerr string
	go func() {
		var code int
		code, _, jerr = runCtx(tb, jctx, concatArgs([]string{"journal", "--cluster-id", id, "--segment-interval", "1s"}, journalArgs, clusterArgs(c), w.cos)...)
		done <- code
	}()
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		tb.Fatal(err)
	}
	txns := testfix.NewTxns(tb)
	do := txns.Do
	for i := range 2 {
		testenv.PutKeys(tb, cli, fmt.Sprintf("/p/w%d-", i), 10, 16)
		do(cli.Txn(ctx).Then(clientv3.OpPut(w.overKey, fmt.Sprintf("over-%d", i))).Commit())
		do(cli.Txn(ctx).Then(clientv3.OpPut(fmt.Sprintf("/p/leased-%d", i), "l", clientv3.WithLease(lease.ID)),
			clientv3.OpDelete(fmt.Sprintf("/p/a/key%06d", 10+i)), clientv3.OpPut("/p/txn", fmt.Sprint(i))).Commit())
		do(cli.Txn(ctx).Then(clientv3.OpDelete(fmt.Sprintf("/p/a/key%06d", 20+i))).Commit())
		if i == 0 {
			// A compaction between the backups, once the journal is past
			// it: the second backup's database is compacted there.
			testfix.WaitJournalReach(tb, ctx, w.st, w.layout, id, txns.Rev, 30*time.Second)
			if _, err := cli.Compact(ctx, txns.Rev, clientv3.WithCompactPhysical()); err != nil {
				tb.Fatal(err)
			}
			w.compact = txns.Rev
		}
		time.Sleep(600 * time.Millisecond)
	}
	w.lastRev = txns.Rev
	backup()
	testfix.WaitJournalReach(tb, ctx, w.st, w.layout, id, w.lastRev, 30*time.Second)
	stop()
	if code := <-done; code != 0 {
		tb.Fatalf("journal: exit %d: %s", code, jerr)
	}
	return w
}

func (w *proofWorld) prove(tb testing.TB, ctx context.Context, extra ...string) (int, journalProveResult, string) {
	tb.Helper()
	code, out, errOut := runCtx(tb, ctx, concatArgs([]string{"journal", "prove", "--cluster-id", w.id, "-o", "json"}, extra, w.cos)...)
	var res journalProveResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		tb.Fatalf("journal prove -o json: exit %d: %v\n%s\n%s", code, err, out, errOut)
	}
	return code, res, errOut
}

func (w *proofWorld) restoreArgs(tb testing.TB, rev int64, extra ...string) []string {
	tb.Helper()
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(tb))
	return concatArgs([]string{"restore", "--cluster-id", w.id, "--initial-cluster", "r0=" + peer,
		"--data-dir-root", filepath.Join(tb.TempDir(), "data"), "--to-revision", fmt.Sprint(rev)}, extra, w.cos)
}

// checkOf is the plan's check named name.
func checkOf(res restore.Result, name string) *restore.Check {
	for i := range res.Checks {
		if res.Checks[i].Name == name {
			return &res.Checks[i]
		}
	}
	return nil
}

// A journal proof that passes, through the CLI on real etcd 3.5 and MinIO:
// backup k, the journal (a compaction, leases, txns, deletes between), backup
// k+1. `journal prove` replays the journal into k offline and its HashKV at
// k+1's revision, for k+1's compact revision, equals k+1's: passed, recorded
// at the proof key; a second run has nothing left to prove; a dry run of a
// point-in-time restore into the window shows the proof.
func TestJournalProvePasses(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 3*time.Minute)
	w := newProofWorld(t, ctx, "proof-ok")
	dryRun := func() *restore.Check {
		t.Helper()
		code, out, errOut := runCtx(t, ctx, w.restoreArgs(t, w.lastRev-1, "--dry-run", "-o", "json")...)
		var dry restore.Result
		if code != 0 || json.Unmarshal([]byte(out), &dry) != nil {
			t.Fatalf("restore --dry-run: exit %d\n%s\n%s", code, out, errOut)
		}
		return checkOf(dry, restore.CheckJournalProof)
	}
	// Before the proof: offered, unproven.
	if c := dryRun(); c == nil || c.Status != restore.CheckSkipped || !strings.Contains(c.Detail, "unproven") {
		t.Fatalf("restore --dry-run before the proof: journal proof check %+v", c)
	}

	code, res, errOut := w.prove(t, ctx)
	if code != 0 || len(res.Proofs) != 1 {
		t.Fatalf("journal prove: exit %d, %+v\n%s", code, res, errOut)
	}
	p := res.Proofs[0]
	if p.Verdict != catalog.ProofPassed || p.Got != p.Want || p.Got.Hash == 0 || p.TargetRevision != w.lastRev ||
		p.BaseRevision != w.baseRev || p.Compact != w.compact || p.Events == 0 || len(p.Segments) == 0 {
		t.Fatalf("proof: %+v (want passed at %d from %d, compact %d)", p, w.lastRev, w.baseRev, w.compact)
	}
	rec, err := catalog.ReadJournalProof(ctx, w.st, w.layout, w.id, p.Target)
	if err != nil || rec.Verdict != catalog.ProofPassed || rec.Got != p.Got {
		t.Fatalf("recorded proof: %+v, %v", rec, err)
	}
	if ki := w.layout.Classify(w.layout.JournalProofKey(w.id, p.Target)); ki.Kind != catalog.KeyJournalProof || ki.Name != p.Target {
		t.Fatalf("the proof key classifies as %+v", ki)
	}

	code, res, errOut = w.prove(t, ctx)
	if code != 0 || len(res.Proofs) != 0 || len(res.NotProven) != 1 || !res.NotProven[0].NoJournal {
		t.Fatalf("journal prove again: exit %d, %+v\n%s", code, res, errOut)
	}
	if c := dryRun(); c == nil || c.Status != restore.CheckPassed || !strings.Contains(c.Detail, "proofs/"+p.Target) {
		t.Fatalf("restore --dry-run: journal proof check %+v", c)
	}
	// Below the compaction backup k+1 was hashed at: not covered by the
	// proof, never shown as passed.
	if w.compact-1 <= w.baseRev {
		t.Fatalf("the compaction (%d) is right after the base backup (%d): no revision between", w.compact, w.baseRev)
	}
	code, out, errOut := runCtx(t, ctx, w.restoreArgs(t, w.compact-1, "--dry-run", "-o", "json")...)
	var below restore.Result
	if code != 0 || json.Unmarshal([]byte(out), &below) != nil {
		t.Fatalf("restore --dry-run below the compaction: exit %d\n%s\n%s", code, out, errOut)
	}
	if c := checkOf(below, restore.CheckJournalProof); c == nil || c.Status != restore.CheckSkipped || !strings.Contains(c.Detail, "unproven") ||
		!strings.Contains(c.Detail, fmt.Sprint(w.compact)) {
		t.Fatalf("restore --dry-run to %d, below the proof's compact revision %d: journal proof check %+v", w.compact-1, w.compact, c)
	}
}

// A journal proof that fails: the same world, then one segment between
// the backups replaced by one with the same revisions and a valid chain
// but a changed value (of a revision after the compaction: one compacted
// away in backup k+1 is history no hash of k+1 holds) (encoded with journal.EncodeSegment, written with
// the segment store). `journal prove` exits 1 with a failed proof, naming
// both hashes, recorded; the exporter's real scrape reports
// etcd_recovery_journal_proof_failed 1 for the cluster; restore
// --to-revision into the window is refused naming the proof (a dry run
// too), and accepted with --accept-unproven-journal. A drill of the backup
// still passes, and reports the failed proof beside its verdict.
func TestJournalProveFails(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 3*time.Minute)
	w := newProofWorld(t, ctx, "proof-bad")

	// The last overwrite, after the compaction (one compacted away in
	// backup k+1 could not be told), forged consistently: every segment
	// after it written again naming the forged one, so that the chain
	// holds and only the hash can tell.
	tampered := w.forge(t, ctx, true)
	t.Logf("forged %s and rewrote every segment after it", tampered)
	if chain, err := journal.ListSegments(ctx, w.st, w.layout, w.id, w.baseRev); err != nil || chain.Problem != nil || chain.Reach < w.lastRev {
		t.Fatalf("the tampered journal's chain: %+v %v", chain, err)
	}

	code, res, errOut := w.prove(t, ctx)
	if code == 0 || len(res.Proofs) != 1 {
		t.Fatalf("journal prove of a tampered journal: exit %d, %+v\n%s", code, res, errOut)
	}
	p := res.Proofs[0]
	if p.Verdict != catalog.ProofFailed || p.Got.Hash == p.Want.Hash || p.Got.Revision != p.Want.Revision ||
		!strings.Contains(p.Detail, fmt.Sprint(p.Want.Hash)) || !strings.Contains(errOut, "failed") {
		t.Fatalf("proof: %+v\n%s", p, errOut)
	}
	rec, err := catalog.ReadJournalProof(ctx, w.st, w.layout, w.id, p.Target)
	if err != nil || !rec.Failed() {
		t.Fatalf("recorded proof: %+v, %v", rec, err)
	}
	// A drill of the backup passes (the backup restores) and reports the
	// journal's failed proof beside its verdict.
	dcode, d, derr := w.drill(t, ctx)
	if dcode != 0 || d.Result != fleet.DrillPassed || d.Record == nil || !d.Record.Passed || d.Record.JournalProof != catalog.ProofFailed ||
		!strings.Contains(fmt.Sprint(d.Record.Checks), fmt.Sprint(p.Want.Hash)) {
		t.Fatalf("drill of the backup after a failed proof: exit %d %+v\n%s", dcode, d.Record, lastLinesOf(derr, 20))
	}

	// Proven again as a table, recording nothing (the record stays).
	code, table, errOut := runCtx(t, ctx, concatArgs([]string{"journal", "prove", "--cluster-id", w.id, "--backup", p.Target, "--no-record"}, w.cos)...)
	if code == 0 || !strings.Contains(table, "TARGET") || !strings.Contains(table, fmt.Sprint(p.Got.Hash)) || !strings.Contains(table, "(not recorded: --no-record)") {
		t.Fatalf("journal prove --backup --no-record: exit %d\n%s\n%s", code, table, errOut)
	}
	for _, line := range strings.Split(table, "\n") {
		if utf8.RuneCountInString(line) > 120 {
			t.Errorf("journal prove's table is wider than 120 columns: %q", line)
		}
	}
	t.Logf("journal prove:\n%s", table)

	// The exporter's scrape.
	e, err := metrics.New(metrics.Options{Store: w.st, Layout: w.layout})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	defer srv.Close()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		fmt.Sprintf("%s{cluster=%q} 1\n", metrics.NameJournalProofFailed, w.id),
		fmt.Sprintf("%s{cluster=%q} ", metrics.NameJournalProofTimestamp, w.id),
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("the scrape has no %q", want)
		}
	}

	key := w.layout.JournalProofKey(w.id, p.Target)
	for _, dry := range []bool{false, true} {
		args := w.restoreArgs(t, w.lastRev-1)
		if dry {
			args = append(args, "--dry-run")
		}
		code, out, errOut := runCtx(t, ctx, args...)
		if code == 0 || !strings.Contains(errOut, key) || !strings.Contains(errOut, fmt.Sprint(p.Want.Hash)) || !strings.Contains(errOut, "--accept-unproven-journal") {
			t.Fatalf("restore --to-revision into a window whose proof failed (dry run %v): exit %d\n%s\n%s", dry, code, out, errOut)
		}
	}
	if code, _, _ := runCtx(t, ctx, concatArgs([]string{"restore", "--cluster-id", w.id, "--initial-cluster", "r0=http://127.0.0.1:2380",
		"--data-dir-root", t.TempDir(), "--accept-unproven-journal", "--dry-run"}, w.cos)...); code != exitUsage {
		t.Errorf("--accept-unproven-journal without --to-revision: exit %d, want %d", code, exitUsage)
	}
	code, out, errOut := runCtx(t, ctx, w.restoreArgs(t, w.lastRev-1, "--accept-unproven-journal", "-o", "json")...)
	var got restore.Result
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Replay == nil || got.Replay.ToRevision != w.lastRev-1 {
		t.Fatalf("restore --accept-unproven-journal: exit %d\n%s\n%s", code, out, errOut)
	}
	if c := checkOf(got, restore.CheckJournalProof); c == nil || c.Status != restore.CheckSkipped || !strings.Contains(c.Detail, "accepted") {
		t.Fatalf("restore --accept-unproven-journal: journal proof check %+v", c)
	}

	// The failed proof gates the fallback too: backup k+1 damaged, a
	// restore to its revision falls back to backup k, whose replay passes
	// through the failed window: refused, never restored.
	list, err := catalog.ListBackups(ctx, w.st, w.layout, w.id)
	if err != nil || len(list) != 2 || list[0].Manifest == nil || list[0].Manifest.Name != p.Target {
		t.Fatalf("backups: %+v %v, want backup k+1 (%s) newest", list, err, p.Target)
	}
	newest := list[0].Manifest
	// Its bytes damaged, its size kept: still a committed backup, refused
	// when its checksum is verified.
	snapKey := w.layout.Key(newest.ClusterID, newest.Name, newest.Snapshot.Object)
	b := testfix.ReadObject(t, w.st, snapKey)
	b[len(b)/2] ^= 0xff
	if _, err := w.st.Put(ctx, snapKey, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCtx(t, ctx, w.restoreArgs(t, newest.Revision(), "-o", "json")...)
	if code == 0 || !strings.Contains(errOut, key) || !strings.Contains(errOut, "--accept-unproven-journal") {
		t.Fatalf("restore --to-revision %d with backup k+1 damaged (falls back to k, through the failed window): exit %d\n%s\n%s", newest.Revision(), code, out, lastLinesOf(errOut, 20))
	}
}

// forge replaces the last segment between the backups holding a put of
// overKey after the compaction with one whose value is changed (same
// revisions, versions and create revisions: only a hash can tell), the
// way a credential that may write can: a plain PUT (on a versioned bucket:
// a newer version over the journal's). With rechain, every later segment
// is written again naming the forged one as its Prev (a forger who
// rewrites the whole tail). It returns the forged segment's key.
func (w *proofWorld) forge(tb testing.TB, ctx context.Context, rechain bool) string {
	tb.Helper()
	return w.forgeWhere(tb, ctx, func(ev journal.Event) bool {
		return ev.Type == journal.Put && string(ev.Key) == w.overKey && ev.Rev > w.compact && ev.Rev <= w.lastRev
	}, rechain)
}

// forgeWhere is forge of the last segment holding an event match picks
// (its last such event's value changed).
func (w *proofWorld) forgeWhere(tb testing.TB, ctx context.Context, match func(journal.Event) bool, rechain bool) string {
	tb.Helper()
	segs, err := journal.ListSegments(ctx, w.st, w.layout, w.id, 0)
	if err != nil {
		tb.Fatal(err)
	}
	put := func(h journal.Header, evs []journal.Event) string {
		tb.Helper()
		raw, err := journal.EncodeSegment(h, evs)
		if err != nil {
			tb.Fatal(err)
		}
		key := w.layout.JournalSegmentKey(h.ClusterID, h.FirstRev, h.LastRev)
		// Uncompressed: a reader recognises zstd from its bytes.
		if _, err := w.st.Put(ctx, key, bytes.NewReader(raw)); err != nil {
			tb.Fatal(err)
		}
		d, err := journal.NewDecoder(bytes.NewReader(raw), key, journal.Want{})
		if err != nil {
			tb.Fatal(err)
		}
		for {
			if _, err := d.Next(); err == io.EOF {
				return d.Sum()
			} else if err != nil {
				tb.Fatal(err)
			}
		}
	}
	tampered, sum := "", ""
	for i := len(segs.All) - 1; i >= 0 && tampered == ""; i-- {
		s := segs.All[i]
		h, evs, err := journal.ReadSegment(ctx, w.st, w.layout, s.Key, nil, journal.Want{ClusterID: w.id})
		if err != nil {
			tb.Fatal(err)
		}
		for j := len(evs) - 1; j >= 0; j-- {
			if match(evs[j]) {
				evs[j].Value = []byte("not what etcd holds")
				tampered, sum = s.Key, put(h, evs)
				break
			}
		}
		if tampered == "" || !rechain {
			continue
		}
		for _, later := range segs.All[i+1:] {
			h, evs, err := journal.ReadSegment(ctx, w.st, w.layout, later.Key, nil, journal.Want{ClusterID: w.id})
			if err != nil {
				tb.Fatal(err)
			}
			h.Prev = sum
			sum = put(h, evs)
		}
	}
	if tampered == "" {
		tb.Fatal("no segment holds the event to forge")
	}
	return tampered
}

// drillJSON runs drill -o json and returns its one cluster's result.
func (w *proofWorld) drill(tb testing.TB, ctx context.Context, extra ...string) (int, drill.Result, string) {
	tb.Helper()
	code, out, errOut := runCtx(tb, ctx, concatArgs([]string{"drill", "--cluster-id", w.id, "--etcd-bin-dir", testenv.DrillBinDir(tb, testenv.V35),
		"--temp-dir", tb.TempDir(), "-o", "json"}, extra, clusterArgs(w.etcd), w.cos)...)
	var rep fleet.DrillAllReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Clusters) != 1 {
		tb.Fatalf("drill -o json: exit %d: %v\n%s\n%s", code, err, out, errOut)
	}
	return code, rep.Clusters[0], errOut
}

// Drills and the journal, on real etcd 3.5 and MinIO: drill --to-revision
// R (inside the window between the two backups) restores the older backup
// plus the journal up to R, and its HashKV at R equals the source's
// (which still has R): passed, the record says the target revision. A
// plain drill of the newest backup proves the journal before it (a
// recorded proof, passed, reported as an info check that does not judge
// the backup); a second drill reads the recorded proof.
func TestDrillToRevisionAndJournalProof(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 4*time.Minute)
	w := newProofWorld(t, ctx, "proof-drill")
	r := w.lastRev - 1

	code, d, errOut := w.drill(t, ctx, "--to-revision", fmt.Sprint(r))
	if code != 0 || d.Result != fleet.DrillPassed || d.Record == nil {
		t.Fatalf("drill --to-revision %d: exit %d %+v\n%s", r, code, d, lastLinesOf(errOut, 20))
	}
	rec := d.Record
	cmp := rec.Comparison
	if rec.ToRevision != r || rec.Revision != r || cmp.Mode != catalog.CompareSource || cmp.Revision != r || cmp.Equal == nil || !*cmp.Equal {
		t.Fatalf("drill --to-revision record: to %d, revision %d, comparison %+v", rec.ToRevision, rec.Revision, cmp)
	}
	if rec.JournalProof != "" {
		t.Errorf("a point-in-time drill proved the journal: %q", rec.JournalProof)
	}

	code, d, errOut = w.drill(t, ctx)
	if code != 0 || d.Result != fleet.DrillPassed || d.Record == nil || d.Record.JournalProof != catalog.ProofPassed {
		t.Fatalf("drill of the newest backup: exit %d %+v\n%s", code, d, lastLinesOf(errOut, 20))
	}
	var info *catalog.DrillCheck
	for i, c := range d.Record.Checks {
		if c.Name == "journal proof" {
			info = &d.Record.Checks[i]
		}
	}
	if info == nil || info.Status != catalog.DrillCheckInfo || !strings.Contains(info.Detail, "proven now") {
		t.Fatalf("drill's journal proof check: %+v", info)
	}
	p, err := catalog.ReadJournalProof(ctx, w.st, w.layout, w.id, d.Backup)
	if err != nil || p.Verdict != catalog.ProofPassed || p.TargetRevision != w.lastRev {
		t.Fatalf("the drill's proof: %+v %v", p, err)
	}
	code, d, errOut = w.drill(t, ctx)
	if code != 0 || d.Record == nil || d.Record.JournalProof != catalog.ProofPassed || !strings.Contains(fmt.Sprint(d.Record.Checks), "recorded already") {
		t.Fatalf("second drill: exit %d %+v\n%s", code, d.Record, lastLinesOf(errOut, 20))
	}
}

// Without a journal between two backups there is nothing to prove:
// `journal prove` (and with --backup, --all-unproven) exits 0 saying so,
// and records nothing; a usage error for --backup with --all-unproven.
func TestJournalProveNoJournal(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 2*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	w := &proofWorld{etcd: c, id: "proof-none", cos: cosArgs(t, m, bucket, prefix), st: testfix.Store(t, m, bucket), layout: catalog.Layout{Prefix: prefix}}
	var names []string
	for i := range 2 {
		testenv.PutKeys(t, cli, fmt.Sprintf("/n%d/", i), 10, 16)
		code, out, errOut := runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", w.id, "--v2", "off", "-o", "json"}, clusterArgs(c), w.cos)...)
		var b struct{ Name string }
		if code != 0 || json.Unmarshal([]byte(out), &b) != nil || b.Name == "" {
			t.Fatalf("backup: exit %d\n%s\n%s", code, out, errOut)
		}
		names = append(names, b.Name)
	}
	for _, extra := range [][]string{nil, {"--all-unproven"}, {"--backup", names[1]}} {
		code, res, errOut := w.prove(t, ctx, extra...)
		if code != 0 || len(res.Proofs) != 0 {
			t.Fatalf("journal prove %v without a journal: exit %d %+v\n%s", extra, code, res, errOut)
		}
		if len(extra) != 1 && (len(res.NotProven) != 1 || !res.NotProven[0].NoJournal || !strings.Contains(res.NotProven[0].Reason, "no journal")) {
			t.Fatalf("journal prove %v: %+v", extra, res.NotProven)
		}
	}
	if ps, err := catalog.ListJournalProofs(ctx, w.st, w.layout, w.id); err != nil || len(ps) != 0 {
		t.Fatalf("proofs recorded without a journal: %+v %v", ps, err)
	}
	if code, _, _ := runCtx(t, ctx, concatArgs([]string{"journal", "prove", "--cluster-id", w.id, "--backup", names[1], "--all-unproven"}, w.cos)...); code != exitUsage {
		t.Fatalf("--backup with --all-unproven: exit %d, want %d", code, exitUsage)
	}
}
