package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

const stream = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestOK"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"quiet when it passes\n"}
{"Action":"pass","Package":"m/a","Test":"TestOK","Elapsed":3.5}
{"Action":"run","Package":"m/a","Test":"TestBad"}
{"Action":"run","Package":"m/a","Test":"TestBad/sub"}
{"Action":"output","Package":"m/a","Test":"TestBad/sub","Output":"    bad_test.go:9: the revision moved\n"}
{"Action":"fail","Package":"m/a","Test":"TestBad/sub","Elapsed":1}
{"Action":"fail","Package":"m/a","Test":"TestBad","Elapsed":1.2}
{"Action":"output","Package":"m/a","Output":"FAIL\n"}
{"Action":"fail","Package":"m/a","Elapsed":5}
{"Action":"start","Package":"m/b"}
{"Action":"run","Package":"m/b","Test":"TestSlow"}
{"Action":"pass","Package":"m/b","Test":"TestSlow","Elapsed":42}
{"Action":"pass","Package":"m/b","Elapsed":43}
`

func TestReportFailure(t *testing.T) {
	var out strings.Builder
	ok, err := run(strings.NewReader(stream), &out, nil)
	if err != nil || ok {
		t.Fatalf("run = %v, %v; want a failed run", ok, err)
	}
	s := out.String()
	for _, want := range []string{"FAIL  m/a", "ok    m/b", "the revision moved", "42.0s  m/b TestSlow", "FAILED: 1 packages, tests: m/a TestBad/sub, m/a TestBad"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "quiet when it passes") {
		t.Errorf("a passing test's output was printed:\n%s", s)
	}
	// Once in the output, once in the causes at the end.
	body, why, _ := strings.Cut(s, "Why they failed")
	if strings.Count(body, "the revision moved") != 1 || strings.Count(why, "the revision moved") != 1 {
		t.Errorf("a failed subtest's output is printed once and its cause once at the end, not %d and %d times:\n%s",
			strings.Count(body, "the revision moved"), strings.Count(why, "the revision moved"), s)
	}
	// The slowest tests come first.
	if i, j := strings.Index(s, "m/b TestSlow"), strings.Index(s, "m/a TestOK"); i < 0 || j < 0 || i > j {
		t.Errorf("slowest tests out of order:\n%s", s)
	}
}

func TestReportSkipAndCut(t *testing.T) {
	skip := `{"Action":"run","Package":"m/c","Test":"TestNeedsServer"}
{"Action":"output","Package":"m/c","Test":"TestNeedsServer","Output":"    no MinIO\n"}
{"Action":"skip","Package":"m/c","Test":"TestNeedsServer","Elapsed":0}
{"Action":"pass","Package":"m/c","Elapsed":0.1}
{"Action":"skip","Package":"m/nothing","Elapsed":0}
`
	var out strings.Builder
	if ok, _ := run(strings.NewReader(skip), &out, nil); ok {
		t.Fatalf("a skipped test passed the run:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "SKIPPED (make test skips nothing") || !strings.Contains(out.String(), "no MinIO") {
		t.Errorf("skip not reported with its reason:\n%s", out.String())
	}
	out.Reset()
	cut := `{"Action":"start","Package":"m/d"}
{"Action":"run","Package":"m/d","Test":"TestLong"}
`
	if ok, _ := run(strings.NewReader(cut), &out, nil); ok || !strings.Contains(out.String(), "m/d: no end reported") {
		t.Errorf("a cut stream passed or was not named:\n%s", out.String())
	}
	out.Reset()
	green := `{"Action":"run","Package":"m/e","Test":"TestA"}
{"Action":"pass","Package":"m/e","Test":"TestA","Elapsed":0.1}
{"Action":"pass","Package":"m/e","Elapsed":0.2}
{"Action":"skip","Package":"m/notests","Elapsed":0}
`
	if ok, _ := run(strings.NewReader(green), &out, nil); !ok {
		t.Errorf("a green run (and a package without tests) failed:\n%s", out.String())
	}
}

func TestReportBuildFailure(t *testing.T) {
	in := `{"ImportPath":"m/f [m/f.test]","Action":"build-output","Output":"# m/f\n./f.go:3:1: syntax error\n"}
{"ImportPath":"m/f [m/f.test]","Action":"build-fail"}
{"Action":"start","Package":"m/f"}
{"Action":"output","Package":"m/f","Output":"FAIL\tm/f [build failed]\n"}
{"Action":"fail","Package":"m/f","Elapsed":0,"FailedBuild":"m/f [m/f.test]"}
`
	var out strings.Builder
	if ok, _ := run(strings.NewReader(in), &out, nil); ok || !strings.Contains(out.String(), "syntax error") {
		t.Errorf("a build failure passed or its error was not printed:\n%s", out.String())
	}
}

// TestReportWhyAtTheEnd: a failed test whose fatal message is followed by
// hundreds of lines of server logs (a cleanup's dump) still shows its
// cause in the last lines of the report, the part of a CI log that is
// read; a parent whose subtest failed adds no second entry.
func TestReportWhyAtTheEnd(t *testing.T) {
	var in strings.Builder
	ev := func(test, out string) {
		b, _ := json.Marshal(event{Action: "output", Package: "m/k", Test: test, Output: out})
		in.Write(b)
		in.WriteString("\n")
	}
	in.WriteString(`{"Action":"run","Package":"m/k","Test":"TestLeader"}` + "\n")
	in.WriteString(`{"Action":"run","Package":"m/k","Test":"TestLeader/Failover"}` + "\n")
	ev("TestLeader/Failover", "    leader_test.go:297: leader SIGKILLed: held 14.4s later\n")
	ev("TestLeader/Failover", "    leader_test.go:318: journal-b stopped by SIGTERM: exit 1, want 0:\n")
	ev("TestLeader/Failover", "        journal: fenced: not the leader\n")
	ev("TestLeader/Failover", "        journal: exiting\n")
	ev("TestLeader/Failover", "    leader_test.go:376: kubectl exec toolkit -- etcd-recovery restore: exit 1 in 1m31s\n")
	ev("TestLeader/Failover", "        Restore of etcdcluster kubx-etcd-12/etcd-big via etcd-operator\n")
	ev("TestLeader/Failover", "        Survivor: none (--no-live).\n")
	ev("TestLeader/Failover", "        │ BACKUP │ REVISION │\n")
	ev("TestLeader/Failover", "        etcd-recovery: restore failed at step \"verify the restored cluster\": live key count: count keys: context deadline exceeded\n")
	ev("TestLeader/Failover", "    testenv.go:90: ---- last lines of etcd m0 log ----\n")
	for i := range 300 {
		ev("TestLeader/Failover", fmt.Sprintf("        {\"level\":\"info\",\"msg\":\"server log line %d\"}\n", i))
	}
	in.WriteString(`{"Action":"fail","Package":"m/k","Test":"TestLeader/Failover","Elapsed":20}` + "\n")
	in.WriteString(`{"Action":"fail","Package":"m/k","Test":"TestLeader","Elapsed":10}` + "\n")
	in.WriteString(`{"Action":"fail","Package":"m/k","Elapsed":30}` + "\n")
	var out strings.Builder
	if ok, _ := run(strings.NewReader(in.String()), &out, nil); ok {
		t.Fatalf("a failed run passed:\n%s", out.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	tail := strings.Join(lines[max(0, len(lines)-15):], "\n")
	for _, want := range []string{"m/k TestLeader/Failover:", "leader_test.go:318: journal-b stopped by SIGTERM: exit 1, want 0:", "journal: fenced: not the leader", "leader_test.go:297",
		// Of a long message, the line that says what went wrong.
		"leader_test.go:376: kubectl exec", `failed at step "verify the restored cluster"`} {
		if !strings.Contains(tail, want) {
			t.Errorf("the report's last 15 lines lack %q:\n%s", want, tail)
		}
	}
	if _, why, _ := strings.Cut(out.String(), "Why they failed"); strings.Contains(why, "server log line") {
		t.Errorf("the causes repeat the server log:\n%s", why)
	}
	if strings.Contains(tail, "Survivor: none") {
		t.Errorf("the causes show a long message's first lines, not the one that says what went wrong:\n%s", tail)
	}
	if strings.Contains(tail, "m/k TestLeader:") {
		t.Errorf("the failed parent has an entry of its own beside its failed subtest:\n%s", tail)
	}
}

// TestReportWhyOutsideATest: a package that fails outside any test (a
// timeout's panic) is named at the end with its first lines.
func TestReportWhyOutsideATest(t *testing.T) {
	in := `{"Action":"run","Package":"m/t","Test":"TestHangs"}
{"Action":"output","Package":"m/t","Output":"panic: test timed out after 40m0s\n"}
{"Action":"output","Package":"m/t","Output":"\trunning tests:\n\t\tTestHangs (40m0s)\n"}
{"Action":"output","Package":"m/t","Output":"FAIL\tm/t\t2400.1s\n"}
{"Action":"fail","Package":"m/t","Elapsed":2400.1}
`
	var out strings.Builder
	if ok, _ := run(strings.NewReader(in), &out, nil); ok {
		t.Fatalf("a timed-out package passed:\n%s", out.String())
	}
	_, why, _ := strings.Cut(out.String(), "Why they failed")
	for _, want := range []string{"m/t (outside any test):", "panic: test timed out after 40m0s", "TestHangs (40m0s)"} {
		if !strings.Contains(why, want) {
			t.Errorf("the causes lack %q:\n%s", want, out.String())
		}
	}
}
