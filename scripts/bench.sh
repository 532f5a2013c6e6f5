#!/usr/bin/env bash
# make bench: every benchmark, once each (-benchtime 1x: each iteration is a
# whole scenario against real servers), printing ratios against the baselines
# measured in the same run, and peak RSS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The manual baselines use stock tools: curl (S3 upload/download with
# --aws-sigv4) and zstd (the restore baseline's decompression).
missing=()
for tool in curl zstd; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
  echo "bench: installing ${missing[*]}" >&2
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
# BenchmarkDrill (drill/bench_test.go; BENCH_DRILL_MB, default 512):
# drill s/GiB against restore alone, start/hash shares, tool and etcd peak RSS.
go test -run '^$' -bench "${BENCH:-.}" -benchtime 1x -timeout 60m ${BENCH_PKGS:-./...}
