package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/replicate"
)

// TestReplicateSecondSiteCLI: the second site through the CLI alone, on
// etcd 3.5 and two MinIO servers. A backup and the journal (1 s segments)
// go to the primary; `replicate` (its own credential for the second site,
// by SECOND_COS_CREDENTIALS_DIR's flag) copies them; SIGTERM's path stops
// it with exit 130 promptly, and every backup the second site shows checks
// out whole (no half-written object looks complete). `replicate status`
// reads the journal's progress from the second site. Then the primary's
// credential deletes everything on the primary; `replicate --once` deletes
// nothing there, and `restore --to-revision` from the second site alone
// gives exactly the source's keyspace at the last revision copied.
func TestReplicateSecondSiteCLI(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 2*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/registry/pods/", 20, 32)
	pm, sm := testenv.SharedMinIO(t), testenv.StartMinIO(t)
	pb, sb := pm.NewBucket(t), sm.NewBucket(t)
	prefix := testenv.Prefix(t)
	primary := cosArgs(t, pm, pb, prefix)
	secondURL := fmt.Sprintf("s3://%s/dr/%s?endpoint=%s&region=%s", sb, prefix, url.QueryEscape(sm.Endpoint), sm.Region)
	second := []string{"--second-store", secondURL, "--second-credentials-dir", credsDir(t, sm.AccessKey, sm.SecretKey)}
	const id = "c1"
	backupCLI(t, ctx, c, primary, id)
	stopJournal := journalRun(t, ctx, concatArgs([]string{"--cluster-id", id, "--segment-interval", "1s"}, clusterArgs(c), primary)...)
	for i := range 30 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/leases/%d", i%7), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	g, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cli.Put(ctx, "/registry/leased", "v", clientv3.WithLease(g.ID))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, "/registry/pods/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	rev := r.Header.Revision + 1
	pst := testfix.Store(t, pm, pb)
	pl := catalog.Layout{Prefix: prefix}
	testfix.WaitJournalReach(t, ctx, pst, pl, id, rev, 30*time.Second)

	stop := journalRunCmd(t, ctx, "replicate", concatArgs(primary, second, []string{"--journal-interval", "300ms", "--scan-interval", "2s", "--status-every", "1s"})...)
	sst := testfix.Store(t, sm, sb)
	sl := catalog.Layout{Prefix: "dr/" + prefix}
	testfix.WaitJournalReach(t, ctx, sst, sl, id, rev, 30*time.Second)
	// The backup too: the copier's journal polls and its full pass run
	// apart, so the journal may reach the second site first.
	waitCommittedBackup(t, ctx, sst, sl, id)
	stopped := time.Now()
	code, errOut := stop()
	if code != exitCanceled || time.Since(stopped) > 10*time.Second {
		t.Fatalf("replicate after SIGTERM's cancel: exit %d after %s, want 130 promptly\n%s", code, time.Since(stopped), errOut)
	}
	entries, err := catalog.Inventory(ctx, sst, sl, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, errs, err := catalog.CheckEntries(ctx, sst, sl, entries, 0); err != nil {
		t.Fatal(err)
	} else {
		for i, e := range entries {
			if e.Committed && (errs[i] != nil || e.Damaged != "") {
				t.Errorf("backup %s on the second site: %v %s", e.Name, errs[i], e.Damaged)
			}
		}
	}

	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"replicate", "status", "-o", "json"}, second)...)
	var st replicate.StatusReport
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Clusters[id].JournalLastRevision < rev {
		t.Fatalf("replicate status: exit %d, %v: %s\n%s", code, err, out, errOut)
	}
	if code, out, _ := runCtx(t, ctx, concatArgs([]string{"replicate", "status"}, second)...); code != 0 || !strings.Contains(out, id) {
		t.Errorf("replicate status's table: exit %d\n%s", code, out)
	}
	if code, errOut := stopJournal(); code != exitOK && code != exitCanceled {
		t.Errorf("journal: exit %d: %s", code, errOut)
	}

	// The primary is lost to its own credential.
	testfix.DeleteUnder(t, ctx, pst, "")
	before, _ := sst.List(ctx, "")
	if code, out, errOut := runCtx(t, ctx, concatArgs([]string{"replicate", "--once"}, primary, second)...); code != 0 {
		t.Fatalf("replicate --once over the wiped primary: exit %d\n%s\n%s", code, out, errOut)
	}
	if after, _ := sst.List(ctx, ""); len(after) != len(before) {
		t.Fatalf("the second site holds %d objects after the pass, %d before", len(after), len(before))
	}
	want := pitrDump(t, cli, rev)
	got := restoreDump(t, ctx, cosArgs(t, sm, sb, "dr/"+prefix), id, rev)
	checkDump(t, fmt.Sprintf("the restore from the second site at revision %d", rev), want, got)
}

// waitCommittedBackup waits until st holds a committed backup of id.
func waitCommittedBackup(tb testing.TB, ctx context.Context, st store.Store, l catalog.Layout, id string) {
	tb.Helper()
	for {
		entries, err := catalog.Inventory(ctx, st, l, id)
		if err == nil {
			for _, e := range entries {
				if e.Committed {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("no committed backup of %s under %q: %v", id, l.Prefix, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
