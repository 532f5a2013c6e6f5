// Package deploy holds the Kubernetes manifests of etcd-recovery (the YAML
// files of this directory), the Helm chart that installs them for the
// fleet (Chart.yaml, values.yaml, templates/: it reads those files), and
// their tests: chart_test.go renders the chart for 2 and 18 namespaces and
// applies every object with server-side dry-run to a real kube-apiserver;
// deploy_test.go runs the shipped pod specs (the backup CronJob's job
// template, the pre-update Job, the toolkit and the exporter Deployments)
// in the image `make image` builds, as a kubelet would run them
// (internal/testing/podrun), against a real kube-apiserver, real etcd
// clusters and MinIO, with their limits.
package deploy
