package podrun

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// HostCommand is the container of s as a plain process of binary (the
// image's entrypoint) on the host, without podman or root: for tests that
// need what the pod runs (its args, its environment as the kubelet builds
// it, its volumes' files and its service account) but not its isolation,
// limits or image. Every volume is materialised under dir (dir/<volume>:
// secret files with their mode, the service-account token, emptyDirs
// empty), and every environment value naming a mount path, or a path
// under one, is rewritten to the host directory. The service-account
// mount becomes a kubeconfig (dir/kubeconfig: the API server of
// KUBERNETES_SERVICE_HOST/PORT, the token file, ca.crt and the
// namespace) in KUBECONFIG, which the tool prefers to the in-cluster
// paths it cannot have here. The environment is only the spec's, plus
// PATH and HOME (dir), as a container's is. A spec with a command (an
// entrypoint of its own) is an error: binary is what runs.
func (s *Spec) HostCommand(ctx context.Context, binary, dir string) (*exec.Cmd, error) {
	if len(s.Entrypoint) > 0 {
		return nil, fmt.Errorf("pod %s container %s: command %q replaces the image's entrypoint: not run on the host", s.PodName, s.Container, s.Entrypoint)
	}
	type hostMount struct{ path, host string }
	var mounts []hostMount
	var saDir string
	for _, m := range s.Mounts {
		host := filepath.Join(dir, m.Volume)
		if err := os.MkdirAll(host, 0o700); err != nil {
			return nil, err
		}
		mode := m.FileMode
		if mode == 0 {
			mode = 0o644
		}
		for name, b := range m.Files {
			if strings.Contains(name, "/") {
				if err := os.MkdirAll(filepath.Join(host, filepath.Dir(name)), 0o700); err != nil {
					return nil, err
				}
			}
			if err := os.WriteFile(filepath.Join(host, name), b, mode); err != nil {
				return nil, err
			}
		}
		if m.Kind == MountServiceAccount {
			saDir = host
		}
		mounts = append(mounts, hostMount{m.Path, host})
	}
	// The longest mount path first: a path under a nested mount is that
	// mount's.
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].path) > len(mounts[j].path) })
	remap := func(v string) string {
		for _, m := range mounts {
			if v == m.path {
				return m.host
			}
			if rest, ok := strings.CutPrefix(v, strings.TrimSuffix(m.path, "/")+"/"); ok {
				return filepath.Join(m.host, rest)
			}
		}
		return v
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir}
	for _, e := range s.Env {
		env = append(env, e.Name+"="+remap(e.Value))
	}
	if saDir != "" {
		host, _ := s.EnvValue("KUBERNETES_SERVICE_HOST")
		port, _ := s.EnvValue("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, fmt.Errorf("pod %s: a service-account token but no KUBERNETES_SERVICE_HOST/PORT (Cluster.APIServerURL)", s.PodName)
		}
		ns, err := os.ReadFile(filepath.Join(saDir, "namespace"))
		if err != nil {
			return nil, err
		}
		kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: in-cluster
  cluster: {server: "https://%s:%s", certificate-authority: %q}
users:
- name: sa
  user: {tokenFile: %q}
contexts:
- name: in-cluster
  context: {cluster: in-cluster, user: sa, namespace: %q}
current-context: in-cluster
`, host, port, filepath.Join(saDir, "ca.crt"), filepath.Join(saDir, "token"), string(ns))
		path := filepath.Join(dir, "kubeconfig")
		if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
			return nil, err
		}
		env = append(env, "KUBECONFIG="+path)
	}
	cmd := exec.CommandContext(ctx, binary, s.Args...)
	cmd.Env = env
	cmd.Dir = dir
	if s.WorkingDir != "" {
		cmd.Dir = remap(s.WorkingDir)
	}
	return cmd, nil
}
