// Package archtest checks the direction of imports: the product features
// (backup, restore, drill, inspect, kube, metrics and the command in cmd/) sit
// above the plumbing in internal/, and no plumbing package imports a
// feature, directly or through another package. The test harness lives
// under internal/testing/ (test servers, fixtures, the store conformance
// suite and fault injector, the fault matrix): it may import features, only
// tests may import it, and no package outside it may import the standard
// library's testing package (a helper that takes testing.TB is harness, and
// belongs under internal/testing/).
package archtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const module = "github.com/armada/etcd-recovery"

// features are the product packages (and everything under them).
var features = []string{"backup", "restore", "drill", "inspect", "kube", "metrics", "cmd"}

// apart are the feature packages that must not depend on another feature
// package, directly or through another package: restore's survivor
// snapshot is backup's, given by the composer (restore/survivor), so that
// restore and the object format do not depend on backup.
var apart = map[string][]string{
	"restore": {"backup"},
}

// fixtures is the test harness: it starts real servers or builds fixtures
// from the features, and is imported by tests only (checked below).
var fixtures = []string{"internal/testing"}

// pkg is what go list says about one package (without its tests).
type pkg struct {
	ImportPath string
	Imports    []string // direct
	Deps       []string // transitive
	Error      *struct{ Err string }
}

func under(path string, roots []string) bool {
	rel, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return false
	}
	for _, r := range roots {
		if rel == r || strings.HasPrefix(rel, r+"/") {
			return true
		}
	}
	return false
}

func isFeature(path string) bool  { return under(path, features) }
func isFixture(path string) bool  { return under(path, fixtures) }
func isPlumbing(path string) bool { return under(path, []string{"internal"}) && !isFixture(path) }

// violations are the imports against the rules, one line each:
//   - a plumbing package (internal/, not a fixture) depends on a feature;
//   - internal/catalog imports a feature (the rule above, named apart: the
//     catalog is the one shared model of the backups);
//   - a package that is not a fixture depends on a fixture (fixtures are
//     for tests only);
//   - a package that is not a fixture imports the standard library's
//     testing package (harness outside internal/testing/);
//   - a package of apart depends on one it is kept apart from (restore on
//     backup).
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		if !strings.HasPrefix(p.ImportPath, module) {
			continue
		}
		for _, d := range p.Deps {
			switch {
			case isPlumbing(p.ImportPath) && isFeature(d):
				via := "through another package"
				if slices.Contains(p.Imports, d) {
					via = "directly"
				}
				out = append(out, "plumbing package "+p.ImportPath+" imports feature "+d+" ("+via+")")
			case !isFixture(p.ImportPath) && isFixture(d):
				out = append(out, "package "+p.ImportPath+" imports test fixture "+d+" (fixtures are for tests only)")
			}
		}
		if !isFixture(p.ImportPath) && slices.Contains(p.Imports, "testing") {
			out = append(out, "package "+p.ImportPath+" imports the testing package outside a _test.go file (test harness belongs under internal/testing/)")
		}
		if rel, ok := strings.CutPrefix(p.ImportPath, module+"/"); ok {
			for _, not := range apart[rel] {
				if slices.Contains(p.Deps, module+"/"+not) {
					via := "through another package"
					if slices.Contains(p.Imports, module+"/"+not) {
						via = "directly"
					}
					out = append(out, "package "+p.ImportPath+" imports "+module+"/"+not+" ("+via+"): it must not depend on it")
				}
			}
		}
		if p.ImportPath == module+"/internal/catalog" {
			for _, d := range p.Deps {
				if isFeature(d) {
					out = append(out, "internal/catalog imports feature "+d)
				}
			}
		}
	}
	return out
}

