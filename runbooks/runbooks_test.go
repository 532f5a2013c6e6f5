package runbooks

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/kubetest"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testenv"
	"github.com/armada/etcd-recovery/internal/testfix"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The runbooks' structure: every section inspect points to is a heading,
// README.md's table links exactly those sections, and every block that the
// tests do not run says why.
func TestRunbookStructure(t *testing.T) {
	rb := parseAll(t)
	for _, ref := range inspect.Runbooks {
		if _, _, err := rb.section(ref); err != nil {
			t.Errorf("inspect's NEXT STEP target: %v", err)
		}
	}
	linkRE := regexp.MustCompile(`\]\(([a-z0-9-]+\.md(?:#[a-z0-9-]+)?)\)`)
	linked := map[string]bool{}
	for _, d := range rb {
		for _, m := range linkRE.FindAllStringSubmatch(d.text, -1) {
			ref := m[1]
			if !strings.Contains(ref, "#") {
				if rb[ref] == nil {
					t.Errorf("%s links to %s, which does not exist", d.file, ref)
				}
				continue
			}
			if _, _, err := rb.section(ref); err != nil {
				t.Errorf("%s: broken link: %v", d.file, err)
			}
			if d.file == "README.md" {
				linked["runbooks/"+ref] = true
			}
		}
		for _, b := range d.blocks {
			if b.opts.notRun != "" {
				t.Logf("not run by the tests: %s: %s", b.id(), b.opts.notRun)
			}
		}
	}
	for _, ref := range inspect.Runbooks {
		if !linked[ref] {
			t.Errorf("runbooks/README.md's table does not link %s, a section inspect's NEXT STEP points to", ref)
		}
	}
	if b, err := rb.blocks(connectionRef); err != nil || len(b) != 1 {
		t.Errorf("%s: want exactly one block of connection settings: %v", connectionRef, err)
	}
}

type scenarioFunc func(t *testing.T, rb runbooks)

var scenarios = []struct {
	name string
	fn   scenarioFunc
}{
	{"member-failure", memberFailure},
	{"quorum-loss", quorumLoss},
	{"operator-restore", operatorRestore},
	{"nospace", noSpace},
	{"unreachable", unreachable},
	{"missed-backup", missedBackup},
	{"failed-drill", failedDrill},
}

// TestRunbooks executes every runbook in the failure it is written for, in
// parallel, then checks that every runnable block ran and that every
// section inspect points to was executed.
func TestRunbooks(t *testing.T) {
	rb := parseAll(t)
	var done atomic.Int32
	t.Run("scenario", func(t *testing.T) {
		for _, sc := range scenarios {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				sc.fn(t, rb)
				if !t.Failed() {
					done.Add(1)
				}
			})
		}
	})
	if int(done.Load()) != len(scenarios) {
		t.Logf("%d of %d scenarios passed (or -run selected some): coverage of the runbooks not checked", done.Load(), len(scenarios))
		return
	}
	if un := rb.unexecuted(); len(un) > 0 {
		t.Errorf("runbook blocks that no scenario runs (run them in a scenario, or mark them <!-- not run by the tests: REASON -->): %s", strings.Join(un, ", "))
	}
	for _, ref := range inspect.Runbooks {
		blocks, err := rb.blocks(ref)
		if err != nil {
			t.Error(err)
			continue
		}
		ran := false
		for _, b := range blocks {
			if _, ok := executed.Load(b.id()); ok {
				ran = true
			}
		}
		if !ran {
			t.Errorf("inspect's NEXT STEP points to %s, which no scenario executes", ref)
		}
	}
}

// fixture is a cluster's connection files and COS settings, as a toolkit
// pod has them mounted.
type fixture struct {
	id     string
	pki    *testenv.PKI
	minio  *testenv.MinIO
	bucket string
	layout catalog.Layout
	store  store.Store
	vars   map[string]string
}

func copyFile(tb testing.TB, from, to string) {
	tb.Helper()
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, 0o600)
	}
	if err != nil {
		tb.Fatal(err)
	}
}

