package inspect_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func options(c *testenv.EtcdCluster, timeout time.Duration) inspect.Options {
	return inspect.Options{Etcd: testfix.EtcdConfig(c), Timeout: timeout}
}

// storeOptions are options(c, 2 s) for cluster id with a new bucket and
// prefix of the shared MinIO as the backup store.
func storeOptions(t *testing.T, c *testenv.EtcdCluster, id string) (inspect.Options, store.Store, catalog.Layout) {
	t.Helper()
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	o := options(c, 2*time.Second)
	o.Store, o.Layout, o.ClusterID, o.Location = testfix.Store(t, m, bucket), catalog.Layout{Prefix: testenv.Prefix(t)}, id, bucket
	return o, o.Store, o.Layout
}

// run inspects and logs the table, so a failing test shows what inspect saw.
func run(t *testing.T, o inspect.Options) (*inspect.Report, time.Duration) {
	t.Helper()
	start := time.Now()
	rep, err := inspect.Run(context.Background(), o)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	var buf bytes.Buffer
	if err := inspect.Render(&buf, output.FormatTable, rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("inspect took %v:\n%s", took.Round(time.Millisecond), buf.String())
	return rep, took
}

func member(t *testing.T, rep *inspect.Report, name string) inspect.MemberHealth {
	t.Helper()
	for _, m := range rep.Members {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("member %s not in the report", name)
	return inspect.MemberHealth{}
}

func hasFlag(rep *inspect.Report, kind inspect.FlagKind, substr string) bool {
	for _, f := range rep.Flags {
		if f.Kind == kind && strings.Contains(f.Message, substr) {
			return true
		}
	}
	return false
}

// followers returns the members that are not the leader.
func followers(t *testing.T, c *testenv.EtcdCluster) (leader *testenv.EtcdMember, fs []*testenv.EtcdMember) {
	leader = c.Leader(t)
	for _, m := range c.Members {
		if m != leader {
			fs = append(fs, m)
		}
	}
	return leader, fs
}

// Every supported etcd generation, 3 members with mutual TLS: HEALTHY,
// everything filled in.
func TestInspectHealthy(t *testing.T) {
	t.Parallel()
	for _, v := range testenv.AllVersions {
		t.Run(string(v), func(t *testing.T) {
			t.Parallel()
			c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, TLS: true})
			testenv.PutKeys(t, c.Client(t), "/k/", 50, 128)
			leader := c.Leader(t)
			rep, _ := run(t, options(c, 3*time.Second))
			if rep.Verdict != inspect.VerdictHealthy || rep.ExitCode() != 0 {
				t.Fatalf("verdict %s (%s)", rep.Verdict, rep.Summary)
			}
			if rep.Voting != 3 || rep.Quorum != 2 || rep.Up != 3 || rep.Tolerates != 1 {
				t.Errorf("voting %d quorum %d up %d tolerates %d", rep.Voting, rep.Quorum, rep.Up, rep.Tolerates)
			}
			if rep.Leader != leader.Name {
				t.Errorf("leader %q, want %s", rep.Leader, leader.Name)
			}
			if len(rep.Flags) != 0 || rep.NextStep.Action != "none" || len(rep.Warnings) != 0 || rep.MemberList != "from the cluster" {
				t.Errorf("flags %+v next %+v warnings %v list %q", rep.Flags, rep.NextStep, rep.Warnings, rep.MemberList)
			}
			if len(rep.Members) != 3 || rep.ClusterID == "" {
				t.Fatalf("members %+v cluster %q", rep.Members, rep.ClusterID)
			}
			for _, em := range c.Members {
				m := member(t, rep, em.Name)
				if m.Health != inspect.HealthHealthy || !m.LinearizableRead || !m.SerializableRead || !m.StatusOK || m.Error != "" {
					t.Errorf("%s: %+v", m.Name, m)
				}
				if m.ClientURL != em.ClientURL || m.ID == "" || !strings.HasPrefix(m.Version, string(v)+".") || m.ClusterID != rep.ClusterID {
					t.Errorf("%s: url %s id %q version %q cluster %q", m.Name, m.ClientURL, m.ID, m.Version, m.ClusterID)
				}
				if m.DBSize <= 0 || m.DBSizeInUse <= 0 || m.RaftTerm == 0 || m.RaftIndex == 0 || m.AppliedIndex == 0 || m.Lag > 100 {
					t.Errorf("%s: db %d/%d term %d index %d applied %d lag %d", m.Name, m.DBSize, m.DBSizeInUse, m.RaftTerm, m.RaftIndex, m.AppliedIndex, m.Lag)
				}
				if m.Leader != (m.Name == leader.Name) || len(m.Alarms) != 0 || m.LatencyMS <= 0 {
					t.Errorf("%s: leader %v alarms %v latency %v", m.Name, m.Leader, m.Alarms, m.LatencyMS)
				}
			}
		})
	}
}

