package backup_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/probe"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// stallSlack is the time a stalled backup may take past its stall timeout
// on two busy cores: the watchdog, the cancel, the stream unwinding, and
// the cleanup on a resumed store (abortKeyUploads watches the key for 2s).
const stallSlack = 10 * time.Second

// assertKeyClean fails if key has an object or an open multipart upload,
// asking with the exact key (the listing MinIO answers reliably).
func assertKeyClean(tb testing.TB, st *cos.Store, key string) {
	tb.Helper()
	ups, err := st.ListUploadsForKey(context.Background(), key)
	if err != nil {
		tb.Fatal(err)
	}
	if len(ups) != 0 {
		tb.Fatalf("%d multipart uploads left on %s: %+v", len(ups), key, ups)
	}
	if keys := testfix.Keys(tb, st, key); len(keys) != 0 {
		tb.Fatalf("objects left: %v", keys)
	}
}

// Runs of one cluster started in the same millisecond (the clock is pinned
// so they always do), in goroutines of one process and in separate
// processes, all commit distinct backups, and every one restores: its
// manifest describes its own snapshot, byte for byte.
func TestBackupConcurrentRunsDistinct(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/k/", 300, 512)
	r := newRig(t, c, nil)
	const id = "concurrent"
	at := time.Now().UTC().Truncate(time.Millisecond)
	const goroutines, procs = 4, 3

	// Separate processes: this test binary, re-run as a backup helper.
	var cmds []*exec.Cmd
	outs := make([]*strings.Builder, procs)
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperBackupProcess$", "-test.count=1")
		outs[i] = &strings.Builder{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		cfg := testfix.EtcdConfig(c)
		cmd.Env = append(os.Environ(),
			"BACKUP_HELPER=1",
			"BACKUP_HELPER_ENDPOINTS="+strings.Join(cfg.Endpoints, ","),
			"BACKUP_HELPER_CACERT="+cfg.CACert, "BACKUP_HELPER_CERT="+cfg.Cert, "BACKUP_HELPER_KEY="+cfg.Key,
			"BACKUP_HELPER_S3="+r.MinIO.Endpoint, "BACKUP_HELPER_BUCKET="+r.Store.Bucket(),
			"BACKUP_HELPER_AK="+r.MinIO.AccessKey, "BACKUP_HELPER_SK="+r.MinIO.SecretKey,
			"BACKUP_HELPER_PREFIX="+r.Layout.Prefix, "BACKUP_HELPER_ID="+id,
			"BACKUP_HELPER_AT="+strconv.FormatInt(at.UnixMilli(), 10),
		)
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		names []string
	)
	for range goroutines {
		wg.Go(func() {
			opts := r.Options(t, id)
			opts.Now = func() time.Time { return at }
			res, err := backup.Run(context.Background(), opts)
			if err != nil {
				t.Errorf("concurrent backup: %v", err)
				return
			}
			mu.Lock()
			names = append(names, res.Manifest.Name)
			mu.Unlock()
		})
	}
	wg.Wait()
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper process %d: %v\n%s", i, err, outs[i])
		}
		for _, line := range strings.Split(outs[i].String(), "\n") {
			if n, ok := strings.CutPrefix(line, "BACKUP-NAME "); ok {
				names = append(names, strings.TrimSpace(n))
			}
		}
	}
	if len(names) != goroutines+procs {
		t.Fatalf("%d backups reported success, want %d: %v", len(names), goroutines+procs, names)
	}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			t.Fatalf("two runs committed the same backup name %s: %v", n, names)
		}
		seen[n] = true
		if ti, _, err := catalog.ParseBackupName(n); err != nil || !ti.Equal(at) {
			t.Fatalf("name %s: %v %v", n, ti, err)
		}
	}
	listed := r.Listed(t, id)
	if len(listed) != len(names) {
		t.Fatalf("list shows %d backups, %d committed", len(listed), len(names))
	}
	for _, l := range listed {
		if !l.Committed || l.Manifest == nil || !seen[l.Manifest.Name] {
			t.Fatalf("listed backup %+v", l)
		}
		testfix.CheckSnapshot(t, r.Store, r.Layout, l.Manifest)
	}
}