// newFixture writes the client-TLS dir (from ca, cert and key), the members'
// TLS dir, the cos-credentials dir, and makes a bucket and prefix.
func newFixture(t *testing.T, pki *testenv.PKI, endpoints []string) *fixture {
	t.Helper()
	m := testenv.SharedMinIO(t)
	f := &fixture{id: "etcd-rb-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36), pki: pki, minio: m, bucket: m.NewBucket(t)}
	prefix := testenv.Prefix(t)
	f.layout = catalog.Layout{Prefix: prefix}
	f.store = testfix.Store(t, m, f.bucket)
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "etcd-tls")
	memberTLS := filepath.Join(dir, "member-tls")
	creds := filepath.Join(dir, "cos-credentials")
	for _, d := range []string{tlsDir, memberTLS, creds} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	setClientTLS(t, tlsDir, pki.CAFile, pki.ClientCertFile, pki.ClientKeyFile)
	for to, from := range map[string]string{"server.crt": pki.ServerCertFile, "server.key": pki.ServerKeyFile, "server-ca.crt": pki.CAFile,
		"peer.crt": pki.ServerCertFile, "peer.key": pki.ServerKeyFile, "peer-ca.crt": pki.CAFile} {
		copyFile(t, from, filepath.Join(memberTLS, to))
	}
	// The carrier's cos-credentials secret, as mounted: etcd-operator's
	// credentials/config files (AWS shared-file format).
	for name, v := range kubetest.AWSSecretData(m.AccessKey, m.SecretKey, m.Region) {
		if err := os.WriteFile(filepath.Join(creds, name), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.vars = map[string]string{
		"id":                  f.id,
		"endpoints":           strings.Join(endpoints, ","),
		"tls-dir":             tlsDir,
		"member-tls-dir":      memberTLS,
		"cos-endpoint":        m.Endpoint,
		"cos-region":          m.Region,
		"bucket":              f.bucket,
		"prefix":              prefix,
		"cos-credentials-dir": creds,
	}
	return f
}

func setClientTLS(tb testing.TB, dir, ca, cert, key string) {
	tb.Helper()
	copyFile(tb, ca, filepath.Join(dir, "etcd-client-ca.crt"))
	copyFile(tb, cert, filepath.Join(dir, "etcd-client.crt"))
	copyFile(tb, key, filepath.Join(dir, "etcd-client.key"))
}

// newMembers plans n new members on loopback ports: their placeholders and
// --initial-cluster.
func newMembers(t *testing.T, n int) (members []map[string]string, initialCluster string, endpoints []string) {
	t.Helper()
	var ic []string
	for i := range n {
		name := fmt.Sprintf("r%d", i)
		client := fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t))
		peer := fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t))
		members = append(members, map[string]string{"name": name, "client-url": client, "peer-url": peer})
		ic = append(ic, name+"="+peer)
		endpoints = append(endpoints, client)
	}
	return members, strings.Join(ic, ","), endpoints
}

// clusterAt is a client to members started by a runbook.
func clusterAt(pki *testenv.PKI, endpoints []string) *testenv.EtcdCluster {
	c := &testenv.EtcdCluster{Version: testenv.V35, PKI: pki}
	for _, ep := range endpoints {
		c.Members = append(c.Members, &testenv.EtcdMember{ClientURL: ep})
	}
	return c
}

// checkKeys compares every key of want with the cluster's value.
func checkKeys(t *testing.T, cli *clientv3.Client, want map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	for k, v := range want {
		resp, err := cli.Get(ctx, k)
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != v {
			t.Errorf("key %s: got %d values (%q...), want %q", k, len(resp.Kvs), firstValue(resp), v)
			if n++; n > 5 {
				t.FailNow()
			}
		}
	}
}

func firstValue(r *clientv3.GetResponse) string {
	if len(r.Kvs) == 0 {
		return ""
	}
	v := string(r.Kvs[0].Value)
	if len(v) > 20 {
		v = v[:20]
	}
	return v
}

func mustContain(t *testing.T, r result, subs ...string) {
	t.Helper()
	// Tables and long lines are wrapped: compare with whitespace collapsed.
	out := strings.Join(strings.Fields(r.output), " ")
	for _, s := range subs {
		if !strings.Contains(out, strings.Join(strings.Fields(s), " ")) {
			t.Errorf("the output of %s does not say %q:\n%s", r.block.id(), s, r.output)
		}
	}
}

