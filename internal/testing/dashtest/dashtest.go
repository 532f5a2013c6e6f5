// Package dashtest reads the Grafana dashboards of deploy/dashboards/,
// lints them, and turns every panel query into a promtool rule that fires
// when the query returns nothing, so that a test can run the queries
// against synthetic series (deploy/) or the exporter's real scrape
// (metrics/).
package dashtest

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Dashboard is the part of a Grafana dashboard's JSON model the lint and
// the query runs read.
type Dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is a panel, or a row (Type "row", whose Panels are its collapsed
// panels).
type Panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Datasource  *Datasource `json:"datasource"`
	GridPos     GridPos     `json:"gridPos"`
	Targets     []Target    `json:"targets"`
	Panels      []Panel     `json:"panels"`
	FieldConfig struct {
		Defaults struct {
			Thresholds *Thresholds `json:"thresholds"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// Thresholds are a panel's colour steps: the first (value null) applies
// below the second's value, and so on.
type Thresholds struct {
	Mode  string `json:"mode"`
	Steps []struct {
		Color string   `json:"color"`
		Value *float64 `json:"value"`
	} `json:"steps"`
}

// ThresholdPanelTypes are the panel types whose colour says good or bad:
// each must set thresholds with a red step (bad) and a green one (good).
var ThresholdPanelTypes = []string{"stat", "gauge", "bargauge", "timeseries"}

// thresholdColors are the colours a step may have: green good, orange
// or yellow a warning, red bad.
var thresholdColors = []string{"green", "yellow", "orange", "red"}

// Datasource is a panel's or a target's data source reference.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// GridPos is a panel's place on Grafana's 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Target is one query of a panel.
type Target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *Datasource `json:"datasource"`
}

// Variable is a templating variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *Datasource     `json:"datasource"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
}

// DatasourceRef is the data source every panel, target and query
// variable uses: the dashboard's datasource variable.
const DatasourceRef = "${datasource}"

// Load reads and decodes a dashboard; a file that is not JSON, or has
// fields of the wrong type, fails the test.
func Load(tb testing.TB, path string) (*Dashboard, []byte) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("dashboard: %v", err)
	}
	d, err := Decode(b)
	if err != nil {
		tb.Fatalf("dashboard %s: %v", path, err)
	}
	return d, b
}

