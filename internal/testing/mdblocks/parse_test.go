package mdblocks

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestGitHubAnchor(t *testing.T) {
	for text, want := range map[string]string{
		"Restore from snapshot":                          "restore-from-snapshot",
		"The exporter (`etcd-recovery serve`)":           "the-exporter-etcd-recovery-serve",
		"Faults: what the tool does, and how long":       "faults-what-the-tool-does-and-how-long",
		"Alerts (`deploy/40-alerts.yaml`)":               "alerts-deploy40-alertsyaml",
		"Kubernetes (etcd-operator clusters)":            "kubernetes-etcd-operator-clusters",
		"A [linked](other.md#x) heading":                 "a-linked-heading",
		"snake_case and UPPER":                           "snake_case-and-upper",
		"Restore drills: `drill`, `backup --drill`":      "restore-drills-drill-backup---drill",
		"Cost — measured 2026-11-25 on a 2-core machine": "cost--measured-2026-11-25-on-a-2-core-machine",
	} {
		if got := GitHubAnchor(text); got != want {
			t.Errorf("GitHubAnchor(%q) = %q, want %q", text, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	text := strings.Join([]string{
		"# Title",
		"",
		"See [a](other.md#x), [b](#usage \"title\"), ![img](pic.png) and `[not](a-link.md)`.",
		"",
		"## Usage",
		"",
		"<!-- test: exit=2 needs=curl,zstd -->",
		"```sh",
		"etcd-recovery inspect",
		"```",
		"",
		"### Usage",
		"",
		"1. a step:",
		"",
		"   <!-- not run by the tests: needs a kubelet -->",
		"   ```sh",
		"   kubectl logs x",
		"   ```",
		"",
		"```",
		"output, not a command",
		"```",
		"",
		"    indented code",
		"",
		`<a id="explicit"></a>`,
		"",
		"[ref]: https://example.com",
	}, "\n")
	d, err := Parse("docs/x.md", text)
	if err != nil {
		t.Fatal(err)
	}
	var anchors []string
	for _, h := range d.Headings {
		anchors = append(anchors, h.Anchor)
	}
	if want := []string{"title", "usage", "usage-1"}; !reflect.DeepEqual(anchors, want) {
		t.Errorf("anchors %v, want %v", anchors, want)
	}
	if !d.Anchors["explicit"] {
		t.Errorf("explicit <a id> anchor missing: %v", d.Anchors)
	}
	var links []string
	for _, l := range d.Links {
		links = append(links, l.Target)
	}
	if want := []string{"other.md#x", "#usage", "pic.png", "https://example.com"}; !reflect.DeepEqual(links, want) {
		t.Errorf("links %v, want %v", links, want)
	}
	if len(d.Blocks) != 2 {
		t.Fatalf("%d blocks, want 2", len(d.Blocks))
	}
	b0, b1 := d.Blocks[0], d.Blocks[1]
	if b0.ID() != "docs/x.md:8" || b0.Opts.Exit != 2 || !reflect.DeepEqual(b0.Opts.Needs, []string{"curl", "zstd"}) || b0.Code != "etcd-recovery inspect\n" {
		t.Errorf("block 0: %s %+v %q", b0.ID(), b0.Opts, b0.Code)
	}
	if b1.Opts.NotRun != "needs a kubelet" || b1.Code != "kubectl logs x\n" || !b1.Under("usage-1") || !b1.Under("title") {
		t.Errorf("block 1: %+v %q %v", b1.Opts, b1.Code, b1.Anchors)
	}
	if !reflect.DeepEqual(d.Indented, []int{25}) {
		t.Errorf("indented code blocks at %v, want line 25", d.Indented)
	}
	if _, err := Parse("bad.md", "<!-- not run by the tests: -->\n```sh\nx\n```\n"); err == nil {
		t.Error("an annotation without a reason parsed")
	}
	if _, err := Parse("bad.md", "<!-- test: often -->\n```sh\nx\n```\n"); err == nil {
		t.Error("an unknown annotation field parsed")
	}
}

func TestCheckLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n")
	write("deploy/a.yaml", "x: 1\n")
	write("docs/b.md", strings.Join([]string{
		"# B",
		"## Two words",
		"[ok](../README.md#top) [ok](#two-words) [ok](../deploy/) [ok](../deploy/a.yaml#L1) [ok](https://x.invalid/#nope)",
		"[bad](../README.md#nope) [bad](missing.md) [bad](#gone) [bad](../deploy/a.yaml#top) [bad](../../outside.md) [bad](/abs.md)",
	}, "\n"))
	d, err := ParseFile(filepath.Join(root, "docs", "b.md"), "docs/")
	if err != nil {
		t.Fatal(err)
	}
	errs := CheckLinks(d, root, map[string]*Doc{})
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	if len(errs) != 6 {
		t.Fatalf("want 6 broken links, got %d:\n%s", len(errs), strings.Join(got, "\n"))
	}
	for i, want := range []string{"../README.md#nope", "missing.md", "#gone", "../deploy/a.yaml#top", "../../outside.md", "/abs.md"} {
		if !strings.Contains(got[i], want) {
			t.Errorf("error %d %q does not name %s", i, got[i], want)
		}
	}
}
