package docs

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/metrics"
	"github.com/armada/etcd-recovery/replicate"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/undelete"
)

// numberCheck pins a number an SRE acts on, stated in a document, to the Go
// value it describes: phrase is a regular expression over the document's
// text with its whitespace collapsed to single spaces (so a phrase may span
// a line break), each group one number. Every match must agree, and there
// must be at least one: a phrase that no longer matches fails too, so
// that a reworded sentence is pinned again rather than silently dropped.
type numberCheck struct {
	what   string // the Go value, as the code names it
	file   string // relative to the repository's root
	phrase string
	want   []string // one per group
	// verify, when set, judges the groups instead of want (a formula).
	verify func(groups []string) error
}

// seconds, minutes, hours and days render a duration as the documents
// write it ("4.4", "5", "168").
func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }
func minutes(d time.Duration) string { return strconv.FormatFloat(d.Minutes(), 'f', -1, 64) }
func hours(d time.Duration) string   { return strconv.FormatFloat(d.Hours(), 'f', -1, 64) }
func days(d time.Duration) string    { return strconv.FormatFloat(d.Hours()/24, 'f', -1, 64) }

// flagDuration renders a duration as a flag's value is written in the
// documents: "10m", "3h30m", "168h", "3s".
func flagDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// withCommas writes n as the documents do: 1,000,000,000.
func withCommas(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// jitteredRetry is the longest wait between two tries of a leader
// election candidate: client-go's wait.JitterUntil stretches RetryPeriod
// by up to JitterFactor of itself.
func jitteredRetry() time.Duration {
	d := float64(kube.DefaultRetryPeriod) * (1 + leaderelection.JitterFactor)
	return time.Duration(math.Round(d/float64(100*time.Millisecond))) * 100 * time.Millisecond
}

// takeoverBound is the documented bound for a follower to take the Lease
// after the leader dies: it saw the last renewal by its next retry, waits
// LeaseDuration, and takes the Lease at the retry after.
func takeoverBound() time.Duration { return kube.DefaultLeaseDuration + 2*jitteredRetry() }

// startTimeoutFormula checks the documented default start timeout of a
// drill's etcd ("X min plus Y s per Z MiB of database") against
// drill.DefaultStartTimeout at several database sizes.
func startTimeoutFormula(g []string) error {
	base, err1 := strconv.Atoi(g[0])
	per, err2 := strconv.Atoi(g[1])
	mib, err3 := strconv.Atoi(g[2])
	if err1 != nil || err2 != nil || err3 != nil || mib == 0 {
		return fmt.Errorf("cannot read the formula %q", g)
	}
	for _, size := range []int64{0, 4 << 20, 100 << 20, 1229 << 20, 8 << 30} {
		doc := time.Duration(base)*time.Minute + time.Duration(size/(int64(mib)<<20)*int64(per))*time.Second
		if code := drill.DefaultStartTimeout(size); doc != code {
			return fmt.Errorf("for a %d MiB database the document's formula gives %s, drill.DefaultStartTimeout %s", size>>20, doc, code)
		}
	}
	return nil
}

// restoreParallelFormula checks the documented restore-all default
// parallelism against fleet.DefaultRestoreParallel: the per-restore and
// base memory, the share of the limit, the bound, the toolkit pod's
// answer, and the restores a CPU (a quarter of a CPU each).
func restoreParallelFormula(g []string) error {
	n := make([]int64, len(g))
	for i, s := range g {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("cannot read %q in %q", s, g)
		}
		n[i] = v
	}
	per, base, share, most, cpus, mem, toolkit, perCPU := n[0]<<20, n[1]<<20, n[2], n[3], n[4], n[5]<<20, n[6], n[7]
	if per != fleet.RestoreMemBytesPerCluster || base != fleet.RestoreBaseMemBytes || share != fleet.RestoreMemShare ||
		most != fleet.MaxRestoreParallel || perCPU != 1000/fleet.RestoreCPUMilliPerCluster {
		return fmt.Errorf("the document says %d MiB a restore, %d MiB base, %d %%, at most %d, %d per CPU; the code %d MiB, %d MiB, %d %%, %d, %d",
			per>>20, base>>20, share, most, perCPU, fleet.RestoreMemBytesPerCluster>>20, fleet.RestoreBaseMemBytes>>20, fleet.RestoreMemShare,
			fleet.MaxRestoreParallel, 1000/fleet.RestoreCPUMilliPerCluster)
	}
	if got := fleet.DefaultRestoreParallel(cpus*1000, mem); int64(got) != toolkit {
		return fmt.Errorf("the document says the toolkit pod (%d CPUs, %d MiB) gets %d; fleet.DefaultRestoreParallel gives %d", cpus, mem>>20, toolkit, got)
	}
	return nil
}

