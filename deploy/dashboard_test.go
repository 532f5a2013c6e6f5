package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/testing/dashtest"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

const (
	// dashboardFile is the fleet dashboard, shipped as JSON.
	dashboardFile = "dashboards/etcd-recovery-fleet.json"
	// dashboardSeriesFile holds the exporter's series no alert uses.
	dashboardSeriesFile = "testdata/dashboard_series.yml"
	// dashNamespaces is what $namespace becomes: every namespace of the
	// test series (All is ".*"; this is stricter: a query that ignores
	// $namespace still passes, one that mangles it does not).
	dashNamespaces = "kubx-etcd-0[1-9]"
	// The queries run at dashEval over the window before it: the alert
	// tests' longest series end at 1720 min (28h40m).
	dashEval, dashWindow, dashStep = "29h", "29h", "5m"
)

// TestDashboardLint: the fleet dashboard is valid JSON with a uid and
// title, a datasource and a multi-valued namespace variable with All,
// every panel an id of its own, the datasource variable as data source,
// a target with a non-empty query using defined variables only, and a
// place inside the 24 columns that overlaps no other panel. The lint's
// checks are themselves checked: each defect planted in a copy is found.
func TestDashboardLint(t *testing.T) {
	t.Parallel()
	d, raw := dashtest.Load(t, kubetest.DeployPath(t, dashboardFile))
	for _, err := range dashtest.Lint(d) {
		t.Errorf("deploy/%s: %v", dashboardFile, err)
	}
	if n := len(d.Queries()); n < 25 {
		t.Errorf("deploy/%s: only %d queries", dashboardFile, n)
	}
	planted := []struct {
		name, want string
		plant      func(d *dashtest.Dashboard)
	}{
		{"no uid", "no uid", func(d *dashtest.Dashboard) { d.UID = "" }},
		{"duplicate id", "id also used by", func(d *dashtest.Dashboard) { d.Panels[2].ID = d.Panels[1].ID }},
		{"empty expr", "empty expr", func(d *dashtest.Dashboard) { d.Panels[1].Targets[0].Expr = " " }},
		{"no target", "no target", func(d *dashtest.Dashboard) { d.Panels[1].Targets = nil }},
		{"other datasource", "want uid ${datasource}", func(d *dashtest.Dashboard) { d.Panels[1].Datasource.UID = "prometheus" }},
		{"undefined variable", "variable $cluster is not defined", func(d *dashtest.Dashboard) {
			d.Panels[1].Targets[0].Expr = strings.Replace(d.Panels[1].Targets[0].Expr, "$namespace", "$cluster", 1)
		}},
		{"outside the grid", "not inside the 24 columns", func(d *dashtest.Dashboard) { d.Panels[1].GridPos.X = 25 - d.Panels[1].GridPos.W }},
		{"overlap", "overlaps panel", func(d *dashtest.Dashboard) { d.Panels[2].GridPos = d.Panels[1].GridPos }},
		{"no thresholds", "no thresholds", func(d *dashtest.Dashboard) { d.Panels[1].FieldConfig.Defaults.Thresholds = nil }},
		{"thresholds without red", "without a red step", func(d *dashtest.Dashboard) {
			th := *d.Panels[1].FieldConfig.Defaults.Thresholds
			th.Steps = slices.Clone(th.Steps)
			for i := range th.Steps {
				th.Steps[i].Color = "green"
			}
			d.Panels[1].FieldConfig.Defaults.Thresholds = &th
		}},
		{"thresholds not ascending", "not above step", func(d *dashtest.Dashboard) {
			th := *d.Panels[1].FieldConfig.Defaults.Thresholds
			th.Steps = append(slices.Clone(th.Steps), th.Steps[len(th.Steps)-1])
			d.Panels[1].FieldConfig.Defaults.Thresholds = &th
		}},
		{"green zero fallback", "a green 0 with every exporter gone", func(d *dashtest.Dashboard) {
			d.Panels[1].Targets[0].Expr += " or vector(0)"
		}},
	}
	for _, p := range planted {
		c, err := dashtest.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		p.plant(c)
		errs := dashtest.Lint(c)
		if !strings.Contains(fmt.Sprint(errs), p.want) {
			t.Errorf("planted %s: lint errors %v, want one with %q", p.name, errs, p.want)
		}
	}
	if _, err := dashtest.Decode(append(raw[:len(raw)/2:len(raw)/2], '}')); err == nil {
		t.Errorf("a truncated dashboard decodes")
	}
	// Every series a query names is one the exporter or the journal
	// exports: a quoted name in the source of metrics/ or of the
	// journal's metrics (a histogram's by its _bucket, _sum, _count).
	exported := map[string]bool{}
	for _, glob := range []string{"metrics/*.go", "internal/journal/metrics.go"} {
		files, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(t), glob))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range quotedNameRE.FindAllStringSubmatch(string(b), -1) {
				exported[m[1]] = true
			}
		}
	}
	if len(exported) < 30 {
		t.Fatalf("only %d series names found in metrics/ and internal/journal/metrics.go", len(exported))
	}
	for _, q := range d.Queries() {
		for _, name := range seriesNameRE.FindAllString(q.Expr, -1) {
			base := histogramSuffixRE.ReplaceAllString(name, "")
			if !exported[name] && !exported[base] {
				t.Errorf("panel %d %q: series %s is exported by neither the exporter nor the journal", q.Panel.ID, q.Panel.Title, name)
			}
		}
	}
}

