package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"filippo.io/age"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// s3Requests records the requests a proxy in front of MinIO passed on:
// "<method> <path> <range>".
type s3Requests struct {
	mu   sync.Mutex
	reqs []string
}

func (l *s3Requests) add(r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, r.Method+" "+r.URL.Path+" "+r.Header.Get("Range"))
}

// take returns the requests so far and forgets them.
func (l *s3Requests) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.reqs
	l.reqs = nil
	return out
}

// gets are the requests that read an object whose key ends with suffix.
func gets(reqs []string, suffix string) []string {
	var out []string
	for _, r := range reqs {
		method, rest, _ := strings.Cut(r, " ")
		path, _, _ := strings.Cut(rest, " ")
		if method == http.MethodGet && strings.HasSuffix(path, suffix) {
			out = append(out, r)
		}
	}
	return out
}

// proxiedCOSArgs are cosArgs through a loopback proxy to MinIO that
// records every request (the signature holds: the Host is the proxy's
// on both sides).
func proxiedCOSArgs(t *testing.T, m *testenv.MinIO, bucket, prefix string) ([]string, *s3Requests) {
	t.Helper()
	u, err := url.Parse(m.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	log := &s3Requests{}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return []string{"--cos-endpoint", srv.URL, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix,
		"--cos-credentials-dir", credsDir(t, m.AccessKey, m.SecretKey)}, log
}

// identityFile writes a new age identity as age-keygen would (mode 0600)
// and returns its path and recipient.
func identityFile(t *testing.T) (string, string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "identity.txt")
	if err := os.WriteFile(path, []byte("# public key: "+id.Recipient().String()+"\n"+id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, id.Recipient().String()
}

// listJSON is what this test reads of list -o json.
type listJSON []struct {
	Name    string               `json:"name"`
	Drill   *catalog.DrillResult `json:"drill"`
	Decrypt *prune.DecryptResult `json:"decrypt"`
}

// TestCLIDrillEncryptedStored: an encrypted backup on real MinIO of a real
// etcd 3.5. backup --drill drills its plaintext copy: drill.json says
// drilled=local-plaintext and list shows it as of the plaintext copy.
// list --identity-file opens each backup's age header with a ranged read
// of 4 KiB (never the whole object): "opens" with the recipient's
// identity, UNDECRYPTABLE / NO IDENTITY OPENS IT with another, and "no
// identity mounted" where ETCD_RECOVERY_IDENTITY_FILE names a missing
// file (the toolkit without its secret). drill --identity-file with another
// identity fails before the snapshot object is read at all, naming the
// recipient, and records nothing; with the recipient's identity it
// downloads and decrypts the stored ciphertext end to end and records
// drilled=stored, encrypted=true, which list shows as the stored
// ciphertext, decrypted.
func TestCLIDrillEncryptedStored(t *testing.T) {
	t.Parallel()
	if os.Getenv(seal.EnvIdentityFile) != "" {
		t.Fatalf("%s is set in the test's environment: this test sets its own identities", seal.EnvIdentityFile)
	}
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/secrets/", 300, 256)
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	cos, reqs := proxiedCOSArgs(t, m, bucket, prefix)
	st, layout := testfix.Store(t, m, bucket), catalog.Layout{Prefix: prefix}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	right, pubRight := identityFile(t)
	wrong, pubWrong := identityFile(t)
	binDir := testenv.DrillBinDir(t, testenv.V35)

	start := time.Now()
	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", "sealed", "--kind", "scheduled", "--drill",
		"--encrypt-to", pubRight, "--etcd-bin-dir", binDir, "--temp-dir", t.TempDir(), "-o", "json"}, clusterArgs(c), cos)...)
	if code != 0 {
		t.Fatalf("backup --drill --encrypt-to: exit %d\n%s\n%s", code, out, lastLinesOf(errOut, 20))
	}
	t.Logf("backup --drill: %v", time.Since(start).Round(time.Millisecond))
	var bk catalog.Manifest
	if err := json.Unmarshal([]byte(out), &bk); err != nil || !bk.Encrypted() {
		t.Fatalf("backup -o json: %v, encrypted %v\n%s", err, bk.Encrypted(), out)
	}
	snapshot := layout.Key("sealed", bk.Name, bk.Snapshot.Object)
	rec, err := catalog.LoadDrill(ctx, st, layout, "sealed", bk.Name)
	if err != nil || rec == nil || !rec.Passed || rec.Drilled != catalog.DrilledLocalPlaintext || !rec.Encrypted {
		t.Fatalf("drill.json after backup --drill: %+v, %v; want passed, drilled=%s, encrypted", rec, err, catalog.DrilledLocalPlaintext)
	}
	// list: the default table (flattened), -o wide (flattened) and -o json.
	list := func(args ...string) (string, string, listJSON) {
		t.Helper()
		var tables [2]string
		for i, format := range []string{"table", "wide"} {
			code, out, errOut := runCtx(t, ctx, concatArgs([]string{"list", "--cluster-id", "sealed", "-o", format}, args, cos)...)
			if code != 0 {
				t.Fatalf("list %v -o %s: exit %d\n%s%s", args, format, code, out, errOut)
			}
			checkListWidth(t, out)
			tables[i] = strings.Join(strings.Fields(out), " ")
		}
		_, js, errOut := runCtx(t, ctx, concatArgs([]string{"list", "--cluster-id", "sealed", "-o", "json"}, args, cos)...)
		var rows listJSON
		if err := json.Unmarshal([]byte(js), &rows); err != nil || len(rows) != 1 {
			t.Fatalf("list %v -o json: %v, %d rows\n%s%s", args, err, len(rows), js, errOut)
		}
		return tables[0], tables[1], rows
	}
	table, wide, rows := list()
	if !strings.Contains(table, "drill restored the plaintext copy (not the stored ciphertext)") || !strings.Contains(wide, "source, plaintext copy") ||
		strings.Contains(wide, "DECRYPTS") || rows[0].Drill.Drilled != catalog.DrilledLocalPlaintext {
		t.Errorf("list after backup --drill: want the drill shown as of the plaintext copy, no DECRYPTS column:\n%s\n%s", table, wide)
	}

	// list --identity-file: the header, by a ranged read.
	reqs.take()
	table, wide, rows = list("--identity-file", right)
	if d := rows[0].Decrypt; d == nil || d.State != prune.DecryptOpens || !strings.Contains(wide, "DECRYPTS") || !strings.Contains(wide, " opens ") ||
		!strings.Contains(table, " committed ") {
		t.Errorf("list --identity-file <the recipient's>: decrypt %+v\n%s\n%s", rows[0].Decrypt, table, wide)
	}
	ranged := gets(reqs.take(), bk.Snapshot.Object)
	if len(ranged) == 0 {
		t.Errorf("list --identity-file did not read the snapshot object's header")
	}
	for _, r := range ranged {
		if !strings.HasSuffix(r, " bytes=0-4095") {
			t.Errorf("list read the snapshot object with %q; want only ranged reads of its first 4 KiB", r)
		}
	}
	table, wide, rows = list("--identity-file", wrong)
	if d := rows[0].Decrypt; d == nil || d.State != prune.DecryptNoIdentity || !strings.Contains(d.Error, pubRight) ||
		!strings.Contains(table, " UNDECRYPTABLE ") || !strings.Contains(table, pubRight) || !strings.Contains(wide, "NO IDENTITY OPENS IT") {
		t.Errorf("list --identity-file <another>: decrypt %+v; want %q naming %s\n%s\n%s", rows[0].Decrypt, prune.DecryptNoIdentity, pubRight, table, wide)
	}

	// The toolkit pod with its identity secret absent: the variable names
	// a mount with no file. Every encrypted backup: no identity mounted.
	cmd := exec.CommandContext(ctx, testfix.Tool(t), concatArgs([]string{"list", "--cluster-id", "sealed", "-o", "json"}, cos)...)
	cmd.Env = append(os.Environ(), seal.EnvIdentityFile+"="+filepath.Join(t.TempDir(), "etcd-recovery-identity", "identity.txt"))
	js, err := cmd.Output()
	var unmounted listJSON
	if err != nil || json.Unmarshal(js, &unmounted) != nil || len(unmounted) != 1 || unmounted[0].Decrypt == nil ||
		unmounted[0].Decrypt.State != prune.DecryptNoIdentity || !strings.Contains(unmounted[0].Decrypt.Error, "no identity mounted") {
		t.Errorf("list in a toolkit with no identity mounted: %v\n%s", err, js)
	}

	// drill with another identity: refused before the snapshot is read.
	reqs.take()
	code, out, errOut = runCtx(t, ctx, concatArgs([]string{"drill", "--cluster-id", "sealed", "--identity-file", wrong,
		"--etcd-bin-dir", binDir, "--temp-dir", t.TempDir()}, clusterArgs(c), cos)...)
	if code == 0 || !strings.Contains(errOut+out, pubRight) || !strings.Contains(errOut+out, pubWrong) {
		t.Fatalf("drill --identity-file <another>: exit %d; want a failure naming the recipient %s and the identity %s\n%s\n%s",
			code, pubRight, pubWrong, out, lastLinesOf(errOut, 20))
	}
	if g := gets(reqs.take(), bk.Snapshot.Object); len(g) != 0 {
		t.Errorf("drill with a wrong identity read the snapshot object: %q", g)
	}
	if rec2, err := catalog.LoadDrill(ctx, st, layout, "sealed", bk.Name); err != nil || rec2 == nil || !rec2.FinishedAt.Equal(rec.FinishedAt) {
		t.Errorf("drill.json after the refused drill: %+v, %v; want the earlier record untouched", rec2, err)
	}

	// drill with the recipient's identity: the stored ciphertext.
	start = time.Now()
	code, out, errOut = runCtx(t, ctx, concatArgs([]string{"drill", "--cluster-id", "sealed", "--identity-file", right,
		"--etcd-bin-dir", binDir, "--temp-dir", t.TempDir()}, clusterArgs(c), cos)...)
	if code != 0 {
		t.Fatalf("drill --identity-file <the recipient's>: exit %d\n%s\n%s", code, out, lastLinesOf(errOut, 20))
	}
	t.Logf("drill of the stored ciphertext: %v", time.Since(start).Round(time.Millisecond))
	full := false
	for _, r := range gets(reqs.take(), bk.Snapshot.Object) {
		full = full || strings.HasSuffix(r, " ")
	}
	if !full {
		t.Errorf("the drill did not download %s", snapshot)
	}
	rec, err = catalog.LoadDrill(ctx, st, layout, "sealed", bk.Name)
	if err != nil || rec == nil || !rec.Passed || rec.Drilled != catalog.DrilledStored || !rec.Encrypted {
		t.Fatalf("drill.json after drill --identity-file: %+v, %v; want passed, drilled=%s, encrypted", rec, err, catalog.DrilledStored)
	}
	table, wide, rows = list()
	if !strings.Contains(table, "drill restored the stored ciphertext, decrypted") || !strings.Contains(wide, "source, stored, decrypted") ||
		rows[0].Drill.Drilled != catalog.DrilledStored || !rows[0].Drill.Encrypted {
		t.Errorf("list after the stored drill: drill %+v; want it shown as of the stored ciphertext, decrypted\n%s\n%s", rows[0].Drill, table, wide)
	}
}

// checkListWidth fails on a line of list's default table wider than
// output.Width (-o wide may be wider).
func checkListWidth(t *testing.T, out string) {
	t.Helper()
	if strings.Contains(out, "DRILL MODE") {
		return
	}
	for _, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > output.Width {
			t.Errorf("list: a line of %d runes (max %d):\n%s", n, output.Width, out)
		}
	}
}
