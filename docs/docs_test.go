package docs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// connectionRef is the block every command of these documents runs after,
// as the runbooks' do: the connection settings an SRE has exported.
const connectionRef = "README.md#connection-settings"

// parse reads the documents (docs/*.md), the runbooks (for their
// connection settings) and the repository's README.md.
func parse(tb testing.TB) (docs, runbooks mdblocks.Set, readme *mdblocks.Doc) {
	tb.Helper()
	docs = mdblocks.ParseDir(tb, ".", "docs/")
	runbooks = mdblocks.ParseDir(tb, filepath.Join("..", "runbooks"), "runbooks/")
	readme, err := mdblocks.ParseFile(filepath.Join("..", "README.md"), "")
	if err != nil {
		tb.Fatal(err)
	}
	return docs, runbooks, readme
}

func prelude(tb testing.TB, runbooks mdblocks.Set) *mdblocks.Block {
	tb.Helper()
	b, err := runbooks.Blocks(connectionRef)
	if err != nil || len(b) != 1 {
		tb.Fatalf("runbooks/%s: want exactly one block of connection settings: %v", connectionRef, err)
	}
	return b[0]
}

// sections are the sections the scenarios run, by scenario: every block
// of docs/ that is not marked "not run by the tests" must lie in one.
var sections = map[string][]string{
	"cluster": {
		"flags.md#commands-and-flags",
		"exit-codes.md#exit-codes",
		"backup.md#take-a-backup",
		"inspect.md#inspect",
		"drills.md#drill-a-backup",
		"drills.md#in-the-backup-run",
		"drills.md#every-cluster",
		"backup.md#retention",
		"backup.md#deleting-backups",
		"testing.md#test-servers",
	},
	"restore": {
		"restore.md#plan-then-write-the-data-dirs",
		"restore.md#verify-the-new-cluster",
	},
	"encryption": {
		"encryption.md#encrypt-a-backup",
	},
	"kubernetes": {
		"kubernetes.md#install",
		"kubernetes.md#back-up-a-namespace",
		"drills.md#every-cluster-of-a-namespace",
		"metrics.md#the-exporter-etcd-recovery-serve",
	},
}

// placeholders are those the scenarios fill: the runbooks' (their
// fixture) and the documents' own (docs/testing.md lists them).
var placeholders = []string{
	"id", "endpoints", "tls-dir", "member-tls-dir", "cos-endpoint", "cos-region", "bucket", "prefix", "cos-credentials-dir",
	"old-endpoints", "new-initial-cluster", "new-token", "data-dir-root", "new-endpoints", "backup",
	"recipient", "identity-file", "namespace", "metrics-port", "values", "update",
}

// TestDocsStructure: every shell block of README.md and docs/ is a ```sh
// block, runs in a scenario's section or says why it cannot, and uses only
// placeholders the scenarios fill; no command hides in an indented code
// block.
func TestDocsStructure(t *testing.T) {
	docs, runbooks, readme := parse(t)
	prelude(t, runbooks)
	known := map[string]bool{}
	for _, p := range placeholders {
		known[p] = true
	}
	covered := map[string]string{}
	for sc, refs := range sections {
		for _, ref := range refs {
			blocks, err := docs.Blocks(ref)
			if err != nil {
				t.Errorf("scenario %s: %v", sc, err)
				continue
			}
			for _, b := range blocks {
				covered[b.ID()] = sc
			}
		}
	}
	all := []*mdblocks.Doc{readme}
	for _, d := range docs {
		all = append(all, d)
	}
	run, marked := 0, 0
	for _, d := range all {
		for _, line := range d.Indented {
			t.Errorf("%s:%d: an indented code block: fence it (```sh for commands, so that the tests run them; ``` for output)", d.Path, line)
		}
		for _, b := range d.Blocks {
			if b.Lang != "sh" {
				t.Errorf("%s: a ```%s block: write commands as ```sh blocks (the tests run those)", b.ID(), b.Lang)
			}
			if b.Opts.NotRun != "" {
				marked++
				t.Logf("not run by the tests: %s: %s", b.ID(), b.Opts.NotRun)
				continue
			}
			run++
			if d == readme {
				t.Errorf("%s: README.md's blocks are not run: mark it <!-- not run by the tests: REASON --> or move it to docs/", b.ID())
				continue
			}
			if covered[b.ID()] == "" {
				t.Errorf("%s: no scenario runs the section of this block (docs_test.go's sections): run it, or mark it <!-- not run by the tests: REASON -->", b.ID())
			}
			for _, p := range mdblocks.Placeholders(b.Code) {
				if !known[p] {
					t.Errorf("%s: placeholder <%s> is not one the scenarios fill (docs_test.go's placeholders, described in docs/testing.md)", b.ID(), p)
				}
			}
		}
	}
	t.Logf("%d shell blocks run by the scenarios, %d marked not run", run, marked)
}

