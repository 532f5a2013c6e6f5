package output

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// RenderAll writes each section's title, table, notes and footer in
// order, and -o json the data once.
func TestRenderAll(t *testing.T) {
	t.Parallel()
	ts := []Table{
		{Title: "Heading\n\n", Header: []string{"NAME", "DETAIL"}, Rows: [][]string{{"a", "why a"}}, Long: []string{"DETAIL"}},
		{Title: "text only\n"},
		{Header: []string{"X"}, Rows: [][]string{{"x1"}}, Footer: "after x\n"},
	}
	var b bytes.Buffer
	if err := RenderAll(&b, FormatTable, ts, nil); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	order := []string{"Heading\n\n", "NAME", "a: why a\n", "text only\n", "x1", "after x\n"}
	at := 0
	for _, s := range order {
		i := strings.Index(out[at:], s)
		if i < 0 {
			t.Fatalf("%q missing or out of order in:\n%s", s, out)
		}
		at += i + len(s)
	}
	if strings.Count(out, "┌") != 2 {
		t.Errorf("want 2 tables (a text-only section draws none):\n%s", out)
	}
	b.Reset()
	data := map[string]int{"rows": 2}
	if err := RenderAll(&b, FormatJSON, ts, data); err != nil {
		t.Fatal(err)
	}
	var got map[string]int
	if err := json.Unmarshal(b.Bytes(), &got); err != nil || got["rows"] != 2 {
		t.Errorf("json %q: %v", b.String(), err)
	}
}

// -o yaml is the same data as -o json: the JSON field names (tags), the
// same values, omitted fields omitted, for Render and RenderAll alike.
func TestRenderYAMLSameDataAsJSON(t *testing.T) {
	t.Parallel()
	type inner struct {
		Rev  int64  `json:"revision"`
		Gone string `json:"gone,omitempty"`
	}
	data := struct {
		ClusterID string   `json:"clusterID"`
		Sizes     []int64  `json:"sizes"`
		Inner     inner    `json:"inner"`
		Nil       *string  `json:"nil,omitempty"`
		Keys      []string `json:"keys"`
	}{"c1", []int64{1, 1 << 40}, inner{Rev: 42}, nil, []string{"/registry/a: b", "yes"}}
	var j, y, yAll bytes.Buffer
	if err := Render(&j, FormatJSON, Table{}, data); err != nil {
		t.Fatal(err)
	}
	if err := Render(&y, FormatYAML, Table{Header: []string{"X"}, Rows: [][]string{{"x"}}}, data); err != nil {
		t.Fatal(err)
	}
	if err := RenderAll(&yAll, FormatYAML, []Table{{Title: "heading\n"}}, data); err != nil {
		t.Fatal(err)
	}
	if y.String() != yAll.String() {
		t.Errorf("Render and RenderAll differ:\n%s\n%s", y.String(), yAll.String())
	}
	for _, s := range []string{"┌", "heading", "gone", "nil:"} {
		if strings.Contains(y.String(), s) {
			t.Errorf("yaml holds %q:\n%s", s, y.String())
		}
	}
	var fromJSON, fromYAML any
	if err := json.Unmarshal(j.Bytes(), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(y.Bytes(), &fromYAML); err != nil {
		t.Fatalf("yaml %q: %v", y.String(), err)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) {
		t.Errorf("yaml is not json's data:\njson %v\nyaml %v", fromJSON, fromYAML)
	}
	if !strings.Contains(y.String(), "clusterID: c1\n") || !strings.Contains(y.String(), "revision: 42") {
		t.Errorf("yaml does not use json's names:\n%s", y.String())
	}
	if f, err := ParseFormat("yaml"); err != nil || f != FormatYAML || !f.Data() {
		t.Errorf("ParseFormat(yaml) = %q, %v", f, err)
	}
}
