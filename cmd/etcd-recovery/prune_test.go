package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// pruneRig is a real MinIO bucket and the flags that point the CLI at it.
// Credentials come from a --cos-credentials-dir, not the environment, so
// the tests may run in parallel.
type pruneRig struct {
	minio  *testenv.MinIO
	store  store.Store
	layout catalog.Layout
	flags  []string
}

func newPruneRig(t *testing.T) *pruneRig {
	t.Helper()
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	dir := t.TempDir()
	for name, v := range map[string]string{"access_key_id": m.AccessKey, "secret_access_key": m.SecretKey} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	return &pruneRig{
		minio: m, store: testfix.Store(t, m, bucket), layout: layout,
		flags: []string{"--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket,
			"--prefix", layout.Prefix, "--cos-credentials-dir", dir, "--cos-max-retries", "1"},
	}
}

// run runs the CLI with the rig's COS flags after the command name.
func (r *pruneRig) run(t *testing.T, cmd string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	argv := append([]string{"etcd-recovery", "--log-level", "warn", cmd}, r.flags...)
	code = run(context.Background(), append(argv, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// put stores a made-up backup folder: a snapshot, a v2 export and (when
// committed) a valid manifest.
func (r *pruneRig) put(t *testing.T, cluster string, at time.Time, kind catalog.Kind, committed bool) string {
	t.Helper()
	name := catalog.BackupName(at, kind)
	ctx := context.Background()
	objs := map[string][]byte{catalog.SnapshotObjectZstd: []byte("s"), catalog.V2ObjectZstd: []byte("v")}
	if committed {
		m, err := catalog.MarshalManifest(&catalog.Manifest{
			Format: catalog.ManifestFormat, ClusterID: cluster, Name: name, Kind: kind, StartedAt: at, FinishedAt: at.Add(time.Second),
			Source:         catalog.Member{Name: "m0", ID: "1", Endpoint: "https://10.0.0.1:2379"},
			Snapshot:       catalog.SnapshotInfo{Object: catalog.SnapshotObjectZstd, Compression: objectio.CompressZstd, RawSize: 4096, RawSHA256: strings.Repeat("a", 64), StoredSize: 1},
			RevisionBefore: 7, RevisionAfter: 7, ToolVersion: "test",
		})
		if err != nil {
			t.Fatal(err)
		}
		objs[catalog.ManifestObject] = m
	}
	for obj, body := range objs {
		if _, err := r.store.Put(ctx, r.layout.Key(cluster, name, obj), bytes.NewReader(body)); err != nil {
			t.Fatal(err)
		}
	}
	return name
}

// pruneTable parses a tablewriter table: the cells of every row, header
// first.
func pruneTable(t *testing.T, out string) [][]string {
	t.Helper()
	var rows [][]string
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "│") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "│"), "│")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatalf("no table in %q", out)
	}
	return rows
}

// pruneJSON is the part of prune's JSON the tests read, decoded on its own
// rather than through the backup package's types.
type pruneJSON struct {
	DryRun   bool `json:"dryRun"`
	Clusters []struct {
		ClusterID string `json:"clusterID"`
		Backups   []struct {
			ClusterID string    `json:"clusterID"`
			Name      string    `json:"name"`
			Kind      string    `json:"kind"`
			Time      time.Time `json:"time"`
			Committed bool      `json:"committed"`
			Keep      bool      `json:"keep"`
			Rules     []string  `json:"rules"`
			Reason    string    `json:"reason"`
			Action    string    `json:"action"`
		} `json:"backups"`
	} `json:"clusters"`
	Kept    int `json:"kept"`
	Planned int `json:"planned"`
	Deleted int `json:"deleted"`
	Failed  int `json:"failed"`
	Stats   struct {
		ObjectsListed int `json:"objectsListed"`
	} `json:"stats"`
}

var ageInReason = regexp.MustCompile(`last written \S+ ago`)

func normalizeReasonAges(rows [][]string) [][]string {
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = slices.Clone(r)
		for j := range out[i] {
			out[i][j] = ageInReason.ReplaceAllString(out[i][j], "last written (age) ago")
		}
	}
	return out
}

