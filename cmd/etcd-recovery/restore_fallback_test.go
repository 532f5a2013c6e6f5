package main

import (
	"bytes"
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

// Restore chooses among the backups that check out, through the CLI, on
// real backups of a real etcd 3.5 in real MinIO. Five backups, oldest
// first: g1 (keys /a/), g2 (keys /a/ and /b/), then b3, b4, b5 at g2's
// revision; b5 and b4 have their snapshot truncated and b3's manifest is
// unreadable (what `list` calls damaged).
//
//   - restore (--dry-run, then a real run, -o json) sets the three aside as
//     damaged with list's reason and restores g2: the member started on the
//     data dir holds g2's keys.
//   - g2's snapshot then gets a same-size corruption (only the checksums
//     find it; list still calls it good): restore refuses g2 at
//     verification and falls back to g1, saying so on stderr (g2, why, g1)
//     and in -o json (g2's status and the fallbacks list); the restored
//     member holds g1's keys (no /b/).
//   - --backup naming a damaged backup, or the corrupt g2, still refuses:
//     exit 1, naming it.
//
// On the old code the first restore chose b5 (truncated) and exited 1 at
// "verify backup", telling to pass --backup.
func TestRestoreCLIChoosesAmongGoodBackups(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cr := newCLIRig(t)
	cos, st, lay := cr.cos, cr.Store, cr.Layout
	ctx := context.Background()
	const id = "fallback-cli"

	backupOnce := func() *catalog.Manifest {
		t.Helper()
		code, out, errOut := runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", id, "--kind", "scheduled", "--v2", "off", "-o", "json"},
			clusterArgs(c), cos)...)
		if code != 0 {
			t.Fatalf("backup: exit %d\n%s", code, errOut)
		}
		var man catalog.Manifest
		if err := json.Unmarshal([]byte(out), &man); err != nil {
			t.Fatalf("backup -o json: %v\n%s", err, out)
		}
		return &man
	}
	want1 := testenv.PutKeys(t, c.Client(t), "/a/", 100, 32)
	g1 := backupOnce()
	want2 := testenv.PutKeys(t, c.Client(t), "/b/", 100, 32)
	for k, v := range want1 {
		want2[k] = v
	}
	g2 := backupOnce()
	b3, b4, b5 := backupOnce(), backupOnce(), backupOnce()
	if b5.Revision() != g2.Revision() || g1.Revision() >= g2.Revision() {
		t.Fatalf("the fixture needs g2 and the damaged ones at one revision above g1's: %d %d %d", g1.Revision(), g2.Revision(), b5.Revision())
	}
	key := func(man *catalog.Manifest, obj string) string { return lay.Key(id, man.Name, obj) }
	put := func(k string, b []byte) {
		t.Helper()
		if _, err := st.Put(ctx, k, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []*catalog.Manifest{b5, b4} {
		snap := testfix.ReadObject(t, st, key(b, b.Snapshot.Object))
		put(key(b, b.Snapshot.Object), snap[:len(snap)/2])
	}
	put(key(b3, catalog.ManifestObject), []byte(`{"format":1,`))

	ic := func() string { return fmt.Sprintf("r0=http://127.0.0.1:%d", testenv.FreePort(t)) }
	restoreJSON := func(t *testing.T, dry bool, extra ...string) (restore.Result, string, string) {
		t.Helper()
		initial := ic()
		args := concatArgs([]string{"restore", "--cluster-id", id, "--no-live", "--initial-cluster", initial,
			"--data-dir-root", filepath.Join(t.TempDir(), "data"), "-o", "json"}, extra, cos)
		if dry {
			args = append(args, "--dry-run")
		}
		code, out, errOut := runCtx(t, ctx, args...)
		if code != 0 {
			t.Fatalf("restore (dry run %v): exit %d\nstdout:\n%s\nstderr:\n%s", dry, code, out, errOut)
		}
		var res restore.Result
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("restore -o json: %v\n%s", err, out)
		}
		return res, out, errOut
	}
	// startOn starts a member on the restored data dir and reads its keys.
	startOn := func(t *testing.T, res restore.Result) map[string]string {
		t.Helper()
		peer, client := strings.TrimPrefix(res.InitialCluster, "r0="), fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
		mem := testenv.StartEtcdMember(t, testenv.MemberSpec{Version: testenv.V35, Name: "r0", DataDir: res.Members[0].DataDir,
			ClientURL: client, PeerURL: peer, InitialCluster: "r0=" + peer, InitialClusterToken: res.Token})
		mem.WaitReady(t)
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		resp, err := cli.Get(rctx, "", clientv3.WithFromKey())
		if err != nil {
			t.Fatalf("read the restored member: %v", err)
		}
		got := map[string]string{}
		for _, kv := range resp.Kvs {
			got[string(kv.Key)] = string(kv.Value)
		}
		return got
	}
	sameKeys := func(t *testing.T, what string, got, want map[string]string) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: %d keys restored, want %d", what, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: key %s missing or wrong", what, k)
				return
			}
		}
	}
	wantIgnored := map[string]string{
		b5.Name: "damaged: " + b5.Snapshot.Object + " size mismatch",
		b4.Name: "damaged: " + b4.Snapshot.Object + " size mismatch",
		b3.Name: "damaged: manifest unreadable",
	}
	checkIgnored := func(t *testing.T, res restore.Result) {
		t.Helper()
		got := map[string]string{}
		for _, ig := range res.Ignored {
			got[ig.Name] = ig.Reason
		}
		for name, want := range wantIgnored {
			if !strings.HasPrefix(got[name], want) {
				t.Errorf("ignored %s: %q, want %q...", name, got[name], want)
			}
		}
		for _, cd := range res.Candidates {
			if wantIgnored[cd.Name] != "" {
				t.Errorf("damaged backup %s is a candidate: %+v", cd.Name, cd)
			}
		}
	}

	t.Run("damaged backups set aside", func(t *testing.T) {
		for _, dry := range []bool{true, false} {
			res, _, errOut := restoreJSON(t, dry)
			if res.Chosen == nil || res.Chosen.Name != g2.Name || res.Chosen.Status != "chosen, verified" || len(res.Fallbacks) != 0 {
				t.Fatalf("dry run %v: chose %+v, fallbacks %+v; want %s verified, no fallback\n%s", dry, res.Chosen, res.Fallbacks, g2.Name, errOut)
			}
			checkIgnored(t, res)
			if !dry {
				sameKeys(t, "restored from "+g2.Name, startOn(t, res), want2)
			}
		}
		// The table says the same.
		initial := ic()
		code, out, errOut := runCtx(t, ctx, concatArgs([]string{"restore", "--cluster-id", id, "--no-live", "--initial-cluster", initial,
			"--data-dir-root", filepath.Join(t.TempDir(), "data"), "--dry-run"}, cos)...)
		if code != 0 || !strings.Contains(out, "Chosen: "+g2.Name) || !strings.Contains(out, "Ignored: "+b5.Name+": damaged: ") {
			t.Errorf("dry run table: exit %d\n%s\n%s", code, out, errOut)
		}
	})

	snap := testfix.ReadObject(t, st, key(g2, g2.Snapshot.Object))
	bad := bytes.Clone(snap)
	for i := len(bad) / 2; i < len(bad)/2+64; i++ {
		bad[i] ^= 0xA5
	}
	put(key(g2, g2.Snapshot.Object), bad)

	t.Run("same-size corruption falls back", func(t *testing.T) {
		for _, dry := range []bool{true, false} {
			res, out, errOut := restoreJSON(t, dry)
			if res.Chosen == nil || res.Chosen.Name != g1.Name || res.Chosen.Status != "chosen, verified" {
				t.Fatalf("dry run %v: chose %+v; want %s\n%s\n%s", dry, res.Chosen, g1.Name, out, errOut)
			}
			checkIgnored(t, res)
			if len(res.Fallbacks) != 1 || res.Fallbacks[0].Backup != g2.Name || res.Fallbacks[0].Next != g1.Name ||
				!strings.Contains(res.Fallbacks[0].Reason, "sha256") {
				t.Errorf("dry run %v: fallbacks %+v; want %s refused for its checksum, then %s", dry, res.Fallbacks, g2.Name, g1.Name)
			}
			if res.Candidates[0].Name != g2.Name || res.Candidates[0].Status != restore.StatusFailedVerification || res.Candidates[0].Detail == "" {
				t.Errorf("dry run %v: candidates %+v; want %s first, %q with its detail", dry, res.Candidates, g2.Name, restore.StatusFailedVerification)
			}
			if !strings.Contains(res.Reason, g2.Name) || !strings.Contains(res.Reason, "failed verification") {
				t.Errorf("dry run %v: reason %q does not say %s failed verification", dry, res.Reason, g2.Name)
			}
			// stderr: one line naming the refused backup, why, and the next.
			var line string
			for _, l := range strings.Split(errOut, "\n") {
				if strings.Contains(l, "level=WARN") && strings.Contains(l, "failed verification") && strings.Contains(l, "backup="+g2.Name) {
					line = l
				}
			}
			if !strings.Contains(line, "next="+g1.Name) || !strings.Contains(line, "sha256") {
				t.Errorf("dry run %v: stderr has no line naming %s, why and %s:\n%s", dry, g2.Name, g1.Name, errOut)
			}
			if !dry {
				got := startOn(t, res)
				sameKeys(t, "restored from "+g1.Name, got, want1)
			}
		}
		// The table says the same.
		code, out, errOut := runCtx(t, ctx, concatArgs([]string{"restore", "--cluster-id", id, "--no-live", "--initial-cluster", ic(),
			"--data-dir-root", filepath.Join(t.TempDir(), "data"), "--dry-run"}, cos)...)
		t.Logf("restore --dry-run:\n%s", out)
		if code != 0 || !strings.Contains(out, "Chosen: "+g1.Name) || !strings.Contains(out, "Refused at verification: "+g2.Name+": ") ||
			!strings.Contains(out, "tried next: "+g1.Name) {
			t.Errorf("dry run table: exit %d\n%s\n%s", code, out, errOut)
		}
	})

	t.Run("--backup still refuses", func(t *testing.T) {
		for _, b := range []*catalog.Manifest{b5, g2} {
			initial := ic()
			root := filepath.Join(t.TempDir(), "data")
			code, out, errOut := runCtx(t, ctx, concatArgs([]string{"restore", "--cluster-id", id, "--no-live", "--initial-cluster", initial,
				"--data-dir-root", root, "--backup", b.Name}, cos)...)
			if code != exitFailure || !strings.Contains(errOut, b.Name) || !strings.Contains(errOut, "refusing it") ||
				!strings.Contains(errOut, "--backup "+g1.Name) {
				t.Errorf("--backup %s: exit %d, want %d refusing it and naming %s\nstdout:\n%s\nstderr:\n%s", b.Name, code, exitFailure, g1.Name, out, errOut)
			}
			if strings.Contains(errOut, "trying the next candidate") {
				t.Errorf("--backup %s fell back:\n%s", b.Name, errOut)
			}
		}
	})
}
