package runbooks

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// A heading of a runbook, with its GitHub-style anchor.
type heading struct {
	level  int
	text   string
	anchor string
	line   int
}

// blockOpts are a block's annotations: an HTML comment on the line just
// before its fence, either
//
//	<!-- test: exit=N background per-member needs=curl,zstd -->
//	<!-- not run by the tests: REASON -->
type blockOpts struct {
	exit       int      // the exit code the runbook promises (default 0)
	background bool     // the block runs a server in the foreground: start it and go on
	perMember  bool     // run once per member of the scenario (<name>, <client-url>, <peer-url>)
	needs      []string // tools beyond the toolkit image's (curl, zstd: laptop-only sections)
	notRun     string   // why the tests cannot run it
}

// block is one ```sh block.
type block struct {
	file    string
	line    int      // of the opening fence, 1-based
	anchors []string // anchors of the enclosing headings, outermost first
	code    string
	opts    blockOpts
}

func (b *block) id() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// under reports whether the block is in the section anchor (or a subsection).
func (b *block) under(anchor string) bool {
	for _, a := range b.anchors {
		if a == anchor {
			return true
		}
	}
	return false
}

type doc struct {
	file     string
	text     string
	headings []heading
	blocks   []*block
}

var (
	headingRE    = regexp.MustCompile(`^(#{1,6})\s+(.+?)\s*#*\s*$`)
	annotationRE = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)
	anchorDropRE = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// githubAnchor is GitHub's anchor of a heading: lower case, punctuation
// dropped, spaces to hyphens.
func githubAnchor(text string) string {
	s := strings.ToLower(strings.TrimSpace(text))
	s = strings.ReplaceAll(s, "`", "")
	s = anchorDropRE.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

func parseAnnotation(s string) (blockOpts, error) {
	var o blockOpts
	if r, ok := strings.CutPrefix(s, "not run by the tests:"); ok {
		o.notRun = strings.TrimSpace(r)
		if o.notRun == "" {
			return o, fmt.Errorf("%q: give the reason", s)
		}
		return o, nil
	}
	r, ok := strings.CutPrefix(s, "test:")
	if !ok {
		return o, fmt.Errorf("unknown annotation %q (want \"test: ...\" or \"not run by the tests: REASON\")", s)
	}
	for _, f := range strings.Fields(r) {
		switch k, v, _ := strings.Cut(f, "="); k {
		case "exit":
			n, err := strconv.Atoi(v)
			if err != nil {
				return o, fmt.Errorf("annotation %q: %v", s, err)
			}
			o.exit = n
		case "background":
			o.background = true
		case "per-member":
			o.perMember = true
		case "needs":
			o.needs = strings.Split(v, ",")
		default:
			return o, fmt.Errorf("annotation %q: unknown field %q", s, f)
		}
	}
	return o, nil
}

// parseDoc reads a runbook: its headings and its ```sh blocks with their
// annotations. Other fenced blocks (output samples) are not commands.
func parseDoc(path string) (*doc, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d := &doc{file: filepath.Base(path), text: string(b)}
	lines := strings.Split(d.text, "\n")
	var stack []heading
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimLeft(line, " ")
		if strings.HasPrefix(trimmed, "```") {
			indent := len(line) - len(trimmed)
			lang := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
			start := i
			var code []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				l := lines[i]
				for n := 0; n < indent && strings.HasPrefix(l, " "); n++ {
					l = l[1:]
				}
				code = append(code, l)
			}
			if i == len(lines) {
				return nil, fmt.Errorf("%s:%d: unterminated code block", d.file, start+1)
			}
			if lang != "sh" {
				continue
			}
			blk := &block{file: d.file, line: start + 1, code: strings.Join(code, "\n") + "\n"}
			for _, h := range stack {
				blk.anchors = append(blk.anchors, h.anchor)
			}
			for j := start - 1; j >= 0; j-- {
				prev := strings.TrimSpace(lines[j])
				if prev == "" {
					continue
				}
				if m := annotationRE.FindStringSubmatch(prev); m != nil {
					if blk.opts, err = parseAnnotation(m[1]); err != nil {
						return nil, fmt.Errorf("%s:%d: %v", d.file, j+1, err)
					}
				}
				break
			}
			d.blocks = append(d.blocks, blk)
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			h := heading{level: len(m[1]), text: m[2], anchor: githubAnchor(m[2]), line: i + 1}
			d.headings = append(d.headings, h)
			for len(stack) > 0 && stack[len(stack)-1].level >= h.level {
				stack = stack[:len(stack)-1]
			}
			stack = append(stack, h)
		}
	}
	return d, nil
}

// runbooks are every runbook of this directory, by file name.
type runbooks map[string]*doc

func parseAll(tb testing.TB) runbooks {
	tb.Helper()
	paths, err := filepath.Glob("*.md")
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no runbooks found: %v", err)
	}
	rb := runbooks{}
	for _, p := range paths {
		d, err := parseDoc(p)
		if err != nil {
			tb.Fatal(err)
		}
		rb[d.file] = d
	}
	return rb
}

// section resolves "file.md#anchor" (or "runbooks/file.md#anchor").
func (rb runbooks) section(ref string) (*doc, heading, error) {
	file, anchor, _ := strings.Cut(strings.TrimPrefix(ref, "runbooks/"), "#")
	d := rb[file]
	if d == nil {
		return nil, heading{}, fmt.Errorf("%s: no runbook %s", ref, file)
	}
	if anchor == "" {
		return nil, heading{}, fmt.Errorf("%s: names no section (want file.md#anchor)", ref)
	}
	for _, h := range d.headings {
		if h.anchor == anchor {
			return d, h, nil
		}
	}
	var have []string
	for _, h := range d.headings {
		have = append(have, "#"+h.anchor)
	}
	sort.Strings(have)
	return nil, heading{}, fmt.Errorf("%s: no heading with anchor #%s in %s (have %s)", ref, anchor, file, strings.Join(have, ", "))
}

// blocks lists the blocks under the section ref, in order.
func (rb runbooks) blocks(ref string) ([]*block, error) {
	d, h, err := rb.section(ref)
	if err != nil {
		return nil, err
	}
	var out []*block
	for _, b := range d.blocks {
		if b.under(h.anchor) {
			out = append(out, b)
		}
	}
	return out, nil
}