func decodePrune(t *testing.T, out string) pruneJSON {
	t.Helper()
	var p pruneJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("prune -o json: %v\n%s", err, out)
	}
	return p
}

// fixture: a week of 8-hourly backups ending an hour ago, an old update,
// a manual backup and an incomplete folder, around the real clock.
func (r *pruneRig) fixture(t *testing.T, cluster string) {
	t.Helper()
	now := time.Now().UTC()
	for i := range 21 {
		r.put(t, cluster, now.Add(-time.Hour-time.Duration(i)*8*time.Hour), catalog.KindScheduled, true)
	}
	r.put(t, cluster, now.Add(-5*24*time.Hour), catalog.KindUpdate, true)
	r.put(t, cluster, now.Add(-9*24*time.Hour), catalog.KindManual, true)
	r.put(t, cluster, now.Add(-2*time.Hour), catalog.KindScheduled, false)
}

func TestPruneCommand(t *testing.T) {
	t.Parallel()
	r := newPruneRig(t)
	r.fixture(t, "cli-a")
	r.fixture(t, "cli-b")
	before := testfix.Keys(t, r.store, "")

	// The dry run's JSON and table are the same rows, and delete nothing.
	code, out, errOut := r.run(t, "prune", "--all-cluster-ids", "--dry-run", "-o", "json")
	if code != 0 {
		t.Fatalf("prune --dry-run -o json: exit %d: %s", code, errOut)
	}
	dry := decodePrune(t, out)
	code, table, errOut := r.run(t, "prune", "--all-cluster-ids", "--dry-run", "-o", "wide")
	if code != 0 {
		t.Fatalf("prune --dry-run: exit %d: %s", code, errOut)
	}
	rows := pruneTable(t, table)
	if want := []string{"CLUSTER", "BACKUP", "KIND", "TIME (UTC)", "ACTION", "REASON"}; !slices.Equal(rows[0], want) {
		t.Errorf("header %v, want %v", rows[0], want)
	}
	var fromJSON [][]string
	for _, c := range dry.Clusters {
		for _, b := range c.Backups {
			kind := b.Kind
			if !b.Committed {
				kind += " (incomplete)"
			}
			fromJSON = append(fromJSON, []string{b.ClusterID, b.Name, kind, b.Time.UTC().Format("2006-01-02 15:04:05"), b.Action, b.Reason})
			if b.Reason == "" || (b.Keep != (b.Action == "keep")) || (!b.Keep && b.Action != "delete") || (b.Keep != (len(b.Rules) > 0)) {
				t.Errorf("dry-run decision %+v", b)
			}
		}
	}
	// The two runs are moments apart: the age of the young incomplete folder differs.
	if !slices.EqualFunc(normalizeReasonAges(rows[1:]), normalizeReasonAges(fromJSON), slices.Equal) {
		t.Errorf("table rows:\n%v\nJSON rows:\n%v", rows[1:], fromJSON)
	}
	if !dry.DryRun || len(dry.Clusters) != 2 || dry.Planned == 0 || dry.Kept+dry.Planned != 48 || dry.Stats.ObjectsListed != len(before) {
		t.Errorf("dry run: %+v", dry)
	}
	if !strings.Contains(table, "would delete") {
		t.Errorf("the table has no summary line:\n%s", table)
	}
	if after := testfix.Keys(t, r.store, ""); !slices.Equal(after, before) {
		t.Fatalf("the dry run deleted %d objects", len(before)-len(after))
	}

	// The real prune of one cluster does what the dry run said, for that cluster only.
	code, out, errOut = r.run(t, "prune", "--cluster-id", "cli-a", "-o", "json")
	if code != 0 {
		t.Fatalf("prune: exit %d: %s", code, errOut)
	}
	done := decodePrune(t, out)
	if len(done.Clusters) != 1 || done.Deleted == 0 || done.Failed != 0 {
		t.Fatalf("prune: %+v", done)
	}
	planned := map[string]string{}
	for _, b := range dry.Clusters[0].Backups {
		planned[b.Name] = b.Action
	}
	left := testfix.Keys(t, r.store, r.layout.ClusterPrefix("cli-a"))
	for _, b := range done.Clusters[0].Backups {
		want := map[string]string{"keep": "keep", "delete": "deleted"}[planned[b.Name]]
		if b.Action != want {
			t.Errorf("%s: %s, the dry run said %s", b.Name, b.Action, planned[b.Name])
		}
		present := slices.ContainsFunc(left, func(k string) bool { return strings.Contains(k, "/"+b.Name+"/") })
		if present != b.Keep {
			t.Errorf("%s: keep %v, still in the bucket %v", b.Name, b.Keep, present)
		}
	}
	if n := len(testfix.Keys(t, r.store, r.layout.ClusterPrefix("cli-b"))); n != 23*3+2 {
		t.Errorf("pruning cli-a touched cli-b: %d objects left", n)
	}

	// list shows why each backup is kept or would be deleted.
	code, out, errOut = r.run(t, "list", "--cluster-id", "cli-b", "-o", "json")
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, errOut)
	}
	var listed []struct {
		Name      string `json:"name"`
		Retention struct {
			Keep   bool     `json:"keep"`
			Rules  []string `json:"rules"`
			Reason string   `json:"reason"`
		} `json:"retention"`
	}
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatal(err)
	}
	dryB := map[string]string{}
	for _, b := range dry.Clusters[1].Backups {
		dryB[b.Name] = b.Reason
	}
	if len(listed) != 24 {
		t.Fatalf("list: %d backups", len(listed))
	}
	for _, l := range listed {
		if l.Retention.Reason == "" || ageInReason.ReplaceAllString(l.Retention.Reason, "") != ageInReason.ReplaceAllString(dryB[l.Name], "") || l.Retention.Keep != (len(l.Retention.Rules) > 0) {
			t.Errorf("list %s: %+v; prune said %q", l.Name, l.Retention, dryB[l.Name])
		}
	}
	code, table, _ = r.run(t, "list", "--cluster-id", "cli-b", "-o", "wide")
	rows = pruneTable(t, table)
	if code != 0 || rows[0][len(rows[0])-1] != "REASON" || len(rows) != 25 {
		t.Fatalf("list table: exit %d\n%s", code, table)
	}
	var keeps, deletes int
	for _, row := range rows[1:] {
		switch cell := row[len(row)-1]; {
		case strings.HasPrefix(cell, "keep: "):
			keeps++
		case strings.HasPrefix(cell, "would delete: "):
			deletes++
		default:
			t.Errorf("list row %v: no retention reason", row)
		}
	}
	if keeps == 0 || deletes == 0 {
		t.Errorf("list: %d kept, %d would be deleted", keeps, deletes)
	}
	// A stricter policy by flag: keep 1 recent, no anchors.
	code, out, _ = r.run(t, "list", "--cluster-id", "cli-b", "-o", "json", "--keep-recent", "1", "--keep-anchors", "0", "--anchor-days", "")
	if code != 0 || strings.Count(out, `"recent"`) != 1 || strings.Contains(out, `"anchor"`) {
		t.Errorf("list with --keep-recent 1 --keep-anchors 0: exit %d\n%s", code, out)
	}
}