var (
	quotedNameRE      = regexp.MustCompile(`"(etcd_recovery_[a-z0-9_]+)"`)
	seriesNameRE      = regexp.MustCompile(`\betcd_recovery_[a-z0-9_]+`)
	histogramSuffixRE = regexp.MustCompile(`_(bucket|sum|count)$`)
)

type promInput struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

// dashboardSeries is the input series of every test of alerts_test.yml,
// each with a label alerts_test naming its test (two tests' series with
// the same labels stay apart), and those of dashboard_series.yml.
func dashboardSeries(tb testing.TB) []promInput {
	tb.Helper()
	var tf struct {
		Tests []struct {
			InputSeries []promInput `json:"input_series"`
		} `json:"tests"`
	}
	var extra struct {
		InputSeries []promInput `json:"input_series"`
	}
	for file, into := range map[string]any{alertTestsFile: &tf, dashboardSeriesFile: &extra} {
		b, err := os.ReadFile(kubetest.DeployPath(tb, file))
		if err != nil {
			tb.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, into); err != nil && file == dashboardSeriesFile {
			tb.Fatalf("deploy/%s: %v", file, err)
		} else if err != nil {
			if err := yaml.Unmarshal(b, into); err != nil {
				tb.Fatalf("deploy/%s: %v", file, err)
			}
		}
	}
	var out []promInput
	for i, tc := range tf.Tests {
		for _, s := range tc.InputSeries {
			name, labels, ok := strings.Cut(s.Series, "{")
			if !ok {
				labels = "}"
			}
			sep := ","
			if strings.TrimSpace(labels) == "}" {
				sep = ""
			}
			out = append(out, promInput{Series: fmt.Sprintf("%s{alerts_test=\"%d\"%s%s", name, i, sep, labels), Values: s.Values})
		}
	}
	if len(out) < 50 || len(extra.InputSeries) == 0 {
		tb.Fatalf("%d series from deploy/%s, %d from deploy/%s", len(out), alertTestsFile, len(extra.InputSeries), dashboardSeriesFile)
	}
	return append(out, extra.InputSeries...)
}