// Members die one by one: DEGRADED, QUORUM LOST with the survivor alive
// without quorum, then UNREACHABLE.
func TestInspectMemberLoss(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true})
	leader, fs := followers(t, c)

	fs[0].Kill()
	rep, _ := run(t, options(c, 2*time.Second))
	if rep.Verdict != inspect.VerdictDegraded || rep.ExitCode() != 1 || rep.Up != 2 || rep.Tolerates != 0 || rep.Leader != leader.Name {
		t.Errorf("one killed: %s up %d tolerates %d leader %q (%s)", rep.Verdict, rep.Up, rep.Tolerates, rep.Leader, rep.Summary)
	}
	if m := member(t, rep, fs[0].Name); m.Health != inspect.HealthDown || !strings.Contains(m.Error, "connection refused") {
		t.Errorf("killed member: %s %q", m.Health, m.Error)
	}
	if !strings.Contains(rep.Summary, "tolerates 0 more failures") || !hasFlag(rep, inspect.FlagMemberDown, fs[0].Name) {
		t.Errorf("summary %q flags %+v", rep.Summary, rep.Flags)
	}
	if rep.NextStep.Runbooks[0] != inspect.RunbookReplaceMember || !strings.Contains(rep.NextStep.Action, fs[0].Name) {
		t.Errorf("next step %+v", rep.NextStep)
	}

	fs[1].Kill()
	rep, _ = run(t, options(c, 2*time.Second))
	if rep.Verdict != inspect.VerdictQuorumLost || rep.ExitCode() != 2 || rep.Alive != 1 || rep.Up != 0 {
		t.Fatalf("two killed: %s alive %d up %d (%s)", rep.Verdict, rep.Alive, rep.Up, rep.Summary)
	}
	s := member(t, rep, leader.Name)
	if s.Health != inspect.HealthNoQuorum || !s.SerializableRead || s.LinearizableRead || !s.StatusOK {
		t.Errorf("survivor: want alive without quorum (serializable read OK, linearizable fails): %+v", s)
	}
	if !strings.Contains(s.Error, "linearizable read failed") {
		t.Errorf("survivor error %q", s.Error)
	}
	if !hasFlag(rep, inspect.FlagMemberDown, leader.Name+" is alive but has no quorum") {
		t.Errorf("flags %+v", rep.Flags)
	}
	if got := strings.Join(rep.NextStep.Runbooks, " "); got != inspect.RunbookSurvivorSnapshot+" "+inspect.RunbookRestore ||
		!strings.Contains(rep.NextStep.Action, "survivor snapshot of "+leader.Name) {
		t.Errorf("next step %+v", rep.NextStep)
	}

	leader.Kill()
	rep, took := run(t, options(c, 2*time.Second))
	if rep.Verdict != inspect.VerdictUnreachable || rep.ExitCode() != 3 || rep.NextStep.Runbooks[0] != inspect.RunbookUnreachable {
		t.Errorf("all killed: %s %+v", rep.Verdict, rep.NextStep)
	}
	if took > 4*time.Second {
		t.Errorf("all killed: took %v with --timeout 2s", took)
	}
}

