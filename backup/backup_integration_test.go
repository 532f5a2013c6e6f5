package backup_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// rig is one test's cluster, bucket and prefix.
type rig struct{ *testfix.BackupRig }

func newRig(tb testing.TB, c *testenv.EtcdCluster, m *testenv.MinIO, opts ...testfix.StoreOption) *rig {
	tb.Helper()
	return &rig{testfix.NewBackupRig(tb, c, m, opts...)}
}

func (r *rig) assertNothingStored(tb testing.TB, id string) {
	tb.Helper()
	if keys := testfix.Keys(tb, r.Store, r.Layout.ClusterPrefix(id)); len(keys) != 0 {
		tb.Fatalf("a failed backup left objects behind: %v", keys)
	}
	ups, err := r.Store.ListUploads(context.Background(), r.Layout.ClusterPrefix(id))
	if err != nil {
		tb.Fatal(err)
	}
	if len(ups) != 0 {
		tb.Fatalf("a failed backup left %d multipart uploads: %+v", len(ups), ups)
	}
}

// Every supported etcd generation: a 3-member mutual-TLS cluster, v3 data
// and (3.4/3.5) v2 keys, backed up and verified byte for byte.
func TestBackupTLSClusters(t *testing.T) {
	t.Parallel()
	for _, v := range testenv.AllVersions {
		t.Run(string(v), func(t *testing.T) {
			t.Parallel()
			c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, TLS: true, EnableV2: v.HasV2()})
			cli := c.Client(t)
			written := testenv.PutKeys(t, cli, "/registry/pods/", 500, 256)
			var v2 map[string]string
			if v.HasV2() {
				v2 = testenv.PutV2Keys(t, c, 40)
			}
			r := newRig(t, c, nil)
			leader := c.Leader(t)
			gr, err := cli.Get(context.Background(), "any")
			if err != nil {
				t.Fatal(err)
			}
			revWritten := gr.Header.Revision
			res, err := backup.Run(context.Background(), r.Options(t, "tls-"+strings.ReplaceAll(string(v), ".", "")))
			if err != nil {
				t.Fatal(err)
			}
			m := res.Manifest
			if m.Source.Name == leader.Name {
				t.Errorf("snapshot taken from the leader %s; a healthy follower should be preferred", leader.Name)
			}
			if m.Source.ID == "" || !strings.HasPrefix(m.Source.Endpoint, "https://") {
				t.Errorf("source member not recorded: %+v", m.Source)
			}
			if !strings.HasPrefix(m.ServerVersion, string(v)+".") {
				t.Errorf("server version %q, want %s.x", m.ServerVersion, v)
			}
			if m.RevisionBefore < revWritten || m.RevisionAfter < m.RevisionBefore {
				t.Errorf("revisions before %d after %d; the cluster was at %d", m.RevisionBefore, m.RevisionAfter, revWritten)
			}
			if m.Kind != catalog.KindScheduled || m.Format != catalog.ManifestFormat || m.ToolVersion == "" || m.FinishedAt.Before(m.StartedAt) {
				t.Errorf("manifest header: %+v", m)
			}
			st := testfix.CheckSnapshot(t, r.Store, r.Layout, m)
			if st.Revision < m.RevisionBefore || st.Revision > m.RevisionAfter {
				t.Errorf("snapshot revision %d outside [%d, %d]", st.Revision, m.RevisionBefore, m.RevisionAfter)
			}
			if st.TotalKey < len(written) {
				t.Errorf("snapshot holds %d keys, %d were written", st.TotalKey, len(written))
			}
			if v.HasV2() {
				exp := testfix.ReadV2Export(t, r.Store, r.Layout, m)
				got := map[string]string{}
				for _, n := range exp.Nodes {
					if !n.Dir {
						got[n.Key] = n.Value
					}
				}
				for k, val := range v2 {
					if got[k] != val {
						t.Errorf("v2 key %s: exported %q, written %q", k, got[k], val)
					}
				}
				if m.V2.Keys != len(v2) || len(got) != len(v2) {
					t.Errorf("v2 keys: manifest %d, export %d, written %d", m.V2.Keys, len(got), len(v2))
				}
				var ttl bool
				for _, n := range exp.Nodes {
					ttl = ttl || n.TTL > 0
				}
				if !ttl {
					t.Error("the v2 key written with a TTL was exported without one")
				}
			} else {
				if m.V2 != nil || m.V2Skipped == "" {
					t.Errorf("etcd %s has no v2 API: want a clean skip, got v2=%+v skipped=%q", v, m.V2, m.V2Skipped)
				}
			}
			l := r.Listed(t, m.ClusterID)
			if len(l) != 1 || !l[0].Committed || l[0].Manifest == nil || l[0].Manifest.Snapshot.RawSHA256 != m.Snapshot.RawSHA256 {
				t.Fatalf("list after backup: %+v", l)
			}
		})
	}
}

