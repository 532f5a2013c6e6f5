package drill_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// totalProgress records what a download's progress is told.
type totalProgress struct {
	mu          sync.Mutex
	label       string
	total, last int64
	done        bool
}

func (p *totalProgress) SetTotal(n int64) { p.mu.Lock(); p.total = n; p.mu.Unlock() }
func (p *totalProgress) Update(n int64)   { p.mu.Lock(); p.last = n; p.mu.Unlock() }
func (p *totalProgress) Done()            { p.mu.Lock(); p.done = true; p.mu.Unlock() }

// A drill's download shows progress (Options.Progress, which the CLI
// sets for one drill), with the manifest's size as its total.
func TestDrillProgressKnowsTheTotal(t *testing.T) {
	t.Parallel()
	c, r := drillSource(t, testenv.V35, 100)
	const id = "drill-progress"
	m := r.TakeBackup(t, c, id, catalog.KindScheduled)
	o := drillOpts(t, r, id, testenv.DrillBinDir(t, testenv.V35))
	o.NoRecord = true
	var mu sync.Mutex
	var progs []*totalProgress
	o.Progress = func(label string) restore.Progress {
		p := &totalProgress{label: label}
		mu.Lock()
		progs = append(progs, p)
		mu.Unlock()
		return p
	}
	rec, err := drill.Run(testfix.Context(t, 3*time.Minute), o)
	if err != nil || rec == nil || !rec.Passed {
		t.Fatalf("drill: %v %+v", err, rec)
	}
	found := false
	for _, p := range progs {
		if !strings.HasPrefix(p.label, "download ") {
			continue
		}
		found = true
		if p.total != m.Snapshot.StoredSize || p.last != p.total || !p.done {
			t.Errorf("%s: total %d, reached %d, done %v; want the manifest's stored size %d, reached", p.label, p.total, p.last, p.done, m.Snapshot.StoredSize)
		}
	}
	if !found {
		t.Fatalf("no download progress among %d", len(progs))
	}
}
