package images_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// The toolkit image as `make image` built it, run with podman as the pods
// run it: as the image's user, read-only root, no capabilities.

const (
	wantUID     = 65532
	entrypoint  = "/usr/local/bin/etcd-recovery"
	bundlePath  = "/etc/ssl/certs/ca-certificates.crt" // the first file Go's crypto/x509 reads on Linux
	minCABundle = 100
)

// podmanRun runs the image with testenv.PodmanRunArgs, --rm, a read-only
// root without podman's extra tmpfs mounts (as Kubernetes runs it), all
// capabilities dropped and no privilege escalation; extra go before the
// image (mounts, --entrypoint, --env NAME), args after it. It returns
// stdout and stderr together.
func podmanRun(t *testing.T, env []string, extra []string, args ...string) (string, error) {
	t.Helper()
	a := append([]string{"run", "--rm"}, testenv.PodmanRunArgs...)
	a = append(a, "--read-only", "--read-only-tmpfs=false", "--cap-drop", "all",
		"--security-opt", "no-new-privileges", "--memory", "256m")
	a = append(a, extra...)
	a = append(a, testenv.Image(t))
	a = append(a, args...)
	cmd := testenv.PodmanCmd(a...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustRun(t *testing.T, extra []string, args ...string) string {
	t.Helper()
	out, err := podmanRun(t, nil, extra, args...)
	if err != nil {
		t.Fatalf("podman run %s %s: %v\n%s", strings.Join(extra, " "), strings.Join(args, " "), err, out)
	}
	return out
}

func TestImageConfig(t *testing.T) {
	t.Parallel()
	ref := testenv.Image(t)
	c := testenv.InspectImage(t, ref)
	t.Logf("image %s: %d bytes (%.0f MB) uncompressed, local digest %s", ref, c.Size, float64(c.Size)/1e6, c.Digest)
	if c.User != fmt.Sprintf("%d:%d", wantUID, wantUID) || c.UID() != wantUID || c.GID() != wantUID {
		t.Errorf("image User %q, want %d:%d (the manifests' runAsUser/runAsGroup)", c.User, wantUID, wantUID)
	}
	if !slices.Equal(c.Entrypoint, []string{entrypoint}) {
		t.Errorf("image Entrypoint %q, want [%s]", c.Entrypoint, entrypoint)
	}
	if len(c.Cmd) != 0 {
		t.Errorf("image Cmd %q: the pods' args replace it; none should be needed", c.Cmd)
	}
	var pathEnv string
	for _, e := range c.Env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			pathEnv = v
		}
		if strings.HasPrefix(e, "SSL_CERT_") {
			t.Errorf("image Env %s: Go must read the bundle at %s", e, bundlePath)
		}
	}
	if !slices.Contains(filepath.SplitList(pathEnv), "/usr/local/bin") || !slices.Contains(filepath.SplitList(pathEnv), "/bin") {
		t.Errorf("image PATH %q lacks /usr/local/bin or /bin", pathEnv)
	}
	if want := testenv.ServerVersion(t, "ETCD35_VERSION"); c.Labels["io.etcd.version"] != want {
		t.Errorf("image label io.etcd.version %q, want %s (scripts/test-servers.env)", c.Labels["io.etcd.version"], want)
	}
	for label, key := range map[string]string{labelDrill35: "ETCD35_VERSION", labelDrill36: "ETCD36_VERSION"} {
		if want := testenv.ServerVersion(t, key); c.Labels[label] != want {
			t.Errorf("image label %s %q, want %s (scripts/test-servers.env %s)", label, c.Labels[label], want, key)
		}
	}
	if d, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), testenv.ImageLocalDigestFile)); err != nil || strings.TrimSpace(string(d)) != c.Digest {
		t.Errorf("%s = %q (%v), podman says %s", testenv.ImageLocalDigestFile, d, err, c.Digest)
	}
}