func one(t *testing.T, rs []result, substr string, i int) result {
	t.Helper()
	got := find(rs, substr)
	if i < 0 {
		i += len(got)
	}
	if i < 0 || i >= len(got) {
		t.Fatalf("no run #%d of a block with %q (%d found)", i, substr, len(got))
	}
	return got[i]
}

// memberFailure: 3 members, one killed. inspect is DEGRADED and points to
// the section; the member is replaced with the runbook's etcdctl member
// remove/add and etcd --initial-cluster-state existing; inspect HEALTHY,
// the data all there and writable.
func memberFailure(t *testing.T, rb runbooks) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true})
	cli := c.Client(t)
	keys := testenv.PutKeys(t, cli, "/registry/pods/", 100, 200)
	f := newFixture(t, c.PKI, c.Endpoints())
	down := c.Members[2]
	ml, err := cli.MemberList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var id uint64
	for _, m := range ml.Members {
		if m.Name == down.Name {
			id = m.ID
		}
	}
	down.Kill()
	s := newScenario(t, rb, f.vars)
	s.vars["member-id"] = strconv.FormatUint(id, 16)
	s.vars["name"], s.vars["peer-url"], s.vars["client-url"] = down.Name, down.PeerURL, down.ClientURL
	s.vars["new-data-dir"] = filepath.Join(s.dir, "m2-new.etcd")

	rs := s.run(inspect.RunbookReplaceMember)
	first := one(t, rs, "etcd-recovery inspect", 0)
	mustContain(t, first, "DEGRADED", "tolerates 0 more", down.Name)
	if ns := nextStep(t, first); !strings.Contains(ns, inspect.RunbookReplaceMember) {
		t.Errorf("inspect's NEXT STEP does not point to %s: %s", inspect.RunbookReplaceMember, ns)
	}
	last := one(t, rs, "etcd-recovery inspect", -1)
	mustContain(t, last, "HEALTHY")
	ml, err = cli.MemberList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Members) != 3 {
		t.Errorf("%d members after the replacement, want 3", len(ml.Members))
	}
	for _, m := range ml.Members {
		if m.ID == id || m.Name == "" {
			t.Errorf("member %x (%q) after the replacement: the old one is still listed, or the new one never started", m.ID, m.Name)
		}
	}
	checkKeys(t, clusterAt(c.PKI, []string{down.ClientURL}).Client(t), keys)
}

