package runbooks

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
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