// 5 members, 2 killed: quorum 3 held, no failure left to spare.
func TestInspectFiveMembersTwoDown(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 5, TLS: true})
	leader, fs := followers(t, c)
	fs[1].Kill()
	fs[3].Kill()
	rep, _ := run(t, options(c, 3*time.Second))
	if rep.Verdict != inspect.VerdictDegraded || rep.Voting != 5 || rep.Quorum != 3 || rep.Up != 3 || rep.Tolerates != 0 {
		t.Errorf("%s voting %d quorum %d up %d tolerates %d (%s)", rep.Verdict, rep.Voting, rep.Quorum, rep.Up, rep.Tolerates, rep.Summary)
	}
	if rep.Leader != leader.Name || !strings.Contains(rep.Summary, "tolerates 0 more failures") {
		t.Errorf("leader %q summary %q", rep.Leader, rep.Summary)
	}
	for _, m := range []*testenv.EtcdMember{fs[1], fs[3]} {
		if member(t, rep, m.Name).Health != inspect.HealthDown || !strings.Contains(rep.NextStep.Action, m.Name) {
			t.Errorf("%s: %+v, next %q", m.Name, member(t, rep, m.Name), rep.NextStep.Action)
		}
	}
}

// A frozen member (SIGSTOP: the port accepts connections, nothing answers)
// costs one timeout, not one per call. The timeout is the default (3s): a
// healthy member of a test machine under load (the race lane beside the
// main run) once took more than 1s to answer, and was then reported down.
func TestInspectFrozenMember(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true})
	_, fs := followers(t, c)
	frozen := fs[0]
	frozen.Freeze()
	t.Cleanup(frozen.Thaw)
	const timeout = inspect.DefaultTimeout
	for i := range 2 { // the second run must be as fast: nothing is cached
		rep, took := run(t, options(c, timeout))
		t.Logf("run %d with a frozen member and --timeout %v: %v", i, timeout, took)
		if took > timeout*5/2 {
			t.Errorf("took %v with a frozen member and --timeout %v: want about one timeout", took, timeout)
		}
		if rep.Verdict != inspect.VerdictDegraded || rep.Up != 2 || rep.Tolerates != 0 {
			t.Errorf("%s up %d (%s)", rep.Verdict, rep.Up, rep.Summary)
		}
		m := member(t, rep, frozen.Name)
		if m.Health != inspect.HealthDown || !strings.Contains(m.Error, "no answer within "+timeout.String()) {
			t.Errorf("frozen member: %s %q", m.Health, m.Error)
		}
	}
}

// Only one member in --endpoints: the others come from its member list,
// the healthy one and the dead one.
func TestInspectPartialEndpoints(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V36, TLS: true})
	leader, fs := followers(t, c)
	fs[1].Kill()
	o := options(c, 2*time.Second)
	o.Etcd.Endpoints = []string{strings.TrimPrefix(fs[0].ClientURL, "https://")} // bare host:port, as etcdctl takes it
	rep, _ := run(t, o)
	if len(rep.Members) != 3 || len(rep.Endpoints) != 1 || rep.Endpoints[0] != fs[0].ClientURL {
		t.Fatalf("members %d endpoints %v", len(rep.Members), rep.Endpoints)
	}
	if member(t, rep, leader.Name).Health != inspect.HealthHealthy || member(t, rep, fs[0].Name).Health != inspect.HealthHealthy {
		t.Errorf("healthy members: %+v", rep.Members)
	}
	if m := member(t, rep, fs[1].Name); m.Health != inspect.HealthDown || m.ClientURL != fs[1].ClientURL {
		t.Errorf("member missing from --endpoints and dead: %+v", m)
	}
	if rep.Verdict != inspect.VerdictDegraded || rep.Leader != leader.Name {
		t.Errorf("%s leader %q", rep.Verdict, rep.Leader)
	}
}

