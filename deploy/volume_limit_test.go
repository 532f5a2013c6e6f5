package deploy

import (
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/restore"
)

// Every disk emptyDir a tool container mounts, other than its scratch
// ($TMPDIR, checked by TestScratchLimitMatchesSizeLimit), is listed in its
// ETCD_RECOVERY_VOLUME_LIMITS with the volume's sizeLimit: statfs shows
// the node's free disk, not the sizeLimit, so without it a manual restore
// of three 8 GiB members into the toolkit's /restore passes the tool's
// check and the kubelet evicts the pod (and deletes the volume) halfway.
// No entry names a directory that is not such a volume. Pure YAML.
func TestVolumeLimitsMatchSizeLimits(t *testing.T) {
	t.Parallel()
	listed := 0
	for _, pc := range deployContainers(t) {
		spec, c, where, env := pc.spec, pc.c, pc.where, pc.env
		limits := map[string]string{}
		if v := env[restore.EnvVolumeLimits]; v != "" {
			for _, pair := range strings.Split(v, ",") {
				dir, q, ok := strings.Cut(pair, "=")
				if !ok {
					t.Errorf("%s: %s=%q: entry %q is not dir=quantity", where, restore.EnvVolumeLimits, v, pair)
					continue
				}
				limits[strings.TrimSuffix(dir, "/")] = q
			}
		}
		for _, m := range c.VolumeMounts {
			dir := strings.TrimSuffix(m.MountPath, "/")
			vol := scratchVolume(spec, c, dir)
			if vol == nil || dir == strings.TrimSuffix(env["TMPDIR"], "/") {
				continue
			}
			q, ok := limits[dir]
			delete(limits, dir)
			if !ok {
				t.Errorf("%s: disk emptyDir %s at %s (sizeLimit %v) is not in %s", where, vol.Name, dir, vol.EmptyDir.SizeLimit, restore.EnvVolumeLimits)
				continue
			}
			listed++
			n, err := restore.ParseScratchLimit(q)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if vol.EmptyDir.SizeLimit == nil || n != vol.EmptyDir.SizeLimit.Value() {
				t.Errorf("%s: %s gives %s %s, but emptyDir %s has sizeLimit %v: keep them equal", where, restore.EnvVolumeLimits, dir, q, vol.Name, vol.EmptyDir.SizeLimit)
			}
		}
		for dir := range limits {
			t.Errorf("%s: %s names %s, which is not a disk emptyDir it mounts", where, restore.EnvVolumeLimits, dir)
		}
	}
	if listed == 0 {
		t.Error("no container lists a volume in " + restore.EnvVolumeLimits + ": want at least the toolkit's /restore")
	}
}
