package fleet

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/armada/etcd-recovery/internal/output"
)

// RestoreAllWatch shows a restore-all as it runs: on a terminal, a table
// of the clusters in progress redrawn about once a second (cluster, step,
// bytes, elapsed); otherwise one structured log line per step per
// cluster. Its Step is RestoreAllOptions.OnStep; Stop ends the redraws.
type RestoreAllWatch struct {
	w        io.Writer
	terminal bool
	log      *slog.Logger

	mu     sync.Mutex
	steps  map[string]RestoreAllStep // by namespace/cluster
	order  []string
	logged map[string]string // the step last logged, by namespace/cluster
	lines  int               // lines drawn last time
	stop   chan struct{}
	done   chan struct{}
}

// NewRestoreAllWatch starts a watch writing to w (stderr): the live table
// when terminal, else log lines to log.
func NewRestoreAllWatch(w io.Writer, terminal bool, log *slog.Logger) *RestoreAllWatch {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rw := &RestoreAllWatch{w: w, terminal: terminal, log: log, steps: map[string]RestoreAllStep{}, logged: map[string]string{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if !terminal {
		close(rw.done)
		return rw
	}
	go func() {
		defer close(rw.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-rw.stop:
				rw.draw(true)
				return
			case <-t.C:
				rw.draw(false)
			}
		}
	}()
	return rw
}

// Step records a cluster's step (RestoreAllOptions.OnStep).
func (rw *RestoreAllWatch) Step(s RestoreAllStep) {
	key := s.Namespace + "/" + s.Cluster
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if _, ok := rw.steps[key]; !ok {
		rw.order = append(rw.order, key)
	}
	rw.steps[key] = s
	if rw.terminal || rw.logged[key] == s.Step {
		return
	}
	rw.logged[key] = s.Step
	attrs := []any{"namespace", s.Namespace, "cluster", s.Cluster, "step", s.Step, "bytes", s.Bytes, "elapsed", s.Elapsed.Round(time.Millisecond)}
	switch {
	case s.Outcome == OutcomeFailed:
		rw.log.Error("restore-all: cluster failed", append(attrs, "outcome", s.Outcome, "err", s.Err)...)
	case s.Outcome != "":
		rw.log.Info("restore-all: cluster finished", append(attrs, "outcome", s.Outcome)...)
	default:
		rw.log.Info("restore-all: step", attrs...)
	}
}

// Stop ends the live table (drawn a last time) and waits for it.
func (rw *RestoreAllWatch) Stop() {
	select {
	case <-rw.stop:
	default:
		close(rw.stop)
	}
	<-rw.done
}

// Table is the live table: every cluster seen, in the order first seen,
// those finished with their outcome.
func (rw *RestoreAllWatch) Table() output.Table {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	t := output.Table{Header: []string{"NAMESPACE", "CLUSTER", "STEP", "BYTES", "ELAPSED"}}
	running, finished := 0, 0
	for _, key := range rw.order {
		s := rw.steps[key]
		step := s.Step
		if s.Outcome != "" {
			step, finished = s.Outcome, finished+1
		} else if s.Step != StepQueued {
			running++
		}
		b := "-"
		if s.Bytes > 0 {
			b = output.Bytes(s.Bytes)
		}
		t.Rows = append(t.Rows, []string{s.Namespace, s.Cluster, step, b, s.Elapsed.Round(time.Second).String()})
	}
	t.Title = fmt.Sprintf("restore-all: %d running, %d finished, %d queued\n", running, finished, len(rw.order)-running-finished)
	// Running first, then queued, then finished: what moves is on top.
	rank := func(row []string) int {
		switch {
		case row[2] == StepQueued:
			return 1
		case slices.Contains([]string{OutcomeRestored, OutcomeRebuilt, OutcomeFailed, OutcomeNotStarted}, row[2]):
			return 2
		}
		return 0
	}
	slices.SortStableFunc(t.Rows, func(a, b []string) int { return rank(a) - rank(b) })
	return t
}

// draw redraws the table over the last one (the cursor moved up over it).
func (rw *RestoreAllWatch) draw(last bool) {
	var buf bytes.Buffer
	if err := output.Render(&buf, output.FormatTable, rw.Table(), nil); err != nil {
		return
	}
	text := buf.String()
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.lines > 0 {
		fmt.Fprintf(rw.w, "\x1b[%dA\x1b[J", rw.lines)
	}
	fmt.Fprint(rw.w, text)
	rw.lines = strings.Count(text, "\n")
	if last {
		rw.lines = 0
	}
}
