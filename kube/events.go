package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Event reasons recorded on an EtcdCluster.
const (
	ReasonBackupSucceeded = "BackupSucceeded"
	ReasonBackupFailed    = "BackupFailed"
	// Reasons of the drill of a backup, recorded next to the backup's own
	// Event (backup --all --drill) or alone (drill --all).
	ReasonDrillPassed = "DrillPassed"
	ReasonDrillFailed = "DrillFailed"
	ReasonDrillNotRun = "DrillNotRun"
	// ReasonDrillInconclusive: the node, not the backup, stopped the drill.
	ReasonDrillInconclusive = "DrillInconclusive"
	// Reasons of restore-all: a cluster's restore began (Normal), ended
	// verified (Normal) or failed (Warning).
	ReasonRestoreStarted   = "RestoreStarted"
	ReasonRestoreSucceeded = "RestoreSucceeded"
	ReasonRestoreFailed    = "RestoreFailed"
	// EventComponent is the event source, as `kubectl describe` shows it.
	EventComponent = "etcd-recovery"
)

// maxEventMessage is the API server's limit on an event message.
const maxEventMessage = 1024

// RecordEvent records a core/v1 Event on the EtcdCluster, so that
// `kubectl describe etcdcluster NAME` shows it. eventType is
// corev1.EventTypeNormal or corev1.EventTypeWarning.
func (k *Client) RecordEvent(ctx context.Context, c Cluster, eventType, reason, message string) error {
	if len(message) > maxEventMessage {
		message = message[:maxEventMessage-3] + "..."
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: c.Name + ".",
			Namespace:    c.Namespace,
		},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: APIVersion,
			Kind:       KindEtcdCluster,
			Namespace:  c.Namespace,
			Name:       c.Name,
			UID:        c.UID,
		},
		Reason:              reason,
		Message:             message,
		Type:                eventType,
		Source:              corev1.EventSource{Component: EventComponent},
		ReportingController: "etcd-recovery.armada.ibm.com/" + EventComponent,
		ReportingInstance:   hostname(),
		Action:              "Backup",
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
	if _, err := k.Core.Events(c.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("recording event %s on etcdcluster %s: %w", reason, c, ctxErr(ctx, err))
	}
	return nil
}

// Events returns the events recorded on the EtcdCluster (tests, tooling).
func (k *Client) Events(ctx context.Context, c Cluster) ([]corev1.Event, error) {
	list, err := k.Core.Events(c.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=" + KindEtcdCluster + ",involvedObject.name=" + c.Name,
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}
