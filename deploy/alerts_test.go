package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// The alert rules (deploy/40-alerts.yaml) and their promtool unit tests
// (deploy/testdata/alerts_test.yml).
const (
	alertsFile = "40-alerts.yaml"
	// alertTestsFile is under testdata/ and .yml, not .yaml: neither
	// `kubectl apply -f deploy/` nor kubetest.DeployFiles (deploy/*.yaml,
	// deploy/*/*.yaml) takes it for a manifest.
	alertTestsFile = "testdata/alerts_test.yml"
	// alertRulesFile is the name alerts_test.yml's rule_files gives the
	// rules extracted from the PrometheusRule.
	alertRulesFile = "alerts.rules.yaml"
)

type promRule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type promRuleGroup struct {
	Name  string     `json:"name"`
	Rules []promRule `json:"rules"`
}

// alertRules reads the PrometheusRule of deploy/40-alerts.yaml: its spec
// (the plain rule file promtool takes, as YAML) and its groups.
func alertRules(tb testing.TB) ([]byte, []promRuleGroup) {
	tb.Helper()
	objs := kubetest.DecodeManifests(tb, kubetest.DeployPath(tb, alertsFile))
	if len(objs) != 1 {
		tb.Fatalf("%s: %d objects, want one PrometheusRule", alertsFile, len(objs))
	}
	o := objs[0]
	if o.GetAPIVersion() != "monitoring.coreos.com/v1" || o.GetKind() != "PrometheusRule" {
		tb.Fatalf("%s: %s %s, want monitoring.coreos.com/v1 PrometheusRule", alertsFile, o.GetAPIVersion(), o.GetKind())
	}
	spec, ok := o.Object["spec"].(map[string]any)
	if !ok {
		tb.Fatalf("%s: no spec", alertsFile)
	}
	b, err := yaml.Marshal(spec)
	if err != nil {
		tb.Fatal(err)
	}
	var rf struct {
		Groups []promRuleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		tb.Fatalf("%s: spec: %v", alertsFile, err)
	}
	if len(rf.Groups) == 0 {
		tb.Fatalf("%s: no rule groups", alertsFile)
	}
	return b, rf.Groups
}

func alertNames(groups []promRuleGroup) []string {
	var names []string
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				names = append(names, r.Alert)
			}
		}
	}
	return names
}

