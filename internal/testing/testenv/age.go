package testenv

import "testing"

// Age returns the path of the age tool (`age -d -i IDENTITY`) that
// `scripts/test-servers.sh age` unpacked from Debian's age package:
// <test-server cache>/age-debian-$AGE_DEBIAN_VERSION/age, the version of
// scripts/test-servers.env; age-keygen is beside it. Only that one, never
// an age on PATH: the runbook's manual fallback is tested with what a
// Debian host installs. A test that needs it fails without it, naming
// `make test-servers` (never skips).
func Age(tb testing.TB) string {
	tb.Helper()
	return debianTool(tb, "age", "AGE_DEBIAN_VERSION")
}
