// Package undelete undoes a bad delete without rolling back anything
// else: it brings back into the live cluster, through etcd's API, the keys
// a prefix (or a Kubernetes namespace) had at a revision before the
// delete, each with its bytes from that revision and each written only
// while it is still absent. The revision's keyspace is built as a
// point-in-time restore builds it (the newest backup at or below it, and
// the journal replayed up to it), in a scratch file; the live cluster is
// never stopped. See Run, docs/undelete.md and runbooks/undelete.md.
package undelete
