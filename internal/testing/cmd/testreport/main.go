// Command testreport reads `go test -json` on stdin and prints what a
// person reading a CI log needs: one line per package (ok or FAIL, with its
// time), the whole output of every failed test and of every package that
// failed outside a test (a build error, a panic, a timeout), every skipped
// test (make test skips nothing, so a skip fails the run), and at the end
// the 10 slowest packages and the 10 slowest tests, so that drift in the
// test budget shows. The raw stream is kept with -json FILE.
//
// The very end repeats, for every failed test, its last messages from a
// test file (the t.Fatal that ended it is among them): a CI log is often
// read from its tail only, and a failed test's output can be thousands of
// lines of server logs that push the cause out of it.
//
//	go test -json ./... | go run ./internal/testing/cmd/testreport -json bin/test-report.json
//
// It exits 1 when a package or test failed, a test was skipped, or a
// package started but never reported an end (the stream was cut).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time       time.Time
	Action     string
	ImportPath string // build-output and build-fail (Go 1.24 and later)
	Package    string
	Test       string
	Elapsed    float64
	Output     string
}

type result struct {
	name    string
	elapsed time.Duration
}

type report struct {
	out      io.Writer
	start    time.Time
	output   map[string]*strings.Builder // package or package\x00test → output so far
	started  map[string]bool             // packages that printed anything and have not ended
	pkgs     []result
	tests    []result
	failed   []string
	skipped  []string
	pkgFails int
	why      []cause
}

// cause is a failed test's last messages from a test file.
type cause struct {
	test  string // package and test
	lines []string
}

// Why's bounds: the last whyPerTest messages of a test, each with up to
// whyCont continuation lines of whyWidth characters, and whyTotal lines in
// all (the rest are in the raw stream).
const (
	whyPerTest = 6
	whyCont    = 3
	whyWidth   = 300
	whyTotal   = 45
)

// testMsg is the first line of a t.Log/t.Error/t.Fatal from a test file
// (a helper that calls t.Helper() reports its caller's line).
var testMsg = regexp.MustCompile(`^\s*[\w.-]+_test\.go:\d+: `)

// tellingLine is a continuation line that says what went wrong (an error
// of the tool, a failed check, a want), preferred to the first lines of a
// long message (a command's whole output).
var tellingLine = regexp.MustCompile(`(?i)(fail|error|refus|want|panic|mismatch|timed out|deadline|exit [1-9])`)

// causes picks out of a failed test's output its last whyPerTest
// messages from a test file, each with its first continuation lines.
func causes(out string) []string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var msgs [][]string
	for i := 0; i < len(lines); i++ {
		if !testMsg.MatchString(lines[i]) {
			continue
		}
		depth := len(lines[i]) - len(strings.TrimLeft(lines[i], " \t"))
		// The message's continuation lines (indented deeper): the last
		// ones that say what went wrong, else the first ones.
		var cont, telling []string
		for j := i + 1; j < len(lines); j++ {
			l := lines[j]
			if testMsg.MatchString(l) || len(l)-len(strings.TrimLeft(l, " \t")) <= depth || strings.HasPrefix(strings.TrimSpace(l), "--- ") {
				break
			}
			if t := strings.TrimSpace(l); t != "" {
				cont = append(cont, "    "+clip(t))
				if tellingLine.MatchString(t) {
					telling = append(telling, "    "+clip(t))
				}
			}
		}
		switch {
		case len(telling) > whyCont:
			cont = telling[len(telling)-whyCont:] // the tool's own error comes last
		case len(telling) > 0:
			cont = telling
		case len(cont) > whyCont:
			cont = cont[:whyCont]
		}
		msgs = append(msgs, append([]string{clip(strings.TrimSpace(lines[i]))}, cont...))
	}
	if len(msgs) > whyPerTest {
		msgs = msgs[len(msgs)-whyPerTest:]
	}
	var flat []string
	for _, m := range msgs {
		flat = append(flat, m...)
	}
	return flat
}

func clip(s string) string {
	if len(s) > whyWidth {
		return s[:whyWidth] + "…"
	}
	return s
}

func newReport(out io.Writer) *report {
	return &report{out: out, start: time.Now(), output: map[string]*strings.Builder{}, started: map[string]bool{}}
}

func key(e event) string {
	if e.Test == "" {
		return e.Package
	}
	return e.Package + "\x00" + e.Test
}