func TestPruneCommandErrors(t *testing.T) {
	t.Parallel()
	r := newPruneRig(t)
	r.fixture(t, "err-a")
	before := testfix.Keys(t, r.store, "")
	usage := [][]string{
		{"prune"},
		{"prune", "--all-cluster-ids", "--cluster-id", "err-a"},
		{"prune", "--cluster-id", "../etc"},
		{"prune", "--all-cluster-ids", "--anchor-days", "1,x"},
		{"prune", "--all-cluster-ids", "--anchor-days", "32"},
		{"prune", "--all-cluster-ids", "--incomplete-after", "0s"},
		{"prune", "--all-cluster-ids", "--keep-recent", "-1"},
		{"prune", "--all-cluster-ids", "-o", "xml"},
		{"delete", "--cluster-id", "err-a"},
		{"delete", "--cluster-id", "err-a", "--backup", "yesterday"},
	}
	for _, args := range usage {
		if code, _, errOut := r.run(t, args[0], args[1:]...); code != exitUsage {
			t.Errorf("%v: exit %d (%s), want %d", args, code, strings.TrimSpace(errOut), exitUsage)
		}
	}
	// A listing that fails deletes nothing and exits non-zero.
	var out, errb bytes.Buffer
	argv := []string{"etcd-recovery", "prune", "--all-cluster-ids"}
	for i := 0; i < len(r.flags); i += 2 {
		v := r.flags[i+1]
		if r.flags[i] == "--bucket" {
			v = "no-such-bucket"
		}
		argv = append(argv, r.flags[i], v)
	}
	if code := run(context.Background(), argv, &out, &errb); code != exitFailure || !strings.Contains(errb.String(), "nothing was deleted") {
		t.Errorf("prune of a missing bucket: exit %d: %s", code, errb.String())
	}
	if after := testfix.Keys(t, r.store, ""); !slices.Equal(after, before) {
		t.Errorf("failed commands changed the bucket")
	}
}

