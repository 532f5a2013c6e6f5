// Package deploy holds the Kubernetes manifests of etcd-recovery (the YAML
// files of this directory) and their tests: deploy_test.go runs the three
// shipped pod specs (the backup CronJob's job template, the pre-update
// Job template and the toolkit Deployment) in the image `make image`
// builds, as a kubelet would run them (internal/testing/podrun), against a real
// kube-apiserver, real etcd clusters and MinIO, with their limits.
package deploy
