package fleet

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Off a terminal: one log line per step per cluster (byte updates within a
// step log nothing), the outcome on the last. On a terminal: the table,
// redrawn over itself, running clusters first.
func TestRestoreAllWatch(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	w := NewRestoreAllWatch(&bytes.Buffer{}, false, slog.New(slog.NewTextHandler(&logs, nil)))
	for _, s := range []RestoreAllStep{
		{Namespace: "ns", Cluster: "a", Step: StepQueued},
		{Namespace: "ns", Cluster: "a", Step: "select and verify snapshot"},
		{Namespace: "ns", Cluster: "a", Step: "select and verify snapshot", Bytes: 1 << 20},
		{Namespace: "ns", Cluster: "a", Step: "select and verify snapshot", Bytes: 2 << 20},
		{Namespace: "ns", Cluster: "b", Step: StepQueued},
		{Namespace: "ns", Cluster: "a", Step: StepDone, Outcome: OutcomeRestored, Elapsed: 3 * time.Second},
		{Namespace: "ns", Cluster: "b", Step: StepDone, Outcome: OutcomeFailed, Err: "boom"},
	} {
		w.Step(s)
	}
	w.Stop()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d log lines, want 5 (one per step per cluster):\n%s", len(lines), logs.String())
	}
	for i, want := range []string{`cluster=a step=queued`, `step="select and verify snapshot"`, `cluster=b step=queued`, `outcome=restored`, `level=ERROR msg="restore-all: cluster failed" namespace=ns cluster=b`} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d: %s\nwant %s", i, lines[i], want)
		}
	}

	var screen bytes.Buffer
	tw := NewRestoreAllWatch(&screen, true, nil)
	tw.Step(RestoreAllStep{Namespace: "ns", Cluster: "done", Step: StepDone, Outcome: OutcomeRestored})
	tw.Step(RestoreAllStep{Namespace: "ns", Cluster: "waiting", Step: StepQueued})
	tw.Step(RestoreAllStep{Namespace: "ns", Cluster: "busy", Step: "wait for the restored etcdcluster", Bytes: 5 << 20, Elapsed: 2 * time.Second})
	tab := tw.Table()
	if tab.Title != "restore-all: 1 running, 1 finished, 1 queued\n" || len(tab.Rows) != 3 || tab.Rows[0][1] != "busy" || tab.Rows[0][3] != "5.0 MiB" ||
		tab.Rows[1][1] != "waiting" || tab.Rows[2][2] != OutcomeRestored {
		t.Errorf("live table %q %v", tab.Title, tab.Rows)
	}
	tw.draw(false)
	tw.draw(false)
	tw.Stop()
	if out := screen.String(); strings.Count(out, "restore-all: 1 running") < 3 || !strings.Contains(out, "\x1b[") {
		t.Errorf("the table was not redrawn over itself:\n%q", out)
	}
}
