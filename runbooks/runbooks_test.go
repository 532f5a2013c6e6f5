package runbooks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The runbooks' structure: every section inspect points to is a heading,
// README.md's table links exactly those sections, every link and anchor
// resolves, and every block that the tests do not run says why.
func TestRunbookStructure(t *testing.T) {
	rb := parseAll(t)
	for _, ref := range inspect.Runbooks {
		if _, _, err := rb.Section(ref); err != nil {
			t.Errorf("inspect's NEXT STEP target: %v", err)
		}
	}
	root := testenv.RepoRoot(t)
	cache := map[string]*mdblocks.Doc{}
	linked := map[string]bool{}
	for _, d := range rb {
		for _, err := range mdblocks.CheckLinks(d, root, cache) {
			t.Error(err)
		}
		if d.Name == "README.md" {
			for _, l := range d.Links {
				if !mdblocks.External(l.Target) {
					linked["runbooks/"+l.Target] = true
				}
			}
		}
		for _, b := range d.Blocks {
			if b.Lang != "sh" {
				t.Errorf("%s: a ```%s block: write commands as ```sh blocks (the tests run those)", b.ID(), b.Lang)
			}
			if b.Opts.NotRun != "" {
				t.Logf("not run by the tests: %s: %s", b.ID(), b.Opts.NotRun)
			}
		}
	}
	for _, ref := range inspect.Runbooks {
		if !linked[ref] {
			t.Errorf("runbooks/README.md's table does not link %s, a section inspect's NEXT STEP points to", ref)
		}
	}
	if b, err := rb.Blocks(connectionRef); err != nil || len(b) != 1 {
		t.Errorf("%s: want exactly one block of connection settings: %v", connectionRef, err)
	}
}

type scenarioFunc func(t *testing.T, rb mdblocks.Set)

// scenario is a runbook's failure, by name, as a test brings it about and
// follows the runbook through it.
type scenario struct {
	name string
	fn   scenarioFunc
}

var scenarios = []scenario{
	{"member-failure", memberFailure},
	{"quorum-loss", quorumLoss},
	{"quorum-loss-encrypted", quorumLossEncrypted},
	{"operator-restore", operatorRestore},
	{"nospace", noSpace},
	{"unreachable", unreachable},
	{"missed-backup", missedBackup},
	{"failed-drill", failedDrill},
	{"every-backup-deleted", everyBackupDeleted},
	{"namespace-gone", namespaceGoneRunbook},
	{"namespace-restore", namespaceRestoreRunbook},
}

// TestRunbooks executes every runbook in the failure it is written for, in
// parallel, then checks that every runnable block ran and that every
// section inspect points to was executed.
func TestRunbooks(t *testing.T) {
	rb := parseAll(t)
	run := map[string]func(t *testing.T, rb mdblocks.Set){}
	for _, sc := range scenarios {
		run[sc.name] = sc.fn
	}
	if !mdblocks.RunScenarios(t, rb, "runbook", run) {
		return
	}
	for _, ref := range inspect.Runbooks {
		blocks, err := rb.Blocks(ref)
		if err != nil {
			t.Error(err)
			continue
		}
		ran := false
		for _, b := range blocks {
			if mdblocks.Executed(b) {
				ran = true
			}
		}
		if !ran {
			t.Errorf("inspect's NEXT STEP points to %s, which no scenario executes", ref)
		}
	}
}

// memberFailure: 3 members, one killed. inspect is DEGRADED and points to
// the section; the member is replaced with the runbook's etcdctl member
// remove/add and etcd --initial-cluster-state existing; inspect HEALTHY,
// the data all there and writable.
func memberFailure(t *testing.T, rb mdblocks.Set) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true})
	started := time.Now()
	cli := c.Client(t)
	keys := testenv.PutKeys(t, cli, "/registry/pods/", 100, 200)
	f := mdblocks.NewFixture(t, c.PKI, c.Endpoints())
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
	// etcd refuses `member add` ("unhealthy cluster") until the members
	// have been connected for its health interval: a cluster that has run
	// for a while, as in an incident, has; this one just started. Once
	// fast enough to reach the runbook within 5 s of the start, the test
	// failed on that.
	time.Sleep(time.Until(started.Add(etcdserver.HealthInterval + time.Second)))
	down.Kill()
	s := newScenario(t, rb, f.Vars)
	s.Vars["member-id"] = strconv.FormatUint(id, 16)
	s.Vars["name"], s.Vars["peer-url"], s.Vars["client-url"] = down.Name, down.PeerURL, down.ClientURL
	s.Vars["new-data-dir"] = filepath.Join(s.Dir, "m2-new.etcd")

	rs := s.Run(inspect.RunbookReplaceMember)
	first := mdblocks.One(t, rs, "etcd-recovery inspect", 0)
	mdblocks.MustContain(t, first, "DEGRADED", "tolerates 0 more", down.Name)
	if ns := nextStep(t, first); !strings.Contains(ns, inspect.RunbookReplaceMember) {
		t.Errorf("inspect's NEXT STEP does not point to %s: %s", inspect.RunbookReplaceMember, ns)
	}
	last := mdblocks.One(t, rs, "etcd-recovery inspect", -1)
	mdblocks.MustContain(t, last, "HEALTHY")
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
	mdblocks.CheckKeys(t, mdblocks.ClusterAt(c.PKI, []string{down.ClientURL}).Client(t), keys)
}