// TestLinks: every relative link of README.md, docs/ and runbooks/ names a
// file or directory of the repository, and its #anchor a heading of the
// Markdown file it names (GitHub's anchors). External links are not
// fetched.
func TestLinks(t *testing.T) {
	docs, runbooks, readme := parse(t)
	root := testenv.RepoRoot(t)
	cache := map[string]*mdblocks.Doc{}
	all := []*mdblocks.Doc{readme}
	for _, set := range []mdblocks.Set{docs, runbooks} {
		for _, d := range set {
			all = append(all, d)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Path < all[j].Path })
	n := 0
	for _, d := range all {
		for _, err := range mdblocks.CheckLinks(d, root, cache) {
			t.Error(err)
		}
		for _, l := range d.Links {
			if !mdblocks.External(l.Target) {
				n++
			}
		}
	}
	if n < 50 {
		t.Fatalf("only %d relative links found in %d files: is the link parser broken?", n, len(all))
	}
	t.Logf("%d relative links checked in %d files", n, len(all))
}

// projectOnly are phrases about how the project was made rather than what
// it is: work sessions and issue numbers.
var projectOnly = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\bsession\s*#?\s*\d+`),
	regexp.MustCompile(`(?i)\b(?:this|that|the\s+latest|the\s+last|a\s+previous|the\s+previous|the\s+next)\s+session\b`),
	regexp.MustCompile(`(?i)\b(?:issue|issues|ticket|pr|pull\s+request)\s*#?\s*\d+`),
	regexp.MustCompile(`(?:^|[\s(,;])#\d+\b`),
}

// TestWorkHistoryPatterns: the patterns catch what they are for, and not
// ordinary text. (The samples are split so that this file passes the scan
// it tests.)
func TestWorkHistoryPatterns(t *testing.T) {
	s, i, h := "sess"+"ion", "iss"+"ue", "#"
	for _, text := range []string{
		"measured, " + s + " 8", "this " + s + "'s numbers", "the latest " + s, i + " " + h + "15", "(" + i + " 14)",
		i + " 11, item 8", "Iss" + "ues 12", "see " + h + "16", "P" + "R 7",
	} {
		if !matchesAny(text) {
			t.Errorf("%q is not caught", text)
		}
	}
	for _, text := range []string{
		"a TLS " + s + " ticket", "the " + i + "r's name", "#L12", "restore.md#verify-the-new-cluster", "HTTP 412", "sha256",
	} {
		if matchesAny(text) {
			t.Errorf("%q is caught", text)
		}
	}
}

// TestWorkHistoryAcrossLines: a phrase split by a line break is caught,
// once.
func TestWorkHistoryAcrossLines(t *testing.T) {
	s := "sess" + "ion"
	for text, want := range map[string]int{
		"four runs of this\n" + s + "'s code": 1,
		"see " + s + " 8 and\nmore":           1,
		"a TLS\n" + s + " ticket":             0,
		"the iss" + "ue\n12 rows":             1,
	} {
		if got := len(workHistory(text)); got != want {
			t.Errorf("%q: %d matches %v, want %d", text, got, workHistory(text), want)
		}
	}
}

func matchesAny(text string) bool {
	for _, re := range projectOnly {
		if re.MatchString(text) {
			return true
		}
	}
	return false
}