func TestDeleteCommand(t *testing.T) {
	t.Parallel()
	r := newPruneRig(t)
	now := time.Now().UTC()
	manual := r.put(t, "del-a", now.Add(-48*time.Hour), catalog.KindManual, true)
	pre := r.put(t, "del-a", now.Add(-24*time.Hour), catalog.KindPreRestore, true)
	newest := r.put(t, "del-a", now.Add(-time.Hour), catalog.KindScheduled, true)
	before := testfix.Keys(t, r.store, "")

	code, _, errOut := r.run(t, "delete", "--cluster-id", "del-a", "--backup", manual, "--backup", newest)
	if code != exitFailure || !strings.Contains(errOut, "newest committed backup") || !strings.Contains(errOut, "nothing was deleted") {
		t.Errorf("delete of the newest without --force: exit %d: %s", code, errOut)
	}
	code, _, errOut = r.run(t, "delete", "--cluster-id", "del-a", "--backup", catalog.BackupName(now.Add(-72*time.Hour), catalog.KindManual))
	if code != exitFailure || !strings.Contains(errOut, "no such backup") {
		t.Errorf("delete of a missing backup: exit %d: %s", code, errOut)
	}
	if after := testfix.Keys(t, r.store, ""); !slices.Equal(after, before) {
		t.Fatal("a refused delete changed the bucket")
	}

	code, out, errOut := r.run(t, "delete", "--cluster-id", "del-a", "--backup", manual, "--backup", pre, "-o", "wide")
	if code != 0 {
		t.Fatalf("delete: exit %d: %s", code, errOut)
	}
	rows := pruneTable(t, out)
	if len(rows) != 3 || rows[1][1] != pre || rows[1][4] != "deleted" || rows[2][1] != manual || rows[2][4] != "deleted" {
		t.Errorf("delete table:\n%s", out)
	}
	if left := testfix.Keys(t, r.store, ""); len(left) != 3 || !strings.Contains(left[0], newest) {
		t.Errorf("after delete: %v", left)
	}
	code, out, errOut = r.run(t, "delete", "--cluster-id", "del-a", "--backup", newest, "--allow-newest", "-o", "json")
	if code != 0 || !strings.Contains(out, `"action": "deleted"`) {
		t.Fatalf("delete --force: exit %d: %s %s", code, out, errOut)
	}
	if left := testfix.Keys(t, r.store, ""); len(left) != 0 {
		t.Errorf("after delete --force: %v", left)
	}
}

