package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// The point-in-time flags are one of --to-revision, --to-time and
// --to-latest: two are a usage error (exit 4), before anything is
// contacted.
func TestRestoreToLatestFlagConflicts(t *testing.T) {
	t.Parallel()
	base := []string{"restore", "--cluster-id", "etcd-x", "--initial-cluster", "m0=http://127.0.0.1:1", "--bucket", "b",
		"--cos-endpoint", "http://127.0.0.1:1"}
	for _, extra := range [][]string{
		{"--to-latest", "--to-revision", "5"},
		{"--to-latest", "--to-time", "2026-01-02T15:04:05Z"},
		{"--to-revision", "5", "--to-time", "2026-01-02T15:04:05Z"},
		{"--via", "etcd-operator", "--cluster", "etcd-x", "--to-latest", "--to-revision", "5"},
	} {
		code, out, errOut := runCtx(t, context.Background(), concatArgs(base, extra)...)
		if code != 4 || !strings.Contains(errOut, "give one") {
			t.Errorf("restore %s: exit %d, want 4 naming both flags\n%s\n%s", strings.Join(extra, " "), code, out, errOut)
		}
	}
}

// restore --to-latest on real etcd 3.5 and MinIO: without a journal it is
// refused, naming that the cluster has no journal and the plain restore;
// with one (1 s segments), the dry run names the newest revision the
// journal reaches from the newest backup, with its receive time and age
// (text and -o json), and warns that a member of --endpoints still
// answers (its survivor snapshot loses nothing); a backup newer than the
// journal's end leaves nothing to replay: refused, pointing to the plain
// restore.
func TestRestoreToLatestCLI(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 2*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/ns/a/", 20, 16)
	r0, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	baseRev := r0.Header.Revision
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	cos := cosArgs(t, m, bucket, prefix)
	const id = "latest"
	backupArgs := concatArgs([]string{"backup", "--cluster-id", id, "--v2", "off"}, clusterArgs(c), cos)
	if code, _, errOut := runCtx(t, ctx, backupArgs...); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, errOut)
	}
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	restoreArgs := concatArgs([]string{"restore", "--cluster-id", id, "--initial-cluster", "r0=" + peer,
		"--data-dir-root", filepath.Join(t.TempDir(), "data"), "--to-latest", "--dry-run"}, cos)

	code, out, errOut := runCtx(t, ctx, restoreArgs...)
	if code == 0 || !strings.Contains(errOut, "the cluster has no journal") || !strings.Contains(errOut, "without --to-latest") {
		t.Fatalf("restore --to-latest without a journal: exit %d\n%s\n%s", code, out, errOut)
	}

	stopJournal := journalRun(t, ctx, concatArgs([]string{"--cluster-id", id, "--segment-interval", "1s"}, clusterArgs(c), cos)...)
	for i := range 3 {
		testenv.PutKeys(t, cli, fmt.Sprintf("/ns/b%d/", i), 10, 16)
		time.Sleep(500 * time.Millisecond)
	}
	resp, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	last := resp.Header.Revision
	st := testfix.Store(t, m, bucket)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		segs, err := journal.ListSegments(ctx, st, catalog.Layout{Prefix: prefix}, id, baseRev)
		if err != nil {
			t.Fatal(err)
		}
		if segs.Reach >= last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the journal reaches %d, the last revision is %d", segs.Reach, last)
		}
	}
	if code, jerr := stopJournal(); code != 0 {
		t.Fatalf("journal: exit %d: %s", code, jerr)
	}

	// The member still answers: a warning naming it, and the plan.
	live := concatArgs(restoreArgs, []string{"--endpoints", strings.Join(c.Endpoints(), ",")})
	code, out, errOut = runCtx(t, ctx, live...)
	if code != 0 {
		t.Fatalf("restore --to-latest --dry-run: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{fmt.Sprintf("Latest (--to-latest): revision %d (received ", last), "before the restore started",
		"WARNING: member " + c.Members[0].Name, "still answers", fmt.Sprintf("would replay revisions %d to %d", baseRev+1, last)} {
		if !strings.Contains(out, want) {
			t.Errorf("restore --to-latest --dry-run does not say %q:\n%s", want, out)
		}
	}
	code, out, errOut = runCtx(t, ctx, concatArgs(live, []string{"-o", "json"})...)
	var res restore.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("restore --to-latest --dry-run -o json: exit %d\n%s\n%s", code, out, errOut)
	}
	if l := res.Latest; l == nil || l.Revision != last || l.BackupRevision != baseRev || l.Received.IsZero() || l.AgeText == "" ||
		!strings.Contains(l.LiveMember, c.Members[0].Name) || res.Replay == nil || res.Replay.ToRevision != last || len(res.Warnings) != 1 {
		t.Fatalf("restore --to-latest -o json: latest %+v, replay %+v, warnings %v", res.Latest, res.Replay, res.Warnings)
	}

	// A backup past the journal's end: nothing to replay.
	if code, _, errOut := runCtx(t, ctx, backupArgs...); code != 0 {
		t.Fatalf("second backup: exit %d: %s", code, errOut)
	}
	code, out, errOut = runCtx(t, ctx, restoreArgs...)
	if code == 0 || !strings.Contains(errOut, "holds no revision after backup") || !strings.Contains(errOut, "without --to-latest") {
		t.Fatalf("restore --to-latest with a backup past the journal: exit %d\n%s\n%s", code, out, errOut)
	}
}
