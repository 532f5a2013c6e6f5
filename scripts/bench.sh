#!/usr/bin/env bash
# make bench: every benchmark, once each (-benchtime 1x: each iteration is a
# whole scenario against real servers), printing ratios against the baselines
# measured in the same run, and peak RSS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
go test -run '^$' -bench "${BENCH:-.}" -benchtime 1x -timeout 60m ${BENCH_PKGS:-./...}