// quorumLoss: 3 members with legacy v2 keys, a COS backup, then newer keys,
// then 2 members killed. The survivor snapshot, the restore by hand (data
// dirs, members started, verify, restore v2, inspect) and the manual
// fallback with curl, zstd and stock etcdutl each bring every key back.
func quorumLoss(t *testing.T, rb runbooks) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, EnableV2: true})
	cli := c.Client(t)
	keys := testenv.PutKeys(t, cli, "/registry/configmaps/", 300, 300)
	v2 := testenv.PutV2Keys(t, c, 20)
	f := newFixture(t, c.PKI, c.Endpoints())
	if _, err := backup.Run(context.Background(), backup.Options{ClusterID: f.id, Kind: catalog.KindScheduled, V2: backup.V2Auto,
		Compression: catalog.CompressZstd, Etcd: testfix.EtcdConfig(c), Store: f.store, Layout: f.layout}); err != nil {
		t.Fatalf("scheduled backup of %s: %v", f.id, err)
	}
	for k, v := range testenv.PutKeys(t, cli, "/registry/late/", 20, 100) {
		keys[k] = v // only in the survivor's data
	}
	survivor := c.Members[0]
	c.Members[1].Kill()
	c.Members[2].Kill()

	s := newScenario(t, rb, f.vars)
	s.vars["survivor-endpoint"] = survivor.ClientURL
	rs := s.run(inspect.RunbookSurvivorSnapshot)
	insp := one(t, rs, "etcd-recovery inspect", 0)
	mustContain(t, insp, "QUORUM LOST", survivor.Name)
	ns := nextStep(t, insp)
	for _, ref := range []string{inspect.RunbookSurvivorSnapshot, inspect.RunbookRestore} {
		if !strings.Contains(ns, ref) {
			t.Errorf("inspect's NEXT STEP does not point to %s: %s", ref, ns)
		}
	}
	mustContain(t, one(t, rs, "etcd-recovery list", 0), "manual")
	entries, err := catalog.Inventory(context.Background(), f.store, f.layout, f.id)
	if err != nil {
		t.Fatal(err)
	}
	var manual string
	for _, e := range entries {
		if e.Committed && e.Kind == catalog.KindManual {
			manual = e.Name
		}
	}
	if manual == "" {
		t.Fatalf("the survivor snapshot left no manual backup of %s: %+v", f.id, entries)
	}
	survivor.Kill() // "stop the old members that still run"

	t.Run("by-hand", func(t *testing.T) {
		members, ic, eps := newMembers(t, 3)
		s.members = members
		s.vars["old-endpoints"] = strings.Join(c.Endpoints(), ",")
		s.vars["new-initial-cluster"] = ic
		s.vars["new-endpoints"] = strings.Join(eps, ",")
		s.vars["new-token"] = f.id + "-restored"
		s.vars["data-dir-root"] = filepath.Join(s.dir, "restored")
		s.vars["backup"] = manual
		s.t = t
		rs := s.run("quorum-loss.md#restore-by-hand")
		mustContain(t, one(t, rs, "--dry-run", 0), manual)
		mustContain(t, one(t, rs, "etcd-recovery inspect", 0), "HEALTHY")
		nc := clusterAt(c.PKI, eps)
		ncli := nc.Client(t)
		checkKeys(t, ncli, keys)
		checkRevision(t, ncli)
		checkV2(t, nc, v2)
	})
	t.Run("stock-etcdutl", func(t *testing.T) {
		members, ic, eps := newMembers(t, 3)
		s.members = members
		s.vars["new-initial-cluster"] = ic
		s.vars["new-endpoints"] = strings.Join(eps, ",")
		s.vars["new-token"] = f.id + "-manual"
		s.vars["data-dir-root"] = filepath.Join(s.dir, "manual")
		s.t = t
		rs := s.run("quorum-loss.md#manual-fallback-with-stock-etcd-tools")
		mustContain(t, one(t, rs, "curl", 0), "newest backup: "+f.layout.BackupPrefix(f.id, manual)[:len(f.layout.BackupPrefix(f.id, manual))-1])
		if got := strings.TrimSpace(lastLine(one(t, rs, "grep -c", 0).output)); got != strconv.Itoa(len(keys)) {
			t.Errorf("the runbook's key count says %s, want %d", got, len(keys))
		}
		ncli := clusterAt(c.PKI, eps).Client(t)
		checkKeys(t, ncli, keys)
		checkRevision(t, ncli)
	})
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// checkRevision: the restored revision was bumped (watchers never go back).
func checkRevision(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	resp, err := cli.Get(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision < 1_000_000_000 {
		t.Errorf("restored revision %d: not bumped by 1,000,000,000", resp.Header.Revision)
	}
}

// checkV2 reads every v2 key back through the restored cluster's v2 API.
func checkV2(t *testing.T, c *testenv.EtcdCluster, want map[string]string) {
	t.Helper()
	hc := testenv.V2HTTPClient(c)
	defer hc.CloseIdleConnections()
	for k, v := range want {
		resp, err := hc.Get(c.Members[0].ClientURL + "/v2/keys" + k + "?quorum=true")
		if err != nil {
			t.Fatalf("v2 GET %s: %v", k, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), strconv.Quote(v)) {
			t.Fatalf("v2 key %s after restore v2: %s %s, want value %q", k, resp.Status, b, v)
		}
	}
}

// noSpace: 3 members with a 4 MiB quota, filled until NOSPACE. The runbook
// compacts, defragments and disarms; writes work and inspect is HEALTHY.
func noSpace(t *testing.T, rb runbooks) {
	const quota = 4 << 20
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, QuotaBackendBytes: quota})
	cli := c.Client(t)
	f := newFixture(t, c.PKI, c.Endpoints())
	val := strings.Repeat("x", 128<<10)
	full := false
	for i := 0; i < 200 && !full; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cli.Put(ctx, fmt.Sprintf("/fill/%d", i%4), val)
		cancel()
		if err != nil {
			if !strings.Contains(err.Error(), "database space exceeded") {
				t.Fatalf("filling %s: %v", f.id, err)
			}
			full = true
		}
	}
	if !full {
		t.Fatalf("cluster %s never reached its %d-byte quota", f.id, quota)
	}
	s := newScenario(t, rb, f.vars)
	s.vars["quota-backend-bytes"] = strconv.Itoa(quota)
	rs := s.run(inspect.RunbookNoSpace)
	first := one(t, rs, "etcd-recovery inspect", 0)
	mustContain(t, first, "NOSPACE")
	if ns := nextStep(t, first); !strings.Contains(ns, inspect.RunbookNoSpace) {
		t.Errorf("inspect's NEXT STEP does not point to %s: %s", inspect.RunbookNoSpace, ns)
	}
	last := one(t, rs, "etcd-recovery inspect", -1)
	mustContain(t, last, "HEALTHY")
	if strings.Contains(last.output, "NOSPACE") {
		t.Errorf("inspect still flags NOSPACE after the runbook:\n%s", last.output)
	}
	if _, err := cli.Put(context.Background(), "/after-nospace", "ok"); err != nil {
		t.Errorf("a write after the runbook: %v", err)
	}
	al, err := cli.AlarmList(context.Background())
	if err != nil || len(al.Alarms) != 0 {
		t.Errorf("alarms after the runbook: %v %v", al, err)
	}
}