// Endpoints of two different clusters: the one not in the member list is
// shown as unlisted and the different cluster IDs are flagged.
func TestInspectTwoClusters(t *testing.T) {
	t.Parallel()
	a := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	b := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true, PKI: a.PKI})
	o := options(a, 2*time.Second)
	o.Etcd.Endpoints = []string{a.Members[0].ClientURL, b.Members[0].ClientURL}
	rep, _ := run(t, o)
	if len(rep.Members) != 2 || rep.Voting != 1 {
		t.Fatalf("members %+v voting %d", rep.Members, rep.Voting)
	}
	if !hasFlag(rep, inspect.FlagSplitBrain, "different cluster IDs") || !hasFlag(rep, inspect.FlagUnlisted, "") || rep.Verdict != inspect.VerdictDegraded {
		t.Errorf("%s flags %+v", rep.Verdict, rep.Flags)
	}
}

// A small quota filled up: the NOSPACE alarm is shown, flagged, and is the
// next step.
func TestInspectNoSpace(t *testing.T) {
	t.Parallel()
	const quota = 16 << 20
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, QuotaBackendBytes: quota})
	cli := c.Client(t)
	val := strings.Repeat("x", 512<<10)
	var err error
	for i := 0; i < 200 && err == nil; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = cli.Put(ctx, "/fill/"+strconv.Itoa(i), val)
		cancel()
	}
	if err == nil || !strings.Contains(err.Error(), "database space exceeded") {
		t.Fatalf("filling a %d-byte quota: %v", quota, err)
	}
	o := options(c, 3*time.Second)
	o.Thresholds.QuotaBytes = quota
	rep, _ := run(t, o)
	var with []string
	for _, m := range rep.Members {
		for _, a := range m.Alarms {
			if a == inspect.AlarmNoSpace {
				with = append(with, m.Name)
			}
		}
	}
	if len(with) == 0 {
		t.Errorf("no member shows the NOSPACE alarm: %+v", rep.Members)
	}
	if !hasFlag(rep, inspect.FlagAlarm, "NOSPACE alarm on") || !hasFlag(rep, inspect.FlagNearQuota, "of the 16.0 MiB quota") {
		t.Errorf("flags %+v", rep.Flags)
	}
	if rep.Verdict != inspect.VerdictDegraded || rep.Up != 3 || rep.NextStep.Runbooks[0] != inspect.RunbookNoSpace {
		t.Errorf("%s up %d next %+v", rep.Verdict, rep.Up, rep.NextStep)
	}
}