// TestImageRunsAsNonRootReadOnly: the tool and the shell run as 65532, with
// no capabilities, and cannot write the image.
func TestImageRunsAsNonRootReadOnly(t *testing.T) {
	t.Parallel()
	c := testenv.InspectImage(t, testenv.Image(t))
	out := mustRun(t, nil, "--version")
	if want := "etcd-recovery version " + c.Labels["org.opencontainers.image.version"]; !strings.Contains(out, want) {
		t.Errorf("--version through the entrypoint: %q, want %q", out, want)
	}
	out = mustRun(t, []string{"--entrypoint", "/bin/sh"}, "-c",
		`id -u; id -g; grep CapEff /proc/self/status; pwd; if touch /etc/x 2>/dev/null; then echo root-writable; fi; for c in sh sleep ls cat mkdir df du sha256sum tar grep sed awk find xargs; do command -v $c >/dev/null || echo "missing $c"; done`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 4 || lines[0] != strconv.Itoa(wantUID) || lines[1] != strconv.Itoa(wantUID) {
		t.Fatalf("id in the image: %q, want uid and gid %d", out, wantUID)
	}
	if !regexp.MustCompile(`CapEff:\s+0+$`).MatchString(lines[2]) {
		t.Errorf("capabilities in the container: %q, want none", lines[2])
	}
	if lines[3] != c.WorkingDir {
		t.Errorf("working directory %q, image WORKDIR %q", lines[3], c.WorkingDir)
	}
	for _, l := range lines[4:] {
		t.Errorf("in the image: %s", l)
	}
}

// TestImageWget: the shell's wget (what an SRE reaches for in
// `kubectl exec`, e.g. the exporter's /metrics) fetches over HTTP from
// loopback, by address and by name, a small body and a chunked 200 KB one,
// as the pod's user; and timeout(1) bounds a fetch from a server that never
// answers. (Debian's busybox 1.35 wget crashes on its own -T, exit 139,
// and the shell runs its applets before PATH, so docs/image.md says to use
// timeout.)
func TestImageWget(t *testing.T) {
	t.Parallel()
	line := strings.Repeat("etcd_recovery_x 1\n", 6)
	hang := make(chan struct{})
	defer close(hang)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			io.WriteString(w, "ok\n")
		case "/hang":
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		default:
			for range 2000 { // no Content-Length: chunked
				io.WriteString(w, line)
			}
		}
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	start := time.Now()
	out := mustRun(t, []string{"--entrypoint", "/bin/sh"}, "-c", fmt.Sprintf(`
wget -q -O- http://127.0.0.1:%[1]d/small; echo "rc=$?"
wget -q -O- http://localhost:%[1]d/big | wc -c
timeout 2 wget -q -O- http://127.0.0.1:%[1]d/hang; echo "rc=$?"`, port))
	took := time.Since(start)
	want := []string{"ok", "rc=0", strconv.Itoa(2000 * len(line)), "rc=143"}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l = strings.TrimSpace(l); l != "Terminated" { // the shell's word for a signalled child
			got = append(got, l)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("wget in the image printed %q, want %q", got, want)
	}
	if took > time.Minute {
		t.Errorf("a 2 s timeout took %v in all", took)
	}
}

