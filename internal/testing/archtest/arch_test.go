// Package archtest checks the direction of imports: the product features
// (backup, restore, drill, inspect, kube, metrics and the command in cmd/) sit
// above the plumbing in internal/, and no plumbing package imports a
// feature, directly or through another package. The test harness lives
// under internal/testing/ (test servers, fixtures, the store conformance
// suite and fault injector, the fault matrix): it may import features, only
// tests may import it, and no package outside it may import the standard
// library's testing package (a helper that takes testing.TB is harness, and
// belongs under internal/testing/). Only a store backend
// (internal/store/<name>) and internal/store/all, which registers the
// backends, name a backend: everything else opens stores with store.Open.
package archtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
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
var features = []string{"backup", "restore", "drill", "inspect", "kube", "fleet", "metrics", "replicate", "cmd"}

// apart are the feature packages that must not depend on another feature
// package, directly or through another package (docs/architecture.md's
// table): restore's survivor snapshot is backup's, given by the composer
// (restore/survivor), so that restore does not depend on backup; a drill
// composes restore's stages; a backup and its drill are composed by
// backup/drilled (backup --drill), never inside each other; kube is the
// Kubernetes client under fleet.
var apart = map[string][]string{
	"backup":         {"restore", "drill", "inspect", "kube", "fleet", "metrics"},
	"backup/drilled": {"kube", "fleet", "metrics"},
	"restore":        {"backup", "drill", "kube", "fleet", "metrics"},
	"drill":          {"backup", "kube", "fleet", "metrics"},
	"inspect":        {"backup", "restore", "drill", "kube", "fleet", "metrics"},
	"kube":           {"drill", "fleet", "metrics"},
	"fleet":          {"metrics"},
	"replicate":      {"backup", "restore", "drill", "inspect", "kube", "fleet", "metrics"},
	"undelete":       {"backup", "drill", "kube", "fleet", "metrics", "replicate"},
}

