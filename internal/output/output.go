// Package output renders command results: a tablewriter table built from
// rows, or JSON (or YAML) of the same data. Progress goes to stderr, and only when
// stderr is a terminal.
//
// The convention every command follows: a result (a report) is a type of
// its domain package (backup, restore, inspect, kube, internal/catalog)
// with a method that builds what a human reads from the report's own
// values, in that package's render.go:
//
//	func (r *Report) Table() output.Table     // one table
//	func (r *Report) Tables() []output.Table  // several sections, in order
//
// A Table is rows plus what goes around them: Title (text above, such as
// a heading), Notes (wrapped lines below: reasons, errors, next steps),
// Lines (a report's prose below them, wrapped except with -o wide) and
// Footer (text below, as is); a section with no Header is text only. The
// command then only calls
//
//	output.Render(w, format, rep.Table(), rep)
//	output.RenderAll(w, format, rep.Tables(), rep)
//
// so -o json is always the report itself: the same data as the table.
//
// The text helpers the reports' messages share live here too: Bytes and
// Age (sizes and durations for humans), Plural (a word agreeing with a
// count) and OneLine (an error's text on one line, for a field or cell).
package output

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/olekukonko/tablewriter"
	tablewriter_tw "github.com/olekukonko/tablewriter/tw"
	"golang.org/x/term"
	"sigs.k8s.io/yaml"
)

// Format is -o.
type Format string

const (
	FormatTable Format = "table"
	FormatWide  Format = "wide"
	FormatJSON  Format = "json"
	// FormatYAML is the same data as FormatJSON, as YAML: the JSON
	// document converted (sigs.k8s.io/yaml), so the field names and
	// values are exactly JSON's.
	FormatYAML Format = "yaml"
)

// Width is what a default table fits in, as kubectl's do: -o wide shows
// every column, whatever its width.
const Width = 120

// ParseFormat validates -o.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case FormatTable, FormatWide, FormatJSON, FormatYAML:
		return Format(s), nil
	}
	return "", fmt.Errorf("unknown output format %q (want table, wide, json or yaml)", s)
}

// Data says whether f renders the data itself (json, yaml) rather than
// tables.
func (f Format) Data() bool { return f == FormatJSON || f == FormatYAML }

// Table is a header and rows of cells, with the text around them.
type Table struct {
	// Title is printed as is above the table (a heading, or text that
	// belongs before it); end it with a newline.
	Title string
	// Header names the columns; a Table without one prints no table,
	// only its text (Title, Notes, Footer).
	Header []string
	Rows   [][]string
	// Wide names the columns shown only with -o wide.
	Wide []string
	// Long names the columns of explanations (reasons, errors, next
	// steps): with -o wide they are cells; by default they are left out
	// of the table and printed below it, one "KEY: text" line each (KEY
	// being the row's first cell), wrapped to Width.
	Long []string
	// Key names the column whose cell starts a Long note (default: the
	// first).
	Key string
	// Notes are lines printed below the table, wrapped to Width.
	Notes []string
	// Lines are printed below the Notes, wrapped to Width except with
	// FormatWide, which prints them as they are (a report's prose, such
	// as inspect's verdict lines, read whole in -o wide).
	Lines []string
	// Footer is printed as is below the table and its notes; end it
	// with a newline.
	Footer string
}

// Render writes t as a table (by default fitting Width; every column
// with FormatWide), or data as indented JSON. Callers build both from the
// same values.
func Render(w io.Writer, f Format, t Table, data any) error {
	switch f {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(data)
	case FormatYAML:
		j, err := json.Marshal(data)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(j)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	}
	if _, err := io.WriteString(w, t.Title); err != nil {
		return err
	}
	footer := t.Footer
	var notes []string
	if f != FormatWide {
		t, notes = t.narrow()
	}
	if len(t.Header) > 0 {
		if err := renderTable(w, t); err != nil {
			return err
		}
	}
	for _, n := range append(notes, t.Notes...) {
		for _, l := range Wrap(n, Width, "    ") {
			fmt.Fprintln(w, l)
		}
	}
	for _, n := range t.Lines {
		lines := []string{n}
		if f != FormatWide {
			lines = Wrap(n, Width, "    ")
		}
		for _, l := range lines {
			if _, err := fmt.Fprintln(w, l); err != nil {
				return err
			}
		}
	}
	_, err := io.WriteString(w, footer)
	return err
}

// RenderAll writes the sections in order (each as Render does), or data
// once as indented JSON: for a report of several tables and text.
func RenderAll(w io.Writer, f Format, ts []Table, data any) error {
	if f.Data() {
		return Render(w, f, Table{}, data)
	}
	for _, t := range ts {
		if err := Render(w, f, t, nil); err != nil {
			return err
		}
	}
	return nil
}