// runDashboardQueries runs `promtool test rules` on one absent rule per
// query (dashtest.AbsentRules) over the series: it fails, naming the
// query's alert, when a query returns nothing over the whole window, and
// when one does not parse.
func runDashboardQueries(tb testing.TB, qs []dashtest.Query, series []promInput) (string, error) {
	tb.Helper()
	rules, err := dashtest.AbsentRules(qs, dashNamespaces, dashWindow, dashStep)
	if err != nil {
		tb.Fatal(err)
	}
	test, err := yaml.Marshal(map[string]any{
		"rule_files":          []string{"dashboard.rules.yml"},
		"evaluation_interval": dashEval,
		"tests": []any{map[string]any{
			"name": "every dashboard query returns series", "interval": "1m",
			"input_series": series, "alert_rule_test": dashtest.AlertTests(qs, dashEval),
		}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	for name, b := range map[string][]byte{"dashboard.rules.yml": rules, "dashboard_test.yml": test} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return promtool(tb, dir, "test", "rules", "dashboard_test.yml")
}

func dashboardQueries(tb testing.TB) []dashtest.Query {
	tb.Helper()
	d, _ := dashtest.Load(tb, kubetest.DeployPath(tb, dashboardFile))
	vq, err := d.VariableQueries()
	if err != nil {
		tb.Fatalf("deploy/%s: %v", dashboardFile, err)
	}
	return append(d.Queries(), vq...)
}

// TestDashboardQueries: every panel query of the fleet dashboard (and the
// namespace variable's) returns series from the alert tests' series and
// dashboard_series.yml at some point of their 29 h, with $namespace as a
// regex of their namespaces (a stat's "or vector(0)" fallback removed, so
// the query itself must find something). A query mutated to return
// nothing, and one that does not parse, each fail the run, named.
func TestDashboardQueries(t *testing.T) {
	t.Parallel()
	qs := dashboardQueries(t)
	series := dashboardSeries(t)
	t.Run("All", func(t *testing.T) {
		t.Parallel()
		out, err := runDashboardQueries(t, qs, series)
		if err != nil {
			t.Fatalf("promtool test rules: a dashboard query returns nothing or does not parse (alert PanelNX = panel id N, target X): %v\n%s", err, out)
		}
	})
	mutations := []struct {
		name, want string
		mutate     func(string) string
	}{
		{"Empty", "got:[\n", func(e string) string {
			return strings.ReplaceAll(e, "etcd_recovery_", "etcd_recovery_misspelt_")
		}},
		{"Broken", "parse", func(e string) string { return e + " by (" }},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			mut := append([]dashtest.Query(nil), qs...)
			i := len(mut) / 2
			mut[i].Expr = m.mutate(mut[i].Expr)
			out, err := runDashboardQueries(t, mut, series)
			if err == nil {
				t.Fatalf("query %s mutated to %q: promtool passed:\n%s", mut[i].Name, mut[i].Expr, out)
			}
			t.Logf("query %s mutated to %q: promtool fails:\n%s", mut[i].Name, mut[i].Expr, out)
			if !strings.Contains(out, mut[i].Name) || !strings.Contains(out, m.want) {
				t.Errorf("query %s mutated: promtool output names neither it nor %q:\n%s", mut[i].Name, m.want, out)
			}
			for _, q := range qs {
				if q.Name != mut[i].Name && strings.Contains(out, q.Name+"\n") {
					t.Errorf("query %s mutated: the unmutated %s failed too:\n%s", mut[i].Name, q.Name, out)
				}
			}
		})
	}
}

// TestDashboardZeroNotEmpty: on a fleet where every drill and proof
// failed, the coverage gauges show 0, not No data; a namespace whose
// exporter target is gone while its journal's is scraped shows 0 in
// "Exporters up", "Journal leaders" and "Journal captures" rather than
// vanishing, and is in the namespace variable; a stat's 0 fallback
// ("Damaged backups") needs an exporter of the namespace up: 0 with
// one, nothing (No data) with none, never a green 0. Run by `promtool
// test rules` (promql_expr_test) on each panel's own query.
func TestDashboardZeroNotEmpty(t *testing.T) {
	t.Parallel()
	d, _ := dashtest.Load(t, kubetest.DeployPath(t, dashboardFile))
	byTitle := map[string]string{}
	for _, q := range d.Queries() {
		byTitle[q.Panel.Title+"/"+q.RefID] = q.Expr
	}
	vq, err := d.VariableQueries()
	if err != nil || len(vq) != 1 {
		t.Fatalf("deploy/%s: variable queries %v: %v", dashboardFile, vq, err)
	}
	const (
		exp = `job="etcd-recovery-metrics",instance="10.0.0.1:9090"`
		jnl = `job="etcd-journal-metrics",instance="10.0.0.2:9091"`
	)
	series := []promInput{
		// kubx-etcd-01: exporter up, two clusters, every drill and proof
		// failed or 30 h old; its journal leads.
		{`up{` + exp + `,namespace="kubx-etcd-01"}`, "1x30"},
		{`etcd_recovery_cluster_info{` + exp + `,namespace="kubx-etcd-01",cluster="etcd-a"}`, "1x30"},
		{`etcd_recovery_cluster_info{` + exp + `,namespace="kubx-etcd-01",cluster="etcd-b"}`, "1x30"},
		{`etcd_recovery_drill_last_pass_timestamp_seconds{` + exp + `,namespace="kubx-etcd-01",cluster="etcd-a"}`, "0x30"},
		{`etcd_recovery_drill_last_result{` + exp + `,namespace="kubx-etcd-01",cluster="etcd-a"}`, "0x30"},
		{`etcd_recovery_drill_last_result{` + exp + `,namespace="kubx-etcd-01",cluster="etcd-b"}`, "0x30"},
		{`etcd_recovery_journal_last_received_timestamp_seconds{` + exp + `,namespace="kubx-etcd-01",cluster="etcd-a"}`, "0+3600x30"},
		{`etcd_recovery_journal_last_received_timestamp_seconds{` + exp + `,namespace="kubx-etcd-01",cluster="etcd-b"}`, "0+3600x30"},
		{`etcd_recovery_journal_proof_timestamp_seconds{` + exp + `,namespace="kubx-etcd-01",cluster="etcd-a"}`, "0+3600x30"},
		{`etcd_recovery_journal_proof_failed{` + exp + `,namespace="kubx-etcd-01",cluster="etcd-a"}`, "1x30"},
		{`up{` + jnl + `,namespace="kubx-etcd-01"}`, "1x30"},
		{`etcd_recovery_journal_leader{` + jnl + `,namespace="kubx-etcd-01",identity="j-a_1"}`, "1x30"},
		{`etcd_recovery_journal_captures{` + jnl + `,namespace="kubx-etcd-01"}`, "2x30"},
		// kubx-etcd-02: the exporter's target gone (no up series), the
		// journal's scraped and following only.
		{`up{` + jnl + `,namespace="kubx-etcd-02"}`, "1x30"},
		{`etcd_recovery_journal_leader{` + jnl + `,namespace="kubx-etcd-02",identity="j-b_1"}`, "0x30"},
		{`etcd_recovery_journal_captures{` + jnl + `,namespace="kubx-etcd-02"}`, "0x30"},
	}
	query := func(key string) string {
		t.Helper()
		e, ok := byTitle[key]
		if !ok {
			t.Fatalf("deploy/%s: no panel query %q", dashboardFile, key)
		}
		return e
	}
	ns01, both := "kubx-etcd-01", "kubx-etcd-0[1-3]"
	cases := []dashtest.ExprTest{
		{Expr: dashtest.Substitute(query("Drill coverage (passed within 26 h)/A"), ns01), EvalTime: "30h", ExpSamples: []dashtest.Sample{{Labels: "{}", Value: 0}}},
		{Expr: dashtest.Substitute(query("Proof coverage (passed within 26 h)/A"), ns01), EvalTime: "30h", ExpSamples: []dashtest.Sample{{Labels: "{}", Value: 0}}},
		{Expr: dashtest.Substitute(query("Exporters up/A"), both), EvalTime: "30h", ExpSamples: []dashtest.Sample{{Labels: `{namespace="kubx-etcd-01"}`, Value: 1}, {Labels: `{namespace="kubx-etcd-02"}`, Value: 0}}},
		{Expr: dashtest.Substitute(query("Journal leaders/A"), both), EvalTime: "30h", ExpSamples: []dashtest.Sample{{Labels: `{namespace="kubx-etcd-01"}`, Value: 1}, {Labels: `{namespace="kubx-etcd-02"}`, Value: 0}}},
		{Expr: dashtest.Substitute(query("Journal captures/A"), both), EvalTime: "30h", ExpSamples: []dashtest.Sample{{Labels: `{namespace="kubx-etcd-01"}`, Value: 2}, {Labels: `{namespace="kubx-etcd-02"}`, Value: 0}}},
		{Expr: dashtest.Substitute(query("Damaged backups/A"), ns01), EvalTime: "30h", ExpSamples: []dashtest.Sample{{Labels: "{}", Value: 0}}},
		{Expr: dashtest.Substitute(query("Damaged backups/A"), "kubx-etcd-02"), EvalTime: "30h", ExpSamples: nil},
		{Expr: vq[0].Expr, EvalTime: "30h", ExpSamples: []dashtest.Sample{{Labels: `{namespace="kubx-etcd-01"}`, Value: 2}, {Labels: `{namespace="kubx-etcd-02"}`, Value: 1}}},
	}
	test := dashtest.TestFile(t, []string{}, "1h", "zeros, not empty", series, cases)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "zero_test.yml"), test, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool(t, dir, "test", "rules", "zero_test.yml"); err != nil {
		t.Fatalf("promtool test rules: %v\n%s\n%s", err, out, test)
	}
}