// quorumLoss: 3 members with legacy v2 keys, a COS backup, then newer keys,
// then 2 members killed. The survivor snapshot, the restore by hand (data
// dirs, members started, verify, restore v2, inspect) and the manual
// fallback with curl, zstd and stock etcdutl each bring every key back.
func quorumLoss(t *testing.T, rb mdblocks.Set) {
	c, f, keys, v2 := mdblocks.QuorumLost(t, "/registry/configmaps/", 300, 300, 20)
	survivor := c.Members[0]

	s := newScenario(t, rb, f.Vars)
	s.Vars["survivor-endpoint"] = survivor.ClientURL
	rs := s.Run(inspect.RunbookSurvivorSnapshot)
	insp := mdblocks.One(t, rs, "etcd-recovery inspect", 0)
	mdblocks.MustContain(t, insp, "QUORUM LOST", survivor.Name)
	ns := nextStep(t, insp)
	for _, ref := range []string{inspect.RunbookSurvivorSnapshot, inspect.RunbookRestore} {
		if !strings.Contains(ns, ref) {
			t.Errorf("inspect's NEXT STEP does not point to %s: %s", ref, ns)
		}
	}
	mdblocks.MustContain(t, mdblocks.One(t, rs, "etcd-recovery list", 0), "manual")
	entries, err := catalog.Inventory(context.Background(), f.Store, f.Layout, f.ID)
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
		t.Fatalf("the survivor snapshot left no manual backup of %s: %+v", f.ID, entries)
	}
	survivor.Kill() // "stop the old members that still run"

	t.Run("by-hand", func(t *testing.T) {
		eps := newMembers(t, s, 3, f.ID+"-restored", "restored")
		s.Vars["old-endpoints"] = strings.Join(c.Endpoints(), ",")
		s.Vars["backup"] = manual
		s.T = t
		rs := s.Run("quorum-loss.md#restore-by-hand")
		mdblocks.MustContain(t, mdblocks.One(t, rs, "--dry-run", 0), manual)
		mdblocks.MustContain(t, mdblocks.One(t, rs, "etcd-recovery inspect", 0), "HEALTHY")
		nc := mdblocks.ClusterAt(c.PKI, eps)
		ncli := nc.Client(t)
		mdblocks.CheckKeys(t, ncli, keys)
		checkRevision(t, ncli)
		mdblocks.CheckV2Keys(t, nc, v2)
	})
	t.Run("stock-etcdutl", func(t *testing.T) {
		eps := newMembers(t, s, 3, f.ID+"-manual", "manual")
		// A plaintext backup: the identity is never read.
		s.Vars["identity-file"] = filepath.Join(s.Dir, "no-such-identity.txt")
		s.Tools["age"] = testenv.Age(t)
		s.T = t
		rs := s.Run("quorum-loss.md#manual-fallback-with-stock-etcd-tools")
		mdblocks.MustContain(t, mdblocks.One(t, rs, "curl", 0), "newest backup: "+f.Layout.BackupPrefix(f.ID, manual)[:len(f.Layout.BackupPrefix(f.ID, manual))-1])
		if got := strings.TrimSpace(lastLine(mdblocks.One(t, rs, "grep -c", 0).Output)); got != strconv.Itoa(len(keys)) {
			t.Errorf("the runbook's key count says %s, want %d", got, len(keys))
		}
		ncli := mdblocks.ClusterAt(c.PKI, eps).Client(t)
		mdblocks.CheckKeys(t, ncli, keys)
		checkRevision(t, ncli)
	})
}