// unreachable: the diagnosis gives the cause the runbook names, for a
// wrong CA, a rejected client certificate and members that are down.
func unreachable(t *testing.T, rb runbooks) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, Members: 1})
	f := newFixture(t, c.PKI, c.Endpoints())
	other := testenv.NewPKI(t)
	text := rb["unreachable.md"].text
	for _, tc := range []struct {
		name, cause   string
		ca, cert, key string
		kill          bool
	}{
		{"wrong-ca", "certificate signed by unknown authority", other.CAFile, c.PKI.ClientCertFile, c.PKI.ClientKeyFile, false},
		{"wrong-client-cert", "the server rejected our client certificate", c.PKI.CAFile, other.ClientCertFile, other.ClientKeyFile, false},
		{"members-down", "connection refused", c.PKI.CAFile, c.PKI.ClientCertFile, c.PKI.ClientKeyFile, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(text, tc.cause) {
				t.Fatalf("unreachable.md does not name the cause %q", tc.cause)
			}
			if tc.kill {
				c.Members[0].Kill()
			}
			s := newScenario(t, rb, map[string]string{})
			for k, v := range f.vars {
				s.vars[k] = v
			}
			tlsDir := filepath.Join(s.dir, "etcd-tls")
			if err := os.Mkdir(tlsDir, 0o700); err != nil {
				t.Fatal(err)
			}
			setClientTLS(t, tlsDir, tc.ca, tc.cert, tc.key)
			s.vars["tls-dir"] = tlsDir
			s.vars["member-endpoints"] = strings.Join(c.Endpoints(), ",")
			rs := s.run(inspect.RunbookUnreachable)
			for _, r := range find(rs, "etcd-recovery inspect") {
				mustContain(t, r, "UNREACHABLE", tc.cause)
				if ns := nextStep(t, r); !strings.Contains(ns, inspect.RunbookUnreachable) {
					t.Errorf("inspect's NEXT STEP does not point to %s: %s", inspect.RunbookUnreachable, ns)
				}
			}
		})
	}
}

