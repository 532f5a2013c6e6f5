// Package mdblocks is the harness that executes the project's Markdown: the
// runbooks (runbooks/) and the documentation (docs/). It parses a Markdown
// file's headings (with GitHub's anchors), its links and its shell blocks
// with their annotations, checks links and anchors, and runs blocks in a
// Scenario: a real failure or setup (etcd, MinIO, kube-apiserver on
// loopback, started by the test) whose <placeholders> fill in the blocks,
// each block run with bash -euo pipefail and only the toolkit image's tools
// on PATH.
//
// A block is a fenced ```sh block. The line just before its fence may
// annotate it:
//
//	<!-- test: exit=N background per-member needs=curl,zstd -->
//	<!-- not run by the tests: REASON -->
//
// exit is the exit code the text promises (default 0); background starts a
// block that runs a server in the foreground and goes on; per-member runs it
// once per member of the scenario (<name>, <client-url>, <peer-url>); needs
// adds tools beyond the toolkit image's. Every other block must be run by a
// scenario (Set.Unexecuted lists those none ran).
package mdblocks

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

// Heading is a Markdown heading with its GitHub anchor.
type Heading struct {
	Level  int
	Text   string
	Anchor string // unique in its document: GitHub's -1, -2 suffixes for repeats
	Line   int
}

// Opts are a block's annotations.
type Opts struct {
	Exit       int      // the exit code the text promises (default 0)
	Background bool     // the block runs a server in the foreground: start it and go on
	PerMember  bool     // run once per member of the scenario (<name>, <client-url>, <peer-url>)
	Needs      []string // tools beyond the toolkit image's (curl, zstd, kubectl...)
	NotRun     string   // why the tests cannot run it
}

// ShellLangs are the info strings of fenced blocks that hold shell
// commands. Only "sh" is accepted in the project's Markdown (TestDocs
// refuses the others, so that every command block is one the runner sees
// the same way).
var ShellLangs = []string{"sh", "bash", "shell", "console", "shell-session", "zsh"}

func isShell(lang string) bool {
	for _, l := range ShellLangs {
		if lang == l {
			return true
		}
	}
	return false
}

// Block is one fenced shell block.
type Block struct {
	Doc     *Doc
	Line    int      // of the opening fence, 1-based
	Lang    string   // the fence's info string: sh (bash, console... are refused by the docs tests)
	Anchors []string // anchors of the enclosing headings, outermost first
	Code    string
	Opts    Opts
}

// ID is the block's place, "runbooks/backup.md:42".
func (b *Block) ID() string { return fmt.Sprintf("%s:%d", b.Doc.Path, b.Line) }

// Under reports whether the block is in the section anchor (or a subsection).
func (b *Block) Under(anchor string) bool {
	for _, a := range b.Anchors {
		if a == anchor {
			return true
		}
	}
	return false
}

// Link is a Markdown link's target, as written.
type Link struct {
	Line   int
	Target string
}

// Doc is one parsed Markdown file.
type Doc struct {
	Name     string // file name, "backup.md": what section references use
	Path     string // label for messages and block ids, "runbooks/backup.md"
	File     string // the file read
	Text     string
	Headings []Heading
	Blocks   []*Block
	Links    []Link
	// Anchors are every anchor a link may name: the headings' and
	// explicit <a id="..."> / <a name="..."> ones.
	Anchors map[string]bool
	// Indented lists lines that open an indented code block (four spaces
	// after a blank line, outside a list): commands there would escape the
	// runner.
	Indented []int
}