// --v2 on fails on a server without the v2 API, and leaves nothing behind.
func TestBackupV2OnWithoutV2(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V36, Members: 1, TLS: true})
	r := newRig(t, c, nil)
	opts := r.Options(t, "v2-required")
	opts.V2 = backup.V2On
	_, err := backup.Run(context.Background(), opts)
	var be *backup.Error
	if !errors.As(err, &be) || be.Step() != backup.StepV2 || !errors.Is(err, backup.ErrV2Unavailable) {
		t.Fatalf("want a v2 step error, got %v", err)
	}
	if !strings.Contains(err.Error(), "v2-required") {
		t.Errorf("error does not name the cluster: %v", err)
	}
	r.assertNothingStored(t, "v2-required")

	// --v2 off never asks.
	opts.V2 = backup.V2Off
	res, err := backup.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.V2 != nil || res.Manifest.V2Skipped != "--v2 off" {
		t.Errorf("--v2 off: %+v %q", res.Manifest.V2, res.Manifest.V2Skipped)
	}
}

// The seed runbook: with one pod of three left, back up that pod.
func TestBackupOneSurvivor(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, EnableV2: true})
	written := testenv.PutKeys(t, c.Client(t), "/k/", 200, 64)
	testenv.PutV2Keys(t, c, 10)
	c.Members[0].Kill()
	c.Members[2].Kill()
	r := newRig(t, c, nil)
	res, err := backup.Run(context.Background(), r.Options(t, "survivor"))
	if err != nil {
		t.Fatal(err)
	}
	m := res.Manifest
	if m.Source.Name != c.Members[1].Name {
		t.Errorf("source %s, want the survivor %s", m.Source.Name, c.Members[1].Name)
	}
	st := testfix.CheckSnapshot(t, r.Store, r.Layout, m)
	if st.TotalKey < len(written) {
		t.Errorf("survivor snapshot holds %d keys, want >= %d", st.TotalKey, len(written))
	}
	if m.V2 == nil || m.V2.Keys != 10 {
		t.Errorf("v2 export from a lone survivor (quorum=false): %+v %q", m.V2, m.V2Skipped)
	}
}