// TestImageEtcdTools: etcd's own etcdctl and etcdutl, at the version the
// project builds against, work from the image's shell against a real etcd
// over mutual TLS (the runbooks' manual fallback).
func TestImageEtcdTools(t *testing.T) {
	t.Parallel()
	want := strings.TrimPrefix(testenv.ServerVersion(t, "ETCD35_VERSION"), "v")
	out := mustRun(t, []string{"--entrypoint", "/bin/sh"}, "-c", "etcdctl version && etcdutl version")
	for _, tool := range []string{"etcdctl", "etcdutl"} {
		if !strings.Contains(out, tool+" version: "+want+"\n") {
			t.Errorf("%s version in the image: %q, want %s", tool, out, want)
		}
	}

	cl := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	certs := readableCopy(t, map[string]string{"ca.crt": cl.PKI.CAFile, "client.crt": cl.PKI.ClientCertFile, "client.key": cl.PKI.ClientKeyFile})
	flags := fmt.Sprintf("--endpoints %s --cacert /certs/ca.crt --cert /certs/client.crt --key /certs/client.key", cl.Endpoints()[0])
	script := fmt.Sprintf(`set -e
etcdctl %[1]s put image-test value-from-the-image >/dev/null
etcdctl %[1]s get image-test --print-value-only
etcdctl %[1]s snapshot save /scratch/s.db >/scratch/save.log 2>&1 || { cat /scratch/save.log; exit 1; }
etcdutl snapshot status /scratch/s.db -w json`, flags)
	out = mustRun(t, []string{"--entrypoint", "/bin/sh", "-v", certs + ":/certs:ro", "--tmpfs", "/scratch:rw,size=64m,mode=1777"}, "-c", script)
	val, status, _ := strings.Cut(out, "\n")
	if val != "value-from-the-image" {
		t.Fatalf("etcdctl get in the image: %q", out)
	}
	var st struct {
		Revision  int64 `json:"revision"`
		TotalKey  int   `json:"totalKey"`
		TotalSize int64 `json:"totalSize"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(status)), &st); err != nil || st.Revision < 2 || st.TotalKey < 1 {
		t.Errorf("etcdutl snapshot status of the snapshot etcdctl saved in the image: %q (%v)", status, err)
	}
}

// readableCopy copies files into a new directory the image's user can read
// (test PKI files are 0600 root), returning the directory.
func readableCopy(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestImageCABundle: the tool in the image verifies TLS servers against the
// CA bundle at the path Go reads. Without the server's CA there, a TLS
// connection to the object store fails as "unknown authority"; with that
// one file replaced by the test CA it succeeds. Together with the image's
// bundle being there and parsing (TestImageLayer), the tool trusts
// Debian's CAs.
func TestImageCABundle(t *testing.T) {
	t.Parallel()
	pki := testenv.NewPKI(t)
	var requests atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden) // not retried: the run ends at once
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>test store</Message></Error>`)
	}))
	cert, err := tls.LoadX509KeyPair(pki.ServerCertFile, pki.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	// Placeholder HMAC keys, passed by environment, never as arguments.
	env := []string{"COS_ACCESS_KEY_ID=image-test-key-id", "COS_SECRET_ACCESS_KEY=image-test-secret"}
	extra := []string{"--env", "COS_ACCESS_KEY_ID", "--env", "COS_SECRET_ACCESS_KEY"}
	args := []string{"list", "--cluster-id", "imagetest", "--cos-endpoint", srv.URL, "--bucket", "b", "--cos-max-retries", "0"}

	out, err := podmanRun(t, env, extra, args...)
	if err == nil || !strings.Contains(out, "certificate signed by unknown authority") || requests.Load() != 0 {
		t.Fatalf("the image's bundle trusted a throwaway test CA (err %v, %d requests): %s", err, requests.Load(), out)
	}

	ca := readableCopy(t, map[string]string{"ca.crt": pki.CAFile})
	out, err = podmanRun(t, env, append(extra, "-v", filepath.Join(ca, "ca.crt")+":"+bundlePath+":ro"), args...)
	if requests.Load() == 0 || strings.Contains(out, "x509") || strings.Contains(out, "certificate") {
		t.Fatalf("with the test CA at %s the tool did not trust the server (err %v, %d requests): %s", bundlePath, err, requests.Load(), out)
	}
	if !strings.Contains(out, "AccessDenied") && !strings.Contains(out, "403") {
		t.Errorf("with the test CA at %s: want the store's 403, got (err %v): %s", bundlePath, err, out)
	}
}

// image is the OCI archive `make image` saved (what a registry push sends),
// read into memory: its manifest and config digests, the config, and the
// one layer's entries.
type image struct {
	path                         string
	manifestDigest, configDigest string
	config                       []byte
	entries                      map[string]layerEntry // by absolute path
}