// backup --prune: the committed backup is printed with the prune that
// followed it; older scheduled backups are gone.
func TestBackupPruneCommand(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	r := newPruneRig(t)
	now := time.Now().UTC()
	var old []string
	for i := range 6 {
		old = append(old, r.put(t, "bp", now.Add(-time.Duration(i+1)*time.Minute), catalog.KindScheduled, true))
	}
	manual := r.put(t, "bp", now.Add(-time.Hour), catalog.KindManual, true)
	args := []string{"--cluster-id", "bp", "--kind", "scheduled", "--v2", "off", "--prune", "--keep-anchors", "0", "-o", "json"}
	for _, ep := range c.Endpoints() {
		args = append(args, "--endpoints", ep)
	}
	code, out, errOut := r.run(t, "backup", args...)
	if code != 0 {
		t.Fatalf("backup --prune: exit %d: %s", code, errOut)
	}
	var res struct {
		catalog.Manifest
		Pruned *pruneJSON `json:"pruned"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("backup --prune -o json: %v\n%s", err, out)
	}
	if res.ClusterID != "bp" || res.Name == "" || res.Pruned == nil || res.Pruned.Deleted != 4 || res.Pruned.Kept != 4 {
		t.Fatalf("backup --prune result: %+v %+v", res.Manifest, res.Pruned)
	}
	var names []string
	for _, k := range testfix.Keys(t, r.store, "") {
		if strings.HasSuffix(k, "/"+catalog.ManifestObject) {
			names = append(names, k[len(r.layout.ClusterPrefix("bp")):len(k)-len(catalog.ManifestObject)-1])
		}
	}
	want := []string{manual, old[1], old[0], res.Name} // key order is time order
	if !slices.Equal(names, want) {
		t.Errorf("after backup --prune: %v, want %v", names, want)
	}
}

// Damaged backups through the CLI, on real backups of a real etcd: the
// three newest are damaged (unreadable manifest, truncated snapshot,
// snapshot gone). list shows each as damaged; prune keeps the three good
// ones behind them, exits 1 naming the newest good backup, and that backup
// still restores.
func TestPruneCommandDamaged(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/", 200, 256)
	r := newPruneRig(t)
	const id = "dmg-cli"
	args := []string{"--cluster-id", id, "--kind", "scheduled", "--v2", "off", "-o", "json"}
	for _, ep := range c.Endpoints() {
		args = append(args, "--endpoints", ep)
	}
	var names []string // oldest first
	for range 6 {
		code, out, errOut := r.run(t, "backup", args...)
		if code != 0 {
			t.Fatalf("backup: exit %d: %s", code, errOut)
		}
		var m catalog.Manifest
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("backup -o json: %v\n%s", err, out)
		}
		names = append(names, m.Name)
	}
	ctx := context.Background()
	key := func(i int, obj string) string { return r.layout.Key(id, names[i], obj) }
	if _, err := r.store.Put(ctx, key(5, catalog.ManifestObject), strings.NewReader(`{"format":1,`)); err != nil {
		t.Fatal(err)
	}
	snap := testfix.ReadObject(t, r.store, key(4, catalog.SnapshotObjectZstd))
	if _, err := r.store.Put(ctx, key(4, catalog.SnapshotObjectZstd), bytes.NewReader(snap[:len(snap)/2])); err != nil {
		t.Fatal(err)
	}
	if err := r.store.Delete(ctx, []string{key(3, catalog.SnapshotObjectZstd)}); err != nil {
		t.Fatal(err)
	}
	wantStatus := map[string]string{
		names[5]: "damaged: manifest unreadable: manifest: unexpected end of JSON input",
		names[4]: fmt.Sprintf("damaged: snapshot.db.zst size mismatch: %d bytes stored, the manifest says %d", len(snap)/2, len(snap)),
		names[3]: "damaged: snapshot.db.zst missing",
		names[2]: "committed", names[1]: "committed", names[0]: "committed",
	}

	// list: the same check as retention, in the table and in JSON.
	code, out, errOut := r.run(t, "list", "--cluster-id", id, "-o", "json", "--keep-anchors", "0", "--anchor-days", "")
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, errOut)
	}
	var listed []struct {
		Name      string `json:"name"`
		Status    string `json:"status"`
		Damaged   string `json:"damaged"`
		Retention struct {
			Keep  bool     `json:"keep"`
			Rules []string `json:"rules"`
		} `json:"retention"`
	}
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 6 {
		t.Fatalf("list: %d backups", len(listed))
	}
	for _, l := range listed {
		if l.Status != wantStatus[l.Name] || !l.Retention.Keep {
			t.Errorf("list %s: status %q keep %v, want %q, kept", l.Name, l.Status, l.Retention.Keep, wantStatus[l.Name])
		}
	}
	code, table, _ := r.run(t, "list", "--cluster-id", id)
	if code != 0 || !strings.Contains(table, "damaged: snapshot.db.zst missing") || !strings.Contains(table, "damaged: manifest unreadable") {
		t.Errorf("list table: exit %d\n%s", code, table)
	}

	// prune: exit 1, the good ones stay, the damaged newer ones too.
	code, out, errOut = r.run(t, "prune", "--cluster-id", id, "--keep-anchors", "0", "--anchor-days", "")
	if code != exitFailure {
		t.Fatalf("prune with the 3 newest damaged: exit %d, want %d\n%s\n%s", code, exitFailure, out, errOut)
	}
	for _, sub := range []string{"the newest backup that checks out, " + names[2], "3 damaged backup(s) newer", names[3] + " (snapshot.db.zst missing)"} {
		if !strings.Contains(errOut, sub) {
			t.Errorf("prune stderr does not say %q:\n%s", sub, errOut)
		}
	}
	if !strings.Contains(out, "WARNING: cluster "+id) || !strings.Contains(out, "(damaged)") {
		t.Errorf("prune table does not flag the damaged backups:\n%s", out)
	}
	left := testfix.Keys(t, r.store, r.layout.ClusterPrefix(id))
	for _, n := range names {
		if !slices.ContainsFunc(left, func(k string) bool { return strings.Contains(k, "/"+n+"/") }) {
			t.Errorf("%s was deleted", n)
		}
	}
	m, err := catalog.LoadManifest(ctx, r.store, r.layout, id, names[2])
	if err != nil {
		t.Fatal(err)
	}
	testfix.CheckSnapshot(t, r.store, r.layout, m)
}

// Usage: a floor for --incomplete-after, no stray arguments, a positive
// --timeout; and an object store that accepts connections and never
// answers ends list and prune at --timeout, naming the step.
func TestListPruneUsageAndDeadline(t *testing.T) {
	t.Parallel()
	r := newPruneRig(t)
	for _, args := range [][]string{
		{"prune", "--all-cluster-ids", "--incomplete-after", "30m"},
		{"list", "--cluster-id", "c1", "--incomplete-after", "59m"},
		{"list", "--cluster-id", "c1", "c2"},
		{"prune", "--all-cluster-ids", "extra"},
		{"delete", "--cluster-id", "c1", "--backup", catalog.BackupName(time.Now(), catalog.KindManual), "extra"},
		{"list", "--cluster-id", "c1", "--timeout", "0s"},
	} {
		if code, _, errOut := r.run(t, args[0], args[1:]...); code != exitUsage {
			t.Errorf("%v: exit %d (%s), want %d", args, code, strings.TrimSpace(errOut), exitUsage)
		}
	}

	// A listener that accepts and never answers.
	hole := testenv.StartBlackhole(t)
	silent := slices.Clone(r.flags)
	silent[slices.Index(silent, "--cos-endpoint")+1] = hole.URL("http")
	const timeout = 2 * time.Second
	for step, args := range map[string][]string{
		"list backups": {"list", "--cluster-id", "c1", "--timeout", timeout.String()},
		// Prune's first call is the store's time (the clock check).
		"check the clock": {"prune", "--cluster-id", "c1", "--timeout", timeout.String()},
	} {
		var out, errb bytes.Buffer
		argv := append(append([]string{"etcd-recovery", "--log-level", "error", args[0]}, silent...), args[1:]...)
		start := time.Now()
		code := run(context.Background(), argv, &out, &errb)
		took := time.Since(start)
		// Slack: the store's own per-call handling and a busy machine.
		if limit := timeout + 30*time.Second; took > limit {
			t.Errorf("%v took %s, more than --timeout %s + 30s", args, took, timeout)
		}
		if code != exitFailure || !strings.Contains(errb.String(), "timed out after 2s (--timeout)") || !strings.Contains(errb.String(), step) {
			t.Errorf("%v against a silent store: exit %d in %s: %s", args, code, took.Round(time.Millisecond), errb.String())
		}
	}
}