// list runs `go list -deps -json` on every package of the module.
func list(t testing.TB) []pkg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := filepath.Join("..", "..", "..")
	cmd := exec.CommandContext(ctx, "go", "list", "-e", "-deps", "-json=ImportPath,Imports,Deps,Error", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -json ./...: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestImportDirection(t *testing.T) {
	t.Parallel()
	pkgs := list(t)
	var plumbing, feats int
	for _, p := range pkgs {
		if p.Error != nil && strings.HasPrefix(p.ImportPath, module) {
			t.Logf("%s: %s (its imports are still checked)", p.ImportPath, p.Error.Err)
		}
		switch {
		case isPlumbing(p.ImportPath):
			plumbing++
		case isFeature(p.ImportPath):
			feats++
		}
	}
	// The classification must see the layout: a rename that leaves the
	// lists above empty would pass without checking anything.
	if plumbing < 10 || feats < 5 {
		t.Fatalf("go list found %d plumbing and %d feature packages of %s: the lists in this test are out of date", plumbing, feats, module)
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
	// The feature graph, for the record (go test -v).
	for _, p := range pkgs {
		if !isFeature(p.ImportPath) {
			continue
		}
		var uses []string
		for _, d := range p.Imports {
			if isFeature(d) || under(d, []string{"internal"}) {
				uses = append(uses, strings.TrimPrefix(d, module+"/"))
			}
		}
		t.Logf("%s -> %s", strings.TrimPrefix(p.ImportPath, module+"/"), strings.Join(uses, " "))
	}
}

// The rules catch what they are meant to: a plumbing package importing a
// feature directly or through another plumbing package, the catalog
// importing one, and a product package importing a test fixture; and they
// let the features import plumbing and fixtures import features.
func TestViolationsDetected(t *testing.T) {
	t.Parallel()
	m := func(s string) string { return module + "/" + s }
	pkgs := []pkg{
		{ImportPath: m("internal/catalog"), Imports: []string{m("backup")}, Deps: []string{m("backup"), m("internal/store")}},
		{ImportPath: m("internal/store/cos"), Imports: []string{m("internal/output")}, Deps: []string{m("internal/output"), m("kube")}},
		{ImportPath: m("restore"), Imports: []string{m("internal/testing/testfix")}, Deps: []string{m("internal/testing/testfix"), m("internal/catalog")}},
		{ImportPath: m("internal/store/fake"), Imports: []string{"io", "testing"}, Deps: []string{"io", "testing"}},
		// Allowed.
		{ImportPath: m("kube"), Imports: []string{m("backup"), m("internal/catalog")}, Deps: []string{m("backup"), m("internal/catalog")}},
		{ImportPath: m("internal/testing/testfix"), Imports: []string{m("backup"), "testing"}, Deps: []string{m("backup"), "testing"}},
		{ImportPath: m("cmd/etcd-recovery"), Imports: []string{m("kube")}, Deps: []string{m("kube"), m("internal/usage")}},
	}
	got := violations(pkgs)
	want := []string{
		"plumbing package " + m("internal/catalog") + " imports feature " + m("backup") + " (directly)",
		"internal/catalog imports feature " + m("backup"),
		"plumbing package " + m("internal/store/cos") + " imports feature " + m("kube") + " (through another package)",
		"package " + m("restore") + " imports test fixture " + m("internal/testing/testfix") + " (fixtures are for tests only)",
		"package " + m("internal/store/fake") + " imports the testing package outside a _test.go file (test harness belongs under internal/testing/)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// restore must not import backup, directly or through another package;
// restore/survivor (backup's survivor snapshot for restore) and drill may
// import both.
func TestRestoreApartFromBackup(t *testing.T) {
	t.Parallel()
	m := func(s string) string { return module + "/" + s }
	pkgs := []pkg{
		{ImportPath: m("restore"), Imports: []string{m("backup")}, Deps: []string{m("backup"), m("internal/catalog")}},
		{ImportPath: m("restore"), Imports: []string{m("inspect")}, Deps: []string{m("inspect"), m("backup")}},
		// Allowed.
		{ImportPath: m("restore/survivor"), Imports: []string{m("backup"), m("restore")}, Deps: []string{m("backup"), m("restore")}},
		{ImportPath: m("drill"), Imports: []string{m("restore")}, Deps: []string{m("restore"), m("internal/catalog")}},
		{ImportPath: m("restore"), Imports: []string{m("inspect")}, Deps: []string{m("inspect"), m("internal/catalog")}},
	}
	got := violations(pkgs)
	want := []string{
		"package " + m("restore") + " imports " + m("backup") + " (directly): it must not depend on it",
		"package " + m("restore") + " imports " + m("backup") + " (through another package): it must not depend on it",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
