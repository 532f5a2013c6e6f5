package restore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A volume listed in ETCD_RECOVERY_VOLUME_LIMITS (the toolkit's /restore
// emptyDir, whose sizeLimit statfs does not show) is checked like the
// scratch space: the needs under it add up against its limit, less what
// is already there, and a restore that would pass the limit (and have the
// pod evicted, its data dirs lost) is refused before anything is written.
func TestVolumeLimits(t *testing.T) {
	root := t.TempDir()
	vol := filepath.Join(root, "restore")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	// 600 KiB already there.
	if err := os.WriteFile(filepath.Join(vol, "old"), make([]byte, 600<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvScratchLimit, "")
	t.Setenv(EnvVolumeLimits, vol+"=1Mi")
	member := func(name string, n int64) SpaceNeed {
		return SpaceNeed{Path: filepath.Join(vol, name), What: "member " + name + "'s data dir", Bytes: n, Hint: HintDataDirs}
	}
	// Three members of 200 KiB each: 600 KiB, over the 424 KiB left.
	err := checkSpace(root, []SpaceNeed{member("m0", 200<<10), member("m1", 200<<10), member("m2", 200<<10)})
	var se *SpaceError
	if !errors.As(err, &se) {
		t.Fatalf("three members over the volume's limit: got %v, want a SpaceError", err)
	}
	for _, want := range []string{"not enough room in the volume " + vol, EnvVolumeLimits + " (" + vol + ")=1.0 MiB",
		"member m0's data dir", "member m2's data dir", "--data-dir-root", "raise the volume's sizeLimit and " + EnvVolumeLimits} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if se.Used < 600<<10 || se.Limit != 1<<20 {
		t.Errorf("used %d limit %d, want used >= 600 KiB and limit 1 MiB", se.Used, se.Limit)
	}
	// Two fit (400 KiB of the 424 left).
	if err := checkSpace(root, []SpaceNeed{member("m0", 200<<10), member("m1", 200<<10)}); err != nil {
		t.Errorf("two members within the limit: %v", err)
	}
	// Elsewhere, the volume's limit does not apply.
	if err := checkSpace(root, []SpaceNeed{{Path: filepath.Join(root, "other"), What: "x", Bytes: 4 << 20}}); err != nil {
		t.Errorf("a need outside the limited volume: %v", err)
	}
	// The scratch limit and a volume limit at once: both named.
	t.Setenv(EnvScratchLimit, "100Ki")
	err = checkSpace(filepath.Join(root, "scratch"), []SpaceNeed{member("m0", 500<<10), {Path: filepath.Join(root, "scratch", "s"), What: "the staged snapshot", Bytes: 200 << 10, Hint: HintScratch}})
	if err == nil || !strings.Contains(err.Error(), EnvScratchLimit+"=") || !strings.Contains(err.Error(), EnvVolumeLimits+" (") {
		t.Errorf("both limits short: %v", err)
	}
}

// A value that cannot be read refuses the run, naming the entry and the
// form (a misconfigured pod is refused, not evicted halfway).
func TestVolumeLimitsBadValue(t *testing.T) {
	t.Setenv(EnvScratchLimit, "")
	for _, v := range []string{"restore=18Gi", "/restore", "/restore=lots", "/restore=-1", "/restore=18Gi,,/x=1Gi"} {
		t.Setenv(EnvVolumeLimits, v)
		err := checkSpace(t.TempDir(), []SpaceNeed{{Path: "/restore/x", What: "x", Bytes: 1}})
		if err == nil || !strings.Contains(err.Error(), EnvVolumeLimits) {
			t.Errorf("%s=%q: got %v, want an error naming it", EnvVolumeLimits, v, err)
		}
	}
}
