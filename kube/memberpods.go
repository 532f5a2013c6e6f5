package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// MemberPods is what Kubernetes says of an EtcdCluster's member pods: how
// many there are (not being deleted, not finished) and how many of them
// are Running and Ready (the kubelet's readiness).
type MemberPods struct {
	Pods, Ready int
}

// String is "2/3 member pods Running and Ready".
func (p MemberPods) String() string {
	return fmt.Sprintf("%d/%d member pods Running and Ready", p.Ready, p.Pods)
}

// MemberPodsOf reads the member pods of the EtcdCluster name (labels
// app=etcd, etcd_cluster=name).
func (k *Client) MemberPodsOf(ctx context.Context, name string) (MemberPods, error) {
	sel := labels.SelectorFromSet(labels.Set{LabelApp: "etcd", LabelCluster: name}).String()
	pods, err := k.Core.Pods(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return MemberPods{}, fmt.Errorf("listing the member pods of etcdcluster %s/%s: %w", k.Namespace, name, ctxErr(ctx, err))
	}
	var out MemberPods
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out.Pods++
		if p.Status.Phase == corev1.PodRunning && podReady(p) {
			out.Ready++
		}
	}
	return out, nil
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
