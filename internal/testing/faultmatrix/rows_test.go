package faultmatrix

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/restore"
)

// ---------------------------------------------------------------------------
// Damaged backups: corrupt, truncated, missing, swapped objects, an
// unreadable manifest.

func damageRows() []row {
	type damage struct {
		name string
		// bySize: retention can tell (an object missing or of another size
		// than the manifest says, or an unreadable manifest); a same-size
		// corruption only a restore's checksums find.
		bySize bool
		apply  func(t *testing.T, w *world, lay catalog.Layout, name string)
	}
	snapKey := func(lay catalog.Layout, name string) string {
		return lay.Key(clusterID, name, catalog.SnapshotObjectZstd)
	}
	damages := []damage{
		{"corrupt-snapshot", false, func(t *testing.T, w *world, lay catalog.Layout, name string) {
			cli := w.minio.S3(t)
			b := getObject(t, cli, w.bucket, snapKey(lay, name))
			for i := len(b) / 2; i < len(b)/2+64; i++ {
				b[i] ^= 0xA5
			}
			putObject(t, cli, w.bucket, snapKey(lay, name), b)
		}},
		{"truncated-snapshot", true, func(t *testing.T, w *world, lay catalog.Layout, name string) {
			cli := w.minio.S3(t)
			b := getObject(t, cli, w.bucket, snapKey(lay, name))
			putObject(t, cli, w.bucket, snapKey(lay, name), b[:len(b)/2])
		}},
		{"missing-snapshot", true, func(t *testing.T, w *world, lay catalog.Layout, name string) {
			deleteObject(t, w.minio.S3(t), w.bucket, snapKey(lay, name))
		}},
		{"swapped-snapshot", true, func(t *testing.T, w *world, lay catalog.Layout, name string) {
			// Another backup's (lower revision) snapshot under this one's key.
			cli := w.minio.S3(t)
			putObject(t, cli, w.bucket, snapKey(lay, name), getObject(t, cli, w.bucket, w.fixKey(0, catalog.SnapshotObjectZstd)))
		}},
		{"unreadable-manifest", true, func(t *testing.T, w *world, lay catalog.Layout, name string) {
			putObject(t, w.minio.S3(t), w.bucket, lay.Key(clusterID, name, catalog.ManifestObject), []byte(`{"format": 1, "name": `))
		}},
	}
	var rows []row
	for _, d := range damages {
		rows = append(rows, row{"damaged/" + d.name, func(t *testing.T, w *world) {
			prefix := testenv.Prefix(t)
			lay := catalog.Layout{Prefix: prefix}
			now := time.Now().UTC().Truncate(time.Millisecond)
			_ = w.copyBackup(t, prefix, 0, now.Add(-3*time.Hour), catalog.KindScheduled)
			good2 := w.copyBackup(t, prefix, 1, now.Add(-2*time.Hour), catalog.KindScheduled)
			bad := w.copyBackup(t, prefix, 1, now.Add(-1*time.Hour), catalog.KindScheduled)
			d.apply(t, w, lay, bad)
			bound := time.Minute + slack

			r := w.run(t, bound, append([]string{"list", "--cluster-id", clusterID, "-o", "json"}, w.cos(prefix)...)...)
			expect(t, "list", r, bound, 0)

			// The newest backup is the damaged one. Without --backup,
			// restore never chooses it: one the listing calls damaged
			// (bySize) is set aside with the listing's reason; a same-size
			// corruption is refused at verification and restore falls back
			// to the next good one, saying so on stderr and in -o json.
			// Named with --backup, it is refused (exit 1), naming the next
			// good one.
			ic := "r0=https://127.0.0.1:2380,r1=https://127.0.0.2:2380,r2=https://127.0.0.3:2380"
			for _, dry := range []bool{true, false} {
				root := t.TempDir()
				args := []string{"restore", "--cluster-id", clusterID, "--no-live", "--data-dir-root", root, "--initial-cluster", ic, "-o", "json"}
				if dry {
					args = append(args, "--dry-run")
				}
				what := fmt.Sprintf("restore (dry-run=%t) with the newest backup %s", dry, d.name)
				r := w.run(t, 2*time.Minute, append(args, w.cos(prefix)...)...)
				if !expect(t, what, r, 2*time.Minute, 0) {
					continue
				}
				var res restore.Result
				if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
					t.Errorf("%s: -o json: %v: %s", what, err, r)
					continue
				}
				if res.Chosen == nil || res.Chosen.Name != good2 || res.Chosen.Status != "chosen, verified" {
					t.Errorf("%s: did not choose and verify the good backup %s: %s", what, good2, r)
				}
				ignored := ""
				for _, ig := range res.Ignored {
					if ig.Name == bad {
						ignored = ig.Reason
					}
				}
				switch {
				case d.bySize && (!strings.HasPrefix(ignored, "damaged: ") || len(res.Fallbacks) != 0):
					t.Errorf("%s: %s not set aside as damaged (ignored %q, fallbacks %+v): %s", what, bad, ignored, res.Fallbacks, r)
				case !d.bySize && (len(res.Fallbacks) != 1 || res.Fallbacks[0].Backup != bad || res.Fallbacks[0].Next != good2):
					t.Errorf("%s: want one fallback from %s to %s, got %+v: %s", what, bad, good2, res.Fallbacks, r)
				case !d.bySize && !regexp.MustCompile(`failed verification.*backup=`+bad+`.* next=`+good2).MatchString(r.stderr):
					t.Errorf("%s: stderr does not name the refused %s, why, and %s: %s", what, bad, good2, r)
				}
			}
			{
				root := t.TempDir()
				args := []string{"restore", "--cluster-id", clusterID, "--no-live", "--data-dir-root", root, "--initial-cluster", ic, "--backup", bad}
				what := fmt.Sprintf("restore --backup %s (%s)", bad, d.name)
				r := w.run(t, 2*time.Minute, append(args, w.cos(prefix)...)...)
				// Its objects are verified and refused, naming the next good
				// backup; a manifest that cannot be read is refused at once.
				want := "--backup " + good2
				if d.name == "unreadable-manifest" {
					want = "damaged: manifest unreadable"
				}
				if expect(t, what, r, 2*time.Minute, 1) && (!strings.Contains(r.stderr, bad) || !strings.Contains(r.stderr, want)) {
					t.Errorf("%s: refused without naming it and %q: %s", what, want, r)
				}
				if left := entries(t, root); len(left) > 0 {
					t.Errorf("%s: failed and left %v in the data-dir root", what, left)
				}
			}

			v := w.sharedView(t, prefix, nil)
			v.damaged = bad // injected: the one backup allowed not to restore
			if d.bySize {
				// Retention keeps what can restore: with room for one
				// scheduled backup, the newest good one stays, and prune
				// reports the damage (exit 1).
				args := []string{"prune", "--cluster-id", clusterID, "--keep-recent", "1", "--keep-anchors", "0"}
				r := w.run(t, bound, append(args, w.cos(prefix)...)...)
				expect(t, "prune with the newest backup damaged", r, bound, 1)
			}
			if _, keys := w.checkStore(t, v); keys[lay.Key(clusterID, good2, catalog.ManifestObject)] == 0 {
				t.Errorf("%s, the newest backup that restores, is gone", good2)
			}
		}})
	}
	return rows
}

