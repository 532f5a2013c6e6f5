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
# BenchmarkRebuildFromStore (kube/; BENCH_REBUILD_MB, default 1024): an empty
# namespace to a verified cluster through restore --via etcd-operator
# --rebuild, split into steps; the escrow's size and PUTs over 3 backups
# (~3 min).
# BenchmarkDrill (drill/bench_test.go; BENCH_DRILL_MB, default 512):
# drill s/GiB against restore alone, start/hash shares, tool and etcd peak RSS.
# The journal (internal/journal/journal_bench_test.go, pitr_bench_test.go;
# restore/replay_bench_test.go), about 20 min in all:
#   BenchmarkJournalRPO: event -> segment stored p50/p99, journal CPU and
#     peak RSS, segments (PUTs) per cluster per day, at BENCH_JOURNAL_RATES
#     (100,1000,5000 writes/s) x BENCH_JOURNAL_INTERVALS (1s,30s) for
#     BENCH_JOURNAL_SECONDS (25), and BENCH_JOURNAL_CLUSTERS (50) x
#     BENCH_JOURNAL_CLUSTER_RATE (50) writes/s in one journal process;
#   BenchmarkPITRRestore: restore --to-revision against a plain restore of
#     the same backup, BENCH_PITR_EVENTS (100000,1000000) journaled events;
#   BenchmarkReplay: replay into bbolt against the same events through an
#     etcd client, BENCH_REPLAY_EVENTS (100000);
#   BenchmarkJournalCatchUp100: one journal process of BENCH_CATCHUP_CLUSTERS
#     (100) clusters catching up BENCH_CATCHUP_MB (16) MiB each at once, peak
#     RSS with --memory-budget against none, idle and one cluster (~3 min).
# BenchmarkRestoreAll (fleet/; BENCH_RESTOREALL_CLUSTERS, default 8,
# BENCH_RESTOREALL_MB, default 32): restore-all of a namespace of quorum-lost
# clusters at --parallel 1, 2, 4, 8: wall time, the tool's peak RSS and CPU,
# the ratio to the floor (stored bytes over MinIO's measured throughput plus
# one cluster's fixed cost per wave) (~3 min).
# BenchmarkProveListing1800 (fleet/): the proof CronJob's listings of its
# namespace's 100 clusters in a bucket of 1,800 clusters' journals against one
# listing of the shared prefix (~2 min, most of it writing the keys).
# The second site (replicate/*_bench_test.go; docs/benchmarks.md#the-second-site),
# about 12 min in all:
#   BenchmarkReplicateRPO: write -> segment on the primary and on the second
#     site (a second MinIO behind testenv.LinkProxy: BENCH_REPLICATE_RTT, 50ms,
#     BENCH_REPLICATE_MBIT, 100), p50/p99/max and the copier's share, with
#     BENCH_REPLICATE_CLUSTERS (8) real captures at BENCH_REPLICATE_INTERVAL
#     (30s) of BENCH_REPLICATE_RATE (100) writes/s for BENCH_REPLICATE_SECONDS
#     (100) (~4 min);
#   BenchmarkReplicateCost: the copier's requests and bytes on both stores
#     (a counting transport), per cluster per day with the arithmetic, over
#     BENCH_REPLICATE_COST_CLUSTERS (10) clusters, time compressed
#     BENCH_REPLICATE_SCALE (30) times, BENCH_REPLICATE_BACKUP_MB (16) MiB
#     backups, extrapolated to BENCH_REPLICATE_REAL_BACKUP_MB (291) (~1 min);
#   BenchmarkReplicateCopier: the copier's CPU and peak RSS following
#     BENCH_REPLICATE_COPIER_CLUSTERS (100) clusters' journals at 30 s a segment
#     for BENCH_REPLICATE_COPIER_SECONDS (120), and its full passes over
#     BENCH_REPLICATE_SCAN_CLUSTERS (1800) x BENCH_REPLICATE_SCAN_BACKUPS (8)
#     backup folders on both sites (~7 min).
# BenchmarkUndelete (undelete/bench_test.go; BENCH_UNDELETE_OBJECTS,
# default 1000,10000): undelete of a namespace of that many objects (made
# through a real kube-apiserver) against a whole-cluster restore
# --to-revision of the same cluster into a data dir; time per 1,000
# objects, the ratio (~3 min).
# BenchmarkBackupLink (backup/link_bench_test.go; BENCH_LINK_MB, default 512,
# BENCH_LINK_MBIT, default 1000, BENCH_LINK_RTT, default 10ms): the backup
# with the store behind a shaped link against its floor (the larger of the
# raw snapshot stream and the stored bytes over the link) and the two-step
# baseline, with the CPU seconds that say which bound the run (~3 min).
# BenchmarkRestoreFloor (restore/floor_bench_test.go; BENCH_FLOOR_MB, default
# 1024, up to etcd's 8192; BENCH_FLOOR_MBIT, BENCH_FLOOR_RTT): a restore of
# three members from an encrypted backup behind a shaped link, step by step
# from the tool's log, against its floor (stored bytes over the link, three
# databases over the disk's write throughput measured in the same run),
# peak RSS and peak disk (~4 min at 1 GiB; ~25 min and 33 GB of disk at
# BENCH_FLOOR_MB=6144, a 7.3 GiB database).
# BenchmarkRestoreBesideGardener (restore/gardener_bench_test.go;
# BENCH_GARDENER_MB, default 674): the tool's restore of one member beside
# gardener's `etcdbrctl restore` of the same database, each from its own
# backup at its defaults in one MinIO, to a member that serves, with peak RSS
# (~5 min). It needs ETCDBRCTL, the path of an etcdbrctl built from
# github.com/gardener/etcd-backup-restore (`go build -mod=vendor .` in its
# source: the project neither ships nor builds it); without it, it is skipped.
# BENCH_JOURNAL_QUICK=1 shortens the first two (10 s runs, 30 s interval at
# 1,000 writes/s only, 10 clusters, 100,000 events only): about 5 min.
go test -run '^$' -bench "${BENCH:-.}" -benchtime 1x -timeout "${BENCH_TIMEOUT:-90m}" ${BENCH_PKGS:-./...}
