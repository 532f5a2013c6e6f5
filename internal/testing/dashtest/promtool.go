package dashtest

import (
	"testing"

	"sigs.k8s.io/yaml"
)

// Sample is an expected sample of a promtool promql_expr_test.
type Sample struct {
	Labels string  `json:"labels"`
	Value  float64 `json:"value"`
}

// ExprTest is one promql_expr_test of a promtool test file: at EvalTime,
// Expr returns exactly ExpSamples.
type ExprTest struct {
	Expr       string   `json:"expr"`
	EvalTime   string   `json:"eval_time"`
	ExpSamples []Sample `json:"exp_samples"`
}

// TestFile is a promtool test file (`promtool test rules`) of one test
// group named name: series (its input_series) at interval, the rule files
// ruleFiles evaluated at that interval, and tests.
func TestFile(tb testing.TB, ruleFiles []string, interval, name string, series any, tests []ExprTest) []byte {
	tb.Helper()
	b, err := yaml.Marshal(map[string]any{
		"rule_files": ruleFiles, "evaluation_interval": interval,
		"tests": []any{map[string]any{"name": name, "interval": interval, "input_series": series, "promql_expr_test": tests}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
