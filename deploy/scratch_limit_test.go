package deploy

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/armada/etcd-recovery/restore"
)

// maxQuotaBytes is the largest database etcd's quota allows (8 GiB), the
// database the scratch volumes are sized for.
const maxQuotaBytes = 8 << 30

// Every container whose scratch ($TMPDIR) is an emptyDir says its
// sizeLimit in ETCD_RECOVERY_SCRATCH_LIMIT, with the same value (statfs
// does not show a sizeLimit: without the variable the tool's free-space
// check passes and the kubelet evicts the pod); no container sets the
// variable without such a volume; every container that drills (backup
// --drill, drill) has one; and each limit holds the drill of the largest
// database etcd's quota allows (restore.DrillScratchBytes beside the
// database itself): in the toolkit, what fits is refused or run, never
// evicted with the exporter. The manifests covered: the CronJob, the
// pre-update Job template (no scratch: it streams and runs no drill), the
// toolkit, and any other under deploy/. Pure YAML, well under 1 s.
func TestScratchLimitMatchesSizeLimit(t *testing.T) {
	t.Parallel()
	scratchPods := 0
	for _, pc := range deployContainers(t) {
		spec, c, where, env := pc.spec, pc.c, pc.where, pc.env
		limitEnv, hasLimit := env[restore.EnvScratchLimit]
		vol := scratchVolume(spec, c, env["TMPDIR"])
		drills := slices.Contains(c.Args, "--drill") || slices.Contains(c.Args, "drill") || slices.Contains(c.Command, "drill")
		switch {
		case vol == nil && hasLimit:
			t.Errorf("%s: sets %s=%s but its TMPDIR (%q) is not a disk emptyDir", where, restore.EnvScratchLimit, limitEnv, env["TMPDIR"])
			continue
		case vol == nil && drills:
			t.Errorf("%s: drills (%s) without a scratch emptyDir at its TMPDIR", where, strings.Join(c.Args, " "))
			continue
		case vol == nil:
			continue
		}
		scratchPods++
		if vol.EmptyDir.SizeLimit == nil {
			t.Errorf("%s: scratch emptyDir %s has no sizeLimit", where, vol.Name)
			continue
		}
		sizeLimit := vol.EmptyDir.SizeLimit.Value()
		if !hasLimit {
			t.Errorf("%s: scratch emptyDir %s has sizeLimit %s but the container does not set %s to it",
				where, vol.Name, vol.EmptyDir.SizeLimit, restore.EnvScratchLimit)
			continue
		}
		limit, err := restore.ParseScratchLimit(limitEnv)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if limit != sizeLimit {
			t.Errorf("%s: %s=%s (%d bytes), but emptyDir %s has sizeLimit %s (%d bytes): keep them equal",
				where, restore.EnvScratchLimit, limitEnv, limit, vol.Name, vol.EmptyDir.SizeLimit, sizeLimit)
		}
		if need := int64(maxQuotaBytes) + restore.DrillScratchBytes(maxQuotaBytes); limit < need {
			t.Errorf("%s: scratch limit %d bytes holds no drill of an 8 GiB database (%d bytes)", where, limit, need)
		}
	}
	if scratchPods < 2 {
		t.Errorf("found %d containers with a scratch emptyDir; want at least the CronJob's and the toolkit's", scratchPods)
	}
}

// scratchVolume is the disk emptyDir mounted at dir in c, or nil.
func scratchVolume(spec *corev1.PodSpec, c corev1.Container, dir string) *corev1.Volume {
	if dir == "" {
		return nil
	}
	for _, m := range c.VolumeMounts {
		if strings.TrimSuffix(m.MountPath, "/") != strings.TrimSuffix(dir, "/") {
			continue
		}
		for i := range spec.Volumes {
			v := &spec.Volumes[i]
			if v.Name == m.Name && v.EmptyDir != nil && v.EmptyDir.Medium != corev1.StorageMediumMemory {
				return v
			}
		}
	}
	return nil
}

// idleEphemeralRequest is the most ephemeral storage a long-running pod
// (a Deployment's) may request: what it holds idle (logs), not what its
// emptyDirs may hold while an SRE works in it.
const idleEphemeralRequest = 1 << 30

// TestEphemeralStorageCoversEmptyDirs: every pod under deploy/ requests
// ephemeral storage. A Job's or CronJob's pod, which exists only while it
// works, requests at least the sum of its disk emptyDirs' sizeLimits (what
// it may fill before the kubelet evicts it: 10 GiB for a drill, 18 GiB for
// a proof), so the scheduler places it where that much node disk is free;
// a Deployment's (the toolkit: 28 GiB of emptyDirs, idle until an SRE
// execs in) requests at most 1 GiB, or 18 namespaces would reserve 504 GiB
// of node disk for idle pods. Every limit is above the request and the
// emptyDirs' sizeLimits by at least the logs' margin (64 MiB), so the
// emptyDir's own sizeLimit, the one the tool checks first
// (ETCD_RECOVERY_SCRATCH_LIMIT), is met before the pod's limit. Every disk
// emptyDir has a sizeLimit.
func TestEphemeralStorageCoversEmptyDirs(t *testing.T) {
	t.Parallel()
	specs := deployPodSpecs(t)
	if len(specs) < 5 {
		t.Fatalf("only %d pod specs under deploy/", len(specs))
	}
	for _, key := range slices.Sorted(mapsKeysPS(specs)) {
		spec := specs[key]
		var disk int64
		for _, v := range spec.Volumes {
			if v.EmptyDir == nil || v.EmptyDir.Medium == corev1.StorageMediumMemory {
				continue
			}
			if v.EmptyDir.SizeLimit == nil {
				t.Errorf("%s: disk emptyDir %s has no sizeLimit", key, v.Name)
				continue
			}
			disk += v.EmptyDir.SizeLimit.Value()
		}
		var req, lim int64
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			if q, ok := c.Resources.Requests[corev1.ResourceEphemeralStorage]; ok {
				req += q.Value()
			} else {
				t.Errorf("%s container %s: no ephemeral-storage request", key, c.Name)
			}
			if q, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]; ok {
				lim += q.Value()
			} else {
				t.Errorf("%s container %s: no ephemeral-storage limit", key, c.Name)
			}
		}
		if strings.Contains(key, ": Deployment/") {
			// Long-running, idle most of the time: a request of its
			// emptyDirs would reserve their disk for ever on the node
			// (18 toolkits x 28 GiB), so it asks for little.
			if req > idleEphemeralRequest {
				t.Errorf("%s: a long-running pod requests %d bytes of ephemeral storage: want at most %d (what it holds idle), its limit covering its emptyDirs", key, req, int64(idleEphemeralRequest))
			}
		} else if req < disk {
			t.Errorf("%s: ephemeral-storage requests %d bytes, below its disk emptyDirs' sizeLimits (%d bytes)", key, req, disk)
		}
		if lim < max(req, disk)+64<<20 {
			t.Errorf("%s: ephemeral-storage limit %d bytes: want at least the request (%d) and the disk emptyDirs' sizeLimits (%d) plus 64 MiB of logs", key, lim, req, disk)
		}
	}
}
