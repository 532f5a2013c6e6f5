package fleet_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// TestRestoreAllNothingSelected: a --rebuild of a namespace that is gone
// (no EtcdCluster left) whose prefix holds no cluster id (the wrong
// prefix: here the bucket's root, COS_PREFIX "", while the backups are
// under another) is an error naming the prefix, not an empty success; with
// the right prefix the same run plans the cluster id found there. Against
// a real kube-apiserver (the toolkit's service account) and MinIO.
func TestRestoreAllNothingSelected(t *testing.T) {
	t.Parallel()
	const ns = "kubx-etcd-73"
	s := newSmallWorld(t, ns)
	m, bucket, st, sa := s.m, s.bucket, s.st, s.sa
	ctx := testfix.Context(t, 2*time.Minute)
	run := func(layout catalog.Layout) (*fleet.RestoreAllReport, error) {
		return fleet.RestoreAll(ctx, fleet.RestoreAllOptions{
			Namespaces: []fleet.RestoreAllNamespace{{Kube: sa, Store: st, Layout: layout}},
			Rebuild:    true, DryRun: true, Parallel: 1, HealthTimeout: time.Second, ClusterTimeout: time.Minute,
			Template: kube.OperatorRestoreOptions{Bucket: bucket, Endpoint: m.Endpoint, ForcePathStyle: true, TempDir: t.TempDir()},
		})
	}

	for _, prefix := range []string{"", "kubx-etcd-99/"} {
		rep, err := run(catalog.Layout{Prefix: prefix})
		var re *fleet.RestoreAllError
		if !errors.As(err, &re) {
			t.Fatalf("prefix %q: got %v (report %+v), want a RestoreAllError", prefix, err, rep)
		}
		want := `prefix "` + prefix + `"`
		if prefix == "" {
			want = "the bucket's root"
		}
		if msg := err.Error(); !strings.Contains(msg, ns) || !strings.Contains(msg, want) || !strings.Contains(msg, "nothing to restore") {
			t.Errorf("prefix %q: error %q does not name the namespace, the prefix (%s) and what is wrong", prefix, msg, want)
		}
	}

	// The right prefix: the cluster id with a backup there is planned
	// (the error is not raised merely because the namespace is empty).
	layout := catalog.Layout{Prefix: ns + "/"}
	if _, err := st.Put(ctx, layout.Key("etcd-gone", catalog.BackupName(time.Now(), catalog.KindScheduled), catalog.ManifestObject), strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	rep, err := run(layout)
	if err != nil && strings.Contains(err.Error(), "nothing to restore") {
		t.Fatalf("with the cluster id under the prefix: %v", err)
	}
	if rep == nil {
		t.Fatalf("no report: %v", err)
	}
}