func (r *report) add(e event) {
	switch e.Action {
	case "build-output":
		k := "build\x00" + e.ImportPath
		if r.output[k] == nil {
			r.output[k] = &strings.Builder{}
		}
		r.output[k].WriteString(e.Output)
		return
	case "build-fail":
		// The package's own fail event follows and is counted then.
		fmt.Fprintf(r.out, "FAIL  %s: build failed\n", e.ImportPath)
		if b := r.output["build\x00"+e.ImportPath]; b != nil {
			fmt.Fprint(r.out, indent(b.String()))
		}
		return
	}
	if e.Package == "" {
		return
	}
	if e.Test == "" && e.Action != "pass" && e.Action != "fail" && e.Action != "skip" {
		r.started[e.Package] = true
	}
	k := key(e)
	switch e.Action {
	case "output":
		b := r.output[k]
		if b == nil {
			b = &strings.Builder{}
			r.output[k] = b
		}
		b.WriteString(e.Output)
		// A subtest's output belongs to its top-level test too: a failed
		// parent prints everything under it.
		if i := strings.IndexByte(e.Test, '/'); i > 0 {
			pk := e.Package + "\x00" + e.Test[:i]
			if r.output[pk] == nil {
				r.output[pk] = &strings.Builder{}
			}
			r.output[pk].WriteString(e.Output)
		}
	case "pass", "fail", "skip":
		d := time.Duration(e.Elapsed * float64(time.Second))
		if e.Test == "" {
			delete(r.started, e.Package)
			switch e.Action {
			case "pass":
				fmt.Fprintf(r.out, "ok    %-60s %7.1fs\n", e.Package, d.Seconds())
				r.pkgs = append(r.pkgs, result{e.Package, d})
			case "fail":
				r.pkgFails++
				fmt.Fprintf(r.out, "FAIL  %-60s %7.1fs\n", e.Package, d.Seconds())
				r.pkgs = append(r.pkgs, result{e.Package, d})
				if b := r.output[k]; b != nil {
					fmt.Fprintf(r.out, "--- output of package %s:\n%s", e.Package, indent(b.String()))
				}
				// Failed outside any test (a panic, a timeout, a TestMain):
				// its output's first lines name it.
				if !r.whyOf(e.Package) {
					var lines []string
					if b := r.output[k]; b != nil {
						lines = firstLines(b.String(), whyPerTest)
					}
					r.why = append(r.why, cause{e.Package + " (outside any test)", lines})
				}
			}
			r.dropPackage(e.Package)
			return
		}
		if !strings.Contains(e.Test, "/") && e.Action != "skip" {
			r.tests = append(r.tests, result{e.Package + " " + e.Test, d})
		}
		switch e.Action {
		case "fail":
			r.failed = append(r.failed, e.Package+" "+e.Test)
			// A parent whose subtest failed adds nothing: the subtest's
			// messages are the cause.
			child := false
			for _, c := range r.why {
				child = child || strings.HasPrefix(c.test, e.Package+" "+e.Test+"/")
			}
			if b := r.output[k]; b != nil && !child {
				r.why = append(r.why, cause{e.Package + " " + e.Test, causes(b.String())})
			}
			// Print the top-level test's output once (it includes its
			// subtests'); a failed subtest alone prints its own.
			if !strings.Contains(e.Test, "/") || r.output[e.Package+"\x00"+e.Test[:strings.IndexByte(e.Test, '/')]] == nil {
				if b := r.output[k]; b != nil {
					fmt.Fprintf(r.out, "--- FAIL %s %s (%.1fs):\n%s", e.Package, e.Test, d.Seconds(), indent(b.String()))
				}
			}
		case "skip":
			r.skipped = append(r.skipped, e.Package+" "+e.Test)
			if b := r.output[k]; b != nil {
				fmt.Fprintf(r.out, "--- SKIP %s %s:\n%s", e.Package, e.Test, indent(b.String()))
			}
		}
		if !strings.Contains(e.Test, "/") {
			for kk := range r.output {
				if strings.HasPrefix(kk, e.Package+"\x00"+e.Test+"/") {
					delete(r.output, kk)
				}
			}
		}
		delete(r.output, k)
	}
}

// dropPackage forgets a finished package's buffered output.
func (r *report) dropPackage(pkg string) {
	for k := range r.output {
		if k == pkg || strings.HasPrefix(k, pkg+"\x00") {
			delete(r.output, k)
		}
	}
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	if !strings.HasSuffix(b.String(), "\n") {
		b.WriteString("\n")
	}
	return b.String()
}