// numberChecks are the numbers an SRE acts on that a document states and
// the code defines.
func numberChecks() []numberCheck {
	lease, renew, retry := seconds(kube.DefaultLeaseDuration), seconds(kube.DefaultRenewDeadline), seconds(kube.DefaultRetryPeriod)
	jitter := strconv.FormatFloat(1+leaderelection.JitterFactor, 'f', -1, 64)
	segment := seconds(journal.DefaultSegmentInterval)
	lagRatio := int(inspect.DefaultJournalLagBound / journal.DefaultSegmentInterval)
	words := map[int]string{10: "ten"}
	return []numberCheck{
		// restore-all's default parallelism (the formula is in
		// fleet.DefaultRestoreParallel; the document's numbers give it).
		{what: "fleet.DefaultRestoreParallel", file: "docs/restore.md",
			phrase: `about a quarter of a CPU .* and (\d+) MiB beside a (\d+) MiB base, within (\d+) % of the memory limit; the smaller of the two bounds, at least 1 and at most (\d+)\. The toolkit pod \((\d+) CPUs, (\d+) MiB\) gets (\d+); with no limits, (\d+) per CPU`,
			verify: restoreParallelFormula},
		{what: "fleet.DefaultRestoreParallel", file: "runbooks/namespace-restore.md", phrase: `\((\d+) for its (\d+) CPUs and (\d+) MiB:`,
			verify: func(g []string) error {
				n, _ := strconv.Atoi(g[0])
				cpus, _ := strconv.ParseInt(g[1], 10, 64)
				mib, _ := strconv.ParseInt(g[2], 10, 64)
				if got := fleet.DefaultRestoreParallel(cpus*1000, mib<<20); got != n {
					return fmt.Errorf("the runbook says %d for %d CPUs and %d MiB; fleet.DefaultRestoreParallel gives %d", n, cpus, mib, got)
				}
				return nil
			}},
		{what: "fleet.DefaultRestoreFixedCost", file: "docs/restore.md", phrase: "fixed cost \\(`--fixed-cost`, (\\d+) s\\)",
			want: []string{seconds(fleet.DefaultRestoreFixedCost)}},
		{what: "fleet.DefaultRestoreFixedCost", file: "runbooks/namespace-restore.md", phrase: "\\(`--fixed-cost`, (\\d+) s:",
			want: []string{seconds(fleet.DefaultRestoreFixedCost)}},
		{what: "fleet.DefaultClusterTimeout", file: "runbooks/namespace-restore.md", phrase: "\\(`--cluster-timeout`, (\\d+) min\\)",
			want: []string{minutes(fleet.DefaultClusterTimeout)}},
		// The exporter.
		{what: "metrics.DefaultInterval", file: "docs/metrics.md", phrase: "Every `--interval` \\((\\d+) min, ±(\\d+) % jitter\\)",
			want: []string{minutes(metrics.DefaultInterval), strconv.FormatFloat(metrics.DefaultJitter*100, 'f', -1, 64)}},
		{what: "metrics.DefaultInterval", file: "docs/flags.md", phrase: `refreshed every (\d+) min`, want: []string{minutes(metrics.DefaultInterval)}},
		{what: "metrics.DefaultDeadline", file: "docs/metrics.md", phrase: "`--refresh-timeout` \\((\\d+) min\\)", want: []string{minutes(metrics.DefaultDeadline)}},

		// inspect's probe timeout and freshness bounds.
		{what: "inspect.DefaultTimeout", file: "docs/inspect.md", phrase: "one `--probe-timeout` \\((\\w+)\\)", want: []string{flagDuration(inspect.DefaultTimeout)}},
		{what: "inspect.DefaultTimeout", file: "docs/inspect.md", phrase: `\[--probe-timeout (\w+)\]`, want: []string{flagDuration(inspect.DefaultTimeout)}},
		{what: "inspect.DefaultMaxBackupAge", file: "docs/inspect.md", phrase: "`--max-backup-age` \\((\\d+) h,", want: []string{hours(inspect.DefaultMaxBackupAge)}},
		{what: "inspect.DefaultMaxBackupAge, inspect.DefaultMaxDrillAge", file: "docs/inspect.md", phrase: `\[--max-backup-age (\w+)\] \[--max-drill-age (\w+)\]`,
			want: []string{flagDuration(inspect.DefaultMaxBackupAge), flagDuration(inspect.DefaultMaxDrillAge)}},
		{what: "inspect.DefaultMaxDrillAge", file: "docs/inspect.md", phrase: "`--max-drill-age` \\((\\d+) h\\)", want: []string{hours(inspect.DefaultMaxDrillAge)}},
		{what: "inspect.DefaultMaxDrillAge", file: "docs/drills.md", phrase: "`--max-drill-age` (\\d+) h", want: []string{hours(inspect.DefaultMaxDrillAge)}},
		{what: "fleet.DefaultInspectParallel, inspect.DefaultTimeout", file: "docs/inspect.md", phrase: `inspect --all \[--namespace NS\] \[--parallel (\d+)\] \[--probe-timeout (\w+)\]`,
			want: []string{strconv.Itoa(fleet.DefaultInspectParallel), flagDuration(inspect.DefaultTimeout)}},

		// The journal: the segment interval (its RPO), the lag bound, the
		// memory budget, rediscovery, retention.
		{what: "journal.DefaultSegmentInterval", file: "README.md", phrase: `to COS in (\d+) s segments`, want: []string{segment}},
		{what: "journal.DefaultSegmentInterval", file: "docs/flags.md", phrase: `\[--segment-interval (\w+)\]`, want: []string{flagDuration(journal.DefaultSegmentInterval)}},
		{what: "journal.DefaultSegmentInterval", file: "docs/restore-pitr.md", phrase: "`--segment-interval` old \\(default (\\d+) s\\)", want: []string{segment}},
		{what: "journal.DefaultSegmentInterval", file: "docs/fault-matrix.md", phrase: "\\(`--segment-interval` (\\d+) s,", want: []string{segment}},
		{what: "inspect.DefaultJournalLagBound, journal.DefaultSegmentInterval", file: "docs/inspect.md",
			phrase: "past `--journal-lag-bound` \\((\\w+): (\\w+) times the journal's default (\\d+) s",
			want:   []string{flagDuration(inspect.DefaultJournalLagBound), words[lagRatio], segment}},
		{what: "inspect.DefaultJournalLagBound, journal.DefaultSegmentInterval", file: "docs/metrics.md",
			phrase: `received over (\d+) min ago \((\d+) × the (\d+) s segment interval`,
			want:   []string{minutes(inspect.DefaultJournalLagBound), strconv.Itoa(lagRatio), segment}},
		{what: "journal.DefaultMemoryBudget", file: "docs/journal.md", phrase: "`--memory-budget` \\((\\d+) MiB\\)", want: []string{strconv.Itoa(journal.DefaultMemoryBudget >> 20)}},
		{what: "journal.DefaultMemoryBudget", file: "docs/flags.md", phrase: `\[--memory-budget (\d+)MiB\]`, want: []string{strconv.Itoa(journal.DefaultMemoryBudget >> 20)}},
		{what: "fleet.DefaultRediscover", file: "docs/journal.md", phrase: "`--rediscover` \\(default (\\w+)\\)", want: []string{flagDuration(fleet.DefaultRediscover)}},
		{what: "fleet.DefaultRediscover", file: "docs/flags.md", phrase: `\[--rediscover (\w+)\]`, want: []string{flagDuration(fleet.DefaultRediscover)}},
		{what: "retention.DefaultJournalRetention", file: "docs/flags.md", phrase: `\[--journal-retention (\w+)\]`, want: []string{flagDuration(retention.DefaultJournalRetention)}},
		{what: "retention.DefaultJournalRetention", file: "docs/backup.md", phrase: `back \((\d+)h, (\d+) days;`, want: []string{hours(retention.DefaultJournalRetention), days(retention.DefaultJournalRetention)}},
		{what: "prune.DefaultClockTolerance", file: "docs/backup.md", phrase: `from the store's own clock by more than (\d+) min`, want: []string{minutes(prune.DefaultClockTolerance)}},
		{what: "retention.DefaultJournalRetention", file: "docs/restore-pitr.md", phrase: "`--journal-retention` back \\((\\d+) days\\)", want: []string{days(retention.DefaultJournalRetention)}},
		{what: "journal.UnknownLeaseTTL", file: "docs/restore-internals.md", phrase: "with an (hour)'s TTL \\(`journal.UnknownLeaseTTL`\\)",
			want: []string{map[int]string{3600: "hour"}[journal.UnknownLeaseTTL]}},

		// One writer per cluster: the Lease's timings and the takeover
		// bounds they give.
		{what: "kube.DefaultLeaseDuration, kube.DefaultRenewDeadline, kube.DefaultRetryPeriod", file: "docs/kubernetes.md",
			phrase: `LeaseDuration (\d+) s, RenewDeadline (\d+) s, RetryPeriod (\d+) s`, want: []string{lease, renew, retry}},
		{what: "leaderelection.JitterFactor", file: "docs/kubernetes.md", phrase: `at most ([\d.]+) times \(([\d.]+) s\)`, want: []string{jitter, seconds(jitteredRetry())}},
		{what: "the takeover bound", file: "docs/kubernetes.md", phrase: `at most (\d+) s \+ 2 × ([\d.]+) s = ([\d.]+) s after the death`,
			want: []string{lease, seconds(jitteredRetry()), seconds(takeoverBound())}},
		{what: "the takeover bound", file: "docs/kubernetes.md", phrase: `holds the Lease within ([\d.]+) s and writes`, want: []string{seconds(takeoverBound())}},
		{what: "the clean-stop takeover bound", file: "docs/kubernetes.md", phrase: `holds the Lease within ([\d.]+) s of its exit`, want: []string{seconds(jitteredRetry())}},
		{what: "the takeover bounds", file: "docs/flags.md", phrase: `takes over within ([\d.]+) s of the leader's death, within ([\d.]+) s of its clean stop`,
			want: []string{seconds(takeoverBound()), seconds(jitteredRetry())}},
		{what: "kube.DefaultRenewDeadline, the takeover bounds", file: "docs/journal.md",
			phrase: `not renewed within (\d+) s; a follower takes over within ([\d.]+) s of the leader's death, within ([\d.]+) s of a clean stop`,
			want:   []string{renew, seconds(takeoverBound()), seconds(jitteredRetry())}},
		{what: "kube.DefaultRenewDeadline", file: "docs/kubernetes.md", phrase: `renewal started RenewDeadline \((\d+) s\)`, want: []string{renew}},
		{what: "kube.DefaultLeaseDuration - kube.DefaultRenewDeadline", file: "docs/kubernetes.md",
			phrase: `waits LeaseDuration \((\d+) s\) from the last renewal it saw, a leader stops writing at least (\d+) s before`,
			want:   []string{lease, seconds(kube.DefaultLeaseDuration - kube.DefaultRenewDeadline)}},
		{what: "journal.DefaultFinalFlush", file: "docs/kubernetes.md", phrase: "`journal.DefaultFinalFlush` \\((\\d+) s\\)", want: []string{seconds(journal.DefaultFinalFlush)}},

		// Drills, proofs, restores, the store.
		{what: "drill.DefaultStartTimeout", file: "docs/drills.md", phrase: "`--start-timeout` bounds its start \\(default (\\d+) min plus (\\d+) s per (\\d+) MiB of database",
			verify: startTimeoutFormula},
		{what: "drill.DefaultProveTimeout", file: "docs/restore-pitr.md", phrase: "`--timeout` \\((\\d+) min\\) bounds it", want: []string{minutes(drill.DefaultProveTimeout)}},
		{what: "drill.DefaultProveTimeout", file: "docs/journal.md", phrase: `\((\d+) min\) bounds each proof`, want: []string{minutes(drill.DefaultProveTimeout)}},
		{what: "restore.DefaultBumpRevision", file: "docs/restore.md", phrase: "`--bump-revision` \\(default ([\\d,]+)\\)", want: []string{withCommas(restore.DefaultBumpRevision)}},
		{what: "restore.DefaultBumpRevision", file: "docs/restore-internals.md", phrase: "`--bump-revision` \\(default ([\\d,]+)\\)", want: []string{withCommas(restore.DefaultBumpRevision)}},
		{what: "restore.DefaultBumpRevision", file: "docs/journal.md", phrase: "\\(`--bump-revision`, ([\\d,]+), marked compacted\\)", want: []string{withCommas(restore.DefaultBumpRevision)}},
		{what: "restore.DefaultBumpRevision", file: "docs/restore-pitr.md", phrase: `bumped by ([\d,]+) and marked compacted`, want: []string{withCommas(restore.DefaultBumpRevision)}},
		{what: "kube.DefaultOperatorRestoreTimeout", file: "docs/restore.md", phrase: "`--wait-timeout` \\((\\w+)\\)", want: []string{flagDuration(kube.DefaultOperatorRestoreTimeout)}},
		{what: "kube.DefaultOperatorRestoreTimeout", file: "docs/restore-internals.md", phrase: `\[--wait-timeout (\w+)\]`, want: []string{flagDuration(kube.DefaultOperatorRestoreTimeout)}},
		{what: "kube.StagedRemoveTimeout", file: "docs/restore-internals.md", phrase: `with a fresh (\d+) s deadline`, want: []string{seconds(kube.StagedRemoveTimeout)}},
		{what: "store.DefaultStallTimeout", file: "docs/backup.md", phrase: "`--cos-stall-timeout` \\(default (\\d+) s\\)", want: []string{seconds(store.DefaultStallTimeout)}},
		{what: "store.DefaultStallTimeout", file: "docs/flags.md", phrase: "`--cos-stall-timeout` \\(`COS_STALL_TIMEOUT`, default (\\w+):", want: []string{flagDuration(store.DefaultStallTimeout)}},
	}
}

