#!/usr/bin/env bash
# The private TMPDIR of `make test`.
#
#   test-tmpdir.sh check GIB   fail, saying why, unless the filesystem of
#                              TMPDIR (default /tmp) has GIB GiB free
#   test-tmpdir.sh make        create the private dir, print its path
#   test-tmpdir.sh left DIR    fail, naming them, if the tests left
#                              anything in DIR
#
# The tests write their servers' data, the restored data dirs and the
# snapshots under TMPDIR. A full disk makes them fail in ways that look
# like flakes (a MinIO answering 507, an etcd member exiting), so a run
# that cannot fit is refused before it starts, and a test that leaks (a
# leak repeated over many runs is what fills a disk) fails the run.
set -euo pipefail

parent=${TMPDIR:-/tmp}

case ${1:-} in
check)
	need=${2:?GiB}
	avail_kib=$(df -Pk "$parent" | awk 'NR==2 {print $4}')
	avail_gib=$((avail_kib / 1024 / 1024))
	if ((avail_gib < need)); then
		echo "make test: $parent has ${avail_gib} GiB free; the tests need ${need} GiB there (TEST_DISK_GIB, docs/testing.md#disk). Free some space or point TMPDIR at a larger filesystem." >&2
		exit 1
	fi
	;;
make)
	mktemp -d "$parent/etcd-recovery-test.XXXXXX"
	;;
left)
	dir=${2:?dir}
	# go test and go run remove their own go-build dirs, and the port lock
	# is shared by the test binaries on purpose (testenv.FreePort); anything
	# else was left by a test.
	mapfile -t left < <(find "$dir" -mindepth 1 -maxdepth 1 ! -name 'go-build*' ! -name 'etcd-recovery-testenv-ports.lock' -printf '%f\n' | sort)
	if ((${#left[@]} > 0)); then
		echo "make test: FAILED: the tests left ${#left[@]} entries ($(du -sh "$dir" | cut -f1)) in their TMPDIR (a test must clean up what it creates outside t.TempDir):" >&2
		for e in "${left[@]:0:20}"; do
			echo "  $e ($(du -sh "$dir/$e" | cut -f1), modified $(date -u -r "$dir/$e" +%H:%M:%S)):" >&2
			find "$dir/$e" -maxdepth 2 -printf '    %M %u %s %p\n' 2>/dev/null | head -n 8 >&2
		done
		exit 1
	fi
	echo "tmpdir: ok, the tests left nothing behind"
	;;
*)
	echo "usage: $0 check GIB | make | left DIR" >&2
	exit 2
	;;
esac
