package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/undelete"
)

// Realistic long data: EtcdCluster names of 32 characters (etcd-operator
// names are "etcd-" + a 20-character cluster id + a suffix), full backup
// names, errors as the tool prints them.
const (
	longCluster = "etcd-c0ab1cd20ef3gh4ij5kl-prod01"
	longMember  = longCluster + "-8x2k9qzw"
	longBackup  = "20261122T031500.123Z-scheduled-0a1b2c3d"
	longBackup2 = "20261121T191500.456Z-pre-restore-9f8e7d6c"
	longError   = "backup of cluster " + longCluster + " failed at step \"stream snapshot\": cos: upload part 7 of " +
		"kubx-etcd-backups/prod/" + longCluster + "/" + longBackup + "/snapshot.db.zst: object store stalled: no progress for 60s " +
		"(--cos-stall-timeout); the upload was aborted and nothing was left behind"
)

// checkWidth asserts every line of a default rendering fits
// output.Width, and that -o wide and -o json carry every cell's text.
func checkWidth(t *testing.T, name string, render func(output.Format) string, wideOnly []string, mustHave ...string) {
	t.Helper()
	def := render(output.FormatTable)
	widest := 0
	for _, l := range strings.Split(def, "\n") {
		n := utf8.RuneCountInString(l)
		widest = max(widest, n)
		if n > output.Width {
			t.Errorf("%s: a line of %d runes (max %d):\n%s", name, n, output.Width, l)
		}
	}
	wide := render(output.FormatWide)
	js := render(output.FormatJSON)
	for _, s := range wideOnly {
		if !strings.Contains(wide, s) {
			t.Errorf("%s: -o wide lost %q", name, s)
		}
		if js != "" && !strings.Contains(js, jsonText(s)) {
			t.Errorf("%s: -o json lost %q", name, s)
		}
	}
	for _, s := range mustHave {
		if !strings.Contains(def, s) && !strings.Contains(strings.Join(strings.Fields(def), " "), s) {
			// Wrapped below the table: the words are all there.
			if !strings.Contains(strings.Join(strings.Fields(def), ""), strings.Join(strings.Fields(s), "")) {
				t.Errorf("%s: the default output lost %q", name, s)
			}
		}
		if !strings.Contains(wide, s) {
			t.Errorf("%s: -o wide lost %q", name, s)
		}
		if js != "" && !strings.Contains(js, jsonText(s)) {
			t.Errorf("%s: -o json lost %q", name, s)
		}
	}
	wideMax := 0
	for _, l := range strings.Split(wide, "\n") {
		wideMax = max(wideMax, utf8.RuneCountInString(l))
	}
	t.Logf("%s: widest line %d runes by default, %d with -o wide:\n%s", name, widest, wideMax, def)
}

func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return strings.Trim(string(b), `"`)
}

func renderTo(f func(w *bytes.Buffer) error) string {
	var b bytes.Buffer
	if err := f(&b); err != nil {
		return "render error: " + err.Error()
	}
	return b.String()
}