// missedBackup: the newest committed backup is 12 h old and a newer run
// left an incomplete folder; or there is no backup at all. The runbook's
// steps show it, take a backup by hand, and inspect no longer warns.
func missedBackup(t *testing.T, rb runbooks) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/services/", 20, 100)
	for _, stale := range []bool{true, false} {
		name := map[bool]string{true: "stale-and-incomplete", false: "missing"}[stale]
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, c.PKI, c.Endpoints())
			var failed string
			if stale {
				old := time.Now().Add(-12 * time.Hour)
				if _, err := backup.Run(context.Background(), backup.Options{ClusterID: f.id, Kind: catalog.KindScheduled,
					V2: backup.V2Off, Compression: catalog.CompressZstd, Etcd: testfix.EtcdConfig(c), Store: f.store, Layout: f.layout,
					Now: func() time.Time { return old }}); err != nil {
					t.Fatalf("stale backup of %s: %v", f.id, err)
				}
				failed = catalog.NewBackupName(time.Now().Add(-4*time.Hour), catalog.KindScheduled)
				if _, err := f.store.Put(context.Background(), f.layout.Key(f.id, failed, catalog.StartedObject), strings.NewReader("{}")); err != nil {
					t.Fatal(err)
				}
			}
			s := newScenario(t, rb, f.vars)
			rs := s.run(inspect.RunbookMissedBackup)
			first := one(t, rs, "etcd-recovery inspect", 0)
			mustContain(t, first, "HEALTHY", map[bool]string{true: "backup stale", false: "no backup"}[stale])
			if ns := nextStep(t, first); !strings.Contains(ns, inspect.RunbookMissedBackup) {
				t.Errorf("inspect's NEXT STEP does not point to %s: %s", inspect.RunbookMissedBackup, ns)
			}
			if stale {
				mustContain(t, one(t, rs, "etcd-recovery list", 0), failed, "incomplete")
			}
			// The backup taken by hand was not drilled: NEXT STEP may point
			// to the drill (failedDrill), never to a missed backup.
			last := one(t, rs, "etcd-recovery inspect", -1)
			if ns := nextStep(t, last); strings.Contains(ns, inspect.RunbookMissedBackup) ||
				strings.Contains(last.output, "backup stale") || strings.Contains(last.output, "no backup: ") {
				t.Errorf("inspect still warns about the backup after the one taken by hand: %s\n%s", ns, last.output)
			}
		})
	}
}

// failedDrill: the newest backup's restore drill failed its source
// comparison (its drill record says so, as restore.Drill writes it: the
// drill itself is tested in restore/), so inspect warns, HEALTHY, and
// points to the drill runbook; a manual backup drilled at once (backup
// --drill, a real drill against etcd 3.5) proves a fresh restore point and
// inspect no longer warns.
func failedDrill(t *testing.T, rb runbooks) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/secrets/", 50, 100)
	// Another cluster's snapshot, committed under this cluster's id (its
	// objects match its manifest): a backup whose data differs from the
	// source at its revision, which only the source comparison catches.
	other := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, Members: 1, PKI: c.PKI})
	testenv.PutKeys(t, other.Client(t), "/registry/configmaps/", 10, 100)
	f := newFixture(t, c.PKI, c.Endpoints())
	ctx := context.Background()
	res, err := backup.Run(ctx, backup.Options{ClusterID: f.id, Kind: catalog.KindScheduled, V2: backup.V2Off,
		Compression: catalog.CompressZstd, Etcd: testfix.EtcdConfig(other), Store: f.store, Layout: f.layout})
	if err != nil {
		t.Fatalf("scheduled backup of %s: %v", f.id, err)
	}
	bad := res.Manifest.Name
	// The CronJob's drill of it failed (its record, as restore.Drill
	// writes it).
	const check = "compare with source: HashKV at the snapshot's revision differs from the source's"
	rec := &catalog.DrillRecord{ClusterID: f.id, Backup: bad, Passed: false, Failed: check,
		StartedAt: time.Now().Add(-20 * time.Second).UTC(), FinishedAt: time.Now().UTC(), ToolVersion: "test",
		Revision: res.Manifest.Revision(), Comparison: catalog.DrillComparison{Mode: catalog.CompareSource}}
	if err := catalog.PutDrill(ctx, f.store, f.layout, rec); err != nil {
		t.Fatal(err)
	}

	s := newScenario(t, rb, f.vars)
	s.vars["backup"] = bad
	rs := s.run(inspect.RunbookDrill)
	first := one(t, rs, "etcd-recovery inspect", 0)
	mustContain(t, first, "HEALTHY", "restore drill failed", bad, check)
	if ns := nextStep(t, first); !strings.Contains(ns, inspect.RunbookDrill) {
		t.Errorf("inspect's NEXT STEP does not point to %s: %s", inspect.RunbookDrill, ns)
	}
	mustContain(t, one(t, rs, "etcd-recovery list", 0), bad)
	// The rerun fails for real, on the source comparison.
	mustContain(t, one(t, rs, "etcd-recovery drill", 0), bad, `"passed": false`, `"mode": "source"`)
	last := one(t, rs, "etcd-recovery inspect", -1)
	if ns := nextStep(t, last); !strings.Contains(ns, "NEXT STEP: none") {
		t.Errorf("inspect still warns after the manual backup was drilled: %s\n%s", ns, last.output)
	}
	mustContain(t, last, "DRILL: newest proven restorable")
}
