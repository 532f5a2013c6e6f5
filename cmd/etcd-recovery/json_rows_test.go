package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// tableColumn is the named column of every row of the tables of out (a
// -o wide rendering) that have it, header rows left out; one must.
func tableColumn(t *testing.T, out, header string) []string {
	t.Helper()
	var col []string
	idx, found, inHeader := -1, false, false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "┌"):
			idx, inHeader = -1, true // a new table: its first row is the header
			continue
		case !strings.HasPrefix(line, "│"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "│"), "│")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if inHeader {
			idx, inHeader = slices.Index(cells, header), false
			found = found || idx >= 0
			continue
		}
		if idx >= 0 && idx < len(cells) {
			col = append(col, cells[idx])
		}
	}
	if !found {
		t.Fatalf("no column %s in:\n%s", header, out)
	}
	return col
}

// The rendering convention: a command's -o json is the report its table
// is built from, so both hold the same rows, in the same order. Checked
// for list, prune --dry-run and restore --dry-run (whose candidates and
// data dirs are tables of one plan) against real MinIO.
func TestJSONHoldsTableRows(t *testing.T) {
	t.Parallel()
	r := newPruneRig(t)
	const id = "cli-json"
	now := time.Now().UTC()
	for i := range 6 {
		r.put(t, id, now.Add(-time.Hour-time.Duration(i)*8*time.Hour), catalog.KindScheduled, true)
	}
	r.put(t, id, now.Add(-3*24*time.Hour), catalog.KindManual, true)
	r.put(t, id, now.Add(-2*time.Hour), catalog.KindScheduled, false)

	both := func(args ...string) (wide, js string) {
		t.Helper()
		code, wide, errOut := r.run(t, args[0], append(args[1:], "-o", "wide")...)
		if code != 0 {
			t.Fatalf("%v -o wide: exit %d: %s", args, code, errOut)
		}
		code, js, errOut = r.run(t, args[0], append(args[1:], "-o", "json")...)
		if code != 0 {
			t.Fatalf("%v -o json: exit %d: %s", args, code, errOut)
		}
		return wide, js
	}

	// list: one row per backup folder, incomplete ones too.
	wide, js := both("list", "--cluster-id", id)
	var listed []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(js), &listed); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, js)
	}
	var names []string
	for _, b := range listed {
		names = append(names, b.Name)
	}
	if rows := tableColumn(t, wide, "BACKUP"); len(rows) != 8 || !slices.Equal(rows, names) {
		t.Errorf("list: table rows %v, json rows %v (8 folders)", rows, names)
	}

	// prune --dry-run: one row per decision.
	wide, js = both("prune", "--cluster-id", id, "--dry-run")
	p := decodePrune(t, js)
	names = nil
	for _, c := range p.Clusters {
		for _, b := range c.Backups {
			names = append(names, b.Name)
		}
	}
	if rows := tableColumn(t, wide, "BACKUP"); len(rows) == 0 || !slices.Equal(rows, names) {
		t.Errorf("prune --dry-run: table rows %v, json rows %v", rows, names)
	}

	// restore --dry-run: the made-up snapshots fail verification, so the
	// run fails (exit 1), and still prints its plan in both forms.
	root := filepath.Join(t.TempDir(), "data")
	args := []string{"--cluster-id", id, "--no-live", "--data-dir-root", root,
		"--initial-cluster", "r0=https://127.0.0.1:2380,r1=https://127.0.0.1:2381", "--dry-run"}
	code, wide, errOut := r.run(t, "restore", append(args, "-o", "wide")...)
	code2, js, errOut2 := r.run(t, "restore", append(args, "-o", "json")...)
	if code != code2 || wide == "" || js == "" {
		t.Fatalf("restore --dry-run: exit %d (wide) and %d (json)\n%s\n%s\n%s\n%s", code, code2, wide, errOut, js, errOut2)
	}
	var res struct {
		Candidates []struct {
			Name string `json:"name"`
		} `json:"candidates"`
		Members []struct {
			DataDir string `json:"dataDir"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(js), &res); err != nil {
		t.Fatalf("restore -o json: %v\n%s", err, js)
	}
	names = nil
	for _, c := range res.Candidates {
		names = append(names, c.Name)
	}
	if rows := tableColumn(t, wide, "BACKUP"); len(rows) == 0 || !slices.Equal(rows, names) {
		t.Errorf("restore --dry-run: candidate rows %v, json %v\n%s", rows, names, wide)
	}
	var dirs []string
	for _, m := range res.Members {
		dirs = append(dirs, m.DataDir)
	}
	if rows := tableColumn(t, wide, "DATA DIR"); len(rows) != 2 || !slices.Equal(rows, dirs) {
		t.Errorf("restore --dry-run: data dir rows %v, json %v\n%s", rows, dirs, wide)
	}
}
