// Package docs holds the project's documentation (Markdown) and the tests
// that keep it true: docs_test.go runs every sh block of these documents in
// a scenario against real servers (etcd, MinIO, kube-apiserver on
// loopback, started by the test), with the harness the runbooks use
// (internal/testing/mdblocks), or requires the block to say why it cannot
// run; checks every relative link and #anchor of README.md, docs/ and
// runbooks/; and refuses mentions of work sessions and issue numbers.
package docs