func entries(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if e.Name() == "lost+found" {
			continue
		}
		out = append(out, e.Name())
	}
	return out
}

// ---------------------------------------------------------------------------
// Certificates.

func certRows() []row {
	// Bounds: --dial-timeout 2s and --probe-timeout 3s for backup; inspect's
	// whole run is capped at twice --probe-timeout 3s.
	const backupBound = 3*3*time.Second + slack
	const inspectBound = 2*3*time.Second + slack
	try := func(t *testing.T, w *world, eps []string, ca, cert, key, want string) {
		prefix := testenv.Prefix(t)
		args := append([]string{"backup", "--cluster-id", clusterID, "--dial-timeout", "2s", "--probe-timeout", "3s"}, etcdArgs(eps, ca, cert, key)...)
		r := w.run(t, backupBound, append(args, w.cos(prefix)...)...)
		expect(t, "backup", r, backupBound, 1)
		if !strings.Contains(r.stderr, want) {
			t.Errorf("backup: the error does not say %q: %s", want, r)
		}
		r = w.run(t, inspectBound, append([]string{"inspect", "--probe-timeout", "3s"}, etcdArgs(eps, ca, cert, key)...)...)
		expect(t, "inspect", r, inspectBound, 3)
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("inspect: the report does not say %q: %s", want, r)
		}
		if got, keys := w.checkStore(t, w.sharedView(t, prefix, nil)); len(keys) != 0 {
			t.Errorf("a backup that could not reach etcd wrote %v (committed %v)", keys, got)
		}
	}
	return []row{
		{"tls/client-cert-from-another-ca", func(t *testing.T, w *world) {
			other := testenv.NewPKI(t)
			try(t, w, w.etcd.Endpoints(), w.pki.CAFile, other.ClientCertFile, other.ClientKeyFile, "rejected our client certificate")
		}},
		{"tls/server-from-unknown-ca", func(t *testing.T, w *world) {
			other := testenv.NewPKI(t)
			try(t, w, w.etcd.Endpoints(), other.CAFile, w.pki.ClientCertFile, w.pki.ClientKeyFile, "unknown authority")
		}},
		{"tls/expired-client-cert", func(t *testing.T, w *world) {
			dir := t.TempDir()
			cert, key := dir+"/expired.crt", dir+"/expired.key"
			w.pki.IssueClient(t, true, cert, key)
			try(t, w, w.etcd.Endpoints(), w.pki.CAFile, cert, key, "rejected our client certificate")
		}},
		{"tls/expired-server-cert", func(t *testing.T, w *world) {
			pki := testenv.NewMatrixPKI(t, testenv.MatrixPKIOptions{ServerExpired: true})
			dir := t.TempDir()
			port, peer := testenv.FreePort(t), testenv.FreePort(t)
			m := testenv.StartEtcdMember(t, testenv.MemberSpec{Version: testenv.V35, Name: "x0", DataDir: dir + "/x0.etcd",
				ClientURL: fmt.Sprintf("https://127.0.0.1:%d", port), PeerURL: fmt.Sprintf("https://127.0.0.1:%d", peer), PKI: pki.PKI})
			try(t, w, []string{m.ClientURL}, pki.CAFile, pki.ClientCertFile, pki.ClientKeyFile, "expired")
		}},
	}
}

