#!/usr/bin/env bash
# Prints the test-server cache: $TEST_SERVERS_DIR, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/etcd-recovery/test-servers. Outside the
# clone, so a fresh checkout (CI's case) reuses the servers an earlier run
# built. internal/testing/testenv.ServersDir answers the same.
set -euo pipefail
if [[ -n "${TEST_SERVERS_DIR:-}" ]]; then
  echo "$TEST_SERVERS_DIR"
else
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/etcd-recovery/test-servers"
fi
