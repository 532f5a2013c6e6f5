// Package scratchpod holds a test only: the CronJob's pod of deploy/, run
// in the toolkit image with podman against real etcd, MinIO and
// kube-apiserver, with its scratch volume sized just above and just below
// what an encrypted backup --drill needs (docs/backup.md#scratch-space).
package scratchpod