// ---------------------------------------------------------------------------
// A listener that accepts TCP and never answers.

func silentListenerRows() []row {
	return []row{
		{"silent-listener/as-cos-endpoint", func(t *testing.T, w *world) {
			// Every store call has a stall timeout (the flag's, else the
			// store's default): the first call fails after it.
			storeBound := w.stall("backup") + slack
			bh := testenv.StartBlackhole(t)
			cos := cosArgs(bh.URL("http"), w.bucket, testenv.Prefix(t), w.creds)
			cmds := map[string][]string{
				"list":              append([]string{"list", "--cluster-id", clusterID}, w.stallArgs(t, "list")...),
				"prune":             append([]string{"prune", "--cluster-id", clusterID}, w.stallArgs(t, "prune")...),
				"backup":            append(w.backupArgs(), w.stallArgs(t, "backup")...),
				"restore --dry-run": append([]string{"restore", "--cluster-id", clusterID, "--no-live", "--dry-run", "--data-dir-root", t.TempDir(), "--initial-cluster", "r0=https://127.0.0.1:2380"}, w.stallArgs(t, "restore")...),
			}
			kids := map[string]*child{}
			for what, args := range cmds {
				kids[what] = w.start(t, append(args, cos...)...)
			}
			for what, c := range kids {
				r := c.wait(storeBound)
				expect(t, what+" against a silent COS endpoint", r, storeBound, 1)
			}
		}},
		{"silent-listener/as-etcd-endpoint", func(t *testing.T, w *world) {
			bh := testenv.StartBlackhole(t)
			eps := []string{bh.URL("https")}
			p := w.pki
			const inspectBound = 2*3*time.Second + slack
			r := w.run(t, inspectBound, append([]string{"inspect", "--probe-timeout", "3s"}, etcdArgs(eps, p.CAFile, p.ClientCertFile, p.ClientKeyFile)...)...)
			expect(t, "inspect of a silent endpoint", r, inspectBound, 3)
			const backupBound = 3*3*time.Second + slack
			prefix := testenv.Prefix(t)
			args := append([]string{"backup", "--cluster-id", clusterID, "--dial-timeout", "2s", "--probe-timeout", "3s"}, etcdArgs(eps, p.CAFile, p.ClientCertFile, p.ClientKeyFile)...)
			r = w.run(t, backupBound, append(args, w.cos(prefix)...)...)
			expect(t, "backup of a silent endpoint", r, backupBound, 1)
			if _, keys := w.checkStore(t, w.sharedView(t, prefix, nil)); len(keys) != 0 {
				t.Errorf("a backup that reached no member wrote %v", keys)
			}
		}},
	}
}

