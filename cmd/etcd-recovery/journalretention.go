package main

import (
	"time"

	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/urfave/cli/v2"
)

// journalRetentionFlag is prune's and backup --prune's
// --journal-retention: how far back the journal window reaches; the
// ConfigMap's ETCD_RECOVERY_JOURNAL_RETENTION sets it in the CronJob.
func journalRetentionFlag(dest *time.Duration) cli.Flag {
	return &cli.DurationFlag{Name: "journal-retention", EnvVars: []string{"ETCD_RECOVERY_JOURNAL_RETENTION"}, Value: retention.DefaultJournalRetention, Destination: dest,
		Usage: "keep the journal (its segments, and the backups they start from) this far back: the point-in-time restore window"}
}

// checkJournalRetention refuses a journal retention that is not positive.
func checkJournalRetention(d time.Duration) error {
	if d <= 0 {
		return usagef("--journal-retention %s: must be positive", d)
	}
	return nil
}
