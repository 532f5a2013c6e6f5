package metrics_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/testing/dashtest"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
)

var (
	dashSeriesRE  = regexp.MustCompile(`\betcd_recovery_[a-z0-9_]+`)
	dashHistSufRE = regexp.MustCompile(`_(bucket|sum|count)$`)
)

// dashboardOnScrape runs the fleet dashboard's panel queries on the
// exporter's real scrape (as promtoolScrape feeds it to promtool, with
// the target's up series added), with $namespace the scrape's namespace:
// every query whose series are all in the scrape returns something at
// scrapeEval, except those emptyHere names (by "panel title/refId", with
// the reason the world of the test gives none), which must return nothing.
// Queries naming a series the scrape lacks (the journal process's, a
// bucket lock's) are left to deploy's TestDashboardQueries; at least
// minChecked must run.
func dashboardOnScrape(t *testing.T, body []byte, now time.Time, emptyHere map[string]string, minChecked int) {
	t.Helper()
	up := promSeries{Series: fmt.Sprintf(`up{job="etcd-recovery-metrics",namespace=%q,instance="10.0.0.22:9090"}`, alertsNS), ts: 1}
	in := scrapeInput(t, body, []promSeries{up}, now)
	present := map[string]bool{"up": true}
	for _, s := range in {
		name, _, _ := strings.Cut(s.Series, "{")
		present[name] = true
	}
	d, _ := dashtest.Load(t, kubetest.DeployPath(t, "dashboards", "etcd-recovery-fleet.json"))
	type rule struct {
		Alert string `json:"alert"`
		Expr  string `json:"expr"`
	}
	var rules []rule
	var tests []map[string]any
	var skipped []string
	seen := map[string]bool{}
	nsRE := regexp.QuoteMeta(alertsNS)
	for _, q := range d.Queries() {
		key := q.Panel.Title + "/" + q.RefID
		missing := ""
		for _, n := range dashSeriesRE.FindAllString(q.Expr, -1) {
			if !present[n] && !present[dashHistSufRE.ReplaceAllString(n, "")] {
				missing = n
			}
		}
		if missing != "" {
			skipped = append(skipped, key+" ("+missing+")")
			continue
		}
		seen[key] = true
		expr := dashtest.Checked(q.Expr, nsRE)
		if _, empty := emptyHere[key]; empty {
			expr = fmt.Sprintf("count((\n%s\n)) > 0", expr)
		} else {
			expr = fmt.Sprintf("absent_over_time((\n%s\n)[10m:1m])", expr)
		}
		rules = append(rules, rule{Alert: q.Name, Expr: expr})
		tests = append(tests, map[string]any{"eval_time": scrapeEval.String(), "alertname": q.Name, "exp_alerts": []any{}})
	}
	for key, why := range emptyHere {
		if !seen[key] {
			t.Errorf("emptyHere names %q (%s): no such query runs on the scrape", key, why)
		}
	}
	if len(rules) < minChecked {
		t.Fatalf("only %d dashboard queries run on the scrape, want at least %d; skipped: %v", len(rules), minChecked, skipped)
	}
	rulesYAML, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	testYAML, err := yaml.Marshal(map[string]any{
		"rule_files": []string{"alerts.rules.yaml"}, "evaluation_interval": "1m",
		"tests": []any{map[string]any{"name": "the dashboard on the exporter's real scrape", "interval": "1m", "input_series": in, "alert_rule_test": tests}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runPromtoolTest(t, rulesYAML, testYAML); err != nil {
		t.Fatalf("dashboard queries on the exporter's scrape (alert PanelNX: panel id N, target X; fires when a query returns nothing, or something where the world has nothing): %v\n%s", err, out)
	}
	slices.Sort(skipped)
	t.Logf("%d dashboard queries ran on the real scrape (%d expected empty); %d name series it lacks: %v", len(rules), len(emptyHere), len(skipped), skipped)
}