// ---------------------------------------------------------------------------
// A full disk under the data dirs.

func fullDiskRows() []row {
	// smallDisk mounts a tmpfs of size bytes on a fresh dir (root: a real
	// full disk) and returns it, with the chosen backup's uncompressed size.
	smallDisk := func(t *testing.T, w *world, size func(raw int64) int64) (string, int64) {
		root := t.TempDir() + "/small"
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		var man struct {
			Snapshot struct {
				RawSize int64 `json:"rawSize"`
			} `json:"snapshot"`
		}
		if err := json.Unmarshal(getObject(t, w.minio.S3(t), w.bucket, w.fixKey(1, catalog.ManifestObject)), &man); err != nil {
			t.Fatal(err)
		}
		if out, err := helpText("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size(man.Snapshot.RawSize)), "tmpfs", root); err != nil {
			t.Fatalf("mount tmpfs (the matrix needs root for a real full disk): %v: %s", err, out)
		}
		t.Cleanup(func() {
			if out, err := helpText("umount", root); err != nil {
				t.Errorf("umount %s: %v: %s", root, err, out)
			}
		})
		return root, man.Snapshot.RawSize
	}
	restoreArgs := func(w *world, root string) []string {
		return append([]string{"restore", "--cluster-id", clusterID, "--no-live", "--backup", w.fixNames[1],
			"--data-dir-root", root, "--parallel-data-dirs", "1",
			"--initial-cluster", "r0=https://127.0.0.1:2380,r1=https://127.0.0.2:2380,r2=https://127.0.0.3:2380"}, w.cos(w.fixPrefix)...)
	}
	return []row{
		// Too small from the start: refused before anything is downloaded.
		{"disk/too-small-data-dir-root", func(t *testing.T, w *world) {
			root, _ := smallDisk(t, w, func(raw int64) int64 { return raw + 4<<20 })
			bound := 2 * time.Minute
			r := w.run(t, bound, restoreArgs(w, root)...)
			expect(t, "restore onto a too small disk", r, bound, 1)
			for _, want := range []string{`step "check free space"`, "not enough free space in " + root, "need ", "found ", "--data-dir-root"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("the error does not say %q: %s", want, r)
				}
			}
			if left := entries(t, root); len(left) > 0 {
				t.Errorf("a refused restore left %v in the data-dir root", left)
			}
		}},
		// Room at the check, then another writer fills the disk after the
		// first member's data dir is written: ENOSPC mid-way, named, and
		// the member already written is removed (all or none).
		{"disk/fills-during-restore", func(t *testing.T, w *world) {
			root, _ := smallDisk(t, w, func(raw int64) int64 { return 3*(raw+64<<20) + raw + 64<<20 })
			fp := filepath.Join(t.TempDir(), "hold")
			bound := 2 * time.Minute
			c := w.startEnv(t, []string{restore.FailpointEnv + "=" + fp}, restoreArgs(w, root)...)
			// The first member written holds at the failpoint (marker fp.<member>).
			var marker string
			deadline := time.Now().Add(bound)
			for {
				if m, _ := filepath.Glob(fp + ".*"); len(m) > 0 {
					marker = m[0]
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no member was ever written: %s", c.waitNow(time.Second))
				}
				time.Sleep(20 * time.Millisecond)
			}
			// Fill what is left (dd stops at ENOSPC).
			fill := filepath.Join(root, "..filler")
			if out, err := helpText("dd", "if=/dev/zero", "of="+fill, "bs=1M"); err == nil {
				t.Fatalf("dd filled nothing? %s", out)
			}
			if err := os.Remove(marker); err != nil {
				t.Fatal(err)
			}
			r := c.wait(bound)
			expect(t, "restore onto a disk that fills up", r, bound, 1)
			if !strings.Contains(r.stderr, "no space left on device") {
				t.Errorf("the error does not name the full disk: %s", r)
			}
			if err := os.Remove(fill); err != nil {
				t.Fatal(err)
			}
			if left := entries(t, root); len(left) > 0 {
				t.Errorf("a failed restore left %v in the data-dir root", left)
			}
		}},
	}
}

