package restore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// The fallback's bounds, on real MinIO and real etcd 3.5 backups b0 < b1 <
// b2 (revisions), each corrupted in place (same size: the listing calls
// them good, only the checksums find it) where a case says so.
//
//   - every backup corrupt: each is downloaded once, newest first, each
//     refusal is in Fallbacks with the one tried next, and the error is a
//     BackupError naming the last and the others; nothing is written.
//   - a store failure (5xx, stall) on the newest, or a run cancelled while
//     it streams: no fallback (it says nothing about the backup), b1 is
//     never downloaded.
//   - a drill of the corrupt newest backup fails at verification and
//     downloads no other backup (Drill sets Backup: no fallback).
//
// On the old code the all-corrupt case fails: restore refused b2 and
// returned at once (no Fallbacks), after streaming b1 and b0 only to name
// a next good one. The other cases guard what must not change (they pass
// on the old code too).
func TestRestoreFallbackBounds(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	r := newStoreRig(t)
	const id = "fallback-bounds"
	var bs []*catalog.Manifest
	for i := range 3 {
		testenv.PutKeys(t, c.Client(t), fmt.Sprintf("/k%d/", i), 50, 32)
		bs = append(bs, r.TakeBackup(t, c, id, catalog.KindScheduled))
	}
	ctx := testfix.Context(t, 2*time.Minute)
	orig := map[string][]byte{}
	for _, m := range bs {
		orig[m.Name] = bytes.Clone(testfix.ReadObject(t, r.Store, r.SnapshotKey(m)))
	}
	damage := func(t *testing.T, which ...int) {
		t.Helper()
		for i, m := range bs {
			b := bytes.Clone(orig[m.Name])
			for _, w := range which {
				if w == i {
					for k := len(b) / 2; k < len(b)/2+32; k++ {
						b[k] ^= 0xA5
					}
				}
			}
			r.PutObject(t, r.SnapshotKey(m), b)
		}
	}
	ic, _ := newCluster(t, 1, false)
	run := func(t *testing.T, fs *faults.Store, ctx context.Context, prog func(string) restore.Progress) (*restore.Result, error) {
		t.Helper()
		root := filepath.Join(t.TempDir(), "data")
		opts := r.runOpts(t, id, ic, root)
		opts.Store, opts.Progress = fs, prog
		res, err := restore.Run(ctx, opts)
		if left := entriesUnder(t, filepath.Dir(root)); len(left) != 0 {
			t.Errorf("a failed restore left %v", left)
		}
		return res, err
	}
	gets := func(fs *faults.Store) []int {
		var n []int
		for _, m := range bs {
			n = append(n, fs.CountCalls(faults.OpGet, r.SnapshotKey(m)))
		}
		return n
	}

	t.Run("every candidate refused once", func(t *testing.T) {
		damage(t, 0, 1, 2)
		fs := faults.Wrap(r.Store)
		res, err := run(t, fs, ctx, nil)
		var be *restore.BackupError
		if !errors.As(err, &be) || be.Backup != bs[0].Name || !strings.Contains(err.Error(), bs[2].Name) || !strings.Contains(err.Error(), bs[1].Name) {
			t.Fatalf("every backup corrupt: %v; want a BackupError for %s naming %s and %s", err, bs[0].Name, bs[2].Name, bs[1].Name)
		}
		want := []string{bs[2].Name + ">" + bs[1].Name, bs[1].Name + ">" + bs[0].Name, bs[0].Name + ">"}
		var got []string
		for _, fb := range res.Fallbacks {
			got = append(got, fb.Backup+">"+fb.Next)
			if !strings.Contains(fb.Reason, "sha256") || len(fb.Checks) == 0 {
				t.Errorf("fallback %+v: want the checksum named and the checks kept", fb)
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("fallbacks %v, want %v", got, want)
		}
		if n := gets(fs); fmt.Sprint(n) != "[1 1 1]" {
			t.Errorf("snapshot downloads per backup (oldest first) %v; want each once", n)
		}
		for _, cd := range res.Candidates {
			if cd.Status != restore.StatusFailedVerification {
				t.Errorf("candidate %s: status %q", cd.Name, cd.Status)
			}
		}
		t.Logf("refused: %v", err)
	})

	t.Run("store failure is no fallback", func(t *testing.T) {
		damage(t)
		for _, k := range []faults.Kind{faults.ServerError, faults.Stall} {
			fs := faults.Wrap(r.Store)
			fs.Inject(faults.Fault{Op: faults.OpGet, Key: r.SnapshotKey(bs[2]), Kind: k, Delay: 100 * time.Millisecond})
			res, err := run(t, fs, ctx, nil)
			var be *restore.BackupError
			var re *restore.Error
			if err == nil || errors.As(err, &be) || !errors.As(err, &re) || re.Step() != restore.StepVerifyBackup {
				t.Fatalf("%v: %v; want a store error at %q", k, err, restore.StepVerifyBackup)
			}
			if len(res.Fallbacks) != 0 || gets(fs)[1] != 0 || gets(fs)[0] != 0 {
				t.Errorf("%v: fell back: fallbacks %+v, downloads %v", k, res.Fallbacks, gets(fs))
			}
		}
	})

	t.Run("cancelled is no fallback", func(t *testing.T) {
		damage(t, 2)
		fs := faults.Wrap(r.Store)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		res, err := run(t, fs, cctx, func(string) restore.Progress { return cancelOnProgress{cancel} })
		if !errors.Is(err, context.Canceled) || len(res.Fallbacks) != 0 || gets(fs)[1] != 0 {
			t.Fatalf("cancelled while %s streamed: %v, fallbacks %+v, downloads %v; want it cancelled, no fallback", bs[2].Name, err, res.Fallbacks, gets(fs))
		}
	})

	t.Run("a drill proves one backup", func(t *testing.T) {
		damage(t, 2)
		fs := faults.Wrap(r.Store)
		o := drill.Options{ClusterID: id, Store: fs, Layout: r.Layout, EtcdBinDir: testenv.DrillBinDir(t, testenv.V35), NoRecord: true, // the newest: bs[2]
			ScratchDir: t.TempDir(), StartTimeout: time.Minute, ProbeTimeout: 10 * time.Second, Log: testfix.Logger(t)}
		_, err := drill.Run(ctx, o)
		var de *drill.Error
		if !errors.As(err, &de) || de.Step() != drill.StepVerify || !strings.Contains(err.Error(), bs[2].Name) {
			t.Fatalf("drill of the corrupt newest backup: %v; want it failed at %q, naming %s", err, drill.StepVerify, bs[2].Name)
		}
		if n := gets(fs); n[0] != 0 || n[1] != 0 {
			t.Errorf("the drill downloaded other backups (oldest first) %v", n)
		}
	})
}
