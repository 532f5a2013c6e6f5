package drill_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/restore"
)

// A drill that downloads (an unencrypted backup, or the toolkit's drill)
// counts ETCD_RECOVERY_SCRATCH_LIMIT, less what $TMPDIR already holds,
// before it downloads: with room for the staged download but not for it
// and its etcd's WAL, it fails at "check free space", naming the database
// size (the manifest's) and the limit, and writes nothing to scratch; with
// the limit raised, it passes within it. The statfs free space of the
// test's disk is far larger: only the limit can refuse. About 2 s.
func TestDrillScratchLimit(t *testing.T) {
	// t.Setenv: not parallel.
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/pods/", 200, 10<<10)
	r := newStoreRig(t)
	const id = "drill-scratch-limit"
	m := r.TakeBackup(t, c, id, catalog.KindScheduled)
	raw := m.Snapshot.RawSize
	scratch := t.TempDir()
	t.Setenv("TMPDIR", scratch)
	// 1 MiB of scratch already used: counted against the limit.
	if err := os.WriteFile(filepath.Join(scratch, "used"), bytes.Repeat([]byte{1}, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	o := drill.Options{ClusterID: id, Store: r.Store, Layout: r.Layout, Backup: m.Name, EtcdBinDir: testenv.DrillBinDir(t, testenv.V35),
		ScratchDir: scratch, StartTimeout: time.Minute, ProbeTimeout: 10 * time.Second, NoRecord: true, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	limit := restore.StagedBytes(raw) + 1<<20 + 64<<20 // the download fits, the WAL does not
	t.Setenv(restore.EnvScratchLimit, fmt.Sprint(limit))
	_, err := drill.Run(ctx, o)
	var de *drill.Error
	if !errors.As(err, &de) || de.Step() != drill.StepSpace {
		t.Fatalf("drill with %s=%d: want a failure at %q, got %v", restore.EnvScratchLimit, limit, drill.StepSpace, err)
	}
	for _, want := range []string{restore.EnvScratchLimit, fmt.Sprintf("(%d bytes)", limit), "a database of " + output.Bytes(raw), "the manifest's raw size",
		"1.0 MiB already used", "before anything is downloaded"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if entries, _ := os.ReadDir(scratch); len(entries) != 1 {
		t.Errorf("scratch holds %d entries after a refused drill; want only the file that was there", len(entries))
	}

	t.Setenv(restore.EnvScratchLimit, fmt.Sprint(1<<20+raw+restore.DrillScratchBytes(raw)+restore.StagedBytes(raw)))
	if rec, err := drill.Run(ctx, o); err != nil || !rec.Passed {
		t.Fatalf("drill within the limit: %v (%+v)", err, rec)
	}
}
