package testenv

import "testing"

// Promtool returns the path of Prometheus' promtool that
// `scripts/test-servers.sh promtool` (`make test-servers`) unpacked from
// Debian's prometheus package:
// <test-server cache>/promtool-debian-$PROMTOOL_DEBIAN_VERSION/promtool, the
// version of scripts/test-servers.env. Only that one: a promtool on PATH may be any
// version. A test that needs it fails without it, naming `make
// test-servers` (never skips).
func Promtool(tb testing.TB) string {
	tb.Helper()
	return debianTool(tb, "promtool", "PROMTOOL_DEBIAN_VERSION")
}