var spaceRE = regexp.MustCompile(`\s+`)

// sameDuration: a and b are Go durations ("60s", "1m") of the same length.
func sameDuration(a, b string) bool {
	da, err1 := time.ParseDuration(a)
	db, err2 := time.ParseDuration(b)
	return err1 == nil && err2 == nil && da == db
}

// checkNumber returns why text (a document's) does not state c's number
// as the code has it, or nil.
func checkNumber(text string, c numberCheck) error {
	re, err := regexp.Compile(c.phrase)
	if err != nil {
		return fmt.Errorf("%s: phrase %q: %v", c.file, c.phrase, err)
	}
	ms := re.FindAllStringSubmatch(spaceRE.ReplaceAllString(text, " "), -1)
	if len(ms) == 0 {
		return fmt.Errorf("%s: no text matches %q, which states %s: pin the sentence that states it again (numbers_test.go)", c.file, c.phrase, c.what)
	}
	for _, m := range ms {
		got := m[1:]
		if c.verify != nil {
			if err := c.verify(got); err != nil {
				return fmt.Errorf("%s: %q: %v (%s)", c.file, m[0], err, c.what)
			}
			continue
		}
		if len(got) != len(c.want) {
			return fmt.Errorf("%s: phrase %q has %d numbers, want %d", c.file, c.phrase, len(got), len(c.want))
		}
		for i := range got {
			if got[i] != c.want[i] && !sameDuration(got[i], c.want[i]) {
				return fmt.Errorf("%s: %q says %s, the code (%s) %s", c.file, m[0], got[i], c.what, c.want[i])
			}
		}
	}
	return nil
}

