package kube

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// Which existing EtcdRestore a restore deletes (the tool's own, finished)
// and which it refuses.
func TestLeftoverFinished(t *testing.T) {
	now := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
	restore := func(ours bool, uid string, status map[string]any) *unstructured.Unstructured {
		o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": APIVersion, "kind": "EtcdRestore"}}
		o.SetName("etcd-a")
		if ours {
			o.SetLabels(map[string]string{LabelManagedBy: ManagedBy})
		}
		if uid != "" {
			o.SetAnnotations(map[string]string{AnnotationClusterUID: uid})
		}
		if status != nil {
			o.Object["status"] = status
		}
		return o
	}
	cluster := func(uid string, age time.Duration, ready ...any) *unstructured.Unstructured {
		o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": APIVersion, "kind": KindEtcdCluster}}
		o.SetUID(types.UID(uid))
		o.SetCreationTimestamp(metav1.NewTime(now.Add(-age)))
		if ready != nil {
			o.Object["status"] = map[string]any{"phase": "Running", "members": map[string]any{"ready": ready}}
		}
		return o
	}
	ok := map[string]any{"succeeded": true}
	failed := map[string]any{"succeeded": false, "reason": "failed to get s3 object"}
	for _, tc := range []struct {
		name   string
		er, ec *unstructured.Unstructured
		want   bool
		why    string
	}{
		{"not ours", restore(false, "u1", ok), cluster("u2", time.Hour, "m0"), false, "not created by etcd-recovery"},
		{"not acted on", restore(true, "u1", nil), cluster("u1", time.Hour), false, "has not acted on it yet"},
		{"cluster deleted, not recreated", restore(true, "u1", nil), nil, false, "may still be restoring"},
		{"failed", restore(true, "u1", failed), cluster("u1", time.Hour), true, "reported that restore failed: failed to get s3 object"},
		{"replaced, ready", restore(true, "u1", nil), cluster("u2", time.Minute, "m0", "m1"), true, "replaced the EtcdCluster it references (uid u1; now uid u2), and the restored EtcdCluster has 2 ready"},
		{"succeeded, ready", restore(true, "u1", ok), cluster("u2", time.Minute, "m0"), true, "reported it succeeded"},
		{"succeeded, seeding", restore(true, "u1", ok), cluster("u2", time.Minute), false, "seed member may still be fetching"},
		{"succeeded, old cluster not ready", restore(true, "u1", ok), cluster("u2", 3*time.Hour), true, "was created 3h0m0s ago"},
		{"no uid annotation, succeeded", restore(true, "", ok), cluster("u2", time.Minute, "m0"), true, "succeeded"},
	} {
		why, got := leftoverFinished(tc.er, tc.ec, now)
		if got != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("%s: %v %q, want %v and %q", tc.name, got, why, tc.want, tc.why)
		}
	}
}

// The [default] section of AWS shared files, as etcd-operator's SDK reads it.
func TestINIDefault(t *testing.T) {
	got := iniDefault([]byte("region = top\n[other]\nregion = x\n[ default ]\n; c\naws_access_key_id = AK\n  region=us-south  \n[profile default]\noutput = json\n"))
	if got["aws_access_key_id"] != "AK" || got["region"] != "us-south" || got["output"] != "json" || len(got) != 3 {
		t.Fatalf("%v", got)
	}
}
