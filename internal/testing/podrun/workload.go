// Package podrun runs one container of a pod template from deploy/ with
// podman, the way a kubelet would run it: the command and args, env and
// envFrom (ConfigMaps, the downward API's metadata.namespace), the secret
// volumes and the service-account token where Kubernetes mounts them, the
// pod's and the container's security context, every emptyDir with its
// medium and sizeLimit, and resources.limits as cgroup limits. It measures
// the container's peak memory and reports OOM kills.
//
// The translation is strict: a field of the pod spec it does not
// implement fails the translation (Translate), so a manifest change
// cannot go untested silently. It is test plumbing (deploy/deploy_test.go)
// and needs root, podman and runc (testenv.PodmanGlobalArgs,
// testenv.PodmanRunArgs) on a cgroup v1 host.
package podrun

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Workload is the pod template of a CronJob, Job or Deployment.
type Workload struct {
	Kind     string // CronJob, Job or Deployment
	Name     string // metadata.name
	Template corev1.PodTemplateSpec
	// ActiveDeadline is the Job's (or the CronJob's job template's)
	// activeDeadlineSeconds: the pod is killed when it runs longer. Zero
	// when unset (a Deployment).
	ActiveDeadline time.Duration
}

// LoadWorkload reads the single workload (CronJob, Job or Deployment) of
// a manifest file.
func LoadWorkload(path string) (*Workload, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	w, err := ParseWorkload(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return w, nil
}

// ParseWorkload decodes a YAML stream holding exactly one CronJob, Job
// or Deployment (other kinds are an error). Decoding is strict: a field
// the Kubernetes types do not have is an error, as kubectl's server-side
// field validation would make it.
func ParseWorkload(b []byte) (*Workload, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var found *Workload
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, err
		}
		if head.Kind == "" {
			continue // an empty document (comments only)
		}
		w, err := parseOne(head.APIVersion, head.Kind, doc)
		if err != nil {
			return nil, err
		}
		if found != nil {
			return nil, fmt.Errorf("more than one workload (%s %s, %s %s)", found.Kind, found.Name, w.Kind, w.Name)
		}
		found = w
	}
	if found == nil {
		return nil, errors.New("no CronJob, Job or Deployment")
	}
	return found, nil
}

func parseOne(apiVersion, kind string, doc []byte) (*Workload, error) {
	deadline := func(s *int64) time.Duration {
		if s == nil {
			return 0
		}
		return time.Duration(*s) * time.Second
	}
	switch apiVersion + " " + kind {
	case "batch/v1 CronJob":
		var o batchv1.CronJob
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			return nil, fmt.Errorf("CronJob: %w", err)
		}
		js := o.Spec.JobTemplate.Spec
		return &Workload{Kind: kind, Name: o.Name, Template: js.Template, ActiveDeadline: deadline(js.ActiveDeadlineSeconds)}, nil
	case "batch/v1 Job":
		var o batchv1.Job
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			return nil, fmt.Errorf("Job: %w", err)
		}
		return &Workload{Kind: kind, Name: o.Name, Template: o.Spec.Template, ActiveDeadline: deadline(o.Spec.ActiveDeadlineSeconds)}, nil
	case "apps/v1 Deployment":
		var o appsv1.Deployment
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			return nil, fmt.Errorf("Deployment: %w", err)
		}
		return &Workload{Kind: kind, Name: o.Name, Template: o.Spec.Template}, nil
	}
	return nil, fmt.Errorf("%s %s is not a CronJob, Job or Deployment", apiVersion, kind)
}

// ParseConfigMap decodes the single ConfigMap of a YAML stream (e.g.
// deploy/20-config.yaml), strictly.
func ParseConfigMap(b []byte) (*corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		return nil, err
	}
	if cm.Kind != "ConfigMap" || cm.Name == "" {
		return nil, fmt.Errorf("not a named ConfigMap (kind %q, name %q)", cm.Kind, cm.Name)
	}
	return &cm, nil
}