// ---------------------------------------------------------------------------
// SIGINT and SIGTERM at every step.

func signalRows() []row {
	var rows []row
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		sname := map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[sig]
		afterSignal := func(t *testing.T, c *child, what string) result {
			c.signal(sig)
			r := c.waitNow(signalBound)
			expect(t, fmt.Sprintf("%s %s", sname, what), r, signalBound, 130)
			return r
		}
		nothingLeft := func(t *testing.T, w *world, v storeView) {
			got, keys := w.checkStore(t, v)
			if len(keys) != 0 {
				t.Errorf("a cancelled backup left objects %v (committed %v)", keys, got)
			}
		}
		// duringPut: a backup through a proxy, signalled while the PUT of
		// path is held (hit names it); the held request is dropped and
		// never reaches the store.
		duringPut := func(t *testing.T, w *world, path, hit, what string) {
			v := w.proxiedView(t)
			h := v.proxy.Hold(v.reqRe("PUT", path))
			c := w.start(t, append(w.backupArgs(), v.viaProxy()...)...)
			waitHit(t, h, c, hit)
			afterSignal(t, c, what)
			h.Drop()
			waitStoreBack(t, w.minio, v.proxy)
			nothingLeft(t, w, v)
		}
		rows = append(rows,
			row{"signal/" + sname + "/backup-member-probe", func(t *testing.T, w *world) {
				bh := testenv.StartBlackhole(t)
				v := w.sharedView(t, testenv.Prefix(t), nil)
				p := w.pki
				args := append([]string{"backup", "--cluster-id", clusterID, "--dial-timeout", "1m", "--probe-timeout", "1m"},
					etcdArgs([]string{bh.URL("https")}, p.CAFile, p.ClientCertFile, p.ClientKeyFile)...)
				c := w.start(t, append(args, w.cos(v.prefix)...)...)
				if !bh.WaitFor(stepWait, func() bool { return bh.Accepted() > 0 || c.exited() }) || c.exited() {
					t.Fatalf("the run did not dial the member: %s", c.wait(0))
				}
				afterSignal(t, c, "during the member probe")
				nothingLeft(t, w, v)
			}},
			row{"signal/" + sname + "/backup-stream", func(t *testing.T, w *world) {
				v := w.proxiedView(t)
				h := v.proxy.Hold(regexp.MustCompile(`partNumber=`))
				c := w.start(t, append(w.backupArgs(), v.viaProxy()...)...)
				waitHit(t, h, c, "an UploadPart")
				// The upload exists: the signal must abort it.
				var ups []string
				for _, k := range touchedKeys(v.proxy, w.bucket) {
					ups = append(ups, uploadsUnder(t, w.minio.S3(t), w.bucket, k)...)
				}
				if len(ups) == 0 {
					t.Fatalf("no multipart upload exists while a part is being sent")
				}
				afterSignal(t, c, "during the snapshot stream")
				h.Drop()
				waitStoreBack(t, w.minio, v.proxy)
				nothingLeft(t, w, v)
			}},
			row{"signal/" + sname + "/backup-v2-export", func(t *testing.T, w *world) {
				duringPut(t, w, `/v2\.json\.zst`, "the v2 PUT", "during the v2 export")
			}},
			row{"signal/" + sname + "/backup-manifest-write", func(t *testing.T, w *world) {
				duringPut(t, w, `/manifest\.json`, "the manifest PUT", "during the manifest write")
			}},
			row{"signal/" + sname + "/restore-fetch-verify", func(t *testing.T, w *world) {
				v := w.sharedView(t, w.fixPrefix, w.storeProxy(t))
				h := v.proxy.Hold(v.reqRe("GET", `/snapshot\.db\.zst`))
				root := t.TempDir()
				c := w.start(t, append([]string{"restore", "--cluster-id", clusterID, "--no-live", "--backup", w.fixNames[1],
					"--data-dir-root", root, "--initial-cluster", "r0=https://127.0.0.1:2380,r1=https://127.0.0.2:2380,r2=https://127.0.0.3:2380"},
					v.viaProxy()...)...)
				waitHit(t, h, c, "the snapshot GET")
				afterSignal(t, c, "during the snapshot fetch")
				h.Drop()
				if left := entries(t, root); len(left) > 0 {
					t.Errorf("a cancelled restore left %v in the data-dir root", left)
				}
			}},
			row{"signal/" + sname + "/restore-data-dir-write", func(t *testing.T, w *world) {
				root := t.TempDir()
				// Default --parallel: the three data dirs are written at once,
				// so the signal lands while every one is being written.
				c := w.start(t, append([]string{"restore", "--cluster-id", clusterID, "--no-live", "--backup", w.fixNames[1],
					"--data-dir-root", root,
					"--initial-cluster", "r0=https://127.0.0.1:2380,r1=https://127.0.0.2:2380,r2=https://127.0.0.3:2380"},
					w.cos(w.fixPrefix)...)...)
				// The first member's data dir appearing marks the write; the
				// run is stopped at once so the signal lands mid-write.
				deadline := time.Now().Add(stepWait)
				for {
					if _, err := os.Stat(root + "/r0.etcd"); err == nil {
						break
					}
					if c.exited() || time.Now().After(deadline) {
						t.Fatalf("no data dir appeared: %s", c.wait(0))
					}
					time.Sleep(time.Millisecond) // polling the condition
				}
				_ = c.cmd.Process.Signal(syscall.SIGSTOP)
				c.signal(sig)
				_ = c.cmd.Process.Signal(syscall.SIGCONT)
				r := c.waitNow(signalBound)
				expect(t, sname+" during the data-dir write", r, signalBound, 130)
				if left := entries(t, root); len(left) > 0 {
					t.Errorf("a cancelled restore left %v in the data-dir root", left)
				}
			}},
		)
	}
	return rows
}
