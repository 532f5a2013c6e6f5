package testfix

import (
	"strings"
	"sync"
	"testing"
)

// TotalProgress records what a download's progress is told (it is a
// restore.Progress).
type TotalProgress struct {
	mu          sync.Mutex
	Label       string
	total, last int64
	done        bool
}

func (p *TotalProgress) SetTotal(n int64) { p.mu.Lock(); p.total = n; p.mu.Unlock() }
func (p *TotalProgress) Update(n int64)   { p.mu.Lock(); p.last = n; p.mu.Unlock() }
func (p *TotalProgress) Done()            { p.mu.Lock(); p.done = true; p.mu.Unlock() }

// Progresses hands out a TotalProgress per label (an Options.Progress of
// restore or drill calls New) and keeps them all.
type Progresses struct {
	mu  sync.Mutex
	all []*TotalProgress
}

// New is the progress of one step, labelled label.
func (ps *Progresses) New(label string) *TotalProgress {
	p := &TotalProgress{Label: label}
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	return p
}

// CheckDownloads fails tb unless there was a download's progress ("download
// …") and each was given want as its total, reached it and was done.
func (ps *Progresses) CheckDownloads(tb testing.TB, want int64) {
	tb.Helper()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	found := false
	for _, p := range ps.all {
		if !strings.HasPrefix(p.Label, "download ") {
			continue
		}
		found = true
		p.mu.Lock()
		total, last, done := p.total, p.last, p.done
		p.mu.Unlock()
		if total != want || last != total || !done {
			tb.Errorf("%s: total %d, reached %d, done %v; want the manifest's stored size %d, reached", p.Label, total, last, done, want)
		}
	}
	if !found {
		tb.Fatalf("no download progress among %d", len(ps.all))
	}
}
