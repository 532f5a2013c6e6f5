package podrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ServiceAccountDir is where Kubernetes mounts a pod's service-account
// token, CA and namespace.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Cluster is what a kubelet reads from the API server to start the pod:
// the objects the pod spec names and a way to get a token.
type Cluster struct {
	Namespace  string
	ConfigMaps map[string]*corev1.ConfigMap // by name
	Secrets    map[string]*corev1.Secret    // by name
	// Token returns a bound token (TokenRequest) of a service account.
	Token func(serviceAccount string) (string, error)
	// APIServerURL is https://host:port of the kube-apiserver;
	// KUBERNETES_SERVICE_HOST/PORT point there.
	APIServerURL string
	// APIServerCA verifies its serving certificate (ca.crt of the token
	// volume).
	APIServerCA []byte
}

// Spec is one container of a pod, translated: what podman is told to run.
// Secret values only ever live in Files and Env, never in the argv
// PodmanArgs builds (Env goes through a 0600 --env-file).
type Spec struct {
	PodName   string
	Container string
	// Entrypoint replaces the image's entrypoint when the spec has a
	// command (Kubernetes then ignores the image's CMD too).
	Entrypoint []string
	Args       []string
	Env        []EnvVar // in the order Kubernetes builds it; later wins
	User       int64
	Group      int64
	// SupplementalGroups: the pod's fsGroup and supplementalGroups.
	SupplementalGroups []int64
	ReadOnlyRoot       bool
	NoNewPrivileges    bool
	CapDrop            []string
	MemoryLimit        int64 // bytes; 0 = none
	CPULimitMilli      int64 // 0 = none
	CPURequestMilli    int64
	MemoryRequest      int64
	// EphemeralStorageLimit and EphemeralStorageRequest (bytes; 0 = none):
	// the kubelet's eviction bound for the pod's node disk (its disk
	// emptyDirs, logs, writable layer). Recorded, not enforced here: the
	// disk emptyDirs' sizeLimits are (Mount.SizeLimit), and the root is
	// read-only.
	EphemeralStorageLimit   int64
	EphemeralStorageRequest int64
	WorkingDir              string
	Mounts                  []Mount
	// GracePeriod is terminationGracePeriodSeconds (default 30 s): how
	// long a stop waits after SIGTERM before SIGKILL.
	GracePeriod time.Duration
	// ActiveDeadline bounds the run (the Job's activeDeadlineSeconds).
	ActiveDeadline time.Duration
	// Ports are the container's ports by name. The tests run pods on the
	// host's network (testenv.PodmanRunArgs: the test servers listen on
	// loopback), so a port is the host's: one pod at a time listens on it,
	// and a pod left by a killed run is reaped first (OwnerLabel).
	Ports map[string]int32
	// Probes are the container's HTTP probes, their port resolved: the
	// test asks them from inside the pod, as the kubelet would.
	Probes []Probe
}

// Probe is one httpGet probe (readiness, liveness or startup).
type Probe struct {
	Kind string // readiness, liveness, startup
	Path string
	Port int32
}

// URL is the probe's address from inside the pod.
func (p Probe) URL() string { return fmt.Sprintf("http://127.0.0.1:%d%s", p.Port, p.Path) }

// EnvVar is one environment variable of the container.
type EnvVar struct{ Name, Value string }

// MountKind is what backs a mount.
type MountKind string

// Mount kinds.
const (
	MountSecret         MountKind = "secret"         // files from a Secret, read-only
	MountServiceAccount MountKind = "serviceaccount" // token, ca.crt, namespace, read-only
	MountEmptyDirDisk   MountKind = "emptyDir"       // a host directory; its usage is watched against SizeLimit
	MountEmptyDirMemory MountKind = "emptyDir(Memory)"
)

// Mount is a volume mounted into the container.
type Mount struct {
	Volume    string // the pod's volume name
	Path      string // mountPath in the container
	Kind      MountKind
	ReadOnly  bool
	SizeLimit int64             // emptyDir sizeLimit, bytes; 0 = none
	Files     map[string][]byte // secret and service-account files
	FileMode  os.FileMode       // their mode (defaultMode)
	FSGroup   *int64            // the group kubelet gives the volume's files (fsGroup)
}

