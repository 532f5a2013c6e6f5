package drill_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
)

// A drill's outcome from Run's record and error: only a passing record
// without an error is a pass; an error with a record (also one carried by
// the *Error) is a failed backup, naming its check; an inconclusive
// *Error is the node's; an error without a record could not run.
func TestNewOutcome(t *testing.T) {
	t.Parallel()
	passed := &catalog.DrillRecord{Backup: "b1", Passed: true, Comparison: catalog.DrillComparison{Mode: catalog.CompareSource}}
	failed := &catalog.DrillRecord{Backup: "b1", Failed: "hashkv: restored 0x1 != source 0x2", Comparison: catalog.DrillComparison{Mode: catalog.CompareSelf}}
	for _, tc := range []struct {
		name      string
		rec       *catalog.DrillRecord
		err       error
		result    string
		errSubstr string
		text      string
	}{
		{"passed", passed, nil, drill.Passed, "", "passed (source)"},
		{"no error, no passing record", failed, nil, drill.Failed, "no passing record", "FAILED"},
		{"no error, no record", nil, nil, drill.Failed, "no passing record", "FAILED"},
		{"failed", failed, errors.New("check hashkv failed"), drill.Failed, "(failed check: hashkv: restored 0x1 != source 0x2)", "FAILED"},
		{"failed, record in the error", nil, &drill.Error{ClusterID: "c1", At: "compare", Err: errors.New("x"), Record: failed},
			drill.Failed, "failed check: hashkv", "FAILED"},
		{"inconclusive", nil, &drill.Error{ClusterID: "c1", At: "start etcd", Err: errors.New("killed"), Inconclusive: "the OOM killer"},
			drill.Inconclusive, "killed", drill.Inconclusive},
		{"not run", nil, errors.New("no etcd-3.5"), drill.NotRun, "no etcd-3.5", drill.NotRun},
	} {
		o := drill.NewOutcome(tc.rec, tc.err, 3*time.Second)
		if o.Result != tc.result || !strings.Contains(o.Error, tc.errSubstr) || o.Text() != tc.text || o.Seconds != 3 {
			t.Errorf("%s: %+v (text %q); want %s with %q, text %q", tc.name, o, o.Text(), tc.result, tc.errSubstr, tc.text)
		}
	}
	if (*drill.Outcome)(nil).Text() != "-" {
		t.Error("a nil outcome's DRILL column is not -")
	}
}

// A drill run's table: FAILED in capitals, the failing check's name (its
// values below the table), no duration for a cluster without a backup.
func TestReportTable(t *testing.T) {
	t.Parallel()
	rep := &drill.Report{Clusters: []drill.Result{
		drill.NewResult("c1", &catalog.DrillRecord{Backup: "b1", Failed: "key count: 49 restored, 50 in the snapshot"},
			errors.New("check key count failed"), time.Second),
		{Cluster: "c2", Result: drill.NoBackup, Reason: "not drilled: no committed backup", Duration: time.Second},
	}}
	tb := rep.Table()
	if got := tb.Rows[0]; got[1] != "b1" || got[2] != "FAILED" || got[4] != "key count" || got[5] != "1s" {
		t.Errorf("failed row %q", got)
	}
	if got := tb.Rows[1]; got[2] != drill.NoBackup || got[5] != "-" || got[7] != "not drilled: no committed backup" {
		t.Errorf("no-backup row %q", got)
	}
}