func slowest(rs []result, n int) []result {
	s := append([]result(nil), rs...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].elapsed > s[j].elapsed })
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// finish prints the summary and reports whether the run is green.
func (r *report) finish() bool {
	ok := true
	for p := range r.started {
		fmt.Fprintf(r.out, "FAIL  %s: no end reported (the run was cut short)\n", p)
		if b := r.output[p]; b != nil {
			fmt.Fprint(r.out, indent(b.String()))
		}
		ok = false
	}
	fmt.Fprintf(r.out, "\nThe 10 slowest packages (wall time; up to -p of them run at once):\n")
	for _, s := range slowest(r.pkgs, 10) {
		fmt.Fprintf(r.out, "  %7.1fs  %s\n", s.elapsed.Seconds(), s.name)
	}
	fmt.Fprintf(r.out, "The 10 slowest tests (top-level, subtests included in their parent):\n")
	for _, s := range slowest(r.tests, 10) {
		fmt.Fprintf(r.out, "  %7.1fs  %s\n", s.elapsed.Seconds(), s.name)
	}
	fmt.Fprintf(r.out, "%d packages, %d top-level tests in %s\n", len(r.pkgs), len(r.tests), time.Since(r.start).Round(time.Second))
	if len(r.failed) > 0 || r.pkgFails > 0 {
		fmt.Fprintf(r.out, "FAILED: %d packages, tests: %s\n", r.pkgFails, strings.Join(r.failed, ", "))
		ok = false
	}
	r.printWhy()
	if len(r.skipped) > 0 {
		fmt.Fprintf(r.out, "SKIPPED (make test skips nothing: a skip is a failure): %s\n", strings.Join(r.skipped, ", "))
		ok = false
	}
	if len(r.pkgs) == 0 {
		fmt.Fprintf(r.out, "no package reported a result\n")
		ok = false
	}
	return ok
}

// whyOf reports whether a failed test of pkg has its causes recorded.
func (r *report) whyOf(pkg string) bool {
	for _, c := range r.why {
		if strings.HasPrefix(c.test, pkg+" ") {
			return true
		}
	}
	return false
}

// firstLines is out's first n lines that say something (not a bare
// FAIL, the status line go test ends a failed package with).
func firstLines(out string, n int) []string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		if t := strings.TrimSpace(l); t != "" && t != "FAIL" && !strings.HasPrefix(t, "FAIL\t") && len(ls) < n {
			ls = append(ls, clip(t))
		}
	}
	return ls
}

// printWhy prints the failed tests' last messages, whyTotal lines at most.
func (r *report) printWhy() {
	if len(r.why) == 0 {
		return
	}
	fmt.Fprintf(r.out, "Why they failed (each failed test's last messages; the whole output is above and in the -json file):\n")
	n := 0
	for i, c := range r.why {
		if n+1+len(c.lines) > whyTotal && n > 0 {
			fmt.Fprintf(r.out, "  … and %d more failed tests\n", len(r.why)-i)
			return
		}
		fmt.Fprintf(r.out, "  %s:\n", c.test)
		if len(c.lines) == 0 {
			fmt.Fprintf(r.out, "    (no message from a test file: see its output above)\n")
		}
		for _, l := range c.lines {
			fmt.Fprintf(r.out, "    %s\n", l)
		}
		n += 1 + len(c.lines)
	}
}

func run(in io.Reader, out io.Writer, raw io.Writer) (bool, error) {
	r := newReport(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if raw != nil {
			raw.Write(line)
			raw.Write([]byte{'\n'})
		}
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Not an event: go test's own messages (a build failure of a
			// package without tests, go vet's complaints) pass through.
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		r.add(e)
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	return r.finish(), nil
}

func main() {
	jsonOut := flag.String("json", "", "also write the raw go test -json stream to this file")
	flag.Parse()
	var raw io.Writer
	var f *os.File
	if *jsonOut != "" {
		var err error
		if f, err = os.Create(*jsonOut); err != nil {
			fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
			os.Exit(2)
		}
		raw = bufio.NewWriter(f)
	}
	ok, err := run(os.Stdin, os.Stdout, raw)
	if f != nil {
		raw.(*bufio.Writer).Flush()
		f.Close()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testreport: reading go test -json: %v\n", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}
