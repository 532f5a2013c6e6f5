#!/usr/bin/env bash
# Installs the system tools the tests need, if any is missing: Debian's
# podman, buildah and runc (`make image` builds the toolkit image with
# buildah; the tests run it with podman on runc), and curl and zstd (the
# quorum-loss runbook's manual fallback, which the runbook tests execute:
# a SigV4 download with curl, then zstd -d). Says which packages and why
# before it installs anything; prints nothing when all are there.
#
#   scripts/container-tools.sh
set -euo pipefail

missing=()
for t in podman:podman buildah:buildah runc:runc curl:curl zstd:zstd; do
  command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "container-tools: installing Debian packages ${missing[*]} (apt-get install --no-install-recommends): the image tests build and run the toolkit image (podman buildah runc); the runbook tests run the manual fallback (curl zstd)" >&2
if [[ $EUID -ne 0 ]]; then
  echo "container-tools: installing packages needs root: run as root, or: sudo apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
command -v apt-get >/dev/null 2>&1 || {
  echo "container-tools: no apt-get here: install ${missing[*]} with this system's package manager" >&2
  exit 1
}
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
for t in podman buildah runc curl zstd; do
  command -v "$t" >/dev/null 2>&1 || { echo "container-tools: $t is still missing after apt-get install" >&2; exit 1; }
done
