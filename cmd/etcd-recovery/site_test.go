package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/site"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/replicate"
	"github.com/armada/etcd-recovery/restore"
)

// secondArgs are --second-store (an s3:// URL) and
// --second-credentials-dir for a MinIO bucket and prefix.
func secondArgs(tb testing.TB, m *testenv.MinIO, bucket, prefix string) []string {
	tb.Helper()
	u := fmt.Sprintf("s3://%s/%s?endpoint=%s&region=%s", bucket, prefix, url.QueryEscape(m.Endpoint), m.Region)
	return []string{"--second-store", u, "--second-credentials-dir", credsDir(tb, m.AccessKey, m.SecretKey)}
}

// newestBackup is the name of id's newest committed backup in st.
func newestBackup(tb testing.TB, ctx context.Context, m *testenv.MinIO, bucket, prefix, id string) string {
	tb.Helper()
	ls, err := catalog.ListBackups(ctx, testfix.Store(tb, m, bucket), catalog.Layout{Prefix: prefix}, id)
	if err != nil || len(ls) == 0 {
		tb.Fatalf("backups of %s in %s/%s: %v %v", id, bucket, prefix, ls, err)
	}
	return ls[0].Name
}

const fellBack = "reading the second site: the primary is unreachable"

// The second site alone, on real etcd 3.5 and MinIO: a backup and the
// journal written to the primary bucket, copied to a second bucket by the
// copier (replicate.Run: journal polls every 300 ms), then every object of
// the primary deleted by its own credential. list --site second shows
// the second's backup; restore --site second --to-revision R gives
// exactly the source's keyspace at R (every key's value, create and mod
// revision, version and lease) and a plain restore's dry run chooses the
// second's backup; nothing is written to the primary.
func TestSecondSiteRestoreCLI(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 2*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/registry/a/", 10, 16)
	m := testenv.SharedMinIO(t)
	primaryBucket, secondBucket := m.NewBucket(t), m.NewBucket(t)
	pp := testenv.Prefix(t)
	primary := cosArgs(t, m, primaryBucket, pp)
	sp := "dr/" + pp
	second := secondArgs(t, m, secondBucket, sp)
	pst, sst := testfix.Store(t, m, primaryBucket), testfix.Store(t, m, secondBucket)
	pl, sl := catalog.Layout{Prefix: pp}, catalog.Layout{Prefix: sp}
	const id = "dr"
	backupCLI(t, ctx, c, primary, id)
	stopJournal := journalRun(t, ctx, concatArgs([]string{"--cluster-id", id, "--segment-interval", "1s"}, clusterArgs(c), primary)...)
	rctx, stopCopier := context.WithCancel(ctx)
	defer stopCopier()
	copierDone := make(chan error, 1)
	go func() {
		copierDone <- replicate.Run(rctx, replicate.Options{Primary: pst, PrimaryLayout: pl, Second: sst, SecondLayout: sl,
			JournalInterval: 300 * time.Millisecond, ScanInterval: time.Second, StatusEvery: time.Second, Log: testfix.Logger(t)})
	}()
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		testenv.PutKeys(t, cli, fmt.Sprintf("/registry/w%d-", i), 5, 16)
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/leased-%d", i), "l", clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, "/registry/a/key000001", fmt.Sprint("over-", i)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	r, err := cli.Delete(ctx, "/registry/a/key000002")
	if err != nil {
		t.Fatal(err)
	}
	at := r.Header.Revision
	want := pitrDump(t, cli, at)
	if _, err := cli.Delete(ctx, "/registry/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	top := at + 1
	testfix.WaitJournalReach(t, ctx, sst, sl, id, top, 30*time.Second)
	if code, jerr := stopJournal(); code != 0 {
		t.Fatalf("journal: exit %d: %s", code, jerr)
	}
	name := newestBackup(t, ctx, m, primaryBucket, pl.Prefix, id)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st, err := replicate.ReadStatus(ctx, sst, sl, time.Now())
		if err == nil && st.Clusters[id].NewestBackup == name && st.Clusters[id].JournalLastRevision >= top {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the copier has not copied %s and the journal to %d: %+v %v", name, top, st, err)
		}
	}
	stopCopier()
	if err := <-copierDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the copier: %v", err)
	}
	// The primary is emptied by its own credential: what follows reads
	// the second site alone.
	testfix.DeleteUnder(t, ctx, pst, "")
	if n := newestBackup(t, ctx, m, secondBucket, sp, id); n != name {
		t.Fatalf("the second site's newest backup %s, the primary's was %s", n, name)
	}

	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"list", "--cluster-id", id, "--site", "second"}, primary, second)...)
	if code != 0 || !strings.Contains(out, name) || strings.Contains(errOut, fellBack) {
		t.Fatalf("list --site second: exit %d, want %s\n%s\n%s", code, name, out, errOut)
	}

	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	client := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	restoreArgs := concatArgs([]string{"restore", "--site", "second", "--cluster-id", id, "--initial-cluster", "r0=" + peer,
		"--data-dir-root", filepath.Join(t.TempDir(), "data"), "-o", "json"}, primary, second)
	code, out, errOut = runCtx(t, ctx, concatArgs(restoreArgs, []string{"--dry-run"})...)
	var dry restore.Result
	if code != 0 || json.Unmarshal([]byte(out), &dry) != nil || dry.Chosen == nil || dry.Chosen.Name != name {
		t.Fatalf("restore --site second --dry-run: exit %d, want %s chosen\n%s\n%s", code, name, out, errOut)
	}
	code, out, errOut = runCtx(t, ctx, concatArgs(restoreArgs, []string{"--to-revision", fmt.Sprint(at)})...)
	var res restore.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Replay == nil || res.Replay.ToRevision != at {
		t.Fatalf("restore --site second --to-revision %d: exit %d\n%s\n%s", at, code, out, errOut)
	}
	ncli := startRestored(t, res, client, peer)
	checkDump(t, fmt.Sprintf("restored from the second site at %d", at), want, pitrDump(t, ncli, 0))
	if ttl, err := ncli.TimeToLive(ctx, lease.ID); err != nil || ttl.TTL <= 0 {
		t.Fatalf("the lease on the restored member: %+v %v", ttl, err)
	}
	if keys := testfix.Keys(t, testfix.Store(t, m, primaryBucket), ""); len(keys) != 0 {
		t.Fatalf("reading the second site wrote to the primary: %v", keys)
	}
}