func readImage(t *testing.T) *image {
	t.Helper()
	ref := testenv.Image(t)
	_, tag, _ := strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")
	img := &image{path: filepath.Join(testenv.RepoRoot(t), "bin", "image", "etcd-recovery-"+tag+".oci.tar"), entries: map[string]layerEntry{}}
	f, err := os.Open(img.path)
	if err != nil {
		t.Fatalf("the image's OCI archive (make image): %v", err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", img.path, err)
		}
		if h.Typeflag == tar.TypeReg {
			if files[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	blob := func(digest string) []byte {
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
		if sum := sha256.Sum256(b); !ok || "sha256:"+hex.EncodeToString(sum[:]) != digest {
			t.Fatalf("%s: blob %s missing or with digest sha256:%x", img.path, digest, sum)
		}
		return b
	}
	var index struct{ Manifests []struct{ Digest string } }
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("%s index.json: %v, %d manifests", img.path, err, len(index.Manifests))
	}
	img.manifestDigest = index.Manifests[0].Digest
	var man struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	if err := json.Unmarshal(blob(img.manifestDigest), &man); err != nil || len(man.Layers) != 1 {
		t.Fatalf("%s manifest: %v, %d layers (want 1)", img.path, err, len(man.Layers))
	}
	img.configDigest = man.Config.Digest
	img.config = blob(man.Config.Digest)
	zr, err := gzip.NewReader(bytes.NewReader(blob(man.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	lr := tar.NewReader(zr)
	for {
		h, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		e := layerEntry{hdr: h}
		if h.Typeflag == tar.TypeReg {
			if e.data, err = io.ReadAll(lr); err != nil {
				t.Fatal(err)
			}
		}
		img.entries["/"+strings.TrimSuffix(strings.TrimPrefix(path.Clean("/"+h.Name), "/"), "/")] = e
	}
	return img
}

type layerEntry struct {
	hdr  *tar.Header
	data []byte // regular files
}

// TestImageLayer reads the OCI archive (what a registry push sends): its
// digest is bin/image/digest, and every file of the image is root-owned,
// dated the commit time, not writable by the tool's user, and the binaries
// are static.
func TestImageLayer(t *testing.T) {
	t.Parallel()
	img := readImage(t)
	d, _ := os.ReadFile(filepath.Join(testenv.RepoRoot(t), testenv.ImageDigestFile))
	if img.manifestDigest != strings.TrimSpace(string(d)) {
		t.Errorf("%s: manifest %s, but %s says %q", img.path, img.manifestDigest, testenv.ImageDigestFile, d)
	}
	if c := testenv.InspectImage(t, testenv.Image(t)); img.configDigest != "sha256:"+c.ID {
		t.Errorf("archive config %s, local image %s: the archive is not the image", img.configDigest, c.ID)
	}
	var cfg struct {
		Created time.Time
		History []struct{ Created time.Time }
	}
	if err := json.Unmarshal(img.config, &cfg); err != nil {
		t.Fatal(err)
	}
	commit := commitTime(t)
	if !cfg.Created.Equal(commit) {
		t.Errorf("image created %s, want the commit time %s (SOURCE_DATE_EPOCH; or the image is stale: make image)", cfg.Created, commit)
	}
	for _, h := range cfg.History {
		if !h.Created.Equal(commit) {
			t.Errorf("image history created %s, want %s", h.Created, commit)
		}
	}
	entries := img.entries
	t.Logf("image layer: %d entries", len(entries))

	for name, e := range entries {
		h := e.hdr
		owner := 0
		if name == "/home/nonroot" {
			owner = wantUID
		}
		if h.Uid != owner || h.Gid != owner {
			t.Errorf("%s owned by %d:%d, want %d:%d", name, h.Uid, h.Gid, owner, owner)
		}
		if !h.ModTime.Equal(commit) {
			t.Errorf("%s dated %s, want %s", name, h.ModTime, commit)
		}
		mode := h.FileInfo().Mode()
		if mode&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s is %v: no setuid/setgid", name, mode)
		}
		if mode.Type() != os.ModeSymlink && mode.Perm()&0o002 != 0 && name != "/tmp" {
			t.Errorf("%s is %v: world-writable", name, mode)
		}
	}
	if tmp := entries["/tmp"]; tmp.hdr == nil || tmp.hdr.FileInfo().Mode()&os.ModeSticky == 0 || tmp.hdr.FileInfo().Mode().Perm() != 0o777 {
		t.Errorf("/tmp: want drwxrwxrwt")
	}

	// What the pods and the runbooks call, resolved as the kernel would.
	for _, bin := range []string{entrypoint, "/usr/local/bin/etcdctl", "/usr/local/bin/etcdutl", "/bin/busybox", drillEtcd35, drillEtcd36} {
		e := entries[bin]
		if e.hdr == nil || e.hdr.Typeflag != tar.TypeReg || e.hdr.Mode&0o111 != 0o111 {
			t.Errorf("%s: not an executable file in the image", bin)
			continue
		}
		f, err := elf.NewFile(bytes.NewReader(e.data))
		if err != nil {
			t.Errorf("%s: %v", bin, err)
			continue
		}
		libs, _ := f.ImportedLibraries()
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked (interpreter), the image has no libc", bin)
			}
		}
		if len(libs) > 0 {
			t.Errorf("%s needs %v, the image has no shared libraries", bin, libs)
		}
	}
	for _, c := range []string{"sh", "sleep", "ls", "cat", "mkdir", "df", "du", "sha256sum", "tar", "id", "env"} {
		if _, err := resolve(entries, c, "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"); err != nil {
			t.Errorf("%s: %v", c, err)
		}
	}
	if !strings.Contains(string(entries["/etc/passwd"].data), fmt.Sprintf("nonroot:x:%d:%d:", wantUID, wantUID)) ||
		!strings.Contains(string(entries["/etc/group"].data), fmt.Sprintf("nonroot:x:%d:", wantUID)) {
		t.Errorf("/etc/passwd or /etc/group has no nonroot %d", wantUID)
	}

	// The CA bundle: Debian's CAs, each one parsing.
	rest := entries[bundlePath].data
	n := 0
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Errorf("%s certificate %d: %v", bundlePath, n+1, err)
			continue
		}
		if !c.IsCA {
			t.Errorf("%s: %s is not a CA", bundlePath, c.Subject)
		}
		n++
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		t.Errorf("%s: %d bytes that are not PEM", bundlePath, len(rest))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(entries[bundlePath].data) || n <= minCABundle {
		t.Errorf("%s: %d CA certificates, want more than %d", bundlePath, n, minCABundle)
	}
	t.Logf("%s: %d CA certificates", bundlePath, n)
}

// resolve finds a command in the layer as exec would (PATH for a bare name,
// symlinks followed), returning the file it runs.
func resolve(entries map[string]layerEntry, cmd, pathEnv string) (string, error) {
	cands := []string{cmd}
	if !strings.Contains(cmd, "/") {
		cands = nil
		for _, d := range filepath.SplitList(pathEnv) {
			cands = append(cands, path.Join(d, cmd))
		}
	}
	for _, c := range cands {
		for range 10 {
			e, ok := entries[c]
			if !ok {
				break
			}
			if e.hdr.Typeflag == tar.TypeSymlink {
				t := e.hdr.Linkname
				if !path.IsAbs(t) {
					t = path.Join(path.Dir(c), t)
				}
				c = t
				continue
			}
			if e.hdr.Typeflag == tar.TypeReg && e.hdr.Mode&0o111 != 0 {
				return c, nil
			}
			return "", fmt.Errorf("%s is not an executable file", c)
		}
	}
	return "", fmt.Errorf("not found in the image (PATH %s)", pathEnv)
}

func commitTime(t *testing.T) time.Time {
	t.Helper()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("SOURCE_DATE_EPOCH=%q: %v", s, err)
		}
		return time.Unix(n, 0).UTC()
	}
	cmd := exec.Command("git", "log", "-1", "--format=%ct")
	cmd.Dir = testenv.RepoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git log: %v", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(n, 0).UTC()
}

