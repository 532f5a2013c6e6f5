package backup_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/backup/drilled"
	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
)

// One cluster's backup report: the manifest itself as JSON, with "pruned"
// after --prune and "drill" after --drill (drilled.Report); the DRILL
// column and the drill's line below the table only after --drill.
func TestReport(t *testing.T) {
	t.Parallel()
	m := &catalog.Manifest{ClusterID: "c1", Name: "20260101T000000.000Z-manual", RevisionBefore: 42}
	res := &backup.Result{Manifest: m, Duration: time.Second}
	plain := backup.NewReport(res)
	b, err := json.Marshal(plain)
	if err != nil || strings.Contains(string(b), `"drill"`) || strings.Contains(string(b), `"pruned"`) || !strings.Contains(string(b), `"c1"`) {
		t.Fatalf("json without drill or prune: %s %v", b, err)
	}
	if ts := plain.Tables(); len(ts) != 1 || strings.Contains(strings.Join(ts[0].Header, " "), "DRILL") || ts[0].Footer != "" {
		t.Fatalf("tables without drill: %+v", ts)
	}
	withDrill := &drilled.Report{Report: backup.NewReport(res), Drill: &drill.Outcome{Result: drill.NotRun, Error: "no etcd 3.5"}}
	b, err = json.Marshal(withDrill)
	if err != nil || !strings.Contains(string(b), `"drill":{"result":"not run","error":"no etcd 3.5"}`) {
		t.Fatalf("json with drill: %s %v", b, err)
	}
	ts := withDrill.Tables()
	if h := ts[0].Header; h[len(h)-1] != "DRILL" || ts[0].Rows[0][len(h)-1] != "not run" || ts[0].Footer != "drill: not run: no etcd 3.5\n" {
		t.Fatalf("tables with drill: %+v", ts)
	}
}