// --site auto on real MinIO servers: the primary a server of its own,
// the second site a bucket of the shared one, each with a backup of the
// same cluster (the primary's newer). Both up: list reads the primary,
// silently, and sites shows both windows and the gap. The primary frozen
// (SIGSTOP): list reads the second site, says why on stderr, within the
// check's deadline; sites shows the primary unreachable beside the
// second's window. The primary stopped (connection refused): the same.
func TestSiteAutoFallbackCLI(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 2*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/registry/a/", 10, 16)
	pm, sm := testenv.StartMinIO(t), testenv.SharedMinIO(t)
	pb, sb, pp, sp := pm.NewBucket(t), sm.NewBucket(t), testenv.Prefix(t), testenv.Prefix(t)
	primary, second := cosArgs(t, pm, pb, pp), secondArgs(t, sm, sb, sp)
	const id = "auto"
	backupCLI(t, ctx, c, cosArgs(t, sm, sb, sp), id)
	testenv.PutKeys(t, cli, "/registry/b/", 5, 16)
	backupCLI(t, ctx, c, primary, id)
	pname, sname := newestBackup(t, ctx, pm, pb, pp, id), newestBackup(t, ctx, sm, sb, sp, id)
	list := concatArgs([]string{"list", "--cluster-id", id, "--site-timeout", "2s"}, primary, second)
	sitesTable := concatArgs([]string{"sites", "--cluster-id", id, "--site-timeout", "2s"}, primary, second)
	sites := concatArgs(sitesTable, []string{"-o", "json"})

	code, out, errOut := runCtx(t, ctx, list...)
	if code != 0 || !strings.Contains(out, pname) || strings.Contains(out, sname) || strings.Contains(errOut, "second site") {
		t.Fatalf("list, both up: exit %d, want the primary's %s read silently\n%s\n%s", code, pname, out, errOut)
	}
	var cmp site.Comparison
	code, out, errOut = runCtx(t, ctx, sites...)
	if code != 0 || json.Unmarshal([]byte(out), &cmp) != nil || len(cmp.Clusters) != 1 || len(cmp.Clusters[0].Sites) != 2 {
		t.Fatalf("sites, both up: exit %d\n%s\n%s", code, out, errOut)
	}
	ps, ss := cmp.Clusters[0].Sites[0], cmp.Clusters[0].Sites[1]
	if ps.NewestBackup != pname || ss.NewestBackup != sname || ps.Window == nil || ss.Window == nil ||
		cmp.Clusters[0].GapRevisions == nil || *cmp.Clusters[0].GapRevisions != ps.Window.ToRev-ss.Window.ToRev || *cmp.Clusters[0].GapRevisions <= 0 {
		t.Fatalf("sites, both up: %+v", cmp.Clusters[0])
	}
	code, table, errOut := runCtx(t, ctx, sitesTable...)
	if code != 0 || !strings.Contains(table, "BEHIND PRIMARY") || !strings.Contains(table, fmt.Sprintf("%d revision", *cmp.Clusters[0].GapRevisions)) {
		t.Fatalf("sites table: exit %d\n%s\n%s", code, table, errOut)
	}
	t.Logf("sites:\n%s", table)

	fallsBack := func(state string) {
		t.Helper()
		start := time.Now()
		code, out, errOut := runCtx(t, ctx, list...)
		took := time.Since(start)
		if code != 0 || !strings.Contains(out, sname) || !strings.Contains(errOut, "etcd-recovery: "+fellBack+": ") {
			t.Fatalf("list, the primary %s: exit %d, want the second's %s and %q\n%s\n%s", state, code, sname, fellBack, out, errOut)
		}
		if took > 2*time.Second+3*time.Second {
			t.Errorf("list, the primary %s: took %v; the check's deadline is 2s", state, took)
		}
		t.Logf("the primary %s: list read the second site in %v", state, took)
		code, out, errOut = runCtx(t, ctx, sites...)
		var cmp site.Comparison
		if code != 0 || json.Unmarshal([]byte(out), &cmp) != nil || len(cmp.Sites) != 2 || cmp.Sites[0].Error == "" || len(cmp.Clusters) != 1 {
			t.Fatalf("sites, the primary %s: exit %d\n%s\n%s", state, code, out, errOut)
		}
		ps, ss := cmp.Clusters[0].Sites[0], cmp.Clusters[0].Sites[1]
		if !strings.HasPrefix(ps.Error, "unreachable: ") || ps.Window != nil || ss.Window == nil || ss.NewestBackup != sname || cmp.Clusters[0].GapRevisions != nil {
			t.Fatalf("sites, the primary %s: %+v", state, cmp.Clusters[0])
		}
	}
	pm.Freeze()
	fallsBack("frozen")
	pm.Thaw()
	pm.Stop()
	fallsBack("stopped")
}