// inner is the order of the shared packages under internal/ (through
// any chain of imports): the vocabulary at the bottom (kvevent: etcd's
// changes; store: the object store seam), then the object format
// (objectio), the catalog's read model (catalog), its pure policies
// (retention), and its deletions and listing (prune); the journal's
// format, capture and window (with list's view of it) sit above them. The table of etcd's
// internals (etcdinternals) depends on no feature's format: it applies
// kvevent records, never the journal's. The escrow (escrow) sits on the
// catalog and the object format, beside retention.
var inner = map[string][]string{
	"internal/kvevent":       {"internal/store", "internal/objectio", "internal/catalog", "internal/retention", "internal/prune", "internal/journal", "internal/etcdinternals", "internal/escrow"},
	"internal/store":         {"internal/objectio", "internal/catalog", "internal/retention", "internal/prune", "internal/journal", "internal/escrow"},
	"internal/objectio":      {"internal/catalog", "internal/retention", "internal/prune", "internal/journal", "internal/escrow"},
	"internal/etcdinternals": {"internal/objectio", "internal/catalog", "internal/retention", "internal/prune", "internal/journal", "internal/escrow"},
	"internal/catalog":       {"internal/retention", "internal/prune", "internal/journal", "internal/escrow"},
	"internal/retention":     {"internal/prune", "internal/journal"},
	"internal/prune":         {"internal/journal"},
	"internal/escrow":        {"internal/retention", "internal/prune", "internal/journal"},
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

// storeSeams are the packages under internal/store that are not backends:
// the seam itself, the retry wrapper and the registration package that
// links the backends (internal/store/all). Every other package under
// internal/store is a backend.
var storeSeams = []string{"internal/store", "internal/store/retry", "internal/store/all"}

// backendRegistration is the one package outside the backends that names
// them (a blank import of each, registering it with store.Register).
const backendRegistration = "internal/store/all"

// isBackend reports whether path is a store backend (or a package under
// one).
func isBackend(path string) bool {
	rel, ok := strings.CutPrefix(path, module+"/internal/store/")
	return ok && rel != "" && !slices.Contains(storeSeams, "internal/store/"+rel)
}

// backendOf is the backend package path is, or is under ("" if none).
func backendOf(path string) string {
	rel, ok := strings.CutPrefix(path, module+"/internal/store/")
	if !ok || !isBackend(path) {
		return ""
	}
	name, _, _ := strings.Cut(rel, "/")
	return module + "/internal/store/" + name
}

// namesBackend is the rule that only a backend and the registration name
// a backend: a direct import of backend b by p is allowed when p is b (or
// under it), the registration package, or the test harness.
func namesBackend(p pkg, b string) bool {
	switch {
	case !isBackend(b), backendOf(p.ImportPath) == backendOf(b), p.ImportPath == module+"/"+backendRegistration,
		isFixture(p.ImportPath):
		return false
	}
	return true
}

// violations are the imports against the rules, one line each:
//   - a plumbing package (internal/, not a fixture) depends on a feature;
//   - internal/catalog imports a feature (the rule above, named apart: the
//     catalog is the one shared model of the backups);
//   - a package that is not a fixture depends on a fixture (fixtures are
//     for tests only);
//   - a package that is not a fixture imports the standard library's
//     testing package (harness outside internal/testing/);
//   - a package other than a backend, internal/store/all and the harness
//     imports a store backend (internal/store/<name>): the rest open
//     stores through the registry (store.Open).
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
		for _, d := range p.Imports {
			if namesBackend(p, d) {
				out = append(out, "package "+p.ImportPath+" imports store backend "+d+" (only the backend and "+backendRegistration+" name it; open stores with store.Open)")
			}
		}
		if !isFixture(p.ImportPath) && slices.Contains(p.Imports, "testing") {
			out = append(out, "package "+p.ImportPath+" imports the testing package outside a _test.go file (test harness belongs under internal/testing/)")
		}
		if p.ImportPath == module+"/kube" {
			// kube is the Kubernetes client: a backup's and an inspection's
			// work is their packages' (fleet composes them; apart keeps kube
			// from fleet).
			for _, d := range p.Deps {
				if slices.Contains(p.Imports, d) && under(d, []string{"backup", "inspect"}) {
					out = append(out, "kube imports "+d)
				}
			}
		}
		if rel, ok := strings.CutPrefix(p.ImportPath, module+"/"); ok {
			for _, not := range inner[rel] {
				if slices.Contains(p.Deps, module+"/"+not) {
					out = append(out, "shared package "+p.ImportPath+" imports "+module+"/"+not+" (the order of internal/ runs the other way)")
				}
			}
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
		{ImportPath: m("cmd/etcd-recovery"), Imports: []string{m("internal/store/cos"), m("internal/store")}, Deps: []string{m("internal/store/cos"), m("internal/store")}},
		{ImportPath: m("internal/catalog/x"), Imports: []string{m("internal/store/memstore")}, Deps: []string{m("internal/store/memstore")}},
		{ImportPath: m("kube"), Imports: []string{m("inspect"), m("restore")}, Deps: []string{m("inspect"), m("restore"), m("backup"), m("fleet")}},
		{ImportPath: m("backup"), Imports: []string{m("internal/catalog")}, Deps: []string{m("internal/catalog"), m("drill")}},
		{ImportPath: m("backup/drilled"), Imports: []string{m("fleet")}, Deps: []string{m("fleet"), m("backup"), m("drill")}},
		// Allowed.
		{ImportPath: m("backup/drilled"), Imports: []string{m("backup"), m("drill")}, Deps: []string{m("backup"), m("drill"), m("restore")}},
		{ImportPath: m("fleet"), Imports: []string{m("backup"), m("kube")}, Deps: []string{m("backup"), m("kube"), m("internal/catalog")}},
		{ImportPath: m("internal/testing/testfix"), Imports: []string{m("backup"), "testing"}, Deps: []string{m("backup"), "testing"}},
		{ImportPath: m("cmd/etcd-recovery"), Imports: []string{m("kube")}, Deps: []string{m("kube"), m("internal/usage")}},
		{ImportPath: m("internal/store/all"), Imports: []string{m("internal/store/cos")}, Deps: []string{m("internal/store/cos"), m("internal/store")}},
		{ImportPath: m("internal/store/cos/inner"), Imports: []string{m("internal/store/cos"), m("internal/store/retry")}, Deps: []string{m("internal/store/cos")}},
		{ImportPath: m("internal/testing/testfix"), Imports: []string{m("internal/store/cos")}, Deps: []string{m("internal/store/cos")}},
		{ImportPath: m("metrics"), Imports: []string{m("internal/store"), m("internal/store/retry"), m("internal/store/all")}, Deps: []string{m("internal/store")}},
	}
	got := violations(pkgs)
	want := []string{
		"plumbing package " + m("internal/catalog") + " imports feature " + m("backup") + " (directly)",
		"internal/catalog imports feature " + m("backup"),
		"plumbing package " + m("internal/store/cos") + " imports feature " + m("kube") + " (through another package)",
		"package " + m("restore") + " imports test fixture " + m("internal/testing/testfix") + " (fixtures are for tests only)",
		"package " + m("internal/store/fake") + " imports the testing package outside a _test.go file (test harness belongs under internal/testing/)",
		"package " + m("cmd/etcd-recovery") + " imports store backend " + m("internal/store/cos") + " (only the backend and internal/store/all name it; open stores with store.Open)",
		"package " + m("internal/catalog/x") + " imports store backend " + m("internal/store/memstore") + " (only the backend and internal/store/all name it; open stores with store.Open)",
		"kube imports " + m("inspect"),
		"package " + m("kube") + " imports " + m("fleet") + " (through another package): it must not depend on it",
		"package " + m("backup") + " imports " + m("drill") + " (through another package): it must not depend on it",
		"package " + m("backup/drilled") + " imports " + m("fleet") + " (directly): it must not depend on it",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The inner order: the object format below the catalog, etcd's internals
// below the journal, the read model below its policies and deletions.
func TestInnerOrderDetected(t *testing.T) {
	t.Parallel()
	m := func(s string) string { return module + "/" + s }
	pkgs := []pkg{
		{ImportPath: m("internal/objectio"), Imports: []string{m("internal/catalog")}, Deps: []string{m("internal/catalog"), m("internal/store")}},
		{ImportPath: m("internal/etcdinternals"), Imports: []string{m("internal/journal")}, Deps: []string{m("internal/journal"), m("internal/kvevent")}},
		{ImportPath: m("internal/catalog"), Imports: []string{m("internal/objectio")}, Deps: []string{m("internal/objectio"), m("internal/retention")}},
		{ImportPath: m("internal/retention"), Imports: []string{m("internal/catalog")}, Deps: []string{m("internal/catalog"), m("internal/prune")}},
		{ImportPath: m("internal/prune"), Imports: []string{m("internal/journal")}, Deps: []string{m("internal/journal"), m("internal/catalog")}},
		// Allowed.
		{ImportPath: m("internal/prune"), Imports: []string{m("internal/retention")}, Deps: []string{m("internal/retention"), m("internal/catalog"), m("internal/objectio")}},
		{ImportPath: m("internal/journal"), Imports: []string{m("internal/prune"), m("internal/kvevent")}, Deps: []string{m("internal/catalog"), m("internal/kvevent"), m("internal/retention"), m("internal/prune")}},
		{ImportPath: m("internal/etcdinternals"), Imports: []string{m("internal/kvevent")}, Deps: []string{m("internal/kvevent")}},
	}
	got := violations(pkgs)
	want := []string{
		"shared package " + m("internal/objectio") + " imports " + m("internal/catalog") + " (the order of internal/ runs the other way)",
		"shared package " + m("internal/etcdinternals") + " imports " + m("internal/journal") + " (the order of internal/ runs the other way)",
		"shared package " + m("internal/catalog") + " imports " + m("internal/retention") + " (the order of internal/ runs the other way)",
		"shared package " + m("internal/retention") + " imports " + m("internal/prune") + " (the order of internal/ runs the other way)",
		"shared package " + m("internal/prune") + " imports " + m("internal/journal") + " (the order of internal/ runs the other way)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The single-cluster commands are the CLI's own composition: their files
// import no fleet (one cluster's backup, its drill and a drill of one
// cluster compose backup, backup/drilled and drill). The --all forms live
// in files of their own (backup_all.go, drill_all.go). go list sees the
// package, not its files: the files' imports are read here.
var singleClusterFiles = []string{"backup.go", "drill.go"}

func TestSingleClusterCommandsApartFromFleet(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "..", "cmd", "etcd-recovery")
	for _, name := range singleClusterFiles {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if under(path, []string{"fleet"}) {
				t.Errorf("cmd/etcd-recovery/%s imports %s: a single-cluster command composes backup, backup/drilled and drill itself", name, path)
			}
		}
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