// TestHelperBackupProcess is one backup run in its own process, for
// TestBackupConcurrentRunsDistinct; in a normal test run it returns at
// once (and passes: make test counts a skip as a failure).
func TestHelperBackupProcess(t *testing.T) {
	if os.Getenv("BACKUP_HELPER") != "1" {
		return
	}
	g := os.Getenv
	ms, _ := strconv.ParseInt(g("BACKUP_HELPER_AT"), 10, 64)
	at := time.UnixMilli(ms).UTC()
	st, err := cos.New(cos.Config{Endpoint: g("BACKUP_HELPER_S3"), Region: testenv.MinIORegion, Bucket: g("BACKUP_HELPER_BUCKET"),
		Creds: cos.Credentials{AccessKeyID: g("BACKUP_HELPER_AK"), SecretAccessKey: g("BACKUP_HELPER_SK"), Source: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	opts := backup.Options{ClusterID: g("BACKUP_HELPER_ID"), Kind: catalog.KindScheduled, Store: st,
		Layout: catalog.Layout{Prefix: g("BACKUP_HELPER_PREFIX")}, ProbeTimeout: 5 * time.Second,
		Now: func() time.Time { return at }}
	opts.Etcd.Endpoints = strings.Split(g("BACKUP_HELPER_ENDPOINTS"), ",")
	opts.Etcd.CACert, opts.Etcd.Cert, opts.Etcd.Key = g("BACKUP_HELPER_CACERT"), g("BACKUP_HELPER_CERT"), g("BACKUP_HELPER_KEY")
	opts.Etcd.DialTimeout = 5 * time.Second
	res, err := backup.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("BACKUP-NAME %s\n", res.Manifest.Name)
}

// The object store frozen (SIGSTOP) before, during and after the snapshot
// stream: the backup fails after the stall timeout, not minutes later, with
// an error naming the cluster, the step and "object store stalled"; no
// second member is tried; and once the store resumes (here: as soon as the
// stall is seen) nothing is left under the backup's keys.
func TestBackupStoreFrozen(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/big/", 3000, 8<<10) // ~24 MiB
	for _, when := range []string{"before", "during", "after"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			m := testenv.StartMinIO(t)
			t.Cleanup(m.Thaw)
			// 5 s, not less: on a loaded 2-core CI machine a MinIO HEAD
			// took over 2 s, a false stall before anything was frozen.
			const stall = 5 * time.Second
			var stalledKey atomic.Value
			r := newRig(t, c, m, func(cfg *cos.Config) {
				cfg.StallTimeout = stall
				cfg.AbortWindow = 60 * time.Second
				cfg.OnStall = func(op, key string) {
					stalledKey.Store(key)
					m.Thaw()
				}
			})
			id := "frozen-" + when
			opts := r.Options(t, id)
			opts.Compression = objectio.CompressNone
			opts.V2 = backup.V2Off
			var sources atomic.Int32
			var froze sync.Once
			freeze := func() { froze.Do(m.Freeze) }
			opts.OnSource = func(probe.Member) {
				sources.Add(1)
				if when == "before" {
					freeze()
				}
			}
			if when == "during" {
				opts.Progress = func(n int64) {
					if n > 8<<20 {
						freeze()
					}
				}
			}
			var snapKey atomic.Value
			if when == "after" {
				fs := faults.Wrap(r.Store)
				fs.Inject(faults.Fault{Op: faults.OpPut, KeySuffix: catalog.SnapshotObjectRaw, Kind: faults.Hook,
					Func: func(_ context.Context, key string) { snapKey.Store(key); freeze() }})
				opts.Store = fs
			}
			start := time.Now()
			_, err := backup.Run(context.Background(), opts)
			d := time.Since(start)
			if !errors.Is(err, store.ErrStalled) {
				t.Fatalf("backup into a frozen store: %v (after %v): want object store stalled", err, d)
			}
			wantStep := backup.StepUpload
			if when == "after" {
				wantStep = backup.StepObjects
			}
			var be *backup.Error
			if !errors.As(err, &be) || be.Step() != wantStep {
				t.Errorf("step: %v, want %q", err, wantStep)
			}
			for _, want := range []string{id, wantStep, "object store stalled"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if n := sources.Load(); n != 1 {
				t.Errorf("%d members were streamed: a store stall must not be retried on another member", n)
			}
			// The stall, plus the stream's and the cleanup's time.
			if d > stall+stallSlack+5*time.Second {
				t.Errorf("the backup took %v with a stall timeout of %v", d, stall)
			}
			k, _ := stalledKey.Load().(string)
			if sk, ok := snapKey.Load().(string); ok {
				k = sk
			}
			if k == "" {
				t.Fatal("the stall was not reported through OnStall")
			}
			if when != "after" {
				assertKeyClean(t, r.Store, k)
			}
			r.assertNothingStored(t, id)
		})
	}
}

// Exact store faults (internal/testing/faults), on a real MinIO.
func TestBackupStoreFaults(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 3, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/big/", 600, 8<<10) // ~5 MiB

	// A stall mid-part: one member only, ErrStalled, nothing left.
	t.Run("stall-mid-part", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, c, nil)
		opts := r.Options(t, "stall-part")
		opts.Compression = objectio.CompressNone
		fs, err := r.runFaulty(opts, faults.Fault{Op: faults.OpPut, KeySuffix: catalog.SnapshotObjectRaw, Kind: faults.Stall,
			After: 2 << 20, Delay: time.Second, Times: 1})
		if !errors.Is(err, store.ErrStalled) || !strings.Contains(err.Error(), `"upload snapshot"`) {
			t.Fatalf("want a stalled upload, got %v", err)
		}
		if n := fs.CountCalls(faults.OpPut, catalog.SnapshotObjectRaw); n != 1 {
			t.Errorf("%d snapshot uploads: a stalled store must not be retried on another member", n)
		}
		r.assertNothingStored(t, "stall-part")
	})

	// The snapshot object deleted under a running backup (a prune with a
	// short --incomplete-after): no manifest is written for it.
	t.Run("object-vanishes", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, c, nil)
		opts := r.Options(t, "vanish")
		fs, err := r.runFaulty(opts, faults.Fault{Op: faults.OpPut, KeySuffix: catalog.SnapshotObjectZstd, Kind: faults.Vanish})
		assertStepError(t, err, backup.StepObjects, "object vanished during backup")
		if n := fs.CountCalls(faults.OpPut, catalog.ManifestObject); n != 0 {
			t.Errorf("a manifest was written for a vanished snapshot")
		}
		r.assertNothingStored(t, "vanish")
	})

	// The snapshot deleted while the manifest is being written (after the
	// first check): the backup is not reported committed, and its manifest
	// is removed again.
	t.Run("object-vanishes-during-commit", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, c, nil)
		opts := r.Options(t, "vanish-commit")
		_, err := r.runFaulty(opts, faults.Fault{Op: faults.OpPut, KeySuffix: catalog.ManifestObject, Kind: faults.Hook,
			Func: func(ctx context.Context, key string) {
				snap := strings.TrimSuffix(key, catalog.ManifestObject) + catalog.SnapshotObjectZstd
				if err := r.Store.Delete(ctx, []string{snap}); err != nil {
					t.Error(err)
				}
			}})
		assertStepError(t, err, backup.StepObjects, "object vanished during backup")
		r.assertNothingStored(t, "vanish-commit")
	})

	// A 5xx on the manifest, after the snapshot was stored: the snapshot
	// is removed and no manifest written.
	t.Run("5xx-on-manifest", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, c, nil)
		opts := r.Options(t, "manifest-5xx")
		_, err := r.runFaulty(opts, faults.Fault{Op: faults.OpPut, KeySuffix: catalog.ManifestObject, Kind: faults.ServerError})
		assertStepError(t, err, backup.StepManifest, "HTTP 503")
		r.assertNothingStored(t, "manifest-5xx")
	})

	// Another writer replaces the manifest right after it is written: the
	// read-back sees it and the backup does not report success.
	t.Run("manifest-replaced", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, c, nil)
		opts := r.Options(t, "replaced")
		_, err := r.runFaulty(opts, faults.Fault{Op: faults.OpPut, KeySuffix: catalog.ManifestObject, Kind: faults.Hook,
			Func: func(ctx context.Context, key string) {
				if _, err := r.Store.Put(ctx, key, strings.NewReader(`{"format":1}`)); err != nil {
					t.Error(err)
				}
			}})
		assertStepError(t, err, backup.StepManifest, "another writer replaced it")
	})

	// etcd's trailing sha256 not matching the stream (one byte of the
	// database damaged on the way): the backup aborts, on every member,
	// with no manifest and no object or upload left.
	t.Run("trailer-mismatch", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, c, nil)
		opts := r.Options(t, "trailer")
		var damaged atomic.Int32
		backup.SetChunkHook(&opts, func(b []byte) {
			// Flip a byte in the middle of every chunk: the stream no
			// longer hashes to etcd's trailer, whichever chunk holds it.
			if len(b) > 64 {
				damaged.Add(1)
				b[len(b)/2] ^= 0xff
			}
		})
		_, err := backup.Run(context.Background(), opts)
		if err == nil || !strings.Contains(err.Error(), "sha256 mismatch") {
			t.Fatalf("want a sha256 mismatch, got %v", err)
		}
		if damaged.Load() == 0 {
			t.Fatal("no chunk was damaged: the test proves nothing")
		}
		r.assertNothingStored(t, "trailer")
	})

	// A reset that outlasts the store's retries fails the upload (and the
	// member is not blamed); a 404 on the manifest read-back fails the run.
	t.Run("reset-then-404", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, c, nil)
		opts := r.Options(t, "reset")
		fs, err := r.runFaulty(opts, faults.Fault{Op: faults.OpPut, KeySuffix: catalog.SnapshotObjectZstd, Kind: faults.Reset, After: 1 << 20, Times: 1})
		if err == nil || !strings.Contains(err.Error(), "connection reset") {
			t.Fatalf("want a reset error, got %v", err)
		}
		r.assertNothingStored(t, "reset")

		fs.Clear()
		fs.Inject(faults.Fault{Op: faults.OpGet, KeySuffix: catalog.ManifestObject, Kind: faults.NotFound})
		opts.Store = fs
		_, err = backup.Run(context.Background(), opts)
		assertStepError(t, err, backup.StepManifest, "NoSuchKey")
		r.assertNothingStored(t, "reset")
	})
}
