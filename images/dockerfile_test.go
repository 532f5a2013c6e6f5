package images_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// instr is one Dockerfile instruction (continuation lines joined).
type instr struct {
	cmd, args string
	stage     int
}

func parseDockerfile(t *testing.T, path string) []instr {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []instr
	stage := -1
	var cur string
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		cur += trimmed
		cmd, args, _ := strings.Cut(cur, " ")
		cmd = strings.ToUpper(cmd)
		if cmd == "FROM" {
			stage++
		}
		out = append(out, instr{cmd: cmd, args: strings.TrimSpace(args), stage: stage})
		cur = ""
	}
	return out
}

// makeTarget returns the prerequisites and the recipe of a Makefile target.
func makeTarget(t *testing.T, mk, name string) (prereqs, recipe string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `:(.*)\n((?:\t.*\n)*)`).FindStringSubmatch(mk)
	if m == nil {
		t.Fatalf("Makefile has no %s target", name)
	}
	return strings.TrimSpace(m[1]), m[2]
}

// TestDockerfile checks images/Dockerfile as a build needing no base image
// and no runtime (so buildah builds it offline and reproducibly), and that
// `make image` and `make test` build it with scripts/image.sh.
func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t, "Dockerfile")
	var froms, copies []string
	var user, workdir string
	var entry []string
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			froms = append(froms, in.args)
		case "RUN", "ADD", "ONBUILD", "HEALTHCHECK":
			// RUN needs a runtime and makes the build depend on what it
			// does; ADD may fetch URLs.
			t.Errorf("Dockerfile: %s %s: the image is assembled from the prepared context with COPY only", in.cmd, in.args)
		case "COPY":
			copies = append(copies, in.args)
		case "USER":
			user = in.args
		case "WORKDIR":
			workdir = in.args
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &entry); err != nil {
				t.Errorf("ENTRYPOINT must be exec form (signals reach the tool): %s", in.args)
			}
		case "CMD":
			t.Errorf("Dockerfile: CMD %s: the pods give their own args; a CMD would run when they give none", in.args)
		}
	}
	if !slices.Equal(froms, []string{"scratch"}) {
		t.Errorf("Dockerfile stages %q: want one, FROM scratch (no base image to pull)", froms)
	}
	for _, c := range copies {
		if strings.Contains(c, "--from") {
			t.Errorf("COPY %s: no build stages", c)
		}
		if !strings.Contains(c, "--chown=") {
			t.Errorf("COPY %s: the owner must be explicit (the context's owners are the builder's)", c)
		}
	}
	uid, gid, _ := strings.Cut(user, ":")
	if uid == "" || uid == "0" || strings.Trim(uid, "0123456789") != "" || gid == "" || strings.Trim(gid, "0123456789") != "" {
		t.Errorf("USER %q: want a numeric non-root uid:gid (runAsNonRoot needs a number)", user)
	}
	if !slices.Equal(entry, []string{"/usr/local/bin/etcd-recovery"}) {
		t.Errorf("ENTRYPOINT %q, want [/usr/local/bin/etcd-recovery]", entry)
	}
	if workdir == "" {
		t.Errorf("no WORKDIR")
	}

	mkb, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	mk := string(mkb)
	_, build := makeTarget(t, mk, "build")
	if !strings.Contains(build, "CGO_ENABLED=0") || !strings.Contains(build, "-o $(BIN)") {
		t.Errorf("Makefile build target is not a static build into $(BIN): %q", build)
	}
	if _, image := makeTarget(t, mk, "image"); !strings.Contains(image, "scripts/image.sh") || !strings.Contains(image, "VERSION=$(VERSION)") {
		t.Errorf("Makefile image target does not run scripts/image.sh with VERSION: %q", image)
	}
	testPre, _ := makeTarget(t, mk, "test")
	for _, p := range []string{"container-tools", "image"} {
		if !slices.Contains(strings.Fields(testPre), p) {
			t.Errorf("make test does not depend on %s (prerequisites %q): the image tests would run a stale or missing image", p, testPre)
		}
	}
	if _, ct := makeTarget(t, mk, "container-tools"); !strings.Contains(ct, "scripts/container-tools.sh") {
		t.Errorf("Makefile container-tools target: %q", ct)
	}

	sb, err := os.ReadFile(filepath.Join("..", "scripts", "image.sh"))
	if err != nil {
		t.Fatal(err)
	}
	script := string(sb)
	if !strings.Contains(script, "-f images/Dockerfile") || !strings.Contains(script, "--isolation chroot") || !strings.Contains(script, `--timestamp "$EPOCH"`) {
		t.Errorf("scripts/image.sh does not build images/Dockerfile with --isolation chroot --timestamp")
	}
	// The script's podman/buildah flags are the tests' (testenv).
	m := regexp.MustCompile(`(?m)^GLOBAL=\((.*)\)$`).FindStringSubmatch(script)
	if m == nil || !slices.Equal(strings.Fields(m[1]), testenv.PodmanGlobalArgs) {
		t.Errorf("scripts/image.sh GLOBAL=%q, testenv.PodmanGlobalArgs %q: the tests would not see the image", m, testenv.PodmanGlobalArgs)
	}
}
