package deploy

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/kube"
)

// readDoc is a file of the repository as text.
func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(testenv.RepoRoot(t) + "/" + rel)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// secs is d in seconds as the documents write it: "23.8 s", "35 s".
func secs(d time.Duration) string {
	return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", d.Seconds()), "0"), ".") + " s"
}

// TestDocsAgreeWithManifests: where a number is in a manifest and in the
// documents, both say the same. The manifest's number is read from its
// field (the grace period, the schedules, the deadlines, the scratch
// sizes); the journal's takeover bound, which is no field, is derived from
// the election's timings (kube's LeaseDuration and RetryPeriod, client-go's
// JitterFactor) and must be the one in 60-journal.yaml's comment and in
// every document that gives it.
func TestDocsAgreeWithManifests(t *testing.T) {
	t.Parallel()
	k8s := readDoc(t, "docs/kubernetes.md")

	var journal appsv1.Deployment
	decodeFirst(t, "60-journal.yaml", "Deployment", &journal)
	g := journal.Spec.Template.Spec.TerminationGracePeriodSeconds
	if g == nil {
		t.Fatal("60-journal.yaml: no terminationGracePeriodSeconds")
	}
	for _, want := range []string{
		fmt.Sprintf("`terminationGracePeriodSeconds` is %d", *g),
		fmt.Sprintf("%d s grace", *g),
	} {
		if !strings.Contains(k8s, want) {
			t.Errorf("docs/kubernetes.md does not say %q (60-journal.yaml's terminationGracePeriodSeconds is %d)", want, *g)
		}
	}

	retry := time.Duration(float64(kube.DefaultRetryPeriod) * (1 + leaderelection.JitterFactor))
	takeover, handover := secs(kube.DefaultLeaseDuration+2*retry), secs(retry)
	manifest := readDoc(t, "deploy/60-journal.yaml")
	for _, f := range []struct{ file, text string }{
		{"deploy/60-journal.yaml", manifest},
		{"docs/kubernetes.md", k8s},
		{"docs/journal.md", readDoc(t, "docs/journal.md")},
		{"docs/flags.md", readDoc(t, "docs/flags.md")},
	} {
		if !strings.Contains(f.text, takeover) || !strings.Contains(f.text, handover) {
			t.Errorf("%s does not give the takeover bound %s (LeaseDuration %s + 2 x RetryPeriod %s x %.1f jitter) and %s after a clean stop",
				f.file, takeover, kube.DefaultLeaseDuration, kube.DefaultRetryPeriod, 1+leaderelection.JitterFactor, handover)
		}
	}

	for _, c := range []struct {
		file, deadline string
		scratch        string
	}{
		{"30-cronjob.yaml", "4 h", "10Gi"},
		{"70-prove.yaml", "55 min", "18Gi"},
	} {
		var cj batchv1.CronJob
		decodeFirst(t, c.file, "CronJob", &cj)
		if s := "`" + cj.Spec.Schedule + "` UTC"; !strings.Contains(k8s, s) {
			t.Errorf("docs/kubernetes.md does not give %s's schedule %s", c.file, s)
		}
		d := time.Duration(*cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds) * time.Second
		got := fmt.Sprintf("%d min", int(d.Minutes()))
		if d%time.Hour == 0 {
			got = fmt.Sprintf("%d h", int(d.Hours()))
		}
		if got != c.deadline {
			t.Errorf("%s: activeDeadlineSeconds %s; docs/kubernetes.md's table says %s: update both", c.file, d, c.deadline)
		}
		if !strings.Contains(k8s, "`activeDeadlineSeconds` ("+c.deadline+")") {
			t.Errorf("docs/kubernetes.md does not give %s's activeDeadlineSeconds (%s)", c.file, c.deadline)
		}
		for _, v := range cj.Spec.JobTemplate.Spec.Template.Spec.Volumes {
			if v.Name == "scratch" && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil {
				if got := v.EmptyDir.SizeLimit.String(); got != c.scratch || !strings.Contains(k8s, got+" `/scratch`") {
					t.Errorf("%s: scratch sizeLimit %s; docs/kubernetes.md's table must give it as %q", c.file, got, got+" `/scratch`")
				}
			}
		}
	}
}

// decodeFirst decodes the first object of deploy/file, which must be of kind.
func decodeFirst(t *testing.T, file, kind string, out any) {
	t.Helper()
	objs := kubetest.DecodeManifests(t, kubetest.DeployPath(t, file))
	if len(objs) == 0 || objs[0].GetKind() != kind {
		t.Fatalf("deploy/%s: want a %s first", file, kind)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, out); err != nil {
		t.Fatalf("deploy/%s: %v", file, err)
	}
}