// TestNoWorkHistory: README.md, docs/ and runbooks/ speak of the project
// itself, not of the sessions or issues it was built in.
func TestNoWorkHistory(t *testing.T) {
	root := testenv.RepoRoot(t)
	var files []string
	files = append(files, filepath.Join(root, "README.md"))
	for _, dir := range []string{"docs", "runbooks"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, m := range workHistory(string(b)) {
			t.Errorf("%s:%d: %q: say what the project does, not how its development was organised", rel, m.line, m.text)
		}
	}
}

type historyMatch struct {
	line int
	text string
}

// workHistory finds projectOnly's phrases in text, on one line or across
// a line break ("of this" at a line's end, "session's" at the next one's
// start).
func workHistory(text string) []historyMatch {
	var out []historyMatch
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		for _, re := range projectOnly {
			if m := re.FindString(line); m != "" {
				out = append(out, historyMatch{i + 1, strings.TrimSpace(m)})
			}
		}
		if i+1 == len(lines) {
			continue
		}
		// Joined with the next line: only a match across the join counts
		// (one inside either line is found on its own).
		a, b := strings.TrimSpace(line), strings.TrimSpace(lines[i+1])
		pair := a + " " + b
		for _, re := range projectOnly {
			for _, loc := range re.FindAllStringIndex(pair, -1) {
				if loc[0] < len(a) && loc[1] > len(a)+1 {
					out = append(out, historyMatch{i + 1, pair[loc[0]:loc[1]]})
				}
			}
		}
	}
	return out
}

// TestDocs runs every section of docs/ that has commands, in the scenario
// it needs (in parallel), then checks that every runnable block ran.
func TestDocs(t *testing.T) {
	docs, runbooks, _ := parse(t)
	conn := prelude(t, runbooks)
	scenarios := map[string]func(t *testing.T, docs mdblocks.Set, conn *mdblocks.Block){
		"cluster":    clusterScenario,
		"restore":    restoreScenario,
		"encryption": encryptionScenario,
		"kubernetes": kubernetesScenario,
	}
	run := map[string]func(t *testing.T, docs mdblocks.Set){}
	for name, fn := range scenarios {
		run[name] = func(t *testing.T, docs mdblocks.Set) { fn(t, docs, conn) }
	}
	mdblocks.RunScenarios(t, docs, "docs/", run)
}

// runSection runs the section ref in s, which must be one of the
// scenario's (sections): the structure test relies on that list.
func runSection(t *testing.T, s *mdblocks.Scenario, scenario, ref string) []mdblocks.Result {
	t.Helper()
	for _, r := range sections[scenario] {
		if r == ref {
			return s.Run(ref)
		}
	}
	t.Fatalf("section %s is not in scenario %s's list (sections in docs_test.go)", ref, scenario)
	return nil
}

// linkRepo makes the repository's directories a block names (deploy/,
// scripts/) available in the scenario's working directory, as they are in a
// clone.
func linkRepo(t *testing.T, s *mdblocks.Scenario, dirs ...string) {
	t.Helper()
	root := testenv.RepoRoot(t)
	for _, d := range dirs {
		if err := os.Symlink(filepath.Join(root, d), filepath.Join(s.Dir, d)); err != nil {
			t.Fatal(err)
		}
	}
}

func committed(t *testing.T, f *mdblocks.Fixture, id string) []catalog.Entry {
	t.Helper()
	entries, err := catalog.Inventory(context.Background(), f.Store, f.Layout, id)
	if err != nil {
		t.Fatal(err)
	}
	var out []catalog.Entry
	for _, e := range entries {
		if e.Committed {
			out = append(out, e)
		}
	}
	return out
}

