// Package runbooks holds the SRE runbooks (Markdown) and the test that
// executes them: runbooks_test.go parses each runbook's ```sh blocks, fills
// in their <placeholders> from a real failure (etcd clusters and MinIO on
// loopback), runs them in order with bash -euo pipefail and only the
// toolkit image's tools on PATH, and checks the outcome each runbook
// promises. Every block must run (or say in the Markdown why it cannot), and
// every section inspect's NEXT STEP points to must be executed. The parser
// and the runner are internal/testing/mdblocks, which docs/ shares.
package runbooks