var (
	headingRE    = regexp.MustCompile(`^(#{1,6})\s+(.+?)\s*#*\s*$`)
	annotationRE = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)
	anchorDropRE = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	mdLinkRE     = regexp.MustCompile(`\[([^\]]*)\]\(([^)]*)\)`)
	codeSpanRE   = regexp.MustCompile("`+[^`]*`+")
	// !?[text](target "title") and [text](<target>)
	inlineLinkRE = regexp.MustCompile(`\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDefRE     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	htmlAnchorRE = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	listItemRE   = regexp.MustCompile(`^\s*(?:[-*+]|\d+[.)])\s`)
)

// GitHubAnchor is GitHub's anchor of a heading's text: links reduced to
// their text, lower case, punctuation dropped (letters, digits, spaces,
// hyphens and underscores stay), spaces to hyphens. Repeats get -1, -2...
// suffixes: see Doc.Anchors.
func GitHubAnchor(text string) string {
	s := mdLinkRE.ReplaceAllString(strings.TrimSpace(text), "$1")
	s = strings.ToLower(s)
	s = anchorDropRE.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// ParseAnnotation reads the inside of a block's annotation comment.
func ParseAnnotation(s string) (Opts, error) {
	var o Opts
	if r, ok := strings.CutPrefix(s, "not run by the tests:"); ok {
		o.NotRun = strings.TrimSpace(r)
		if o.NotRun == "" {
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
			o.Exit = n
		case "background":
			o.Background = true
		case "per-member":
			o.PerMember = true
		case "needs":
			o.Needs = strings.Split(v, ",")
		default:
			return o, fmt.Errorf("annotation %q: unknown field %q", s, f)
		}
	}
	return o, nil
}

// ParseFile reads a Markdown file; label is the directory prefix of its
// Path ("runbooks/", "docs/", "" for the repository root).
func ParseFile(file, label string) (*Doc, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	d, err := Parse(label+filepath.Base(file), string(b))
	if err != nil {
		return nil, err
	}
	d.File = file
	return d, nil
}

// Parse reads Markdown text: its headings, links and shell blocks with
// their annotations. Other fenced blocks (output samples) are not commands.
func Parse(path, text string) (*Doc, error) {
	d := &Doc{Name: filepath.Base(path), Path: path, Text: text, Anchors: map[string]bool{}}
	lines := strings.Split(d.Text, "\n")
	var stack []Heading
	seen := map[string]int{}
	prevBlank, inList := true, false
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimLeft(line, " ")
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence := trimmed[:3]
			indent := len(line) - len(trimmed)
			lang, _, _ := strings.Cut(strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1])), " ")
			start := i
			var code []string
			for i++; i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), fence); i++ {
				l := lines[i]
				for n := 0; n < indent && strings.HasPrefix(l, " "); n++ {
					l = l[1:]
				}
				code = append(code, l)
			}
			if i == len(lines) {
				return nil, fmt.Errorf("%s:%d: unterminated code block", d.Path, start+1)
			}
			prevBlank = false
			if indent == 0 {
				inList = false
			}
			if !isShell(lang) {
				continue
			}
			blk := &Block{Doc: d, Line: start + 1, Lang: lang, Code: strings.Join(code, "\n") + "\n"}
			for _, h := range stack {
				blk.Anchors = append(blk.Anchors, h.Anchor)
			}
			for j := start - 1; j >= 0; j-- {
				prev := strings.TrimSpace(lines[j])
				if prev == "" {
					continue
				}
				if m := annotationRE.FindStringSubmatch(prev); m != nil {
					o, err := ParseAnnotation(m[1])
					if err != nil {
						return nil, fmt.Errorf("%s:%d: %v", d.Path, j+1, err)
					}
					blk.Opts = o
				}
				break
			}
			d.Blocks = append(d.Blocks, blk)
			continue
		}
		blank := strings.TrimSpace(line) == ""
		switch {
		case blank:
		case listItemRE.MatchString(line):
			inList = true
		case !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t"):
			inList = false
		}
		if prevBlank && !inList && !blank && (strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t")) {
			d.Indented = append(d.Indented, i+1)
		}
		prevBlank = blank
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(line, -1) {
			d.Anchors[m[1]] = true
		}
		if m := refDefRE.FindStringSubmatch(line); m != nil {
			d.Links = append(d.Links, Link{Line: i + 1, Target: m[1]})
		} else {
			for _, m := range inlineLinkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(line, ""), -1) {
				d.Links = append(d.Links, Link{Line: i + 1, Target: m[1]})
			}
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			a := GitHubAnchor(m[2])
			if n := seen[a]; n > 0 {
				seen[a] = n + 1
				a = fmt.Sprintf("%s-%d", a, n)
			} else {
				seen[a] = 1
			}
			h := Heading{Level: len(m[1]), Text: m[2], Anchor: a, Line: i + 1}
			d.Headings = append(d.Headings, h)
			d.Anchors[a] = true
			for len(stack) > 0 && stack[len(stack)-1].Level >= h.Level {
				stack = stack[:len(stack)-1]
			}
			stack = append(stack, h)
		}
	}
	return d, nil
}

// Set is the Markdown files of one directory, by file name.
type Set map[string]*Doc

// ParseDir parses every *.md of dir; label prefixes their paths in
// messages and block ids ("runbooks/").
func ParseDir(tb testing.TB, dir, label string) Set {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no Markdown files in %s: %v", dir, err)
	}
	s := Set{}
	for _, p := range paths {
		d, err := ParseFile(p, label)
		if err != nil {
			tb.Fatal(err)
		}
		s[d.Name] = d
	}
	return s
}

// Section resolves "file.md#anchor" (a directory before the file name,
// "runbooks/file.md#anchor", is ignored).
func (s Set) Section(ref string) (*Doc, Heading, error) {
	file, anchor, _ := strings.Cut(ref, "#")
	file = filepath.Base(file)
	d := s[file]
	if d == nil {
		return nil, Heading{}, fmt.Errorf("%s: no file %s", ref, file)
	}
	if anchor == "" {
		return nil, Heading{}, fmt.Errorf("%s: names no section (want file.md#anchor)", ref)
	}
	for _, h := range d.Headings {
		if h.Anchor == anchor {
			return d, h, nil
		}
	}
	var have []string
	for _, h := range d.Headings {
		have = append(have, "#"+h.Anchor)
	}
	sort.Strings(have)
	return nil, Heading{}, fmt.Errorf("%s: no heading with anchor #%s in %s (have %s)", ref, anchor, d.Path, strings.Join(have, ", "))
}

// Blocks lists the blocks under the section ref, in order.
func (s Set) Blocks(ref string) ([]*Block, error) {
	d, h, err := s.Section(ref)
	if err != nil {
		return nil, err
	}
	var out []*Block
	for _, b := range d.Blocks {
		if b.Under(h.Anchor) {
			out = append(out, b)
		}
	}
	return out, nil
}

// Unexecuted lists every runnable block of the set that no scenario ran.
func (s Set) Unexecuted() []string {
	var out []string
	for _, d := range s {
		for _, b := range d.Blocks {
			if !Executed(b) && b.Opts.NotRun == "" {
				out = append(out, b.ID())
			}
		}
	}
	sort.Strings(out)
	return out
}