// Translate turns container (the only one when "") of a workload's pod
// template into a Spec, reading what it names from cl. Every field of the
// pod spec, the container and its volumes is either implemented here or
// an error naming it: a field nobody translates must not pass untested.
func Translate(w *Workload, container, podName string, cl Cluster) (*Spec, error) {
	ps := w.Template.Spec
	if len(ps.Containers) != 1 && container == "" {
		return nil, fmt.Errorf("%s %s: %d containers: name the one to run", w.Kind, w.Name, len(ps.Containers))
	}
	var c *corev1.Container
	for i := range ps.Containers {
		if container == "" || ps.Containers[i].Name == container {
			c = &ps.Containers[i]
		}
	}
	if c == nil {
		return nil, fmt.Errorf("%s %s: no container %q", w.Kind, w.Name, container)
	}
	if len(ps.Containers) != 1 {
		return nil, fmt.Errorf("%s %s: %d containers: only single-container pods are translated", w.Kind, w.Name, len(ps.Containers))
	}
	s := &Spec{PodName: podName, Container: c.Name, GracePeriod: 30 * time.Second, ActiveDeadline: w.ActiveDeadline}
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	// The pod: everything not handled below must be unset.
	rest := ps.DeepCopy()
	rest.Containers = nil
	rest.Volumes = nil
	switch ps.RestartPolicy {
	case corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure, corev1.RestartPolicyAlways, "":
		rest.RestartPolicy = "" // one run is what the tests observe
	}
	rest.ServiceAccountName, rest.AutomountServiceAccountToken = "", nil
	if ps.TerminationGracePeriodSeconds != nil {
		s.GracePeriod = time.Duration(*ps.TerminationGracePeriodSeconds) * time.Second
		rest.TerminationGracePeriodSeconds = nil
	}
	var fsGroup *int64
	runAsNonRoot := false
	if psc := ps.SecurityContext; psc != nil {
		r := psc.DeepCopy()
		s.applyIdentity(r.RunAsUser, r.RunAsGroup, r.RunAsNonRoot, &runAsNonRoot)
		if r.FSGroup != nil {
			fsGroup = r.FSGroup
			s.SupplementalGroups = append(s.SupplementalGroups, *r.FSGroup)
		}
		s.SupplementalGroups = append(s.SupplementalGroups, r.SupplementalGroups...)
		if sp := r.SeccompProfile; sp != nil && sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			fail("pod securityContext.seccompProfile %s: only RuntimeDefault (podman's default profile) is translated", sp.Type)
		}
		r.RunAsUser, r.RunAsGroup, r.RunAsNonRoot, r.FSGroup, r.SupplementalGroups, r.SeccompProfile = nil, nil, nil, nil, nil, nil
		if !reflect.DeepEqual(*r, corev1.PodSecurityContext{}) {
			fail("pod securityContext: not translated: %s", asJSON(r))
		}
		rest.SecurityContext = nil
	}
	if !reflect.DeepEqual(*rest, corev1.PodSpec{}) {
		fail("pod spec: not translated: %s", asJSON(rest))
	}

	// The container.
	rc := c.DeepCopy()
	rc.Name, rc.Image, rc.ImagePullPolicy = "", "", "" // the image under test replaces the manifest's
	rc.TerminationMessagePath, rc.TerminationMessagePolicy = "", ""
	// $(VAR) in command/args is expanded below, once the env is known.
	if len(c.Command) > 0 {
		s.Entrypoint = append([]string(nil), c.Command...)
	}
	s.Args = append([]string(nil), c.Args...)
	rc.Command, rc.Args = nil, nil
	s.WorkingDir, rc.WorkingDir = c.WorkingDir, ""

	// Resources.
	for name, q := range c.Resources.Limits {
		switch name {
		case corev1.ResourceMemory:
			s.MemoryLimit = q.Value()
		case corev1.ResourceCPU:
			s.CPULimitMilli = q.MilliValue()
		case corev1.ResourceEphemeralStorage:
			s.EphemeralStorageLimit = q.Value()
		default:
			fail("container %s: resources.limits.%s is not translated", c.Name, name)
		}
	}
	for name, q := range c.Resources.Requests {
		switch name {
		case corev1.ResourceMemory:
			s.MemoryRequest = q.Value()
		case corev1.ResourceCPU:
			s.CPURequestMilli = q.MilliValue()
		case corev1.ResourceEphemeralStorage:
			s.EphemeralStorageRequest = q.Value()
		default:
			fail("container %s: resources.requests.%s is not translated", c.Name, name)
		}
	}
	rc.Resources.Limits, rc.Resources.Requests = nil, nil
	if s.MemoryLimit > 0 && s.MemoryRequest > s.MemoryLimit || s.CPULimitMilli > 0 && s.CPURequestMilli > s.CPULimitMilli ||
		s.EphemeralStorageLimit > 0 && s.EphemeralStorageRequest > s.EphemeralStorageLimit {
		fail("container %s: a request above its limit (the API server would refuse the pod)", c.Name)
	}

	// Security context.
	if csc := c.SecurityContext; csc != nil {
		r := csc.DeepCopy()
		s.applyIdentity(r.RunAsUser, r.RunAsGroup, r.RunAsNonRoot, &runAsNonRoot)
		if r.AllowPrivilegeEscalation != nil && !*r.AllowPrivilegeEscalation {
			s.NoNewPrivileges = true
		}
		if r.ReadOnlyRootFilesystem != nil {
			s.ReadOnlyRoot = *r.ReadOnlyRootFilesystem
		}
		if cp := r.Capabilities; cp != nil {
			if len(cp.Add) > 0 {
				fail("container %s: capabilities.add is not translated: %v", c.Name, cp.Add)
			}
			for _, d := range cp.Drop {
				s.CapDrop = append(s.CapDrop, strings.ToLower(string(d)))
			}
		}
		if sp := r.SeccompProfile; sp != nil && sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			fail("container %s: securityContext.seccompProfile %s: only RuntimeDefault is translated", c.Name, sp.Type)
		}
		r.RunAsUser, r.RunAsGroup, r.RunAsNonRoot, r.AllowPrivilegeEscalation, r.ReadOnlyRootFilesystem, r.Capabilities, r.SeccompProfile = nil, nil, nil, nil, nil, nil, nil
		if !reflect.DeepEqual(*r, corev1.SecurityContext{}) {
			fail("container %s: securityContext: not translated: %s", c.Name, asJSON(r))
		}
		rc.SecurityContext = nil
	}
	if runAsNonRoot && s.User == 0 {
		// The kubelet refuses to start it ("container has runAsNonRoot
		// and image will run as root"); the image's USER is not consulted
		// here, so the spec must name the user.
		fail("container %s: runAsNonRoot without a non-zero runAsUser", c.Name)
	}

	// Environment, as the kubelet builds it: the master service's
	// variables, then envFrom in order, then env in order; later wins.
	if cl.APIServerURL != "" {
		u, err := url.Parse(cl.APIServerURL)
		if err != nil || u.Scheme != "https" || u.Port() == "" {
			fail("API server URL %q: want https://host:port", cl.APIServerURL)
		} else {
			s.Env = append(s.Env, EnvVar{"KUBERNETES_SERVICE_HOST", u.Hostname()}, EnvVar{"KUBERNETES_SERVICE_PORT", u.Port()},
				EnvVar{"KUBERNETES_SERVICE_PORT_HTTPS", u.Port()}, EnvVar{"KUBERNETES_PORT", "tcp://" + u.Host})
		}
	}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil && ef.SecretRef == nil:
			cm := cl.ConfigMaps[ef.ConfigMapRef.Name]
			if cm == nil {
				if ef.ConfigMapRef.Optional == nil || !*ef.ConfigMapRef.Optional {
					fail("container %s: envFrom configMap %s not found (the pod would not start)", c.Name, ef.ConfigMapRef.Name)
				}
				continue
			}
			for _, k := range sortedKeys(cm.Data) {
				s.Env = append(s.Env, EnvVar{ef.Prefix + k, cm.Data[k]})
			}
			if len(cm.BinaryData) > 0 {
				fail("configMap %s: binaryData in envFrom is not translated", cm.Name)
			}
		case ef.SecretRef != nil && ef.ConfigMapRef == nil:
			sec := cl.Secrets[ef.SecretRef.Name]
			if sec == nil {
				if ef.SecretRef.Optional == nil || !*ef.SecretRef.Optional {
					fail("container %s: envFrom secret %s not found (the pod would not start)", c.Name, ef.SecretRef.Name)
				}
				continue
			}
			for _, k := range sortedKeys(sec.Data) {
				s.Env = append(s.Env, EnvVar{ef.Prefix + k, string(sec.Data[k])})
			}
		default:
			fail("container %s: envFrom entry not translated: %s", c.Name, asJSON(ef))
		}
	}
	rc.EnvFrom = nil
	for _, e := range c.Env {
		if strings.Contains(e.Value, "$(") {
			fail("container %s: env %s: $(VAR) expansion is not translated", c.Name, e.Name)
		}
		if e.ValueFrom == nil {
			s.Env = append(s.Env, EnvVar{e.Name, e.Value})
			continue
		}
		vf := e.ValueFrom
		switch {
		case vf.FieldRef != nil && vf.ResourceFieldRef == nil && vf.ConfigMapKeyRef == nil && vf.SecretKeyRef == nil:
			if v := vf.FieldRef.APIVersion; v != "" && v != "v1" {
				fail("container %s: env %s: fieldRef apiVersion %s", c.Name, e.Name, v)
			}
			switch vf.FieldRef.FieldPath {
			case "metadata.namespace":
				s.Env = append(s.Env, EnvVar{e.Name, cl.Namespace})
			case "metadata.name":
				s.Env = append(s.Env, EnvVar{e.Name, podName})
			default:
				fail("container %s: env %s: fieldRef %s is not translated", c.Name, e.Name, vf.FieldRef.FieldPath)
			}
		case vf.ConfigMapKeyRef != nil && vf.FieldRef == nil && vf.ResourceFieldRef == nil && vf.SecretKeyRef == nil:
			r := vf.ConfigMapKeyRef
			cm := cl.ConfigMaps[r.Name]
			v, ok := "", false
			if cm != nil {
				v, ok = cm.Data[r.Key]
			}
			if !ok && (r.Optional == nil || !*r.Optional) {
				fail("container %s: env %s: configMap %s key %s not found (the pod would not start)", c.Name, e.Name, r.Name, r.Key)
			}
			if ok {
				s.Env = append(s.Env, EnvVar{e.Name, v})
			}
		case vf.SecretKeyRef != nil && vf.FieldRef == nil && vf.ResourceFieldRef == nil && vf.ConfigMapKeyRef == nil:
			r := vf.SecretKeyRef
			sec := cl.Secrets[r.Name]
			var v []byte
			ok := false
			if sec != nil {
				v, ok = sec.Data[r.Key]
			}
			if !ok && (r.Optional == nil || !*r.Optional) {
				fail("container %s: env %s: secret %s key %s not found (the pod would not start)", c.Name, e.Name, r.Name, r.Key)
			}
			if ok {
				s.Env = append(s.Env, EnvVar{e.Name, string(v)})
			}
		default:
			fail("container %s: env %s: valueFrom not translated: %s", c.Name, e.Name, asJSON(vf))
		}
	}
	rc.Env = nil
	for _, e := range s.Env {
		if strings.ContainsAny(e.Name, "=\n\x00") || strings.ContainsAny(e.Value, "\n\x00") {
			fail("container %s: env %s: a name or value podman's --env-file cannot carry", c.Name, e.Name)
		}
	}
	for _, list := range [][]string{s.Entrypoint, s.Args} {
		for i, a := range list {
			x, err := expandVars(a, s.Env)
			if err != nil {
				fail("container %s: command/args %q: %v", c.Name, a, err)
			}
			list[i] = x
		}
	}

	// Volumes and mounts.
	vols := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		vols[v.Name] = v
	}
	used := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		r := vm.DeepCopy()
		r.Name, r.MountPath, r.ReadOnly = "", "", false
		if !reflect.DeepEqual(*r, corev1.VolumeMount{}) {
			fail("container %s: volumeMount %s: not translated: %s", c.Name, vm.Name, asJSON(r))
		}
		v, ok := vols[vm.Name]
		if !ok {
			fail("container %s: volumeMount %s: no such volume", c.Name, vm.Name)
			continue
		}
		used[vm.Name] = true
		m, err := volumeMount(v, vm, fsGroup, cl)
		if err != nil {
			fail("container %s: volume %s: %v", c.Name, vm.Name, err)
			continue
		}
		s.Mounts = append(s.Mounts, m)
	}
	rc.VolumeMounts = nil
	for _, v := range ps.Volumes {
		if !used[v.Name] {
			// Still materialised by the kubelet (a missing secret blocks
			// the pod), so check it resolves.
			if _, err := volumeMount(v, corev1.VolumeMount{Name: v.Name, MountPath: "/unused"}, fsGroup, cl); err != nil {
				fail("volume %s: %v", v.Name, err)
			}
		}
	}
	// The service-account token, as the kubelet's kube-api-access volume.
	automount := true
	if ps.AutomountServiceAccountToken != nil {
		automount = *ps.AutomountServiceAccountToken
	}
	if automount {
		sa := ps.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		if cl.Token == nil {
			fail("service account %s: no token source", sa)
		} else if tok, err := cl.Token(sa); err != nil {
			fail("service account %s: token: %v", sa, err)
		} else {
			s.Mounts = append(s.Mounts, Mount{Volume: "kube-api-access", Path: ServiceAccountDir, Kind: MountServiceAccount, ReadOnly: true,
				Files:    map[string][]byte{"token": []byte(tok), "ca.crt": cl.APIServerCA, "namespace": []byte(cl.Namespace)},
				FileMode: 0o644, FSGroup: fsGroup})
		}
	}
	// Ports and HTTP probes.
	for _, p := range c.Ports {
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP || p.HostPort != 0 || p.HostIP != "" {
			fail("container %s: port %s: only TCP container ports are translated: %s", c.Name, p.Name, asJSON(p))
			continue
		}
		if s.Ports == nil {
			s.Ports = map[string]int32{}
		}
		s.Ports[p.Name] = p.ContainerPort
	}
	rc.Ports = nil
	for kind, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		if pr == nil {
			continue
		}
		g := pr.HTTPGet
		if g == nil || pr.Exec != nil || pr.TCPSocket != nil || pr.GRPC != nil || g.Host != "" || len(g.HTTPHeaders) > 0 || g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP {
			fail("container %s: %s probe: only plain httpGet probes are translated: %s", c.Name, kind, asJSON(pr))
			continue
		}
		port := int32(g.Port.IntValue())
		if g.Port.StrVal != "" {
			p, ok := s.Ports[g.Port.StrVal]
			if !ok {
				fail("container %s: %s probe: no port named %q", c.Name, kind, g.Port.StrVal)
				continue
			}
			port = p
		}
		s.Probes = append(s.Probes, Probe{Kind: kind, Path: g.Path, Port: port})
	}
	slices.SortFunc(s.Probes, func(a, b Probe) int { return strings.Compare(a.Kind, b.Kind) })
	rc.ReadinessProbe, rc.LivenessProbe, rc.StartupProbe = nil, nil, nil
	if !reflect.DeepEqual(*rc, corev1.Container{}) {
		fail("container %s: not translated: %s", c.Name, asJSON(rc))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s %s: %w", w.Kind, w.Name, err)
	}
	return s, nil
}