// writeBackup commits a backup folder directly, as a backup taken at t.
func writeBackup(t *testing.T, st store.Store, layout catalog.Layout, id string, at time.Time, rev int64) string {
	t.Helper()
	name := catalog.BackupName(at, catalog.KindScheduled)
	snap := []byte("not really a snapshot")
	ctx := context.Background()
	if _, err := st.Put(ctx, layout.Key(id, name, catalog.SnapshotObjectRaw), bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	body, err := catalog.MarshalManifest(&catalog.Manifest{
		Format: catalog.ManifestFormat, ClusterID: id, Name: name, Kind: catalog.KindScheduled,
		StartedAt: at.UTC(), FinishedAt: at.UTC().Add(time.Second),
		Source:         catalog.Member{Name: "m0", ID: "1", Endpoint: "https://127.0.0.1:2379"},
		RevisionBefore: rev, RevisionAfter: rev,
		Snapshot: catalog.SnapshotInfo{Object: catalog.SnapshotObjectRaw, Compression: objectio.CompressNone,
			RawSize: int64(len(snap)), RawSHA256: testfix.SHA256(snap), StoredSize: int64(len(snap)), StoredSHA256: testfix.SHA256(snap)},
		ToolVersion: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, layout.Key(id, name, catalog.ManifestObject), bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	return name
}

func rep0(t *testing.T, o inspect.Options) *inspect.Report {
	t.Helper()
	rep, _ := run(t, o)
	if rep.Backup == nil || rep.Backup.Newest == nil {
		t.Fatalf("no newest backup: %+v", rep.Backup)
	}
	return rep
}

// closedPort is a port nothing listens on: reserved by testenv below the
// kernel's ephemeral range (so no outgoing connection's source port can
// take it) and never bound.
func closedPort(t *testing.T) int {
	t.Helper()
	return testenv.FreePort(t)
}

// Backup freshness against a real MinIO: missing, stale, fresh; a broken
// store is a warning that leaves the verdict alone.
func TestInspectBackupFreshness(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	const id = "fresh-check"
	o, st, layout := storeOptions(t, c, id)

	t.Run("missing", func(t *testing.T) {
		// An incomplete folder (no manifest) is not a backup.
		if _, err := st.Put(context.Background(), layout.Key(id, catalog.BackupName(time.Now(), catalog.KindScheduled), catalog.SnapshotObjectRaw),
			strings.NewReader("partial")); err != nil {
			t.Fatal(err)
		}
		rep, _ := run(t, o)
		if rep.Backup == nil || rep.Backup.State != inspect.BackupMissing || !hasFlag(rep, inspect.FlagBackupMissing, "no backup") {
			t.Fatalf("backup %+v flags %+v", rep.Backup, rep.Flags)
		}
		if rep.Verdict != inspect.VerdictHealthy || rep.NextStep.Runbooks[0] != inspect.RunbookMissedBackup {
			t.Errorf("%s %+v", rep.Verdict, rep.NextStep)
		}
	})
	var stale string
	t.Run("stale", func(t *testing.T) {
		stale = writeBackup(t, st, layout, id, time.Now().Add(-10*time.Hour), 1234)
		rep, _ := run(t, o)
		b := rep.Backup
		if b == nil || b.State != inspect.BackupStale || b.Newest == nil || b.Newest.Name != stale || b.Newest.Revision != 1234 || b.Newest.Kind != "scheduled" {
			t.Fatalf("backup %+v", b)
		}
		if !strings.HasPrefix(b.AgeText, "10h") || b.MaxAgeText != "9h0m0s" || !hasFlag(rep, inspect.FlagBackupStale, stale) {
			t.Errorf("age %q max %q flags %+v", b.AgeText, b.MaxAgeText, rep.Flags)
		}
		if rep.Verdict != inspect.VerdictHealthy || rep.ExitCode() != 0 || rep.NextStep.Runbooks[0] != inspect.RunbookMissedBackup {
			t.Errorf("%s %+v", rep.Verdict, rep.NextStep)
		}
		o2 := o
		o2.MaxBackupAge = 11 * time.Hour
		if rep, _ := run(t, o2); rep.Backup.State != inspect.BackupOK {
			t.Errorf("--max-backup-age 11h: %+v", rep.Backup)
		}
	})
	t.Run("fresh", func(t *testing.T) {
		res, err := backup.Run(context.Background(), backup.Options{ClusterID: id, Kind: catalog.KindScheduled,
			Etcd: testfix.EtcdConfig(c), Store: st, Layout: layout, ProbeTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rep, _ := run(t, o)
		b := rep.Backup
		if b == nil || b.State != inspect.BackupOK || b.Newest == nil || b.Newest.Name != res.Manifest.Name || b.Newest.Revision != res.Manifest.RevisionBefore {
			t.Fatalf("backup %+v, want %s", b, res.Manifest.Name)
		}
		// Fresh, never drilled: the warnings are the drill's
		// (TestInspectDrill) and the escrow's: a backup without a recipient
		// has no escrow (the escrow subtest below).
		if b.Age > time.Minute || len(rep.Flags) != 2 || !hasFlag(rep, inspect.FlagDrillMissing, "never drilled") ||
			!hasFlag(rep, inspect.FlagEscrowUnusable, "has no usable escrow") ||
			rep.NextStep.Runbooks[0] != inspect.RunbookDrill || rep.Verdict != inspect.VerdictHealthy {
			t.Errorf("age %v flags %+v next %+v", b.Age, rep.Flags, rep.NextStep)
		}
	})
	t.Run("damaged newest", func(t *testing.T) {
		// A newer backup whose snapshot object is gone does not count: the
		// freshness is the newest backup that would restore's.
		good := rep0(t, o).Backup.Newest.Name
		broken := writeBackup(t, st, layout, id, time.Now(), 99)
		if err := st.Delete(context.Background(), []string{layout.Key(id, broken, catalog.SnapshotObjectRaw)}); err != nil {
			t.Fatal(err)
		}
		rep, _ := run(t, o)
		b := rep.Backup
		if b == nil || b.Newest == nil || b.Newest.Name != good || len(b.Unreadable) != 1 ||
			!strings.Contains(b.Unreadable[0], broken) || !strings.Contains(b.Unreadable[0], "missing") {
			t.Fatalf("backup %+v, want newest %s and %s reported damaged", b, good, broken)
		}
		if !hasFlag(rep, inspect.FlagBackupUnreadable, broken) {
			t.Errorf("flags %+v", rep.Flags)
		}
	})
	t.Run("store down", func(t *testing.T) {
		o2 := o
		o2.Store = testfix.Store(t, testenv.SharedMinIO(t), o.Location, func(cfg *cos.Config) {
			cfg.Endpoint = "http://127.0.0.1:" + strconv.Itoa(closedPort(t))
		})
		rep, _ := run(t, o2)
		if rep.Backup == nil || rep.Backup.State != inspect.BackupUnknown || rep.Backup.Error == "" || !hasFlag(rep, inspect.FlagBackupUnknown, "") {
			t.Fatalf("backup %+v flags %+v", rep.Backup, rep.Flags)
		}
		if rep.Verdict != inspect.VerdictHealthy || rep.ExitCode() != 0 {
			t.Errorf("a store failure changed the verdict: %s", rep.Verdict)
		}
	})
	t.Run("escrow", func(t *testing.T) {
		// The newest backup's escrow, from its manifest: usable with a
		// certificate 60 days out is quiet; one expiring in 10 days, or
		// expired, warns; a missing escrow warns; each names the runbook.
		now := time.Now()
		for i, tc := range []struct {
			name     string
			ref      *catalog.EscrowRef
			flag     inspect.FlagKind
			severity inspect.Severity
			says     string
			line     string
		}{
			{"usable, 60 days", testfix.StoredEscrow(catalog.EscrowPresent, testfix.EscrowAddress("60"), testfix.EscrowCert("etcd-x-server-tls", now.Add(60*24*time.Hour))),
				"", "", "", "PRESENT"},
			{"expires in 10 days", testfix.StoredEscrow(catalog.EscrowPresent, testfix.EscrowAddress("10"), testfix.EscrowCert("etcd-x-server-tls", now.Add(60*24*time.Hour)),
				testfix.EscrowCert("etcd-x-client-tls", now.Add(10*24*time.Hour))),
				inspect.FlagCertExpiring, inspect.SeverityWarning, "escrowed certificate etcd-x-client-tls (CN=etcd-x-client-tls) of cluster fresh-check", "etcd-x-client-tls, in 9d"},
			{"expired", testfix.StoredEscrow(catalog.EscrowPresent, testfix.EscrowAddress("0"), testfix.EscrowCert("etcd-x-peer-tls", now.Add(-time.Hour))),
				inspect.FlagCertExpiring, inspect.SeverityCritical, "etcd-x-peer-tls (CN=etcd-x-peer-tls) of cluster fresh-check in", "EXPIRED"},
			{"missing", &catalog.EscrowRef{State: catalog.EscrowMissing, Problems: []string{"secret etcd-x-peer-tls not found"}},
				inspect.FlagEscrowUnusable, inspect.SeverityWarning, "no usable escrow (escrow missing: secret etcd-x-peer-tls not found)", "MISSING"},
		} {
			name := testfix.PutEscrowBackup(t, st, layout, id, now.Add(time.Duration(i+1)*time.Second), tc.ref)
			rep, _ := run(t, o)
			e := rep.Backup.Escrow
			if e == nil || e.Backup != name || e.State != tc.ref.State || e.Usable != tc.ref.Usable() {
				t.Fatalf("%s: escrow %+v, want %s's, state %s", tc.name, e, name, tc.ref.State)
			}
			var got []inspect.Flag
			for _, f := range rep.Flags {
				if f.Kind == inspect.FlagEscrowUnusable || f.Kind == inspect.FlagCertExpiring {
					got = append(got, f)
				}
			}
			switch {
			case tc.flag == "" && len(got) != 0:
				t.Errorf("%s: escrow flags %+v, want none", tc.name, got)
			case tc.flag != "" && (len(got) != 1 || got[0].Kind != tc.flag || got[0].Severity != tc.severity ||
				!strings.Contains(got[0].Message, tc.says) || got[0].Runbook != inspect.RunbookNamespaceGone):
				t.Errorf("%s: escrow flags %+v, want one %s %s saying %q, runbook %s", tc.name, got, tc.severity, tc.flag, tc.says, inspect.RunbookNamespaceGone)
			}
			if l := lineOf(t, rep, "ESCROW: "); !strings.Contains(l, tc.line) || !strings.Contains(l, name) {
				t.Errorf("%s: %s", tc.name, l)
			}
		}
	})
}

// A frozen object store does not hold inspect beyond its bound.
func TestInspectFrozenStore(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	m := testenv.StartMinIO(t)
	st := testfix.Store(t, m, m.NewBucket(t))
	m.Freeze()
	t.Cleanup(m.Thaw)
	o := options(c, time.Second)
	o.Store, o.Layout, o.ClusterID = st, catalog.Layout{}, "frozen-store"
	rep, took := run(t, o)
	if took > 5*time.Second/2 {
		t.Errorf("took %v with a frozen store and --timeout 1s", took)
	}
	if rep.Verdict != inspect.VerdictHealthy || rep.Backup == nil || rep.Backup.State != inspect.BackupUnknown {
		t.Errorf("%s backup %+v", rep.Verdict, rep.Backup)
	}
}

// Cancelling the context stops inspect with the context's error.
func TestInspectCancelled(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	c.Members[0].Freeze()
	t.Cleanup(c.Members[0].Thaw)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := inspect.Run(ctx, options(c, 5*time.Second))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Errorf("err %v after %v", err, time.Since(start))
	}
}

// A store call that ignores its context (a misbehaving backend) cannot hold
// inspect past its deadline: the report comes at 2 × --timeout, with the
// backup freshness unknown and the etcd verdict unchanged.
func TestInspectStoreIgnoringContext(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	m := testenv.SharedMinIO(t)
	fs := faults.Wrap(testfix.Store(t, m, m.NewBucket(t)))
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	fs.Inject(faults.Fault{Op: faults.OpList, Kind: faults.Hook,
		Func: func(context.Context, string) { <-release }}) // blocks, whatever the context says
	const timeout = time.Second
	o := options(c, timeout)
	o.Store, o.Layout, o.ClusterID, o.Location = fs, catalog.Layout{Prefix: testenv.Prefix(t)}, "ignores-ctx", "b"
	rep, took := run(t, o)
	if bound := 2*timeout + 30*time.Second; took > bound {
		t.Errorf("inspect took %v, bound %v", took, bound)
	}
	if rep.Backup == nil || rep.Backup.State != inspect.BackupUnknown || !strings.Contains(rep.Backup.Error, "no answer") {
		t.Fatalf("backup %+v", rep.Backup)
	}
	if rep.Verdict != inspect.VerdictHealthy {
		t.Errorf("verdict %s", rep.Verdict)
	}
}