// promtool runs the cached promtool with args in dir and returns its
// combined output and error.
//
// Its bound is generous: `promtool test rules` took 25 s alone on 2 cores
// (2026-11-28) and over 2 min twice inside `make test`, whose other
// packages keep both cores busy; a promtool killed at its bound also
// leaves its storage in TMPDIR.
func promtool(tb testing.TB, dir string, args ...string) (string, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Promtool(tb), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestAlertRulesPromtool: `promtool check rules` accepts the rules of the
// PrometheusRule, and `promtool test rules` passes deploy/testdata/alerts_test.yml
// against them.
func TestAlertRulesPromtool(t *testing.T) {
	t.Parallel()
	spec, groups := alertRules(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, alertRulesFile), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(kubetest.DeployPath(t, alertTestsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(alertTestsFile)), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := promtool(t, dir, "check", "rules", alertRulesFile)
	if err != nil {
		t.Fatalf("promtool check rules %s (the spec of deploy/%s): %v\n%s", alertRulesFile, alertsFile, err, out)
	}
	if want := len(alertNames(groups)); !strings.Contains(out, "SUCCESS: "+strconv.Itoa(want)+" rules found") {
		t.Errorf("promtool check rules: want %d rules found:\n%s", want, out)
	}
	out, err = promtool(t, dir, "test", "rules", filepath.Base(alertTestsFile))
	if err != nil {
		t.Fatalf("promtool test rules deploy/%s: %v\n%s", alertTestsFile, err, out)
	}
	t.Logf("promtool test rules:\n%s", out)
}

// TestAlertAbsentPerNamespace: the absent() rules as the chart renders
// them for kubx-etcd-01..03 (one per namespace, templates/fleet.yaml) pass
// `promtool check rules`, and `promtool test rules`
// deploy/testdata/alerts_absent_test.yml: when kubx-etcd-02's exporter
// vanishes, and later its journal's leader, while the other two keep
// reporting, EtcdRecoveryExporterAbsent and EtcdJournalAbsent fire naming
// kubx-etcd-02 (the fleet-wide absent() of 40-alerts.yaml stays quiet
// then), and resolve when it is back.
func TestAlertAbsentPerNamespace(t *testing.T) {
	t.Parallel()
	var rule []byte
	for _, o := range kubetest.RenderChart(t, kubetest.FleetValues("kubx-etcd-01", "kubx-etcd-02", "kubx-etcd-03")) {
		if o.GetKind() == "PrometheusRule" {
			b, err := yaml.Marshal(o.Object["spec"])
			if err != nil {
				t.Fatal(err)
			}
			rule = b
		}
	}
	if rule == nil {
		t.Fatal("the chart rendered no PrometheusRule")
	}
	const testsFile = "testdata/alerts_absent_test.yml"
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, alertRulesFile), rule, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(kubetest.DeployPath(t, testsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(testsFile)), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool(t, dir, "check", "rules", alertRulesFile); err != nil {
		t.Fatalf("promtool check rules (the rendered PrometheusRule): %v\n%s", err, out)
	}
	if out, err := promtool(t, dir, "test", "rules", filepath.Base(testsFile)); err != nil {
		t.Fatalf("promtool test rules deploy/%s on the rendered rules: %v\n%s", testsFile, err, out)
	}
}

type alertTestFile struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			EvalTime  string           `json:"eval_time"`
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestAlertRulesCovered: every alert of deploy/40-alerts.yaml has a
// promtool case in deploy/testdata/alerts_test.yml where it fires and a later one
// of the same test where it no longer does, and every case names an alert
// that exists (a case expecting nothing from a misspelt alert would pass
// for ever). So an alert that can never fire, or a new alert without a
// test, fails.
func TestAlertRulesCovered(t *testing.T) {
	t.Parallel()
	_, groups := alertRules(t)
	names := alertNames(groups)
	b, err := os.ReadFile(kubetest.DeployPath(t, alertTestsFile))
	if err != nil {
		t.Fatal(err)
	}
	var tf alertTestFile
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatalf("deploy/%s: %v", alertTestsFile, err)
	}
	if !slices.Equal(tf.RuleFiles, []string{alertRulesFile}) {
		t.Errorf("deploy/%s: rule_files %v, want [%s] (the spec alerts_test.go extracts)", alertTestsFile, tf.RuleFiles, alertRulesFile)
	}
	fires := map[string]bool{}
	resolves := map[string]bool{}
	for _, tc := range tf.Tests {
		firstFire := map[string]time.Duration{}
		for _, c := range tc.AlertRuleTest {
			if !slices.Contains(names, c.Alertname) {
				t.Errorf("deploy/%s: test %q: alert %q is not in deploy/%s", alertTestsFile, tc.Name, c.Alertname, alertsFile)
				continue
			}
			at, err := parsePromDuration(c.EvalTime)
			if err != nil {
				t.Errorf("deploy/%s: test %q: eval_time %q: %v", alertTestsFile, tc.Name, c.EvalTime, err)
				continue
			}
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname] = true
				if f, ok := firstFire[c.Alertname]; !ok || at < f {
					firstFire[c.Alertname] = at
				}
			}
		}
		for _, c := range tc.AlertRuleTest {
			at, _ := parsePromDuration(c.EvalTime)
			if f, ok := firstFire[c.Alertname]; ok && len(c.ExpAlerts) == 0 && at > f {
				resolves[c.Alertname] = true
			}
		}
	}
	for _, n := range names {
		if !fires[n] {
			t.Errorf("alert %s: no case in deploy/%s where it fires", n, alertTestsFile)
		}
		if !resolves[n] {
			t.Errorf("alert %s: no case in deploy/%s where it resolves after firing", n, alertTestsFile)
		}
	}
	if len(names) < 10 {
		t.Errorf("only %d alerts in deploy/%s: %v", len(names), alertsFile, names)
	}
}

var promDurationRE = regexp.MustCompile(`^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$`)

// parsePromDuration parses the durations alerts_test.yml uses (1d2h3m4s).
func parsePromDuration(s string) (time.Duration, error) {
	m := promDurationRE.FindStringSubmatch(s)
	if m == nil || s == "" {
		return 0, &time.ParseError{Layout: "[Nd][Nh][Nm][Ns]", Value: s}
	}
	var d time.Duration
	for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
		if m[i+1] == "" {
			continue
		}
		n, err := strconv.Atoi(m[i+1])
		if err != nil {
			return 0, err
		}
		d += time.Duration(n) * unit
	}
	return d, nil
}

