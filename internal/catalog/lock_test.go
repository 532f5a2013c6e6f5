package catalog

import (
	"testing"
)

func TestParseLockMode(t *testing.T) {
	for in, want := range map[string]LockMode{"": LockOff, "off": LockOff, "governance": LockGovernanceMode,
		"Compliance": LockComplianceMode, "bucket-default": LockBucketDefault} {
		got, err := ParseLockMode(in)
		if err != nil || got != want {
			t.Errorf("ParseLockMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseLockMode("forever"); err == nil {
		t.Error("ParseLockMode(forever): no error")
	}
	if LockGovernanceMode.StoreMode() != "GOVERNANCE" || LockBucketDefault.Explicit() || !LockComplianceMode.Explicit() {
		t.Error("StoreMode/Explicit wrong")
	}
}
