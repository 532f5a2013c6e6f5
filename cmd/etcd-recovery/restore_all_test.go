package main

import "testing"

// restore-all's mistakes are usage errors (exit 4) named before anything
// is contacted (port 9 is never dialled).
func TestRestoreAllUsageErrors(t *testing.T) {
	t.Parallel()
	store := []string{"--bucket", "b", "--cos-endpoint", "http://127.0.0.1:9", "--kubeconfig", "/nonexistent"}
	args := func(a ...string) []string { return append(append([]string{"restore-all"}, a...), store...) }
	usageErrors(t, []usageCase{
		{args("--order", "random"), `restore-all: --order "random": want smallest, largest or name`},
		{args("--replace"), "restore-all: --replace goes with --rebuild"},
		{args("--force", "--to-time", "1h"), "restore-all: --force and --to-time"},
		{args("--to-time", "yesterday"), `restore-all: --to-time "yesterday"`},
		{args("--namespaces", "kubx-etcd-01,kubx-etcd-02,kubx-etcd-01"), "a namespace given twice"},
		// Several namespaces under one prefix would rebuild each other's
		// cluster ids: the template must name the namespace.
		{args("--namespaces", "kubx-etcd-01,kubx-etcd-02", "--prefix-template", "backups/"),
			`restore-all: --namespaces with --prefix-template "backups/": it must contain {namespace}`},
		{args("--namespaces", "kubx-etcd-01,kubx-etcd-02", "--prefix-template", ""), `--prefix-template "": it must contain {namespace}`},
		{args("--cluster", "bad/name"), "restore-all: --cluster"},
		{args("--selector", "a=(b"), "restore-all: --selector"},
		{args("--parallel", "-2"), "restore-all: --parallel -2"},
		{args("--cluster-timeout", "0s"), "cluster-timeout"},
		{[]string{"restore-all", "--cos-endpoint", "http://127.0.0.1:9"}, "restore-all: --bucket is required"},
	})
}