// TestDocNumbersMatchCode: every number an SRE acts on that a document
// states (the exporter's refresh, the probe timeout, the drill's start
// timeout, the journal's segment interval, the Lease's timings and the
// takeover bounds, retention, the revision bump...) is the one the code
// has.
func TestDocNumbersMatchCode(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..")
	texts := map[string]string{}
	values := map[string]bool{}
	checks := numberChecks()
	for _, c := range checks {
		if _, ok := texts[c.file]; !ok {
			b, err := os.ReadFile(filepath.Join(root, c.file))
			if err != nil {
				t.Fatal(err)
			}
			texts[c.file] = string(b)
		}
		for _, w := range c.want {
			if w == "" {
				t.Errorf("%s: %s has no rendering for the documents (numbers_test.go)", c.file, c.what)
			}
		}
		if err := checkNumber(texts[c.file], c); err != nil {
			t.Error(err)
		}
		values[c.what] = true
	}
	if len(values) < 6 {
		t.Fatalf("only %d values checked", len(values))
	}
	t.Logf("%d statements of %d values in %d files checked", len(checks), len(values), len(texts))
}

// TestDocNumbersCheckerFails: the check fails on a wrong number, on a
// phrase that no longer matches and on a formula that disagrees, and
// passes the right text.
func TestDocNumbersCheckerFails(t *testing.T) {
	t.Parallel()
	c := numberCheck{what: "x", file: "x.md", phrase: `every (\d+) min`, want: []string{"5"}}
	for text, ok := range map[string]bool{
		"refreshed every\n  5 min, and":            true,
		"refreshed every 6 min":                    false,
		"refreshed every 5 min, later every 6 min": false,
		"refreshed each 5 min":                     false,
	} {
		if err := checkNumber(text, c); (err == nil) != ok {
			t.Errorf("%q: %v, want ok=%v", text, err, ok)
		}
	}
	f := numberCheck{what: "drill.DefaultStartTimeout", file: "x.md", phrase: `default (\d+) min plus (\d+) s per (\d+) MiB`, verify: startTimeoutFormula}
	for text, ok := range map[string]bool{
		"default 2 min plus 1 s per 4 MiB":  true,
		"default 2 min plus 1 s per 16 MiB": false,
		"default 3 min plus 1 s per 4 MiB":  false,
	} {
		if err := checkNumber(text, f); (err == nil) != ok {
			t.Errorf("%q: %v, want ok=%v", text, err, ok)
		}
	}
	d := numberCheck{what: "y", file: "x.md", phrase: `default (\w+)\)`, want: []string{"1m"}}
	if err := checkNumber("(default 60s)", d); err != nil {
		t.Errorf("60s and 1m: %v", err)
	}
	if err := checkNumber("(default 61s)", d); err == nil {
		t.Errorf("61s and 1m agree")
	}
	if got := flagDuration(3*time.Hour + 30*time.Minute); got != "3h30m" {
		t.Errorf("flagDuration(3h30m) = %s", got)
	}
	if got := withCommas(1_000_000_000); got != "1,000,000,000" {
		t.Errorf("withCommas = %s", got)
	}
}