func volumeMount(v corev1.Volume, vm corev1.VolumeMount, fsGroup *int64, cl Cluster) (Mount, error) {
	m := Mount{Volume: v.Name, Path: vm.MountPath, ReadOnly: vm.ReadOnly, FSGroup: fsGroup}
	src := v.VolumeSource
	switch {
	case src.Secret != nil && reflect.DeepEqual(src, corev1.VolumeSource{Secret: src.Secret}):
		sv := src.Secret
		if len(sv.Items) > 0 {
			return m, errors.New("secret items are not translated")
		}
		m.Kind, m.ReadOnly = MountSecret, true // secret volumes are always read-only
		m.FileMode = 0o644                     // Kubernetes' default
		if sv.DefaultMode != nil {
			m.FileMode = os.FileMode(*sv.DefaultMode) & 0o777
		}
		sec := cl.Secrets[sv.SecretName]
		if sec == nil {
			if sv.Optional != nil && *sv.Optional {
				m.Files = map[string][]byte{}
				return m, nil
			}
			return m, fmt.Errorf("secret %s not found (the pod would not start)", sv.SecretName)
		}
		m.Files = map[string][]byte{}
		for k, b := range sec.Data {
			m.Files[k] = b
		}
		for k, s := range sec.StringData {
			m.Files[k] = []byte(s)
		}
		return m, nil
	case src.EmptyDir != nil && reflect.DeepEqual(src, corev1.VolumeSource{EmptyDir: src.EmptyDir}):
		ed := src.EmptyDir
		if ed.SizeLimit != nil {
			m.SizeLimit = ed.SizeLimit.Value()
		}
		switch ed.Medium {
		case corev1.StorageMediumMemory:
			m.Kind = MountEmptyDirMemory
			if m.SizeLimit == 0 {
				return m, errors.New("a memory emptyDir without sizeLimit (sized by the node's memory) is not translated")
			}
		case corev1.StorageMediumDefault:
			m.Kind = MountEmptyDirDisk
		default:
			return m, fmt.Errorf("emptyDir medium %s is not translated", ed.Medium)
		}
		return m, nil
	}
	return m, fmt.Errorf("volume source not translated: %s", asJSON(src))
}

