package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// --leader-lease-name is checked before anything is contacted: a name the
// API server would refuse is a usage error naming the flag. (The election
// itself is kube's TestLeaderElection, with the real binary.)
func TestJournalLeaderLeaseNameRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cos := []string{"--cos-endpoint", "http://127.0.0.1:9", "--bucket", "b", "--prefix", "p",
		"--cos-credentials-dir", credsDir(t, "test-access-key", "test-secret-key")}
	for _, name := range []string{"Bad_Name", ""} {
		code, _, errOut := runCtx(t, ctx, concatArgs([]string{"journal", "--cluster-id", "c1", "--endpoints", "http://127.0.0.1:9",
			"--leader-elect", "--leader-lease-name", name}, cos)...)
		if code != 4 || !strings.Contains(errOut, "--leader-lease-name") {
			t.Errorf("--leader-lease-name %q: exit %d, want 4 naming the flag:\n%s", name, code, errOut)
		}
	}
}