// helpDefault finds a flag's default in urfave/cli's help: on the flag's
// line, "(default: 3s)".
func helpDefault(help, flag string) (string, bool) {
	re := regexp.MustCompile(`(?m)^\s*--` + regexp.QuoteMeta(flag) + `[ ,].*\(default: ([^)]*)\)`)
	m := re.FindStringSubmatch(help)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// TestDocFlagDefaults: the defaults the binary's --help shows for the flags
// whose numbers the documents state (some are constants of the command
// itself, which no test can import) are the documents' and the packages'.
func TestDocFlagDefaults(t *testing.T) {
	t.Parallel()
	tool := testfix.Tool(t)
	type flagCheck struct {
		cmd  []string
		flag string
		want string // the package's constant, as a flag's value; "" when only the command holds it
		file string // a document that states the default, with phrase
		doc  string
	}
	d := flagDuration
	checks := []flagCheck{
		{[]string{"inspect"}, "probe-timeout", d(inspect.DefaultTimeout), "docs/inspect.md", `\[--probe-timeout (\w+)\]`},
		{[]string{"restore"}, "probe-timeout", d(inspect.DefaultTimeout), "docs/flags.md", "`--probe-timeout` bounds one probe of a member \\((\\w+)\\)"},
		{[]string{"restore"}, "timeout", "", "docs/restore.md", "`--timeout` \\(default (\\w+)\\)"},
		{[]string{"restore"}, "timeout", "", "docs/flags.md", "`--timeout` is the run's overall deadline \\((\\w+);"},
		{[]string{"backup"}, "timeout", "", "docs/backup.md", "`--timeout` \\(default (\\w+):"},
		{[]string{"backup"}, "timeout", "", "docs/flags.md", "`backup`'s (\\w+), its drills and prune"},
		{[]string{"backup"}, "parallel", strconv.Itoa(fleet.DefaultParallel), "docs/flags.md", `\((\d+) for backup and inspect:`},
		{[]string{"backup"}, "drill-parallel", "", "docs/drills.md", "`--drill-parallel` \\((\\d+)\\) at a time"},
		{[]string{"backup"}, "cos-stall-timeout", d(store.DefaultStallTimeout), "", ""},
		{[]string{"serve"}, "interval", d(metrics.DefaultInterval), "", ""},
		{[]string{"serve"}, "refresh-timeout", d(metrics.DefaultDeadline), "", ""},
		{[]string{"journal"}, "segment-interval", d(journal.DefaultSegmentInterval), "", ""},
		{[]string{"journal"}, "rediscover", d(fleet.DefaultRediscover), "", ""},
		{[]string{"restore"}, "wait-timeout", d(kube.DefaultOperatorRestoreTimeout), "", ""},
		{[]string{"inspect"}, "journal-lag-bound", d(inspect.DefaultJournalLagBound), "", ""},
		{[]string{"restore-all"}, "cluster-timeout", d(fleet.DefaultClusterTimeout), "docs/flags.md", `\[--cluster-timeout (\w+)\]`},
		{[]string{"restore-all"}, "fixed-cost", d(fleet.DefaultRestoreFixedCost), "docs/flags.md", `\[--fixed-cost (\w+)\]`},
		{[]string{"replicate"}, "journal-interval", d(replicate.DefaultJournalInterval), "docs/second-site.md", "`--journal-interval` \\(default (\\w+)\\)"},
		{[]string{"replicate"}, "scan-interval", d(replicate.DefaultScanInterval), "docs/second-site.md", "`--scan-interval` \\(default (\\w+)\\)"},
		{[]string{"replicate"}, "audit-interval", d(replicate.DefaultAuditInterval), "docs/second-site.md", "`--audit-interval` \\(default (\\w+)\\)"},
		{[]string{"replicate"}, "audit-interval", d(replicate.DefaultAuditInterval), "docs/flags.md", `\[--audit-interval (\w+)\] \[--status-every`},
		{[]string{"replicate"}, "status-every", d(replicate.DefaultStatusEvery), "docs/second-site.md", "`--status-every` \\(default (\\w+)\\)"},
		{[]string{"replicate"}, "copy-parallel", strconv.Itoa(replicate.DefaultParallel), "docs/flags.md", `\[--copy-parallel (\d+)\] \[--second-lock-mode`},
		{[]string{"undelete"}, "max-txn-ops", strconv.Itoa(undelete.DefaultMaxTxnOps), "docs/undelete.md", "`--max-txn-ops` keys \\(default (\\d+),"},
		{[]string{"undelete"}, "max-txn-ops", strconv.Itoa(undelete.DefaultMaxTxnOps), "docs/flags.md", `\[--max-txn-ops (\d+)\] \[--max-txn-bytes`},
		{[]string{"undelete"}, "settle", d(undelete.DefaultSettle), "docs/undelete.md", "`--settle` \\(default (\\w+),"},
		{[]string{"undelete"}, "settle", d(undelete.DefaultSettle), "docs/flags.md", `\[--settle (\w+)\] \[--operator`},
	}
	helps := map[string]string{}
	for _, c := range checks {
		key := strings.Join(c.cmd, " ")
		help, ok := helps[key]
		if !ok {
			out, errOut, code := testfix.RunTool(t, t.Context(), tool, nil, append(c.cmd, "--help")...)
			if code != 0 {
				t.Fatalf("etcd-recovery %s --help: exit %d: %s", key, code, errOut)
			}
			help, helps[key] = out, out
		}
		got, ok := helpDefault(help, c.flag)
		if !ok {
			t.Errorf("etcd-recovery %s --help shows no default for --%s", key, c.flag)
			continue
		}
		if c.want != "" && got != c.want && !sameDuration(got, c.want) {
			t.Errorf("etcd-recovery %s --%s defaults to %s, the package's constant is %s", key, c.flag, got, c.want)
		}
		if c.file == "" {
			continue
		}
		if dur, err := time.ParseDuration(got); err == nil {
			got = flagDuration(dur)
		}
		b, err := os.ReadFile(filepath.Join("..", c.file))
		if err != nil {
			t.Fatal(err)
		}
		dc := numberCheck{what: "etcd-recovery " + key + " --" + c.flag, file: c.file, phrase: c.doc, want: []string{got}}
		if err := checkNumber(string(b), dc); err != nil {
			t.Error(err)
		}
	}
}