// Every table fits 120 columns by default, its explanations on their own
// lines below it; -o wide and -o json keep all the data. (On the old code
// these tables were up to 313 runes wide, and there was no -o wide.)
func TestTableWidths(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 3, 15, 0, 0, time.UTC)
	v2 := 1234

	// restore-all's report: a restored, a done-earlier and a failed
	// cluster (its error and next step below the table).
	ra := &fleet.RestoreAllReport{Parallel: 8, Order: fleet.OrderSmallest, Failed: []string{"kubx-etcd-17/" + longCluster}, Clusters: []fleet.RestoreAllRow{
		{Namespace: "kubx-etcd-17", Cluster: longCluster, Outcome: fleet.OutcomeRestored, Action: fleet.ActionRestore, Backup: longBackup2, Revision: 1_000_123_456,
			Bytes: 3 << 30, Elapsed: 754 * time.Second, Health: "1/3 members healthy (1 answer): quorum lost", NodePort: 31234,
			ClientURL: "https://" + longCluster + "-client.kubx-etcd-17.svc:2379", Run: "20261122T031500.123Z-0a1b2c3d"},
		{Namespace: "kubx-etcd-17", Cluster: longCluster + "x", Outcome: fleet.OutcomeDoneEarlier, Backup: longBackup, Run: "20261122T031500.123Z-0a1b2c3d"},
		{Namespace: "kubx-etcd-17", Cluster: longCluster, Outcome: fleet.OutcomeFailed, FailedStep: kube.OpStepWait, Cause: longError,
			NextStep: fleet.NextStep(kube.OpStepWait)},
	}}
	checkWidth(t, "restore-all", func(f output.Format) string {
		return renderTo(func(w *bytes.Buffer) error { return output.RenderAll(w, f, ra.Tables(), ra) })
	}, []string{longBackup2, "https://" + longCluster + "-client.kubx-etcd-17.svc:2379"}, longCluster, "31234", "no progress for 60s", "runbooks/quorum-loss.md#restore-through-etcd-operator")

	// list
	rows := prune.ListRows{
		{Name: longBackup, Kind: catalog.KindScheduled, Time: now, Status: "committed", Revision: 123456789, RawSize: 8 << 30,
			StoredSize: 3 << 30, TotalSize: 3<<30 + 12345, V2Keys: &v2, Source: longMember,
			Retention: prune.ListRetention{Keep: true, Rules: []string{"newest", "recent"}, Reason: "newest backup that checks out; 1 of the 3 newest scheduled backups (recent)"}},
		{Name: longBackup2, Kind: catalog.KindPreRestore, Time: now, Status: "damaged: snapshot.db.zst size mismatch: manifest 3221225472, stored 1024",
			Damaged: "snapshot.db.zst size mismatch: manifest 3221225472, stored 1024", Error: longError,
			Retention: prune.ListRetention{Reason: "damaged and older than the newest good backup " + longBackup}},
	}
	checkWidth(t, "list", func(f output.Format) string {
		return renderTo(func(w *bytes.Buffer) error { return output.Render(w, f, rows.Table(), rows) })
	}, []string{longMember}, longBackup, longBackup2, "snapshot.db.zst size mismatch", "no progress for 60s")

	// backup
	m := &catalog.Manifest{ClusterID: longCluster, Name: longBackup, RevisionBefore: 123456789,
		Snapshot: catalog.SnapshotInfo{RawSize: 8 << 30, StoredSize: 3 << 30}, Source: catalog.Member{Name: longMember}}
	checkWidth(t, "backup", func(f output.Format) string {
		rep := &backup.Report{Manifest: m, Duration: 3 * time.Minute}
		return renderTo(func(w *bytes.Buffer) error { return output.RenderAll(w, f, rep.Tables(), rep) })
	}, []string{longMember, longCluster}, longBackup)

	// backup --all
	all := &fleet.BackupAllReport{Clusters: []fleet.ClusterResult{
		{Cluster: longCluster, Result: fleet.ResultOK, Backup: longBackup, Revision: 123456789, Size: 3 << 30, Duration: time.Minute, Pruned: 2},
		{Cluster: longCluster + "x", Result: "failed", Error: longError, Duration: 65 * time.Second},
	}}
	checkWidth(t, "backup --all", func(f output.Format) string {
		return renderTo(func(w *bytes.Buffer) error { return output.Render(w, f, all.Table(), all) })
	}, nil, longCluster, longBackup, "no progress for 60s")

	// prune and delete
	pr := &prune.PruneReport{Now: now, DryRun: true, Clusters: []prune.ClusterPrune{{ClusterID: longCluster,
		Backups: []prune.BackupAction{
			{ClusterID: longCluster, Name: longBackup, Kind: catalog.KindScheduled, Time: now, Committed: true, Keep: true, Action: "keep",
				Reason: "newest backup that checks out; 1 of the 3 newest scheduled backups (recent)"},
			{ClusterID: longCluster, Name: longBackup2, Kind: catalog.KindPreRestore, Time: now, Committed: false, Action: "delete",
				Reason: "incomplete (no manifest) and last written 3d04h ago, more than --incomplete-after 24h0m0s", Error: longError},
		}}}}
	checkWidth(t, "prune", func(f output.Format) string {
		return renderTo(func(w *bytes.Buffer) error { return output.Render(w, f, pr.Table(), pr) })
	}, nil, longCluster, longBackup, longBackup2, "more than --incomplete-after", "no progress for 60s")

	// inspect --all
	ia := &fleet.InspectAllReport{Clusters: []fleet.InspectRow{
		{Cluster: longCluster, Verdict: inspect.VerdictQuorumLost, Members: "1/3", Leader: longMember, DBSize: 7 << 30,
			Backup: string(inspect.BackupStale), BackupAge: "5d03h",
			NextStep: "take a survivor snapshot of the member left, then restore (runbooks/quorum-loss.md#survivor-snapshot)"},
		{Cluster: longCluster + "y", Verdict: inspect.VerdictUnreachable, Members: "0/3", Backup: "unknown",
			NextStep: "check network and TLS (runbooks/unreachable.md)", Error: longError},
	}}
	checkWidth(t, "inspect --all", func(f output.Format) string {
		return renderTo(func(w *bytes.Buffer) error { return output.Render(w, f, ia.Table(), ia) })
	}, []string{longMember}, longCluster, "runbooks/quorum-loss.md#survivor-snapshot", "no progress for 60s")

	// inspect
	rep := &inspect.Report{Assessment: inspect.Assessment{Verdict: inspect.VerdictDegraded, Summary: "quorum held: 2 of 3 members up",
		Members: []inspect.MemberHealth{
			{Name: longMember, ID: "8e9e05c52164694d", ClientURL: "https://" + longMember + ".etcd-kubx-prod.svc:2379", Version: "3.5.21",
				Health: inspect.HealthHealthy, StatusOK: true, Leader: true, RaftTerm: 12, RaftIndex: 123456789, AppliedIndex: 123456789,
				DBSize: 7 << 30, DBSizeInUse: 5 << 30, LatencyMS: 1.5},
			{Name: longMember + "b", ClientURL: "https://" + longMember + "b.etcd-kubx-prod.svc:2379", Health: inspect.HealthDown, Error: longError},
		}}}
	checkWidth(t, "inspect", func(f output.Format) string {
		return renderTo(func(w *bytes.Buffer) error { return inspect.Render(w, f, rep) })
	}, []string{"8e9e05c52164694d", longMember + ".etcd-kubx-prod.svc:2379"}, longMember, "no progress for 60s")

	// undelete: long keys, a reason below the table, a long record key.
	longKey := "/registry/apiextensions.k8s.io/customresourcedefinitions/" + longCluster + "-widgets.storage.example.com"
	ud := &undelete.Result{Run: "20261122T031500.123Z-0a1b2c3d", ClusterID: longCluster, Namespaces: []string{"shop"}, Revision: 123456789,
		ToTime: now, Backup: longBackup, LiveRevision: 123999999, Started: now, Ended: now.Add(42 * time.Second),
		Keys: []undelete.Key{
			{Key: longKey, Action: undelete.ActionRestored, ModRevision: 123456000, Written: 124000000, Size: 4096},
			{Key: "/registry/events/shop/" + longMember + ".17a2b3c4d5e6f7a8", Action: undelete.ActionLeased, ModRevision: 123456001,
				Reason: "attached to lease 7790a2292b57b3f4 at the point (an Event, a lease): its lease is gone, and it would never expire"},
			{Key: "/registry/secrets/shop/huge", Action: undelete.ActionFailed, ModRevision: 123456002, Reason: "the server refuses it: " + longError},
		},
		Counts: map[undelete.Action]int{undelete.ActionRestored: 1, undelete.ActionLeased: 1, undelete.ActionFailed: 1},
		Record: "kubx-etcd-17/_undeletes/" + longCluster + "/20261122T031500.123Z-0a1b2c3d.json"}
	checkWidth(t, "undelete", func(f output.Format) string {
		return renderTo(func(w *bytes.Buffer) error { return output.RenderAll(w, f, undeleteTables(ud, f), ud) })
	}, []string{"124000000", longKey}, "/registry/apiextensions.k8s.io/customre", "storage.example.com",
		"its lease is gone", "no progress for 60s", ud.Record)
	if def := renderTo(func(w *bytes.Buffer) error {
		return output.RenderAll(w, output.FormatTable, undeleteTables(ud, output.FormatTable), ud)
	}); !strings.Contains(def, "1 key shortened in the middle (…) to fit: -o wide or -o json shows every key whole") {
		t.Errorf("undelete: the shortened key is not said:\n%s", def)
	}

	// restore plan (dry run)
	res := &restore.Result{Plan: restore.Plan{ClusterID: longCluster, DryRun: true,
		Candidates: []restore.Candidate{
			{Name: longBackup, Kind: catalog.KindScheduled, Time: now, Revision: 123456789, Source: longMember, ServerVersion: "3.5.21",
				RawSize: 8 << 30, V2Keys: &v2, Status: "failed verification", Detail: longError},
			{Name: longBackup2, Kind: catalog.KindPreRestore, Time: now, Revision: 123456000, Source: longMember, Status: "chosen, verified"},
		},
		Checks: []restore.Check{{Name: restore.CheckStoredSHA, Status: restore.CheckPassed,
			Detail: "sha256 of " + longCluster + "/" + longBackup2 + "/snapshot.db.zst: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}},
		Members: []restore.Member{{Name: longMember, PeerURLs: []string{"https://" + longMember + ".etcd-kubx-prod.svc:2380"},
			DataDir: "/var/lib/etcd-restore/" + longMember + ".etcd", State: restore.DirNonEmpty,
			MovedTo: "/var/lib/etcd-restore/" + longMember + ".etcd.moved-20261122T031500Z"}},
	}}
	checkWidth(t, "restore --dry-run", func(f output.Format) string {
		out := renderTo(func(w *bytes.Buffer) error { return output.RenderAll(w, f, res.Tables(), res) })
		if f == output.FormatJSON {
			return out
		}
		// The tables, and the notes below them; the plan's prose lines
		// are checked apart.
		var keep []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "┌") || strings.HasPrefix(l, "│") || strings.HasPrefix(l, "├") || strings.HasPrefix(l, "└") ||
				strings.HasPrefix(l, longBackup) || strings.HasPrefix(l, "/var/lib/") || strings.HasPrefix(l, restore.CheckStoredSHA) || strings.HasPrefix(l, "    ") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	}, []string{longMember}, longBackup, longBackup2, "no progress for 60s", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
}
