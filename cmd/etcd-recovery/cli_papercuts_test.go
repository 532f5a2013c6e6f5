package main

import (
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/restore"
)

// Usage errors of the papercut fixes, decided before the store is
// contacted (port 9 on loopback is never dialled): journal find takes the
// key as its argument, etcdctl's way, and points an etcdctl habit (--key,
// which is etcd's TLS key flag) to it; time flags take RFC 3339 or a
// duration; a bad --initial-cluster names its entry.
func TestPapercutUsageErrors(t *testing.T) {
	t.Parallel()
	cos := []string{"--cos-endpoint", "http://127.0.0.1:9", "--bucket", "b", "--prefix", "p", "--cos-credentials-dir", credsDir(t, "a", "s")}
	find := concatArgs([]string{"journal", "find", "--cluster-id", "c1"}, cos)
	assertUsageErrors(t, find, []usageCase{
		{[]string{"--key", "/registry/pods/ns/x"}, "--key is etcd's TLS client key flag, not the key to look for: give the key as the argument"},
		{[]string{"--key=/registry/pods/ns/x"}, "journal find --cluster-id ID /registry/pods/NS/NAME"},
		{[]string{"/registry/pods/ns/x", "--key", "/registry/pods/ns/y"}, "or --exact-key K"},
		{nil, "give the key as the argument (etcdctl's way"},
		{[]string{"/a", "/b"}, `one key, not 2 (["/a" "/b"])`},
		{[]string{"/a", "--exact-key", "/a"}, "or one of --exact-key and --key-prefix"},
		{[]string{"--exact-key", "/a", "--key-prefix", "/a"}, "or one of --exact-key and --key-prefix"},
		{[]string{"--key-prefix", "/a", "--match-prefix"}, "--match-prefix makes the KEY argument a prefix"},
		{[]string{""}, "the key is empty"},
		{[]string{"/a", "--since"}, "flag needs an argument: --since"},
		{[]string{"/a", "--no-such"}, "flag provided but not defined: -no-such"},
		{[]string{"/a", "--since", "yesterday"}, `journal find: --since "yesterday": want RFC 3339 (2006-01-02T15:04:05Z) or a duration before now (2h, 15m, 1h30m)`},
		{[]string{"--since", "-2h", "/a"}, `--since "-2h": a duration is how long before now, so not negative`},
	})
	restore := concatArgs([]string{"restore", "--cluster-id", "c1", "--no-live", "--initial-cluster", "m0=https://127.0.0.1:9", "--data-dir-root", t.TempDir()}, cos)
	assertUsageErrors(t, restore, []usageCase{
		{[]string{"--to-time", "2h ago"}, `restore: --to-time "2h ago": want RFC 3339 (2006-01-02T15:04:05Z) or a duration before now`},
		// A bad --initial-cluster names the entry and the form.
		{[]string{"--initial-cluster", "m0=https://127.0.0.1:2380,m1=127.0.0.2:2380"},
			`--initial-cluster: entry 2 "m1=127.0.0.2:2380": peer URL "127.0.0.2:2380" has no scheme (https:// or http://); want name=https://host:2380[,name=https://host:2380...]`},
	})
}

// A time flag is RFC 3339 or a duration before now.
func TestParseTimeFlag(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2h":                          now.Add(-2 * time.Hour),
		"15m":                         now.Add(-15 * time.Minute),
		"1h30m":                       now.Add(-90 * time.Minute),
		"0s":                          now,
		" 90s ":                       now.Add(-90 * time.Second),
		"2026-01-02T15:04:05Z":        time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC),
		"2026-01-02T15:04:05.5+01:00": time.Date(2026, 1, 2, 14, 4, 5, 5e8, time.UTC),
	} {
		got, err := parseTimeFlag("c", "since", in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "2", "2d", "-1m", "2026-01-02", "now"} {
		if _, err := parseTimeFlag("c", "since", in, now); err == nil || !strings.Contains(err.Error(), "--since") {
			t.Errorf("%q: want an error naming --since, got %v", in, err)
		}
	}
}

// The size flags and settings read sizes one way (internal/bytesize):
// journal's --segment-size and --memory-budget, --cos-min-throughput's
// size and the scratch limit agree on each form, KiB 1024-based and KB
// 1000-based.
func TestSizesOneParser(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"64KiB": 64 << 10, "64Ki": 64 << 10, "64KB": 64_000, "64k": 64_000, "4MiB": 4 << 20, "4MB": 4_000_000, "65536": 65536} {
		seg, err := parseSegmentSize(in)
		if err != nil || int64(seg) != want {
			t.Errorf("--segment-size %s: %d, %v; want %d", in, seg, err, want)
		}
		tp, err := cos.ParseThroughput(in + "/60s")
		if err != nil || tp.Bytes != want {
			t.Errorf("--cos-min-throughput %s/60s: %d, %v; want %d", in, tp.Bytes, err, want)
		}
		lim, err := restore.ParseScratchLimit(in)
		if err != nil || lim != want {
			t.Errorf("%s=%s: %d, %v; want %d", restore.EnvScratchLimit, in, lim, err, want)
		}
	}
	if _, err := parseSegmentSize("2GiB"); err == nil || !strings.Contains(err.Error(), "at most 1GiB") {
		t.Errorf("--segment-size 2GiB: %v", err)
	}
}