// A member killed mid-stream: the stream breaks, the upload is aborted, and
// the backup is taken from another member instead.
func TestBackupMemberKilledMidStream(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/big/", 3000, 8<<10) // ~24 MiB
	r := newRig(t, c, nil)
	opts := r.Options(t, "midstream")
	var (
		mu      sync.Mutex
		first   string
		sources []string
		killed  atomic.Bool
	)
	opts.OnSource = func(m probe.Member) {
		mu.Lock()
		defer mu.Unlock()
		if first == "" {
			first = m.Name
		}
		sources = append(sources, m.Name)
	}
	opts.Progress = func(n int64) {
		if n > 2<<20 && killed.CompareAndSwap(false, true) {
			mu.Lock()
			name := first
			mu.Unlock()
			c.Member(t, name).Kill()
		}
	}
	res, err := backup.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !killed.Load() || len(sources) != 2 || res.Manifest.Source.Name == first {
		t.Fatalf("want a retry on another member after killing %s; sources %v, used %s", first, sources, res.Manifest.Source.Name)
	}
	testfix.CheckSnapshot(t, r.Store, r.Layout, res.Manifest)
	ups, err := r.Store.ListUploads(context.Background(), r.Layout.RootPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 0 {
		t.Errorf("the broken stream's multipart upload was not aborted: %+v", ups)
	}
}

// MinIO dies mid-upload: the backup fails with a clear error, writes no
// manifest, and aborts the multipart upload once the store is back.
func TestBackupMinIOStoppedMidUpload(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/big/", 4000, 8<<10) // ~32 MiB, several parts
	m := testenv.StartMinIO(t)
	// failedCh is closed once a request has failed against the dead store:
	// the condition to bring it back on (no sleep).
	failedCh := make(chan struct{})
	var failOnce sync.Once
	r := newRig(t, c, m, func(cfg *cos.Config) {
		cfg.MaxRetries = 1
		cfg.AbortWindow = 60 * time.Second
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return failureTap{rt, func() { failOnce.Do(func() { close(failedCh) }) }}
		}
	})
	opts := r.Options(t, "minio-dies")
	opts.Compression = objectio.CompressNone // parts fill quickly
	killedCh := make(chan struct{})
	var once sync.Once
	opts.Progress = func(n int64) {
		if n > 20<<20 {
			once.Do(func() {
				m.Kill()
				close(killedCh)
			})
		}
	}
	errCh := make(chan error, 1)
	go func() {
		_, err := backup.Run(context.Background(), opts)
		errCh <- err
	}()
	select {
	case <-killedCh:
	case err := <-errCh:
		t.Fatalf("backup ended before MinIO was killed: %v", err)
	}
	select { // the upload fails while the store is down
	case <-failedCh:
	case err := <-errCh:
		t.Fatalf("backup ended before any request failed against the dead store: %v", err)
	}
	m.Start(t) // then the store comes back, and the abort goes through
	var err error
	select {
	case err = <-errCh:
	case <-time.After(90 * time.Second):
		t.Fatal("backup did not end")
	}
	var be *backup.Error
	if !errors.As(err, &be) || be.Step() != backup.StepUpload {
		t.Fatalf("want an upload step error, got %v", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "could not be aborted") {
		t.Errorf("the multipart upload was not aborted after the store came back: %v", err)
	}
	for _, want := range []string{"minio-dies", "upload snapshot", "cos: put "} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	r.assertNothingStored(t, "minio-dies")
}

// Wrong credentials, a missing bucket and a wrong CA fail before any stream
// starts, with an error that names the cluster, the step and the cause,
// and never the secret.
func TestBackupBadConfig(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	mi := testenv.SharedMinIO(t)
	bucket := mi.NewBucket(t)
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	base := func(st store.Store) backup.Options {
		return backup.Options{ClusterID: "badcfg", Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(c),
			Store: st, Layout: layout, ProbeTimeout: 2 * time.Second, Log: testfix.DebugLogger(t)}
	}
	const wrongSecret = "not-the-secret-0123456789abcdef"
	cases := []struct {
		name, step, want string
		opts             func() backup.Options
	}{
		{"wrong credentials", backup.StepStore, "credentials are wrong", func() backup.Options {
			return base(testfix.Store(t, mi, bucket, func(cfg *cos.Config) { cfg.Creds.SecretAccessKey = wrongSecret }))
		}},
		{"missing bucket", backup.StepStore, "does not exist", func() backup.Options {
			return base(testfix.Store(t, mi, "no-such-bucket-"+fmt.Sprint(time.Now().UnixNano())))
		}},
		{"wrong CA", backup.StepMembers, "certificate", func() backup.Options {
			o := base(testfix.Store(t, mi, bucket))
			o.Etcd.CACert = testenv.NewPKI(t).CAFile
			return o
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := backup.Run(context.Background(), tc.opts())
			var be *backup.Error
			if !errors.As(err, &be) || be.Step() != tc.step {
				t.Fatalf("want step %q, got %v", tc.step, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "badcfg") || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q should name the cluster and say %q", msg, tc.want)
			}
			if strings.Contains(msg, wrongSecret) || strings.Contains(msg, mi.SecretKey) {
				t.Errorf("error leaks a secret: %q", msg)
			}
		})
	}
	st := testfix.Store(t, mi, bucket)
	if keys := testfix.Keys(t, st, layout.RootPrefix()); len(keys) != 0 {
		t.Errorf("failed backups wrote %v", keys)
	}
}

// A cancelled run fails cleanly too: no manifest, no upload left.
func TestBackupCancelled(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/big/", 3000, 8<<10)
	r := newRig(t, c, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := r.Options(t, "cancelled")
	opts.Compression = objectio.CompressNone
	opts.Progress = func(n int64) {
		if n > 12<<20 {
			cancel()
		}
	}
	_, err := backup.Run(ctx, opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	r.assertNothingStored(t, "cancelled")
}

var _ = io.EOF

// failureTap calls failed when a request through it fails at the transport.
type failureTap struct {
	rt     http.RoundTripper
	failed func()
}

func (f failureTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := f.rt.RoundTrip(req)
	if err != nil {
		f.failed()
	}
	return resp, err
}