// TestAlertRulesContent: every alert has a severity Alertmanager routes
// on (critical, warning, info), a summary and description that name the cluster and its namespace,
// and a runbook_url that links an existing section of runbooks/ (GitHub's
// anchor of one of its headings).
func TestAlertRulesContent(t *testing.T) {
	t.Parallel()
	_, groups := alertRules(t)
	root := testenv.RepoRoot(t)
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	modLine, _, _ := strings.Cut(string(mod), "\n")
	base := "https://" + strings.TrimSpace(strings.TrimPrefix(modLine, "module ")) + "/blob/main/"
	anchors := map[string][]string{} // runbooks/file.md -> its anchors
	seen := map[string]bool{}
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a recording rule %q; this file holds alerts only", g.Name, r.Record)
				continue
			}
			if seen[r.Alert] {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, s)
			}
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[k] == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, k)
				}
			}
			text := r.Annotations["summary"] + r.Annotations["description"]
			if strings.Contains(r.Expr, "cluster)") {
				for _, want := range []string{"{{ $labels.cluster }}", "{{ $labels.namespace }}"} {
					if !strings.Contains(r.Annotations["summary"], want) || !strings.Contains(r.Annotations["description"], want) {
						t.Errorf("alert %s: summary and description must name %s", r.Alert, want)
					}
				}
			} else if !strings.Contains(r.Expr, "absent(") && !strings.Contains(text, "{{ $labels.namespace }}") {
				t.Errorf("alert %s: summary or description must name {{ $labels.namespace }}", r.Alert)
			}
			u := r.Annotations["runbook_url"]
			ref, ok := strings.CutPrefix(u, base)
			if !ok {
				t.Errorf("alert %s: runbook_url %q is not under %s", r.Alert, u, base)
				continue
			}
			file, anchor, ok := strings.Cut(ref, "#")
			if !ok || !strings.HasPrefix(file, "runbooks/") || !strings.HasSuffix(file, ".md") || anchor == "" {
				t.Errorf("alert %s: runbook_url %q: want %srunbooks/FILE.md#SECTION", r.Alert, u, base)
				continue
			}
			have, ok := anchors[file]
			if !ok {
				have = markdownAnchors(t, filepath.Join(root, file))
				anchors[file] = have
			}
			if !slices.Contains(have, anchor) {
				t.Errorf("alert %s: runbook_url %q: %s has no section #%s (it has %v)", r.Alert, u, file, anchor, have)
			}
		}
	}
}

var (
	mdHeadingRE    = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*\s*$`)
	mdAnchorDropRE = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// markdownAnchors lists GitHub's anchors of a markdown file's headings
// (outside fenced blocks): lower case, punctuation dropped, spaces to
// hyphens. A file that does not exist fails the test.
func markdownAnchors(tb testing.TB, path string) []string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Errorf("runbook: %v", err)
		return nil
	}
	var out []string
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := mdHeadingRE.FindStringSubmatch(line); m != nil {
			s := strings.ToLower(strings.ReplaceAll(m[1], "`", ""))
			s = mdAnchorDropRE.ReplaceAllString(s, "")
			out = append(out, strings.ReplaceAll(s, " ", "-"))
		}
	}
	return out
}

// TestAlertRulesApply: the PrometheusRule applies to a real
// kube-apiserver with the test fixture of its CRD (deploy/testdata/crds/), and reads back
// unchanged (the CRD's structural schema prunes none of its fields).
func TestAlertRulesApply(t *testing.T) {
	t.Parallel()
	k := testenv.StartKubeAPIServer(t)
	kubetest.InstallCRDs(t, k)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gvr := schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"}
	dyn := k.Dynamic(t, "")
	for deadline := time.Now().Add(time.Minute); ; {
		_, err := dyn.Resource(gvr).Namespace("default").List(ctx, metav1.ListOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not served after installing deploy/testdata/crds/: %v", gvr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	const ns = "kubx-etcd-01"
	kubetest.CreateNamespaces(t, k.Clientset(t, ""), ns)
	a := kubetest.NewApplier(t, k)
	obj := kubetest.DecodeManifests(t, kubetest.DeployPath(t, alertsFile))[0]
	if err := a.Apply(ctx, obj, ns, false); err != nil {
		t.Fatalf("apply deploy/%s: %v", alertsFile, err)
	}
	got, err := dyn.Resource(gvr).Namespace(ns).Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := yaml.Marshal(obj.Object["spec"])
	have, _ := yaml.Marshal(got.Object["spec"])
	if !bytes.Equal(want, have) {
		t.Errorf("PrometheusRule %s read back differs from deploy/%s (pruned by the CRD's schema?):\n--- want\n%s\n--- got\n%s", obj.GetName(), alertsFile, want, have)
	}
	// The schema is enforced: a rule without expr is refused.
	bad := obj.DeepCopy()
	bad.SetName("etcd-recovery-alerts-bad")
	groupsAny := bad.Object["spec"].(map[string]any)["groups"].([]any)
	rule := groupsAny[0].(map[string]any)["rules"].([]any)[0].(map[string]any)
	delete(rule, "expr")
	if err := a.Apply(ctx, bad, ns, true); err == nil || !strings.Contains(err.Error(), "expr") {
		t.Errorf("a rule without expr: apply error %v, want one naming expr (the CRD's schema not enforced?)", err)
	}
}
