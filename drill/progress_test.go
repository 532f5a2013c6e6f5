package drill_test

import (
	"testing"
	"time"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// A drill's download shows progress (Options.Progress, which the CLI
// sets for one drill), with the manifest's size as its total.
func TestDrillProgressKnowsTheTotal(t *testing.T) {
	t.Parallel()
	c, r := drillSource(t, testenv.V35, 100)
	const id = "drill-progress"
	m := r.TakeBackup(t, c, id, catalog.KindScheduled)
	o := drillOpts(t, r, id, testenv.DrillBinDir(t, testenv.V35))
	o.NoRecord = true
	var progs testfix.Progresses
	o.Progress = func(label string) restore.Progress { return progs.New(label) }
	rec, err := drill.Run(testfix.Context(t, 3*time.Minute), o)
	if err != nil || rec == nil || !rec.Passed {
		t.Fatalf("drill: %v %+v", err, rec)
	}
	progs.CheckDownloads(t, m.Snapshot.StoredSize)
}
