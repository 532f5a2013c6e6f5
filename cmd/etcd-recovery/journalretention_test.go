package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/urfave/cli/v2"
)

// --journal-retention is on prune, backup and list, reads
// ETCD_RECOVERY_JOURNAL_RETENTION (the ConfigMap's key, checked by
// deploy's TestJournalRetentionFromConfigMap), defaults to
// retention.DefaultJournalRetention, and refuses a value that is not
// positive (exit 4) before contacting anything.
func TestJournalRetentionFlag(t *testing.T) {
	t.Parallel()
	app := newApp(io.Discard, io.Discard)
	for _, name := range []string{"prune", "backup", "list"} {
		var found bool
		for _, c := range app.Commands {
			if c.Name != name {
				continue
			}
			for _, f := range c.Flags {
				df, ok := f.(*cli.DurationFlag)
				if !ok || df.Name != "journal-retention" {
					continue
				}
				found = true
				if df.Value != retention.DefaultJournalRetention || !slices.Equal(df.EnvVars, []string{"ETCD_RECOVERY_JOURNAL_RETENTION"}) {
					t.Errorf("%s --journal-retention: default %v, env %v", name, df.Value, df.EnvVars)
				}
			}
		}
		if !found {
			t.Errorf("%s has no --journal-retention", name)
		}
	}
	for _, args := range [][]string{
		{"prune", "--cluster-id", "c1", "--journal-retention", "0s", "--bucket", "b"},
		{"list", "--cluster-id", "c1", "--journal-retention", "-1h", "--bucket", "b"},
	} {
		code, _, errOut := runCtx(t, t.Context(), args...)
		if code != 4 || !strings.Contains(errOut, "--journal-retention") || !strings.Contains(errOut, "must be positive") {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
}