// EnvValue is the value of an environment variable of the spec (the last
// definition wins, as in Kubernetes) and whether it is set.
func (s *Spec) EnvValue(name string) (string, bool) {
	v, ok := "", false
	for _, e := range s.Env {
		if e.Name == name {
			v, ok = e.Value, true
		}
	}
	return v, ok
}

// Mount returns the mount at path in the container, or nil.
func (s *Spec) Mount(path string) *Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Path == path {
			return &s.Mounts[i]
		}
	}
	return nil
}

// Limits describes the spec's limits, e.g. "memory 512 MiB, cpu 1000m".
func (s *Spec) Limits() string {
	return fmt.Sprintf("memory %s, cpu %dm", mib(s.MemoryLimit), s.CPULimitMilli)
}

func mib(b int64) string {
	if b == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func asJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

// Quantity parses a Kubernetes quantity (tests).
func Quantity(s string) int64 {
	q := resource.MustParse(s)
	return q.Value()
}

// applyIdentity applies runAsUser, runAsGroup and runAsNonRoot of a pod's or
// a container's securityContext (the container's, applied second, wins, as
// in Kubernetes).
func (s *Spec) applyIdentity(user, group *int64, nonRoot *bool, runAsNonRoot *bool) {
	if user != nil {
		s.User = *user
	}
	if group != nil {
		s.Group = *group
	}
	if nonRoot != nil {
		*runAsNonRoot = *nonRoot
	}
}

// expandVars expands $(VAR) in a command or argument as the kubelet does
// (VAR from the container's env, the last definition winning; $$ is a
// literal $), except that a reference to a variable the env does not
// define is an error here (the kubelet leaves it as written: a mistake
// the test should name).
func expandVars(a string, env []EnvVar) (string, error) {
	if !strings.Contains(a, "$") {
		return a, nil
	}
	vals := map[string]string{}
	for _, e := range env {
		vals[e.Name] = e.Value
	}
	var b strings.Builder
	for i := 0; i < len(a); i++ {
		switch {
		case a[i] != '$' || i+1 == len(a):
			b.WriteByte(a[i])
		case a[i+1] == '$':
			b.WriteByte('$')
			i++
		case a[i+1] == '(':
			end := strings.IndexByte(a[i+2:], ')')
			if end < 0 {
				return "", fmt.Errorf("$(VAR) expansion: unterminated $( in %q", a)
			}
			name := a[i+2 : i+2+end]
			v, ok := vals[name]
			if !ok {
				return "", fmt.Errorf("$(VAR) expansion: %s is not in the container's env", name)
			}
			b.WriteString(v)
			i += 2 + end
		default:
			b.WriteByte(a[i])
		}
	}
	return b.String(), nil
}