// narrow drops the Wide columns and moves the Long ones below the table.
func (t Table) narrow() (Table, []string) {
	drop := map[string]bool{}
	for _, h := range t.Wide {
		drop[h] = true
	}
	long := map[string]bool{}
	for _, h := range t.Long {
		long[h] = true
		drop[h] = true
	}
	var keep []int
	out := Table{Notes: t.Notes, Lines: t.Lines}
	key := 0
	for i, h := range t.Header {
		if h == t.Key {
			key = i
		}
		if !drop[h] {
			keep = append(keep, i)
			out.Header = append(out.Header, h)
		}
	}
	var notes []string
	for _, r := range t.Rows {
		row := make([]string, 0, len(keep))
		for _, i := range keep {
			if i < len(r) {
				row = append(row, r[i])
			} else {
				row = append(row, "")
			}
		}
		out.Rows = append(out.Rows, row)
		for i, h := range t.Header {
			if !long[h] || i >= len(r) || r[i] == "" || r[i] == "-" {
				continue
			}
			prefix := ""
			if key < len(r) {
				prefix = r[key] + ": "
			}
			notes = append(notes, prefix+r[i])
		}
	}
	return out, notes
}

// Wrap breaks s into lines of at most width runes, at spaces where it
// can; continuation lines start with indent. A word is cut only when it
// is longer than a whole line: an age key, a key or a backup name is
// never broken where it would fit on the next line (an SRE copies them).
func Wrap(s string, width int, indent string) []string {
	var lines []string
	for _, para := range strings.Split(s, "\n") {
		prefix := ""
		r := []rune(para)
		for {
			room := width - len([]rune(prefix))
			if len(r) <= room {
				lines = append(lines, prefix+string(r))
				break
			}
			cut := room
			for i := room; i > 0; i-- {
				if r[i] == ' ' {
					cut = i
					break
				}
			}
			lines = append(lines, prefix+strings.TrimRight(string(r[:cut]), " "))
			r = []rune(strings.TrimLeft(string(r[cut:]), " "))
			prefix = indent
			if len(r) == 0 {
				break
			}
		}
	}
	return lines
}

func renderTable(w io.Writer, t Table) error {
	tw := tablewriter.NewTable(w,
		tablewriter.WithHeaderAutoFormat(tablewriter_tw.Off),
		tablewriter.WithHeaderAlignment(tablewriter_tw.AlignLeft),
		tablewriter.WithRowAutoWrap(tablewriter_tw.WrapNone))
	tw.Header(anySlice(t.Header)...)
	for _, r := range t.Rows {
		if err := tw.Append(anySlice(r)...); err != nil {
			return err
		}
	}
	return tw.Render()
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// Bytes renders a size for humans (IEC units).
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Age renders a duration as a short age: 45s, 12m, 3h20m, 5d3h.
func Age(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
	if neg {
		return "in " + s
	}
	return s
}

// Progress prints a running byte count to stderr when it is a terminal,
// at most a few times a second. Off a terminal it does nothing. With a
// total (SetTotal: the manifest's size of a download), the line shows it,
// the percentage done and the time left at the rate so far:
//
//	download b1: 1.2 GiB / 4.0 GiB (30%), 45.0 MiB/s, ETA 1m04s
type Progress struct {
	label string
	w     io.Writer
	mu    sync.Mutex
	last  time.Time
	on    bool
	start time.Time
	total int64
	now   func() time.Time
}

// NewProgress returns a progress line labelled label.
func NewProgress(label string) *Progress {
	return NewProgressTo(os.Stderr, label, term.IsTerminal(int(os.Stderr.Fd())))
}

// NewProgressTo is NewProgress on w, shown only when on (tests force it).
func NewProgressTo(w io.Writer, label string, on bool) *Progress {
	return &Progress{label: label, w: w, on: on, start: time.Now(), now: time.Now}
}

// SetTotal sets the bytes the stream will have moved when done (0:
// unknown: the line shows the count and the rate only).
func (p *Progress) SetTotal(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.total = n
	p.mu.Unlock()
}

// Update reports n bytes done.
func (p *Progress) Update(n int64) {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := p.now(); now.Sub(p.last) >= 200*time.Millisecond {
		p.last = now
		fmt.Fprintf(p.w, "\r%s   ", p.line(n, now))
	}
}

// line is the progress line for n bytes done at now.
func (p *Progress) line(n int64, now time.Time) string {
	elapsed := max(now.Sub(p.start).Seconds(), 0.001)
	rate := float64(n) / elapsed
	if p.total <= 0 {
		return fmt.Sprintf("%s: %s (%s/s)", p.label, Bytes(n), Bytes(int64(rate)))
	}
	pct := min(100*float64(n)/float64(p.total), 100)
	eta := "-"
	if rate > 0 && n < p.total {
		eta = ETA(time.Duration(float64(p.total-n) / rate * float64(time.Second)))
	} else if n >= p.total {
		eta = "0s"
	}
	return fmt.Sprintf("%s: %s / %s (%.0f%%), %s/s, ETA %s", p.label, Bytes(n), Bytes(p.total), pct, Bytes(int64(rate)), eta)
}

// ETA renders a time left to the second: 45s, 1m04s, 2h03m.
func ETA(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// Done ends the progress line.
func (p *Progress) Done() {
	if p == nil || !p.on {
		return
	}
	fmt.Fprintln(p.w)
}