// TestManifestsRunImage: every container of the pods deploy/ ships runs as
// the image's user and group, and what it executes is in the image.
func TestManifestsRunImage(t *testing.T) {
	t.Parallel()
	c := testenv.InspectImage(t, testenv.Image(t))
	entries := readImage(t).entries
	var pathEnv string
	for _, e := range c.Env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, f := range []string{"30-cronjob.yaml", "per-cluster/update-job.yaml", "50-toolkit.yaml", "52-exporter.yaml"} {
		pods := 0
		for _, obj := range kubetest.DecodeManifests(t, kubetest.DeployPath(t, f)) {
			var spec map[string]any
			switch obj.GetKind() {
			case "CronJob":
				spec = dig(obj.Object, "spec", "jobTemplate", "spec", "template", "spec")
			case "Job", "Deployment":
				spec = dig(obj.Object, "spec", "template", "spec")
			default:
				continue
			}
			pods++
			podSC := dig(spec, "securityContext")
			cs, _ := spec["containers"].([]any)
			if len(cs) == 0 {
				t.Errorf("deploy/%s %s: no containers", f, obj.GetName())
			}
			for _, ci := range cs {
				ctr, _ := ci.(map[string]any)
				name := fmt.Sprintf("deploy/%s %s/%s container %v", f, obj.GetKind(), obj.GetName(), ctr["name"])
				sc := dig(ctr, "securityContext")
				uid, ok := intField(sc, "runAsUser")
				if !ok {
					uid, ok = intField(podSC, "runAsUser")
				}
				if !ok || uid != c.UID() {
					t.Errorf("%s: runAsUser %d (set: %v), the image's user is %d", name, uid, ok, c.UID())
				}
				gid, ok := intField(sc, "runAsGroup")
				if !ok {
					gid, ok = intField(podSC, "runAsGroup")
				}
				if ok && gid != c.GID() {
					t.Errorf("%s: runAsGroup %d, the image's group is %d", name, gid, c.GID())
				}
				command := strs(ctr["command"])
				if len(command) == 0 {
					if len(strs(ctr["args"])) == 0 {
						t.Errorf("%s: neither command nor args: the tool would run without a command", name)
					}
					command = c.Entrypoint
				}
				if _, err := resolve(entries, command[0], pathEnv); err != nil {
					t.Errorf("%s: command %s: %v", name, command[0], err)
				}
			}
		}
		if pods == 0 {
			t.Errorf("deploy/%s: no pod template", f)
		}
	}
}

