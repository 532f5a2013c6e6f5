package runbooks

import (
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