// clusterScenario: a 3-member etcd 3.5 cluster with mutual TLS and MinIO.
// The reference's commands, a backup, inspect, drills (one, after a backup,
// every cluster id), retention, deletes, and the test-server cache.
func clusterScenario(t *testing.T, docs mdblocks.Set, conn *mdblocks.Block) {
	const sc = "cluster"
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/registry/configmaps/", 100, 200)
	f := mdblocks.NewFixture(t, c.PKI, c.Endpoints())
	s := mdblocks.NewScenario(t, docs, conn, f.Vars)
	linkRepo(t, s, "scripts")

	rs := runSection(t, s, sc, "flags.md#commands-and-flags")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "etcd-recovery --help", 0), "COMMANDS:", "backup", "restore", "drill", "serve")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "backup --help", 0), "--cos-stall-timeout", "$COS_STALL_TIMEOUT")

	rs = runSection(t, s, sc, "exit-codes.md#exit-codes")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "--prefix", 0), "kubx-etcd-01//x")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "restor ", 0), `unknown command "restor"`)

	rs = runSection(t, s, sc, "backup.md#take-a-backup")
	first := committed(t, f, f.ID)
	if len(first) != 1 || first[0].Kind != catalog.KindManual {
		t.Fatalf("after the backup: %d committed backups %+v, want one manual", len(first), first)
	}
	mdblocks.MustContain(t, mdblocks.One(t, rs, "etcd-recovery list", 0), first[0].Name, "manual")

	rs = runSection(t, s, sc, "inspect.md#inspect")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "inspect --cluster-id <id>\n", 0), "HEALTHY", "never drilled")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "-o json", 0), `"verdict"`)

	rs = runSection(t, s, sc, "drills.md#drill-a-backup")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "etcd-recovery drill", 0), first[0].Name, "passed", "source")
	runSection(t, s, sc, "drills.md#in-the-backup-run")
	if got := committed(t, f, f.ID); len(got) != 2 {
		t.Fatalf("after backup --drill: %d committed backups, want 2", len(got))
	}
	rs = runSection(t, s, sc, "drills.md#every-cluster")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "drill --all", 0), f.ID, "passed")

	rs = runSection(t, s, sc, "backup.md#retention")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "--dry-run", 0), "dry run")
	if got := committed(t, f, f.ID); len(got) != 2 {
		t.Errorf("prune deleted manual backups: %d left, want 2", len(got))
	}

	s.Vars["backup"] = first[0].Name
	rs = runSection(t, s, sc, "backup.md#deleting-backups")
	left := committed(t, f, f.ID)
	if len(left) != 1 || left[0].Name == first[0].Name {
		t.Errorf("after deleting %s: %+v, want only the newer backup", first[0].Name, left)
	}
	mdblocks.MustContain(t, mdblocks.One(t, rs, "--all-backups", 0), left[0].Name)

	rs = runSection(t, s, sc, "testing.md#test-servers")
	out := mdblocks.One(t, rs, "servers-dir.sh", 0).Output
	for _, want := range []string{filepath.Join(s.Dir, ".cache", "etcd-recovery", "test-servers"), "/srv/etcd-recovery/test-servers"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("scripts/servers-dir.sh did not print %s:\n%s", want, out)
		}
	}
}

// restoreScenario: a 3-member cluster with v2 keys and a scheduled backup,
// newer writes, then two members killed. The restore snapshots the
// survivor and writes the data dirs; the test starts the new members on
// them (as the runbook's etcd command does); verify, restore v2 and inspect
// pass, and every key is there.
func restoreScenario(t *testing.T, docs mdblocks.Set, conn *mdblocks.Block) {
	const sc = "restore"
	c, f, keys, v2 := mdblocks.QuorumLost(t, "/registry/secrets/", 200, 200, 10)

	s := mdblocks.NewScenario(t, docs, conn, f.Vars)
	members, ic, eps := mdblocks.NewMembers(t, 3)
	s.Vars["old-endpoints"] = strings.Join(c.Endpoints(), ",")
	s.Vars["new-initial-cluster"] = ic
	s.Vars["new-token"] = f.ID + "-restored"
	s.Vars["data-dir-root"] = filepath.Join(s.Dir, "restored")
	rs := runSection(t, s, sc, "restore.md#plan-then-write-the-data-dirs")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "--dry-run", 0), "dry run")
	var pre string
	for _, e := range committed(t, f, f.ID) {
		if e.Kind == catalog.KindPreRestore {
			pre = e.Name
		}
	}
	if pre == "" {
		t.Fatalf("the restore took no pre-restore snapshot of the survivor")
	}
	mdblocks.MustContain(t, rs[len(rs)-1], pre)

	c.Members[0].Kill() // "stop the old members"
	for _, m := range members {
		testenv.StartEtcdMember(t, testenv.MemberSpec{Version: testenv.V35, Name: m["name"],
			DataDir: filepath.Join(s.Vars["data-dir-root"], m["name"]+".etcd"), ClientURL: m["client-url"], PeerURL: m["peer-url"],
			InitialCluster: ic, InitialClusterToken: s.Vars["new-token"], PKI: c.PKI, EnableV2: true})
	}
	s.Vars["new-endpoints"] = strings.Join(eps, ",")
	s.Vars["backup"] = pre
	rs = runSection(t, s, sc, "restore.md#verify-the-new-cluster")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "etcd-recovery inspect", 0), "HEALTHY")
	nc := mdblocks.ClusterAt(c.PKI, eps)
	mdblocks.CheckKeys(t, nc.Client(t), keys)
	mdblocks.CheckV2Keys(t, nc, v2)
}