func dig(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		next, _ := m[k].(map[string]any)
		m = next
	}
	return m
}

func intField(m map[string]any, k string) (int, bool) {
	switch v := m[k].(type) {
	case int64:
		return int(v), true
	case float64:
		return int(v), true
	case int:
		return v, true
	}
	return -1, false
}

func strs(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// TestImageReproducible: the whole build, the binary included, done again
// from this tree in an empty container storage, gives the same digests
// (scripts/image.sh --check-reproducible).
func TestImageReproducible(t *testing.T) {
	t.Parallel()
	c := testenv.InspectImage(t, testenv.Image(t))
	root := testenv.RepoRoot(t)
	cmd := exec.Command(filepath.Join(root, "scripts", "image.sh"), "--check-reproducible")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION="+c.Labels["org.opencontainers.image.version"])
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	t.Logf("scripts/image.sh --check-reproducible (%s):\n%s", time.Since(start).Round(time.Second), out)
	if err != nil {
		t.Fatalf("scripts/image.sh --check-reproducible: %v\n%s", err, tail(stderr.String(), 20))
	}
	if !strings.Contains(string(out), "reproducible: yes") {
		t.Fatalf("no reproducibility verdict")
	}
	if now := testenv.InspectImage(t, testenv.Image(t)); now.ID != c.ID {
		t.Logf("the image was rebuilt (the tree changed since make image): %s -> %s", c.ID, now.ID)
	}
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
