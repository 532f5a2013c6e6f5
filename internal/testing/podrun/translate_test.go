package podrun

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func deployFile(t *testing.T, rel string) []byte {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testCluster(t *testing.T) Cluster {
	t.Helper()
	cm, err := ParseConfigMap(deployFile(t, "20-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return Cluster{
		Namespace:  "kubx-etcd-01",
		ConfigMaps: map[string]*corev1.ConfigMap{cm.Name: cm},
		Secrets: map[string]*corev1.Secret{"cos-credentials": {ObjectMeta: metav1.ObjectMeta{Name: "cos-credentials"},
			Data: map[string][]byte{"credentials": []byte("[default]\naws_access_key_id = A\naws_secret_access_key = S\n")}}},
		Token:        func(sa string) (string, error) { return "token-of-" + sa, nil },
		APIServerURL: "https://127.0.0.1:6443",
		APIServerCA:  []byte("CA"),
	}
}

// TestTranslateShippedPods translates the four pod specs of deploy/ and
// checks what a kubelet would do with them.
func TestTranslateShippedPods(t *testing.T) {
	for _, f := range []string{"30-cronjob.yaml", "per-cluster/update-job.yaml", "50-toolkit.yaml", "52-exporter.yaml"} {
		t.Run(f, func(t *testing.T) {
			w, err := ParseWorkload(deployFile(t, f))
			if err != nil {
				t.Fatal(err)
			}
			s, err := Translate(w, "", "p", testCluster(t))
			if err != nil {
				t.Fatal(err)
			}
			if s.User != 65532 || s.Group != 65532 || !s.ReadOnlyRoot || !s.NoNewPrivileges || strings.Join(s.CapDrop, ",") != "all" ||
				s.MemoryLimit == 0 || s.CPULimitMilli == 0 {
				t.Fatalf("%+v", s)
			}
			if v, _ := s.EnvValue("POD_NAMESPACE"); v != "kubx-etcd-01" {
				t.Fatalf("POD_NAMESPACE %q", v)
			}
			if v, _ := s.EnvValue("KUBERNETES_SERVICE_PORT"); v != "6443" {
				t.Fatalf("KUBERNETES_SERVICE_PORT %q", v)
			}
			if v, _ := s.EnvValue("COS_BUCKET"); v == "" {
				t.Fatal("envFrom the ConfigMap: no COS_BUCKET")
			}
			sa := s.Mount(ServiceAccountDir)
			if sa == nil || string(sa.Files["token"]) == "" || string(sa.Files["namespace"]) != "kubx-etcd-01" {
				t.Fatalf("service-account volume %+v", sa)
			}
			cred := s.Mount("/etc/cos-credentials")
			if cred == nil || cred.Kind != MountSecret || !cred.ReadOnly || cred.FileMode != 0o400 || cred.Files["credentials"] == nil {
				t.Fatalf("cos-credentials mount %+v", cred)
			}
			tmp := s.Mount("/tmp")
			if tmp == nil || tmp.Kind != MountEmptyDirMemory || tmp.SizeLimit != 16<<20 {
				t.Fatalf("/tmp mount %+v", tmp)
			}
			if f == "52-exporter.yaml" {
				// The exporter: its port by name, and both probes on it.
				want := []Probe{{"liveness", "/livez", 9090}, {"readiness", "/healthz", 9090}}
				if s.Ports["metrics"] != 9090 || !slices.Equal(s.Probes, want) {
					t.Fatalf("exporter ports %v probes %+v, want metrics:9090 and %+v", s.Ports, s.Probes, want)
				}
			}
		})
	}
}

// refuses: base (a manifest) with from replaced by to fails to parse or
// translate, with an error naming want.
func refuses(t *testing.T, base, from, to, want string) {
	t.Helper()
	mod := strings.Replace(base, from, to, 1)
	if mod == base {
		t.Fatalf("the manifest has no %q any more: update the test", from)
	}
	w, err := ParseWorkload([]byte(mod))
	if err == nil {
		_, err = Translate(w, "", "p", testCluster(t))
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want an error naming %q", err, want)
	}
}

// TestTranslateRefusesWhatItDoesNotKnow: a field nobody translates fails
// the translation, naming it.
func TestTranslateRefusesWhatItDoesNotKnow(t *testing.T) {
	base := string(deployFile(t, "30-cronjob.yaml"))
	for _, tc := range []struct{ name, old, new, want string }{
		{"hostPath volume", "emptyDir: {medium: Memory, sizeLimit: 16Mi}", "hostPath: {path: /var/tmp}", "volume source not translated"},
		{"subPath", "mountPath: /tmp}", "mountPath: /tmp, subPath: x}", "subPath"},
		{"ephemeral-storage limit", "limits: {cpu: \"1\",", "limits: {ephemeral-storage: 1Gi, cpu: \"1\",", "ephemeral-storage"},
		{"capabilities add", "drop: [ALL]", "drop: [ALL], add: [NET_ADMIN]", "capabilities.add"},
		{"hostNetwork", "restartPolicy: Never", "restartPolicy: Never\n          hostNetwork: true", "hostNetwork"},
		{"lifecycle", "            envFrom:", "            lifecycle: {preStop: {exec: {command: [x]}}}\n            envFrom:", "lifecycle"},
		{"var expansion", "--parallel, \"4\"", "--parallel, \"$(N)\"", "expansion"},
		{"unknown field", "restartPolicy: Never", "restartPolicy: Never\n          restartPolicyy: Never", "unknown field"},
		{"missing configmap", "name: etcd-recovery-config", "name: nope", "configMap nope not found"},
		{"memory emptyDir without size", "emptyDir: {medium: Memory, sizeLimit: 16Mi}", "emptyDir: {medium: Memory}", "without sizeLimit"},
	} {
		t.Run(tc.name, func(t *testing.T) { refuses(t, base, tc.old, tc.new, tc.want) })
	}
}

// TestTranslateProbes: probes the tests cannot ask as the kubelet would
// are refused, naming them.
func TestTranslateProbes(t *testing.T) {
	base := string(deployFile(t, "52-exporter.yaml"))
	for _, tc := range []struct{ name, old, new, want string }{
		{"exec probe", "httpGet: {path: /healthz, port: metrics}", "exec: {command: [\"true\"]}", "only plain httpGet"},
		{"unknown port name", "httpGet: {path: /livez, port: metrics}", "httpGet: {path: /livez, port: nope}", `no port named "nope"`},
		{"https probe", "httpGet: {path: /healthz, port: metrics}", "httpGet: {path: /healthz, port: metrics, scheme: HTTPS}", "only plain httpGet"},
		{"host port", "containerPort: 9090, protocol: TCP}", "containerPort: 9090, protocol: TCP, hostPort: 9090}", "only TCP container ports"},
	} {
		t.Run(tc.name, func(t *testing.T) { refuses(t, base, tc.old, tc.new, tc.want) })
	}
}