// encryptionScenario: one member, an age key made as age-keygen makes it;
// an encrypted backup, listed, drilled with the identity; without it the
// drill refuses; --require-encryption without a recipient is exit 4.
func encryptionScenario(t *testing.T, docs mdblocks.Set, conn *mdblocks.Block) {
	const sc = "encryption"
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/secrets/", 50, 200)
	f := mdblocks.NewFixture(t, c.PKI, c.Endpoints())
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	identity := filepath.Join(t.TempDir(), "identity.txt")
	if err := os.WriteFile(identity, []byte("# created: "+time.Now().UTC().Format(time.RFC3339)+"\n"+id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := mdblocks.NewScenario(t, docs, conn, f.Vars)
	s.Vars["recipient"] = id.Recipient().String()
	s.Vars["identity-file"] = identity
	rs := runSection(t, s, sc, "encryption.md#encrypt-a-backup")
	got := committed(t, f, f.ID)
	if len(got) != 1 {
		t.Fatalf("%d committed backups, want the encrypted one (and nothing from --require-encryption)", len(got))
	}
	objs := testfix.Keys(t, f.Store, f.Layout.BackupPrefix(f.ID, got[0].Name))
	if !strings.Contains(strings.Join(objs, " "), "snapshot.db.zst.age") {
		t.Errorf("the encrypted backup's objects: %v, want snapshot.db.zst.age", objs)
	}
	mdblocks.MustContain(t, mdblocks.One(t, rs, "list --cluster-id <id> -o wide", 0), id.Recipient().String()[:12])
	mdblocks.MustContain(t, mdblocks.One(t, rs, "--identity-file", 0), "passed")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "--no-record", 0), "not run", "no --identity-file given", id.Recipient().String())
	mdblocks.MustContain(t, mdblocks.One(t, rs, "--require-encryption", 0), "recipient")
}

