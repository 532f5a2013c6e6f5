package runbooks

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// connectionRef is the block every command runs after: the exported
// connection settings an SRE has in their shell.
const connectionRef = "README.md#connection-settings"

// connection is the block of connection settings.
func connection(tb testing.TB, rb mdblocks.Set) *mdblocks.Block {
	tb.Helper()
	conn, err := rb.Blocks(connectionRef)
	if err != nil || len(conn) != 1 {
		tb.Fatalf("connection settings %s: %v (%d blocks)", connectionRef, err, len(conn))
	}
	return conn[0]
}

// newScenario runs runbook sections in one failure (mdblocks.Scenario):
// each block after the connection settings, with vars as placeholders.
func newScenario(t *testing.T, rb mdblocks.Set, vars map[string]string) *mdblocks.Scenario {
	t.Helper()
	return mdblocks.NewScenario(t, rb, connection(t, rb), vars)
}

// newMembers makes n new members for s (mdblocks.NewMembers), named by
// its vars <new-initial-cluster> and <new-endpoints>, with <new-token>
// token and <data-dir-root> dir under s.Dir. It returns their endpoints.
func newMembers(t *testing.T, s *mdblocks.Scenario, n int, token, dir string) []string {
	t.Helper()
	members, ic, eps := mdblocks.NewMembers(t, n)
	s.Members = members
	s.Vars["new-initial-cluster"] = ic
	s.Vars["new-endpoints"] = strings.Join(eps, ",")
	s.Vars["new-token"] = token
	s.Vars["data-dir-root"] = filepath.Join(s.Dir, dir)
	return eps
}

// nextStep is the NEXT STEP line of an inspect output.
func nextStep(tb testing.TB, r mdblocks.Result) string {
	tb.Helper()
	lines := strings.Split(r.Output, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "NEXT STEP:") {
			// Long lines are wrapped, continued on indented lines.
			for _, c := range lines[i+1:] {
				if !strings.HasPrefix(c, " ") || strings.TrimSpace(c) == "" {
					break
				}
				l += " " + strings.TrimSpace(c)
			}
			return strings.TrimSpace(l)
		}
	}
	tb.Fatalf("no NEXT STEP line in the output of %s", r)
	return ""
}

// capture is the journal of a scenario's cluster, run in-process as the
// journal command runs it (zstd segments).
type capture struct {
	id     string
	cancel context.CancelFunc
	done   chan error
}

// startCapture journals f's cluster through cli from base, sealing a
// segment every interval, until stop (or the test's end).
func startCapture(t *testing.T, ctx context.Context, f *mdblocks.Fixture, cli *clientv3.Client, base *catalog.Manifest, interval time.Duration, log *slog.Logger) *capture {
	t.Helper()
	cctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	c := &capture{id: f.ID, cancel: cancel, done: make(chan error, 1)}
	go func() {
		c.done <- journal.Capture(cctx, journal.CaptureOptions{Client: cli, ClusterID: f.ID,
			BaseBackup: base.Name, BaseRev: base.Revision(), Store: f.Store, Layout: f.Layout,
			Encoding: objectio.Encoding{Compression: objectio.CompressZstd}, SegmentInterval: interval, Log: log})
	}()
	return c
}

// stop ends the journal and fails the test if it ended with an error.
func (c *capture) stop(t *testing.T) {
	t.Helper()
	c.cancel()
	if err := <-c.done; err != nil {
		t.Fatalf("the journal of %s: %v", c.id, err)
	}
}
