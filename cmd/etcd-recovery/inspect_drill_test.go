package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/output"
)

// inspect --all with the DRILLED column and the drill lines of inspect
// still fit 120 columns by default; -o wide and -o json keep the values.
func TestInspectDrillWidths(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 3, 15, 0, 0, time.UTC)
	const check = "compare with source: HashKV at revision 123456789 differs: restored 0x1f2e3d4c, source 0x5a6b7c8d"
	ia := &fleet.InspectAllReport{Clusters: []fleet.InspectRow{
		{Cluster: longCluster, Verdict: inspect.VerdictQuorumLost, Members: "1/3", Leader: longMember, DBSize: 7 << 30,
			Backup: string(inspect.BackupStale), BackupAge: "5d03h", Drill: string(inspect.DrillOld), DrillProven: longBackup2,
			DrillProvenTime: now, DrillProvenAge: "12d03h", DrillProvenAgeSeconds: 12*86400 + 3*3600,
			NextStep: "take a survivor snapshot of the member left, then restore (runbooks/quorum-loss.md#survivor-snapshot)"},
		{Cluster: longCluster + "x", Verdict: inspect.VerdictHealthy, Members: "3/3", Backup: "ok", BackupAge: "3h20m",
			Drill: string(inspect.DrillFailed), DrillLastBackup: longBackup, DrillLastResult: "failed", DrillLastFailed: check,
			DrillLastTime: now, DrillLastMode: "source", NextStep: "restore drill failed"},
		{Cluster: longCluster + "y", Verdict: inspect.VerdictUnreachable, Members: "0/3", Backup: "unknown", Drill: "unknown",
			NextStep: "check network and TLS (runbooks/unreachable.md)", Error: longError},
	}}
	checkWidth(t, "inspect --all, drills", func(f output.Format) string {
		return renderTo(func(w *bytes.Buffer) error { return output.Render(w, f, ia.Table(), ia) })
	}, []string{longMember}, longCluster, "12d03h", "restore drill failed")
	js := renderTo(func(w *bytes.Buffer) error { return output.Render(w, output.FormatJSON, ia.Table(), ia) })
	for _, s := range []string{`"drill": "old"`, `"drillProven": "` + longBackup2 + `"`, `"drillProvenAgeSeconds": 1047600`,
		`"drillLastBackup": "` + longBackup + `"`, `"drillLastResult": "failed"`, `"drillLastFailed": "` + check + `"`, `"drillLastMode": "source"`} {
		if !strings.Contains(js, s) {
			t.Errorf("inspect --all -o json: no %s:\n%s", s, js)
		}
	}
	// The DRILLED cells (JSON has the state and the values apart).
	def := renderTo(func(w *bytes.Buffer) error { return output.Render(w, output.FormatTable, ia.Table(), ia) })
	for _, cell := range []string{"│ DRILLED ", "│ 12d03h OLD ", "│ FAILED ", "│ UNKNOWN "} {
		if !strings.Contains(def, cell) {
			t.Errorf("inspect --all: no cell %q:\n%s", cell, def)
		}
	}

	rep := &inspect.Report{Assessment: inspect.Verdict(nil, &inspect.BackupStatus{ClusterID: longCluster, Location: "kubx-etcd-backups/prod",
		MaxAge: 9 * time.Hour, Newest: &inspect.BackupInfo{Name: longBackup, Kind: "scheduled", Time: now, Revision: 123456789}, Age: time.Hour,
		Drill: &inspect.DrillStatus{MaxAge: inspect.DefaultMaxDrillAge, Age: 30 * time.Hour,
			Proven: &inspect.ProvenBackup{Name: longBackup2, Kind: "pre-restore", Time: now, DrilledAt: now, Mode: "self-consistency"},
			Last:   &inspect.DrillInfo{Backup: longBackup, Result: inspect.DrillFailedResult, At: now, Failed: check, Mode: "source", Age: time.Minute}}},
		inspect.Thresholds{})}
	checkWidth(t, "inspect, drills", func(f output.Format) string {
		return renderTo(func(w *bytes.Buffer) error { return inspect.Render(w, f, rep) })
	}, nil, longBackup, longBackup2, check, inspect.RunbookDrill)
}