// quorumLossEncrypted: the manual fallback on an age-encrypted backup
// (written by the tool, encrypted to two recipients): Debian's age decrypts
// it with the identity of one of them, and stock etcdutl and etcd bring
// every key back, the revision bumped. No plaintext object is left in the
// store, and the block leaves no ciphertext beside the database.
func quorumLossEncrypted(t *testing.T, rb mdblocks.Set) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, Members: 1})
	keys := testenv.PutKeys(t, c.Client(t), "/registry/secrets/", 200, 300)
	f := mdblocks.NewFixture(t, c.PKI, c.Endpoints())
	mine, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	other, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := seal.ParseRecipients([]string{other.Recipient().String(), mine.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	man := f.Backup(t, context.Background(), c, backup.Options{V2: backup.V2Off, Recipients: rs})
	if !man.Encrypted() || man.Snapshot.Object != "snapshot.db.zst"+seal.Suffix {
		t.Fatalf("backup not encrypted: %+v", man.Snapshot)
	}
	c.Members[0].Kill()

	s := newScenario(t, rb, f.Vars)
	eps := newMembers(t, s, 1, f.ID+"-manual", "manual")
	idFile := filepath.Join(t.TempDir(), "identity.txt")
	if err := os.WriteFile(idFile, []byte("# public key: "+mine.Recipient().String()+"\n"+mine.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Vars["identity-file"] = idFile
	s.Tools["age"] = testenv.Age(t)
	out := s.Run("quorum-loss.md#manual-fallback-with-stock-etcd-tools")
	mdblocks.MustContain(t, mdblocks.One(t, out, "curl", 0), "newest backup: "+strings.TrimSuffix(f.Layout.BackupPrefix(f.ID, man.Name), "/"))
	if left, _ := filepath.Glob(filepath.Join(s.Dir, "*"+seal.Suffix)); len(left) != 0 {
		t.Errorf("the fallback left the ciphertext beside the database: %v", left)
	}
	if got := strings.TrimSpace(lastLine(mdblocks.One(t, out, "grep -c", 0).Output)); got != strconv.Itoa(len(keys)) {
		t.Errorf("the runbook's key count says %s, want %d", got, len(keys))
	}
	ncli := mdblocks.ClusterAt(c.PKI, eps).Client(t)
	mdblocks.CheckKeys(t, ncli, keys)
	checkRevision(t, ncli)
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

// noSpace: 3 members with a 4 MiB quota, filled until NOSPACE. The runbook
// compacts, defragments and disarms; writes work and inspect is HEALTHY.
func noSpace(t *testing.T, rb mdblocks.Set) {
	const quota = 4 << 20
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, QuotaBackendBytes: quota})
	cli := c.Client(t)
	f := mdblocks.NewFixture(t, c.PKI, c.Endpoints())
	val := strings.Repeat("x", 128<<10)
	full := false
	for i := 0; i < 200 && !full; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cli.Put(ctx, fmt.Sprintf("/fill/%d", i%4), val)
		cancel()
		if err != nil {
			if !strings.Contains(err.Error(), "database space exceeded") {
				t.Fatalf("filling %s: %v", f.ID, err)
			}
			full = true
		}
	}
	if !full {
		t.Fatalf("cluster %s never reached its %d-byte quota", f.ID, quota)
	}
	s := newScenario(t, rb, f.Vars)
	s.Vars["quota-backend-bytes"] = strconv.Itoa(quota)
	rs := s.Run(inspect.RunbookNoSpace)
	first := mdblocks.One(t, rs, "etcd-recovery inspect", 0)
	mdblocks.MustContain(t, first, "NOSPACE")
	if ns := nextStep(t, first); !strings.Contains(ns, inspect.RunbookNoSpace) {
		t.Errorf("inspect's NEXT STEP does not point to %s: %s", inspect.RunbookNoSpace, ns)
	}
	last := mdblocks.One(t, rs, "etcd-recovery inspect", -1)
	mdblocks.MustContain(t, last, "HEALTHY")
	if strings.Contains(last.Output, "NOSPACE") {
		t.Errorf("inspect still flags NOSPACE after the runbook:\n%s", last.Output)
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
func unreachable(t *testing.T, rb mdblocks.Set) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, Members: 1})
	f := mdblocks.NewFixture(t, c.PKI, c.Endpoints())
	other := testenv.NewPKI(t)
	text := rb["unreachable.md"].Text
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
			for k, v := range f.Vars {
				s.Vars[k] = v
			}
			tlsDir := filepath.Join(s.Dir, "etcd-tls")
			if err := os.Mkdir(tlsDir, 0o700); err != nil {
				t.Fatal(err)
			}
			mdblocks.SetClientTLS(t, tlsDir, tc.ca, tc.cert, tc.key)
			s.Vars["tls-dir"] = tlsDir
			s.Vars["member-endpoints"] = strings.Join(c.Endpoints(), ",")
			rs := s.Run(inspect.RunbookUnreachable)
			for _, r := range mdblocks.Find(rs, "etcd-recovery inspect") {
				mdblocks.MustContain(t, r, "UNREACHABLE", tc.cause)
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
func missedBackup(t *testing.T, rb mdblocks.Set) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/services/", 20, 100)
	for _, stale := range []bool{true, false} {
		name := map[bool]string{true: "stale-and-incomplete", false: "missing"}[stale]
		t.Run(name, func(t *testing.T) {
			f := mdblocks.NewFixture(t, c.PKI, c.Endpoints())
			var failed string
			if stale {
				old := time.Now().Add(-12 * time.Hour)
				f.Backup(t, context.Background(), c, backup.Options{V2: backup.V2Off, Now: func() time.Time { return old }})
				failed = catalog.NewBackupName(time.Now().Add(-4*time.Hour), catalog.KindScheduled)
				if _, err := f.Store.Put(context.Background(), f.Layout.Key(f.ID, failed, catalog.StartedObject), strings.NewReader("{}")); err != nil {
					t.Fatal(err)
				}
			}
			s := newScenario(t, rb, f.Vars)
			rs := s.Run(inspect.RunbookMissedBackup)
			first := mdblocks.One(t, rs, "etcd-recovery inspect", 0)
			mdblocks.MustContain(t, first, "HEALTHY", map[bool]string{true: "backup stale", false: "no backup"}[stale])
			if ns := nextStep(t, first); !strings.Contains(ns, inspect.RunbookMissedBackup) {
				t.Errorf("inspect's NEXT STEP does not point to %s: %s", inspect.RunbookMissedBackup, ns)
			}
			if stale {
				mdblocks.MustContain(t, mdblocks.One(t, rs, "etcd-recovery list", 0), failed, "incomplete")
			}
			// The backup taken by hand was not drilled: NEXT STEP may point
			// to the drill (failedDrill), never to a missed backup.
			last := mdblocks.One(t, rs, "etcd-recovery inspect", -1)
			if ns := nextStep(t, last); strings.Contains(ns, inspect.RunbookMissedBackup) ||
				strings.Contains(last.Output, "backup stale") || strings.Contains(last.Output, "no backup: ") {
				t.Errorf("inspect still warns about the backup after the one taken by hand: %s\n%s", ns, last.Output)
			}
		})
	}
}

// failedDrill: the newest backup's restore drill failed its source
// comparison (its drill record says so, as drill.Run writes it: the
// drill itself is tested in restore/), so inspect warns, HEALTHY, and
// points to the drill runbook; a manual backup drilled at once (backup
// --drill, a real drill against etcd 3.5) proves a fresh restore point and
// inspect no longer warns.
func failedDrill(t *testing.T, rb mdblocks.Set) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/secrets/", 50, 100)
	// Another cluster's snapshot, committed under this cluster's id (its
	// objects match its manifest): a backup whose data differs from the
	// source at its revision, which only the source comparison catches.
	other := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, Members: 1, PKI: c.PKI})
	testenv.PutKeys(t, other.Client(t), "/registry/configmaps/", 10, 100)
	f := mdblocks.NewFixture(t, c.PKI, c.Endpoints())
	ctx := context.Background()
	badMan := f.Backup(t, ctx, other, backup.Options{V2: backup.V2Off})
	bad := badMan.Name
	// The CronJob's drill of it failed (its record, as drill.Run
	// writes it).
	const check = "compare with source: HashKV at the snapshot's revision differs from the source's"
	rec := &catalog.DrillRecord{ClusterID: f.ID, Backup: bad, Passed: false, Failed: check,
		StartedAt: time.Now().Add(-20 * time.Second).UTC(), FinishedAt: time.Now().UTC(), ToolVersion: "test",
		Revision: badMan.Revision(), Comparison: catalog.DrillComparison{Mode: catalog.CompareSource}}
	if err := catalog.PutDrill(ctx, f.Store, f.Layout, rec); err != nil {
		t.Fatal(err)
	}

	s := newScenario(t, rb, f.Vars)
	s.Vars["backup"] = bad
	rs := s.Run(inspect.RunbookDrill)
	first := mdblocks.One(t, rs, "etcd-recovery inspect", 0)
	mdblocks.MustContain(t, first, "HEALTHY", "restore drill failed", bad, check)
	if ns := nextStep(t, first); !strings.Contains(ns, inspect.RunbookDrill) {
		t.Errorf("inspect's NEXT STEP does not point to %s: %s", inspect.RunbookDrill, ns)
	}
	mdblocks.MustContain(t, mdblocks.One(t, rs, "etcd-recovery list", 0), bad)
	// The rerun fails for real, on the source comparison.
	mdblocks.MustContain(t, mdblocks.One(t, rs, "etcd-recovery drill", 0), bad, `"passed": false`, `"mode": "source"`)
	last := mdblocks.One(t, rs, "etcd-recovery inspect", -1)
	if ns := nextStep(t, last); !strings.Contains(ns, "NEXT STEP: none") {
		t.Errorf("inspect still warns after the manual backup was drilled: %s\n%s", ns, last.Output)
	}
	mdblocks.MustContain(t, last, "DRILL: newest proven restorable")
}
