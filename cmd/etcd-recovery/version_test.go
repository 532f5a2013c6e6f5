package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/version"
)

// `version` reports the linked modules at go.mod's versions, the Go
// version, and the drill's etcd servers as they answer `--version`;
// -o yaml is -o json's data, and the table shows the same.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	gomod, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	bin := testenv.DrillBinDir(t, testenv.V35, testenv.V36)
	code, out, errOut := runCtx(t, context.Background(), "version", "--etcd-bin-dir", bin, "-o", "json")
	var rep version.Report
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("version -o json: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	if rep.Version != version.Version || !strings.HasPrefix(rep.Go, "go1.") {
		t.Errorf("version %q, Go %q", rep.Version, rep.Go)
	}
	if len(rep.Modules) != len(version.Modules) {
		t.Fatalf("modules %+v, want %v", rep.Modules, version.Modules)
	}
	for _, m := range rep.Modules {
		want := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(m.Path) + `\s+(v\S+)`).FindSubmatch(gomod)
		if want == nil {
			t.Errorf("%s is not required in go.mod", m.Path)
		} else if m.Version != string(want[1]) {
			t.Errorf("%s: reported %q, go.mod requires %s", m.Path, m.Version, want[1])
		}
	}
	if len(rep.Servers) != 2 {
		t.Fatalf("servers %+v", rep.Servers)
	}
	for i, minor := range []string{"3.5", "3.6"} {
		s := rep.Servers[i]
		if s.Name != "etcd-"+minor || !strings.HasPrefix(s.Version, minor+".") || s.Path != filepath.Join(bin, s.Name) || s.Error != "" {
			t.Errorf("server %d: %+v, want etcd-%s %s.x in %s", i, s, minor, minor, bin)
		}
	}
	code, y, _ := runCtx(t, context.Background(), "version", "--etcd-bin-dir", bin, "-o", "yaml")
	var fromYAML version.Report
	if err := yaml.UnmarshalStrict([]byte(y), &fromYAML); code != 0 || err != nil || !reflect.DeepEqual(fromYAML, rep) {
		t.Errorf("version -o yaml: exit %d, %v:\n%s\nwant the data of -o json:\n%s", code, err, y, out)
	}
	code, table, _ := runCtx(t, context.Background(), "version", "--etcd-bin-dir", bin)
	for _, s := range []string{"etcd-recovery " + version.Version, "go.etcd.io/etcd/client/v3", rep.Modules[0].Version, "k8s.io/client-go", rep.Servers[1].Version} {
		if code != 0 || !strings.Contains(table, s) {
			t.Errorf("version: exit %d, no %q in:\n%s", code, s, table)
		}
	}

	// A server of the wrong version, and one that never answers (bounded
	// by the deadline): each listed with why, and the command still
	// succeeds.
	bad := t.TempDir()
	if err := os.Symlink(testenv.EtcdBin(t, testenv.V35), filepath.Join(bad, "etcd-3.6")); err != nil {
		t.Fatal(err)
	}
	// A wrapper script whose child (not exec'd) holds stdout open after
	// the deadline killed the shell: the wait for its output is bounded too.
	if err := os.WriteFile(filepath.Join(bad, "etcd-3.5"), []byte("#!/bin/sh\nsleep 60\necho etcd Version: 3.5.35\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	code, out, errOut = runCtx(t, context.Background(), "version", "--etcd-bin-dir", bad, "-o", "json")
	took := time.Since(began)
	rep = version.Report{}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || len(rep.Servers) != 2 {
		t.Fatalf("version with bad servers: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	if s := rep.Servers[0]; s.Version != "" || !strings.Contains(s.Error, "etcd-3.5 --version") {
		t.Errorf("a hanging etcd-3.5: %+v", s)
	}
	if s := rep.Servers[1]; s.Version != "" || !strings.Contains(s.Error, "not 3.6: refusing it") {
		t.Errorf("etcd 3.5 as etcd-3.6: %+v", s)
	}
	if took > 15*time.Second {
		t.Errorf("version took %v with a hanging server: the 5 s deadline did not hold", took)
	}
}
