// Package inspect answers the first question of an etcd incident: how is
// the cluster? It probes every member concurrently, each bounded by one
// timeout, judges quorum (HEALTHY, DEGRADED, QUORUM LOST, UNREACHABLE),
// flags split-brain signs, lagging members, full databases and alarms,
// checks the freshness of the newest backup and its restore-drill proof,
// and names the one next step with its runbook.
//
// # What it owns
//
//   - The report (report.go): Report and Assessment, a member's row
//     (MemberHealth), the verdict (VerdictKind and its exit codes), the
//     flags (Flag, FlagKind, Severity), BackupStatus and DrillStatus, and
//     NextStep. They are `-o json`'s fields; metrics and kube read them.
//   - The network half (inspect.go, probe.go): Run, and Probe (member list
//     and probes, all concurrent, with internal/probe), then the backup and
//     drill check against the store (internal/catalog).
//   - The judgement (verdict.go): Verdict is pure, no network and no
//     clock; it composes one function per check (checks.go: quorum, lag,
//     leader and split brain, alarms, members down, DB quota, unlisted
//     endpoints, backup freshness and restore drills, and the journal
//     lag of journal.go), then the next-step
//     policy (nextstep.go) picks the one thing to do.
//   - The runbook sections flags and next steps point to (runbooks.go).
//   - The rendering (render.go): Tables (the members table, their errors,
//     then the verdict, leader, flags, backup, drill and next-step lines),
//     or JSON of the Report itself, by internal/output's convention.
//
// Members are probed with internal/probe, the tool's one prober, whose
// package doc defines a healthy member; backup's member choice and
// restore's verification use the same prober, and restore verify judges a
// rebuilt cluster with this package's Probe and Verdict.
//
// Options.Validate checks the options before anything is contacted and
// returns usage errors (internal/usage: the CLI exits 4); Run calls it
// first. ValidateTemplate checks the settings alone, for options that are
// the template of many clusters (fleet.InspectAll).
//
// # Adding a check
//
// A new check is one function in checks.go that reads the members (or the
// backup status) and returns its flags, with a FlagKind of its own in
// report.go; Verdict calls it where its flags rank (most urgent first).
// If it changes what to do, nextStep (nextstep.go) gets a case at its rank,
// with a Runbook* section (runbooks.go) that a scenario executes. A new
// health signal of one member belongs in internal/probe (probe.Endpoint),
// shown in MemberHealth by row (probe.go). Test it as a table case of
// Verdict (verdict_test.go): the check is pure.
//
// Imported by: restore (verify), kube (inspect of a namespace), metrics
// (the exporter renders reports) and the CLI. It imports plumbing only.
package inspect
