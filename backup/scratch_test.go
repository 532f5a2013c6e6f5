package backup_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/backup/drilled"
	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// The scratch an encrypted backup --drill needs: the plaintext copy the
// backup streams is taken over by the drill (renamed into its data dir),
// so the scratch holds the database once, plus etcd's two 64 MiB WAL
// segments, never a second or third copy. The peak is measured (du of the
// scratch dir, polled every 5 ms) for a ~48 MiB database: the bound is
// 1.1x the database + 128 MiB of WAL + 4 MiB; with the staged copy
// verifyLocal used to write, the peak was 2x the database + 128 MiB or
// more (~230 MiB here, over the bound of ~185 MiB). Then, with
// ETCD_RECOVERY_SCRATCH_LIMIT at 0.9x the database, the check before the
// stream refuses the drill (naming the database size and the limit): no
// plaintext is written, the backup still commits, and Run returns an
// *Error at StepDrill saying so (drilled.Run). About 15 s.
func TestEncryptedDrillScratchPeak(t *testing.T) {
	// t.Setenv (TMPDIR, the limit): not parallel.
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/configmaps/", 480, 100<<10)
	r := newRig(t, c, nil)
	_, rs := newIdentities(t, 1)
	bin := testenv.DrillBinDir(t, testenv.V35)
	scratch := t.TempDir()
	t.Setenv("TMPDIR", scratch)

	run := func(t *testing.T, id string) (*drilled.Result, error, int64) {
		t.Helper()
		opts := r.Options(t, id)
		opts.Recipients, opts.ScratchDir = rs, scratch
		opts.CheckScratch = func(db int64) error { return restore.CheckDrillScratch(scratch, db) }
		var wrote atomic.Bool
		hook := func(ctx context.Context, m *catalog.Manifest, plaintext string) (*catalog.DrillRecord, error) {
			wrote.Store(plaintext != "")
			return drill.Run(ctx, drill.Options{ClusterID: id, Store: r.Store, Layout: r.Layout, Backup: m.Name,
				Source: testfix.EtcdConfig(c), EtcdBinDir: bin, ScratchDir: scratch, Plaintext: plaintext, Manifest: m,
				StartTimeout: time.Minute, ProbeTimeout: 10 * time.Second, Log: testfix.DebugLogger(t)})
		}
		var peak, peakWAL atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, wal := du(scratch)
				if n-wal > peak.Load() {
					peak.Store(n - wal)
				}
				if wal > peakWAL.Load() {
					peakWAL.Store(wal)
				}
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		res, err := drilled.Run(ctx, opts, hook)
		close(stop)
		wg.Wait()
		t.Logf("peak scratch: %.1f MiB beside etcd's WAL, the WAL %.1f MiB at most", mib(peak.Load()), mib(peakWAL.Load()))
		if peakWAL.Load() > 128<<20 {
			t.Errorf("the drill's WAL took %.1f MiB; the sizing rule allows 128 MiB (two 64 MiB segments)", mib(peakWAL.Load()))
		}
		return res, err, peak.Load()
	}

	res, err, peak := run(t, "scratch-peak")
	if err != nil || res.Drill == nil || !res.Drill.Passed {
		t.Fatalf("encrypted backup --drill: %v (result %+v)", err, res)
	}
	raw := res.Manifest.Snapshot.RawSize
	bound := raw + raw/10 + 4<<20
	t.Logf("database %.1f MiB, peak scratch beside the WAL %.1f MiB (%.2fx), bound %.1f MiB",
		mib(raw), mib(peak), float64(peak)/float64(raw), mib(bound))
	if raw < 40<<20 {
		t.Fatalf("the database is %d bytes: too small to tell one copy from two", raw)
	}
	if peak > bound {
		t.Errorf("an encrypted backup --drill of a %.1f MiB database used %.1f MiB of scratch beside etcd's WAL at its peak; want at most %.1f MiB "+
			"(1.1x the database)", mib(raw), mib(peak), mib(bound))
	}
	if left, _ := du(scratch); left > 0 {
		t.Errorf("%d bytes left in scratch after the run", left)
	}

	// 0.9x the database: refused before the stream, backup kept.
	limit := raw * 9 / 10
	t.Setenv(restore.EnvScratchLimit, fmt.Sprint(limit))
	res, err, peak = run(t, "scratch-refused")
	var be *backup.Error
	switch {
	case res == nil || res.Manifest == nil:
		t.Fatalf("the backup was not committed: %v", err)
	case !errors.As(err, &be) || be.Step() != backup.StepDrill:
		t.Fatalf("want an *Error at step %q, got %v", backup.StepDrill, err)
	}
	for _, want := range []string{"could not run", `step "check free space"`, "before the snapshot streamed",
		"status dbSize", restore.EnvScratchLimit, fmt.Sprintf("%d bytes", limit), "scratch-refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if peak > 1<<20 {
		t.Errorf("%.1f MiB written to scratch by a run refused before it started", mib(peak))
	}
	t.Logf("refused: %v", err)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// du is what the files under root take on disk (allocated blocks), and
// the part of it in etcd's WAL dirs (member/wal, and member/wal.tmp
// while the restore writes it).
func du(root string) (n, wal int64) {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && !d.IsDir() {
				n += st.Blocks * 512
				if strings.Contains(p, "/member/wal/") || strings.Contains(p, "/member/wal.tmp/") {
					wal += st.Blocks * 512
				}
			}
		}
		return nil
	})
	return n, wal
}
