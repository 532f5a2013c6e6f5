package runbooks

import (
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
)

// parseAll parses every runbook of this directory (headings, links, ```sh
// blocks and their annotations: internal/testing/mdblocks, the harness the
// documentation's tests share).
func parseAll(tb testing.TB) mdblocks.Set {
	tb.Helper()
	return mdblocks.ParseDir(tb, ".", "runbooks/")
}
