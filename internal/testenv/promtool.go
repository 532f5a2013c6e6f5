package testenv

import (
	"path/filepath"
	"testing"
)

// Promtool returns the path of Prometheus' promtool built by
// `scripts/test-servers.sh promtool` (`make test-servers`):
// .cache/servers/promtool-$PROMTOOL_VERSION/promtool, the version of
// scripts/test-servers.env. Only that one: a promtool on PATH may be any
// version. A test that needs it fails without it, naming `make
// test-servers` (never skips).
func Promtool(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(ServersDir(tb), "promtool-"+ServerVersion(tb, "PROMTOOL_VERSION"))
	return requireExecutable(tb, "promtool", filepath.Join(dir, "promtool"))
}