// Decode decodes a dashboard's JSON model.
func Decode(b []byte) (*Dashboard, error) {
	if !json.Valid(b) {
		return nil, fmt.Errorf("not valid JSON")
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// AllPanels is every panel and row, a row's collapsed panels included.
func (d *Dashboard) AllPanels() []Panel {
	var out []Panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

// Query is one target of one panel.
type Query struct {
	// Name is a promtool alert name for it: Panel<id><refId>.
	Name  string
	Panel Panel
	RefID string
	Expr  string
}

// Queries lists every target of every panel (rows have none).
func (d *Dashboard) Queries() []Query {
	var out []Query
	for _, p := range d.AllPanels() {
		for _, t := range p.Targets {
			out = append(out, Query{Name: fmt.Sprintf("Panel%d%s", p.ID, t.RefID), Panel: p, RefID: t.RefID, Expr: t.Expr})
		}
	}
	return out
}

// VariableQueries turns every query variable of the form
// label_values(SELECTOR, LABEL) into the PromQL query Grafana's
// Prometheus data source runs for it, count by (LABEL) (SELECTOR), named
// Var<name>.
func (d *Dashboard) VariableQueries() ([]Query, error) {
	var out []Query
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := variableQuery(v)
		m := labelValuesRE.FindStringSubmatch(q)
		if m == nil {
			return nil, fmt.Errorf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q)
		}
		out = append(out, Query{Name: "Var" + v.Name, RefID: v.Name, Expr: fmt.Sprintf("count by (%s) (%s)", m[2], m[1])})
	}
	return out, nil
}

var labelValuesRE = regexp.MustCompile(`^\s*label_values\(\s*(.+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// variableQuery is a query variable's query: a string, or Grafana's
// {"query": "..."} object.
func variableQuery(v Variable) string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

// builtins are Grafana's global variables a panel query may use.
var builtins = []string{"__rate_interval", "__interval", "__range", "__range_s", "__interval_ms", "__from", "__to", "__dashboard"}

var varRE = regexp.MustCompile(`\$(?:\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}|([a-zA-Z_][a-zA-Z0-9_]*))|\[\[([a-zA-Z_][a-zA-Z0-9_]*)\]\]`)

// usedVariables is every variable a string references ($v, ${v},
// ${v:fmt}, [[v]]).
func usedVariables(s string) []string {
	var out []string
	for _, m := range varRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1]+m[2]+m[3])
	}
	return out
}

// Lint checks what Grafana does not: a uid and a title; every panel with
// an id unique in the dashboard, on the 24-column grid and overlapping no
// other; every panel but rows with the datasource variable as its data
// source and at least one target, each with a non-empty expr; every
// variable a query uses defined (or one of Grafana's); a datasource
// variable of Prometheus and a namespace variable, multi-valued with All.
func Lint(d *Dashboard) []error {
	var errs []error
	errf := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if d.UID == "" {
		errf("no uid")
	}
	if d.Title == "" {
		errf("no title")
	}
	defined := map[string]Variable{}
	for _, v := range d.Templating.List {
		if v.Name == "" {
			errf("a variable without a name")
		}
		if _, dup := defined[v.Name]; dup {
			errf("variable %s defined twice", v.Name)
		}
		defined[v.Name] = v
	}
	if v, ok := defined["datasource"]; !ok || v.Type != "datasource" || variableQuery(v) != "prometheus" {
		errf("no datasource variable of type datasource and query prometheus")
	}
	if v, ok := defined["namespace"]; !ok || !v.Multi || !v.IncludeAll {
		errf("no namespace variable that is multi-valued and includes All")
	}
	checkVars := func(where, s string) {
		for _, name := range usedVariables(s) {
			if _, ok := defined[name]; !ok && !slices.Contains(builtins, name) {
				errf("%s: variable $%s is not defined", where, name)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			if v.Datasource == nil || v.Datasource.UID != DatasourceRef {
				errf("variable %s: datasource %+v, want uid %s", v.Name, v.Datasource, DatasourceRef)
			}
			if strings.TrimSpace(variableQuery(v)) == "" {
				errf("variable %s: empty query", v.Name)
			}
			checkVars("variable "+v.Name, variableQuery(v))
		}
	}
	ids := map[int]string{}
	var placed []Panel
	for _, p := range d.AllPanels() {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.ID <= 0 {
			errf("%s: no id", where)
		} else if other, dup := ids[p.ID]; dup {
			errf("%s: id also used by %q", where, other)
		}
		ids[p.ID] = p.Title
		if p.Title == "" {
			errf("%s: no title", where)
		}
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			errf("%s: gridPos %+v is not inside the 24 columns", where, g)
		}
		for _, o := range placed {
			og := o.GridPos
			if g.X < og.X+og.W && og.X < g.X+g.W && g.Y < og.Y+og.H && og.Y < g.Y+g.H {
				errf("%s: gridPos %+v overlaps panel %d %q at %+v", where, g, o.ID, o.Title, og)
			}
		}
		placed = append(placed, p)
		if p.Type == "row" {
			if len(p.Targets) > 0 {
				errf("%s: a row with targets", where)
			}
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != DatasourceRef {
			errf("%s: datasource %+v, want uid %s", where, p.Datasource, DatasourceRef)
		}
		if slices.Contains(ThresholdPanelTypes, p.Type) {
			lintThresholds(where, p.FieldConfig.Defaults.Thresholds, errf)
		}
		if len(p.Targets) == 0 {
			errf("%s: no target", where)
		}
		refs := map[string]bool{}
		for _, t := range p.Targets {
			if t.RefID == "" || refs[t.RefID] {
				errf("%s: target refId %q empty or repeated", where, t.RefID)
			}
			refs[t.RefID] = true
			if strings.TrimSpace(t.Expr) == "" {
				errf("%s: target %s has an empty expr", where, t.RefID)
			}
			if strings.HasSuffix(strings.TrimSpace(t.Expr), orZero) {
				errf("%s: target %s falls back to %q: a green 0 with every exporter gone; use%s", where, t.RefID, strings.TrimSpace(orZero), OrExporterZero)
			}
			if t.Datasource != nil && t.Datasource.UID != DatasourceRef {
				errf("%s: target %s: datasource %+v, want uid %s", where, t.RefID, t.Datasource, DatasourceRef)
			}
			checkVars(fmt.Sprintf("%s target %s", where, t.RefID), t.Expr)
		}
	}
	return errs
}

// lintThresholds: absolute (or percentage) thresholds of at least two
// steps, the first with value null and the others ascending, each of
// green, yellow, orange or red, with a red step and a green one: Grafana's
// default (green, red from 80) on a count or an age is never meant.
func lintThresholds(where string, th *Thresholds, errf func(string, ...any)) {
	if th == nil || len(th.Steps) < 2 {
		errf("%s: no thresholds (at least 2 steps, bad = red, good = green)", where)
		return
	}
	if th.Mode != "absolute" && th.Mode != "percentage" {
		errf("%s: thresholds mode %q, want absolute or percentage", where, th.Mode)
	}
	var red, green bool
	for i, st := range th.Steps {
		switch {
		case i == 0 && st.Value != nil:
			errf("%s: threshold step 0 has value %v, want null (the base)", where, *st.Value)
		case i > 0 && st.Value == nil:
			errf("%s: threshold step %d has no value", where, i)
		case i > 1 && th.Steps[i-1].Value != nil && *st.Value <= *th.Steps[i-1].Value:
			errf("%s: threshold step %d (%v) not above step %d", where, i, *st.Value, i-1)
		}
		if !slices.Contains(thresholdColors, st.Color) {
			errf("%s: threshold step %d colour %q, want one of %v", where, i, st.Color, thresholdColors)
		}
		red = red || st.Color == "red"
		green = green || st.Color == "green"
	}
	if !red || !green {
		errf("%s: thresholds without a red step (bad) and a green one (good)", where)
	}
}

// Substitutions replace Grafana's variables in a query with what
// promtool can evaluate: $namespace by a regex of the test series'
// namespaces, the interval variables by durations.
func Substitute(expr, namespaceRE string) string {
	r := strings.NewReplacer(
		"${namespace}", namespaceRE, "$namespace", namespaceRE,
		"${__rate_interval}", "5m", "$__rate_interval", "5m",
		"${__interval}", "1m", "$__interval", "1m",
		"${__range}", "1h", "$__range", "1h",
	)
	return r.Replace(expr)
}

// The fallbacks a stat panel appends so that it shows 0 rather than "No
// data"; the query before it must return something in the test series
// on its own. OrExporterZero is 0 only while an exporter of the selected
// namespaces is up: with none, No data, never a green 0.
const (
	orZero         = " or vector(0)"
	OrExporterZero = ` or (count(up{job=~".*etcd-recovery.*",namespace=~"$namespace"} == 1) * 0)`
)

// Checked is the query a test evaluates: Substitute's result without a
// trailing fallback (orZero, OrExporterZero).
func Checked(expr, namespaceRE string) string {
	e := strings.TrimSpace(expr)
	for _, f := range []string{orZero, OrExporterZero} {
		e = strings.TrimSpace(strings.TrimSuffix(e, f))
	}
	return strings.TrimSpace(Substitute(e, namespaceRE))
}

// AbsentRules is a Prometheus rule file with one alerting rule per query,
// named by the query's Name, that fires when the query returned nothing
// at every step of the window before the evaluation time
// (absent_over_time of a subquery over the window): a test expecting none
// of them to fire fails for a query that returns nothing, and promtool
// refuses the file for one that does not parse.
func AbsentRules(qs []Query, namespaceRE, window, step string) ([]byte, error) {
	type rule struct {
		Alert string `json:"alert"`
		Expr  string `json:"expr"`
	}
	var rules []rule
	for _, q := range qs {
		rules = append(rules, rule{Alert: q.Name, Expr: fmt.Sprintf("absent_over_time((\n%s\n)[%s:%s])", Checked(q.Expr, namespaceRE), window, step)})
	}
	return yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
}

// AlertTests is, for each query, a promtool alert_rule_test at evalTime
// that expects its absent rule not to fire.
func AlertTests(qs []Query, evalTime string) []map[string]any {
	var out []map[string]any
	for _, q := range qs {
		out = append(out, map[string]any{"eval_time": evalTime, "alertname": q.Name, "exp_alerts": []any{}})
	}
	return out
}
