package testenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The toolkit image, as `make image` (scripts/image.sh) builds it with
// Debian's podman/buildah, and the flags every podman or buildah call of
// the project uses (the script's and the tests').

// PodmanGlobalArgs are podman's and buildah's global flags: the vfs storage
// driver (no overlay module or fuse needed).
var PodmanGlobalArgs = []string{"--storage-driver", "vfs"}

// PodmanRunArgs are `podman run`'s flags known to work on these machines:
// runc (crun refuses the cgroup layout), cgroupfs (no systemd), explicit
// ulimits, and the host network (the test servers listen on loopback).
var PodmanRunArgs = []string{
	"--runtime", "runc", "--cgroup-manager", "cgroupfs",
	"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096",
	"--network", "host",
}

// ImageRefFile is where scripts/image.sh records the reference of the
// image it built, relative to the repository root.
const ImageRefFile = "bin/image/ref"

// Image is the reference of the toolkit image `make image` built. `make
// test` builds it first; a test run without it fails (nothing is skipped).
func Image(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(RepoRoot(tb), ImageRefFile))
	if err != nil {
		tb.Fatalf("testenv: the toolkit image is not built (run `make image`): %v", err)
	}
	return strings.TrimSpace(string(b))
}

// Podman runs podman with PodmanGlobalArgs and args, returning its
// combined output.
func Podman(tb testing.TB, args ...string) ([]byte, error) {
	tb.Helper()
	return PodmanCmd(args...).CombinedOutput()
}

// ImageDigestFile holds the digest a registry serves for the image once its
// OCI archive is pushed as it is (the archive's manifest digest);
// ImageLocalDigestFile the digest in podman's storage.
const (
	ImageDigestFile      = "bin/image/digest"
	ImageLocalDigestFile = "bin/image/local-digest"
)

// PodmanCmd is an unstarted podman command with PodmanGlobalArgs, for
// callers that set its environment, stdin or outputs (secrets go in the
// environment or files, never in args).
func PodmanCmd(args ...string) *exec.Cmd {
	return exec.Command("podman", append(append([]string{}, PodmanGlobalArgs...), args...)...)
}

// ImageConfig is what `podman image inspect` reports about an image: its
// identity and the config a container starts from.
type ImageConfig struct {
	ID     string
	Digest string
	Size   int64
	ContainerConfig
}

// ContainerConfig is the config a container of an image starts from.
type ContainerConfig struct {
	User       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	Labels     map[string]string
}

// InspectImage returns ref's ImageConfig, failing the test if podman can't.
func InspectImage(tb testing.TB, ref string) ImageConfig {
	tb.Helper()
	out, err := PodmanCmd("image", "inspect", ref).Output()
	if err != nil {
		tb.Fatalf("testenv: podman image inspect %s: %v", ref, exitDetail(err))
	}
	var imgs []struct {
		ID     string `json:"Id"`
		Digest string
		Size   int64
		Config ContainerConfig
	}
	if err := json.Unmarshal(out, &imgs); err != nil || len(imgs) != 1 {
		tb.Fatalf("testenv: podman image inspect %s: %d images, %v", ref, len(imgs), err)
	}
	i := imgs[0]
	return ImageConfig{ID: i.ID, Digest: i.Digest, Size: i.Size, ContainerConfig: i.Config}
}

// UID and GID are the numeric user and group the image runs as (its
// USER, "uid:gid"); -1 when the image names none or names them by name.
func (c ImageConfig) UID() int { u, _, _ := strings.Cut(c.User, ":"); return atoiOr(u, -1) }

// GID: see UID.
func (c ImageConfig) GID() int {
	_, g, ok := strings.Cut(c.User, ":")
	if !ok {
		return -1
	}
	return atoiOr(g, -1)
}

func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return def
	}
	return n
}

// exitDetail adds a failed command's stderr to its error.
func exitDetail(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}
