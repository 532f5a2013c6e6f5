package images_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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

// makeVar returns the value of `NAME := value` in the Makefile.
func makeVar(t *testing.T, mk, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `\s*[:?]?=\s*(.*)$`).FindStringSubmatch(mk)
	if m == nil {
		t.Fatalf("Makefile has no %s", name)
	}
	return strings.TrimSpace(m[1])
}

func TestDockerfileMatchesMakefile(t *testing.T) {
	mkb, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	mk := string(mkb)
	bin := makeVar(t, mk, "BIN")
	// The build target produces $(BIN), static.
	build := regexp.MustCompile(`(?m)^build:\n\t(.*)$`).FindStringSubmatch(mk)
	if build == nil || !strings.Contains(build[1], "CGO_ENABLED=0") || !strings.Contains(build[1], "-o $(BIN)") {
		t.Fatalf("Makefile build target is not a static build into $(BIN): %q", build)
	}
	// `make image` uses this Dockerfile and passes VERSION.
	image := regexp.MustCompile(`(?m)^image:\n\t(.*)$`).FindStringSubmatch(mk)
	if image == nil || !strings.Contains(image[1], "-f images/Dockerfile") || !strings.Contains(image[1], "--build-arg VERSION=") {
		t.Fatalf("Makefile image target: %q", image)
	}

	ins := parseDockerfile(t, "Dockerfile")
	last := ins[len(ins)-1].stage
	var buildStage string
	var workdir, entry, user string
	var copied string // destination of the binary in the final stage
	var sawMake, sawCA, sawArg bool
	for _, in := range ins {
		switch {
		case in.cmd == "FROM" && in.stage == 0:
			f := strings.Fields(in.args)
			if len(f) != 3 || !strings.EqualFold(f[1], "AS") {
				t.Fatalf("first stage must be named: FROM %s", in.args)
			}
			buildStage = f[2]
		case in.cmd == "WORKDIR" && in.stage == 0:
			workdir = in.args
		case in.cmd == "ARG" && in.stage == 0 && strings.HasPrefix(in.args, "VERSION"):
			sawArg = true
		case in.cmd == "RUN" && in.stage == 0 && strings.Contains(in.args, "make build"):
			sawMake = true
			if !strings.Contains(in.args, "VERSION=${VERSION}") {
				t.Errorf("build stage does not pass VERSION to make: %s", in.args)
			}
		case in.cmd == "RUN" && in.stage == last && strings.Contains(in.args, "ca-certificates"):
			sawCA = true
		case in.cmd == "COPY" && in.stage == last && strings.HasPrefix(in.args, "--from="+buildStage+" "):
			f := strings.Fields(strings.TrimPrefix(in.args, "--from="+buildStage+" "))
			if len(f) != 2 {
				t.Fatalf("COPY %s", in.args)
			}
			if want := filepath.Join(workdir, bin); f[0] != want {
				t.Errorf("final stage copies %s, but the Makefile builds %s in %s (%s)", f[0], bin, workdir, want)
			}
			copied = f[1]
		case in.cmd == "USER" && in.stage == last:
			user = in.args
		case in.cmd == "ENTRYPOINT" && in.stage == last:
			var e []string
			if err := json.Unmarshal([]byte(in.args), &e); err != nil {
				t.Fatalf("ENTRYPOINT must be exec form: %s", in.args)
			}
			entry = e[0]
		}
	}
	if !sawMake || !sawArg {
		t.Errorf("the build stage must run `make build VERSION=${VERSION}` with ARG VERSION")
	}
	if !sawCA {
		t.Errorf("the final stage installs no CA certificates")
	}
	if copied == "" || entry != copied {
		t.Errorf("ENTRYPOINT %q is not the copied binary %q", entry, copied)
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "0" || u == "root" || strings.Trim(u, "0123456789") != "" {
		t.Errorf("USER %q: want a numeric non-root uid (runAsNonRoot needs a number)", user)
	}
	// The manifests run as the same uid and call the binary by the name on PATH.
	for _, f := range []string{"30-cronjob.yaml", "40-update-job.yaml", "50-toolkit.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		u, _, _ := strings.Cut(user, ":")
		if !strings.Contains(string(b), "runAsUser: "+u) {
			t.Errorf("deploy/%s does not run as uid %s", f, u)
		}
	}
	if filepath.Dir(copied) != "/usr/local/bin" && filepath.Dir(copied) != "/usr/bin" {
		t.Errorf("binary %s is not on PATH (kubectl exec ... -- etcd-recovery)", copied)
	}
}