// --site auto does not replace a primary that answers and refuses: with
// a wrong secret (403) or a bucket that does not exist, list fails naming
// the primary's error and --site second, and reads nothing else (the
// second site holds a backup it would otherwise list). --site second
// without a second site is a usage error on every reader.
func TestSiteAutoRefusalNoFallbackCLI(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	m := testenv.SharedMinIO(t)
	pb, sb, sp := m.NewBucket(t), m.NewBucket(t), testenv.Prefix(t)
	second := secondArgs(t, m, sb, sp)
	for what, primary := range map[string][]string{
		"a wrong secret": {"--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", pb, "--prefix", "p",
			"--cos-credentials-dir", credsDir(t, m.AccessKey, "not-"+m.SecretKey)},
		"no such bucket": cosArgs(t, m, pb+"-gone", "p"),
	} {
		code, out, errOut := runCtx(t, ctx, concatArgs([]string{"list", "--cluster-id", "c1"}, primary, second)...)
		if code == 0 || code == exitUsage || !strings.Contains(errOut, "not reading the second site") || strings.Contains(errOut, fellBack) {
			t.Errorf("list, the primary refusing (%s): exit %d, want a failure naming the primary\n%s\n%s", what, code, out, errOut)
		}
	}
	cos := cosArgs(t, m, pb, "p")
	for _, cmd := range [][]string{
		{"list", "--cluster-id", "c1"},
		{"sites"},
		{"restore", "--cluster-id", "c1", "--initial-cluster", "a=http://127.0.0.1:2380", "--dry-run"},
		{"drill", "--cluster-id", "c1"},
		{"journal", "find", "--cluster-id", "c1", "k"},
		{"inspect", "--cluster-id", "c1"},
	} {
		args := append(append([]string{}, cmd...), cos...)
		if cmd[0] != "sites" {
			args = append(args, "--site", "second")
		}
		assertUsageErrors(t, args, []usageCase{{nil, "no second site is configured"}})
	}
	assertUsageErrors(t, concatArgs([]string{"list", "--cluster-id", "c1"}, cos, second), []usageCase{
		{[]string{"--site", "elsewhere"}, `--site "elsewhere": want primary, second or auto`},
		{[]string{"--site-timeout", "0s"}, "--site-timeout must be positive"},
	})
}
