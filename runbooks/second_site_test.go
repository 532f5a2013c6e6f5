package runbooks

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/replicate"
)

func init() {
	scenarios = append(scenarios, scenario{"second-site", primaryGone})
}

const secondSite = "second-site.md"

// primaryGone: a 1-member TLS etcd 3.5 whose full backup and journal (1 s
// segments, a workload with a lease) go to the primary (the fixture's
// bucket), and the copier (replicate.Run, journal polls every 300 ms)
// copies them to the second site (another bucket, its own prefix); then
// the primary is gone (its endpoint a closed port) and every member lost.
// The runbook's section runs: sites (the primary unreachable, the
// second's window), restore --to-latest from the second site (plan, data
// dirs), the member started, restore verify, inspect HEALTHY, and the
// return's sites. The restored keyspace is exactly the source's at the
// journal's last revision (every key's value, create and mod revision,
// version and lease).
func primaryGone(t *testing.T, rb mdblocks.Set) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/registry/configmaps/", 50, 64)
	f := mdblocks.NewFixture(t, c.PKI, c.Endpoints())
	ctx := testfix.Context(t, 3*time.Minute)
	base := f.Backup(t, ctx, c, backup.Options{V2: backup.V2Off})
	m := f.MinIO
	sb := m.NewBucket(t)
	sst, sl := testfix.Store(t, m, sb), catalog.Layout{Prefix: "dr/" + f.Layout.Prefix}
	rctx, stopCopier := context.WithCancel(ctx)
	defer stopCopier()
	copierDone := make(chan error, 1)
	go func() {
		copierDone <- replicate.Run(rctx, replicate.Options{Primary: f.Store, PrimaryLayout: f.Layout, Second: sst, SecondLayout: sl,
			JournalInterval: 300 * time.Millisecond, ScanInterval: time.Second, StatusEvery: time.Second, Copier: "etcd-recovery-replicate"})
	}()
	cp := startCapture(t, ctx, f, c.Client(t), base, time.Second, nil)
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		testenv.PutKeys(t, cli, fmt.Sprintf("/registry/pods/w%d-", i), 10, 64)
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/leases/l%d", i), "held", clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, "/registry/configmaps/key000001", fmt.Sprint("over-", i)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond)
	}
	r, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	top := r.Header.Revision
	want := testfix.Dump(t, ctx, cli, top)
	// The copier brings the backup and the journal to the second site.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		segs, err := journal.ListSegments(ctx, sst, sl, f.ID, base.Revision())
		if err != nil {
			t.Fatal(err)
		}
		st, serr := replicate.ReadStatus(ctx, sst, sl, time.Now())
		if segs.Reach >= top && serr == nil && st.Clusters[f.ID].NewestBackup == base.Name {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second site's journal of %s reaches %d, not %d (status %+v, %v)", f.ID, segs.Reach, top, st, serr)
		}
	}
	cp.stop(t)
	stopCopier()
	if err := <-copierDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the copier: %v", err)
	}
	for _, m := range c.Members {
		m.Kill()
		if err := os.RemoveAll(m.DataDir); err != nil {
			t.Fatal(err)
		}
	}

	// The primary is gone.
	second := filepath.Join(t.TempDir(), "second-credentials")
	if err := os.Mkdir(second, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"access_key_id": m.AccessKey, "secret_access_key": m.SecretKey} {
		if err := os.WriteFile(filepath.Join(second, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.Vars["second-store"] = fmt.Sprintf("s3://%s/%s?endpoint=%s&region=%s", sb, sl.Prefix, url.QueryEscape(m.Endpoint), m.Region)
	f.Vars["second-credentials-dir"] = second
	f.Vars["cos-endpoint"] = fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	f.Vars["bucket"] = "primary-gone"
	f.Vars["members"] = "1"

	s := newScenario(t, rb, f.Vars)
	// The shell has run the section's export block (each block runs in
	// a shell of its own).
	s.ExtraEnv = append(s.ExtraEnv, "ETCD_RECOVERY_SECOND_STORE="+f.Vars["second-store"], "SECOND_COS_CREDENTIALS_DIR="+second)
	eps := newMembers(t, s, 1, f.ID+"-from-second", "restored")
	verifyLine := regexp.MustCompile(`--min-revision (\d+) --expect-keys (\d+) --expect-members`)
	s.After = func(r mdblocks.Result) {
		if m := verifyLine.FindStringSubmatch(r.Output); m != nil {
			s.Vars["min-revision"], s.Vars["expect-keys"] = m[1], m[2]
		}
	}
	rs := s.Run(secondSite + "#the-primary-region-or-bucket-is-gone")
	sites := mdblocks.One(t, rs, "etcd-recovery sites", 0)
	mdblocks.MustContain(t, sites, "unreachable", "second", base.Name, "primary-gone")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "--dry-run", 0), fmt.Sprintf("Latest (--to-latest): revision %d (received ", top), base.Name)
	mdblocks.MustContain(t, mdblocks.One(t, rs, "restore verify", 0), "live keys, as in the snapshot")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "etcd-recovery inspect", 0), "HEALTHY")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "etcd-recovery sites", -1), "unreachable", base.Name)

	ncli := mdblocks.ClusterAt(c.PKI, eps).Client(t)
	got := testfix.Dump(t, ctx, ncli, 0)
	if len(got) != len(want) {
		t.Errorf("restored %d keys, the source had %d at revision %d", len(got), len(want), top)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: restored %q, the source at %d %q", k, got[k], top, v)
		}
	}
	if ttl, err := ncli.TimeToLive(ctx, lease.ID); err != nil || ttl.TTL <= 0 {
		t.Errorf("the lease on the restored cluster: %+v %v", ttl, err)
	}
}