// kubernetesScenario: a kube-apiserver with the operators' CRDs (the
// chart brings none); deploy/'s chart installed with helm as the documents
// say, for a values file listing the namespace, the per-cluster grant and
// the pre-update Job rendered and applied; an
// EtcdCluster backed by real etcd, the namespace's cos-credentials secret;
// then the CronJob's commands as its service account, the namespace's
// drills, and the exporter as the toolkit's.
func kubernetesScenario(t *testing.T, docs mdblocks.Set, conn *mdblocks.Block) {
	const sc, ns, name = "kubernetes", "kubx-etcd-09", "etcd-docs-k1"
	k := testenv.StartKubeAPIServer(t)
	admin := k.Clientset(t, "")
	dyn := k.Dynamic(t, "")
	kubetest.InstallCRDs(t, k)
	kubetest.CreateNamespaces(t, admin, ns, "monitoring")

	// kubectl and helm as an SRE has them: admin, no COS or etcd settings;
	// helm's own state in the scenario's directory.
	values := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(values, []byte("namespaces:\n- name: "+ns+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := mdblocks.NewScenario(t, docs, nil, map[string]string{"namespace": ns, "id": name, "values": values, "update": "u1"})
	s.Tools["kubectl"] = kubetest.KubectlBin(t)
	s.Tools["helm"] = kubetest.HelmBin(t)
	helmHome := t.TempDir()
	s.ExtraEnv = []string{"KUBECONFIG=" + k.Kubeconfig(t, "", ns), "HELM_CACHE_HOME=" + helmHome, "HELM_CONFIG_HOME=" + helmHome, "HELM_DATA_HOME=" + helmHome}
	linkRepo(t, s, "deploy")
	runSection(t, s, sc, "kubernetes.md#install")
	ctx := context.Background()
	if cj, err := admin.BatchV1().CronJobs(ns).Get(ctx, "etcd-recovery-backup", metav1.GetOptions{}); err != nil {
		t.Errorf("after helm upgrade --install: %v", err)
	} else if cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "etcd-recovery-config", metav1.GetOptions{}); err != nil || cm.Data["COS_PREFIX"] != ns+"/" {
		t.Errorf("after helm upgrade --install: the ConfigMap %v (%v), want COS_PREFIX %s/", cm, err, ns)
	} else {
		t.Logf("installed: CronJob %s schedule %q", cj.Name, cj.Spec.Schedule)
	}
	if _, err := k.Dynamic(t, "").Resource(schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"}).Namespace("monitoring").Get(ctx, "etcd-recovery-alerts", metav1.GetOptions{}); err != nil {
		t.Errorf("after helm upgrade --install: the PrometheusRule in monitoring: %v", err)
	}
	if _, err := admin.BatchV1().Jobs(ns).Get(ctx, "etcd-recovery-update-"+name+"-u1", metav1.GetOptions{}); err != nil {
		t.Errorf("after the update Job's render: %v", err)
	}
	if _, err := admin.RbacV1().Roles(ns).Get(ctx, "etcd-recovery-"+name, metav1.GetOptions{}); err != nil {
		t.Errorf("after the client-TLS grant's render: %v", err)
	}

	fc := kubetest.AddEtcdCluster(t, admin, dyn, ns, name, testenv.EtcdOptions{IP: "127.0.9.10", Members: 1})
	testenv.PutKeys(t, fc.Etcd.Client(t), "/registry/pods/", 50, 200)
	m := testenv.SharedMinIO(t)
	kubetest.CreateCOSSecret(t, admin, ns, m)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	creds := filepath.Join(t.TempDir(), "cos-credentials")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	for file, v := range kubetest.AWSSecretData(m.AccessKey, m.SecretKey, m.Region) {
		if err := os.WriteFile(filepath.Join(creds, file), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The CronJob's pod: its service account, the ConfigMap's COS
	// settings (here MinIO's), the mounted cos-credentials secret.
	cos := []string{"COS_ENDPOINT=" + m.Endpoint, "COS_REGION=" + m.Region, "COS_BUCKET=" + bucket, "COS_PREFIX=" + prefix, "COS_CREDENTIALS_DIR=" + creds}
	as := func(sa string) []string {
		return append([]string{"KUBECONFIG=" + k.Kubeconfig(t, kubetest.SAToken(t, admin, ns, sa), ns)}, cos...)
	}
	s.ExtraEnv = as("etcd-recovery")
	rs := runSection(t, s, sc, "kubernetes.md#back-up-a-namespace")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "--kind scheduled", 0), name)
	mdblocks.MustContain(t, mdblocks.One(t, rs, "--kind update", 0), name)
	mdblocks.MustContain(t, mdblocks.One(t, rs, "inspect --all", 0), name, "HEALTHY")

	rs = runSection(t, s, sc, "drills.md#every-cluster-of-a-namespace")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "drill --all", 0), name, "passed")

	s.ExtraEnv = as("etcd-recovery-toolkit")
	s.Vars["metrics-port"] = strconv.Itoa(testenv.FreePort(t))
	rs = runSection(t, s, sc, "metrics.md#the-exporter-etcd-recovery-serve")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "/metrics", 0),
		fmt.Sprintf(`etcd_recovery_cluster_info{cluster=%q} 1`, name),
		fmt.Sprintf(`etcd_recovery_inspect_verdict{cluster=%q,verdict="healthy"} 1`, name))
}
