package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// A gap, on real etcd 3.5 and MinIO, through the CLI: the journal runs,
// stops, the cluster is written and compacted past where it stopped, and
// the journal starts again. It records the gap (its record at the
// layout's gap key: from the first revision it had not captured to the
// compaction's revision - 1, the old base), takes a scheduled full backup
// at once and journals from it; restore --to-revision of a revision after
// the new base gives the source's keyspace at that revision.
func TestJournalGapTakesABackupAndContinues(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 90*time.Second)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/a/", 20, 16)
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	cos := cosArgs(t, m, bucket, prefix)
	const id = "gap1"
	backupCLI(t, ctx, c, cos, id)
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}
	list := func() []catalog.Entry {
		entries, err := catalog.Inventory(ctx, st, layout, id)
		if err != nil {
			t.Fatal(err)
		}
		return entries
	}
	first := list()
	if len(first) != 1 {
		t.Fatalf("backups: %+v", first)
	}
	man, err := catalog.LoadManifest(ctx, st, layout, id, first[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	jargs := concatArgs([]string{"--cluster-id", id, "--segment-interval", "500ms"}, clusterArgs(c), cos)

	// The journal, then stopped.
	stop := journalRun(t, ctx, jargs...)
	testenv.PutKeys(t, cli, "/b/", 10, 16)
	r, err := cli.Put(ctx, "/b/last", "x")
	if err != nil {
		t.Fatal(err)
	}
	reach := waitJournal(t, ctx, st, layout, id, man.Revision(), r.Header.Revision).Reach
	if code, errOut := stop(); code != 0 {
		t.Fatalf("journal: exit %d: %s", code, errOut)
	}

	// While it is stopped: writes, then a compaction past them.
	testenv.PutKeys(t, cli, "/c/", 10, 16)
	cr, err := cli.Put(ctx, "/c/last", "y")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, cr.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}

	// Again: the gap, the backup, the journal from it.
	stop = journalRun(t, ctx, jargs...)
	var gaps []catalog.JournalGap
	var newBase *catalog.Manifest
	for deadline := time.Now().Add(30 * time.Second); newBase == nil; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			code, errOut := stop()
			t.Fatalf("no gap record and new backup after 30s (gaps %+v); journal exit %d:\n%s", gaps, code, testfix.LastLines(errOut, 20))
		}
		if gaps, err = catalog.ReadJournalGaps(ctx, st, layout, id); err != nil {
			t.Fatal(err)
		}
		for _, e := range list() {
			if e.Committed && e.Kind == catalog.KindScheduled {
				if newBase, err = catalog.LoadManifest(ctx, st, layout, id, e.Name); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if len(gaps) != 1 {
		t.Fatalf("gap records: %+v", gaps)
	}
	g := gaps[0]
	if g.ClusterID != id || g.From != reach+1 || g.To != cr.Header.Revision-1 || g.OldBase == nil || g.OldBase.Name != man.Name ||
		g.OldBase.Rev != man.Revision() || !strings.Contains(g.Reason, "compacted") || g.Time.IsZero() ||
		g.Key != layout.JournalGapKey(id, reach+1) {
		t.Fatalf("gap record: %+v; want from %d to %d, old base %s at %d", g, reach+1, cr.Header.Revision-1, man.Name, man.Revision())
	}
	if ki := layout.Classify(g.Key); ki.Kind != catalog.KeyJournalGap || ki.ClusterID != id || ki.FirstRev != g.From {
		t.Fatalf("the gap key classifies as %+v", ki)
	}
	raw := testfix.ReadObject(t, st, g.Key)
	var stored map[string]any
	if err := json.Unmarshal(raw, &stored); err != nil || stored["from"] != float64(g.From) || stored["reason"] == nil {
		t.Fatalf("the stored record: %s (%v)", raw, err)
	}
	if newBase.Revision() < cr.Header.Revision {
		t.Fatalf("the new base %s is at %d, before the compaction %d", newBase.Name, newBase.Revision(), cr.Header.Revision)
	}

	// The journal continues from the new base.
	testenv.PutKeys(t, cli, "/d/", 10, 16)
	mid, err := cli.Put(ctx, "/d/mid", "m")
	if err != nil {
		t.Fatal(err)
	}
	want := pitrDump(t, cli, mid.Header.Revision)
	if _, err := cli.Delete(ctx, "/a/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	end, err := cli.Put(ctx, "/d/end", "e")
	if err != nil {
		t.Fatal(err)
	}
	ch := waitJournal(t, ctx, st, layout, id, newBase.Revision(), end.Header.Revision)
	if len(ch.Segments) == 0 || ch.Segments[0].FirstRev != newBase.Revision()+1 {
		t.Fatalf("the journal after the gap: %+v, want it from %d", ch.Segments, newBase.Revision()+1)
	}
	code, errOut := stop()
	if code != 0 {
		t.Fatalf("journal: exit %d: %s", code, errOut)
	}
	for _, s := range []string{"journal: gap", "full backup after the gap committed"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("stderr lacks %q:\n%s", s, testfix.LastLines(errOut, 20))
		}
	}

	// restore --to-revision after the new base: the source's keyspace.
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	client := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	root := filepath.Join(t.TempDir(), "data")
	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"restore", "--cluster-id", id, "--initial-cluster", "r0=" + peer, "--data-dir-root", root,
		"--to-revision", fmt.Sprint(mid.Header.Revision), "-o", "json"}, cos)...)
	if code != 0 {
		t.Fatalf("restore --to-revision %d: exit %d\n%s\n%s", mid.Header.Revision, code, out, errOut)
	}
	var res restore.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Replay == nil || res.Replay.ToRevision != mid.Header.Revision ||
		res.Chosen == nil || res.Chosen.Name != newBase.Name || len(res.Members) != 1 {
		t.Fatalf("restore result (want from %s): %v\n%s", newBase.Name, err, out)
	}
	ncli := startRestored(t, res, client, peer)
	got := pitrDump(t, ncli, 0)
	if len(got) != len(want) {
		t.Fatalf("restored %d keys, the source had %d at %d", len(got), len(want), mid.Header.Revision)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: restored %q, the source had %q at %d", k, got[k], v, mid.Header.Revision)
		}
	}
}

// journal's targets and flags are checked before anything is contacted:
// usage errors (exit 4) naming the flags.
func TestJournalUsageErrors(t *testing.T) {
	t.Parallel()
	cos := []string{"--cos-endpoint", "http://127.0.0.1:9", "--bucket", "b", "--prefix", "p", "--cos-credentials-dir", credsDir(t, "a", "s")}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"journal"}, "--cluster-id (or --all) is required"},
		{[]string{"journal", "--all", "--cluster-id", "c1"}, "with --all the id is the EtcdCluster's name"},
		{[]string{"journal", "--cluster-id", "c1", "--rediscover", "5s"}, "--rediscover and --no-events are for --all"},
		{[]string{"journal", "--cluster-id", "c1", "--no-events"}, "--rediscover and --no-events are for --all"},
		{[]string{"journal", "--all", "--rediscover", "0s"}, "rediscover"},
		{[]string{"journal", "--cluster-id", "c1", "--segment-size", "0"}, "--segment-size"},
		{[]string{"journal", "--cluster-id", "c1", "--memory-budget", "lots"}, "--memory-budget"},
		{[]string{"journal", "--cluster-id", "-bad"}, "cluster"},
	} {
		code, _, errOut := runCtx(t, context.Background(), concatArgs(c.args, cos)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, want %d with %q:\n%s", c.args, code, exitUsage, c.want, errOut)
		}
	}
}
