#!/usr/bin/env bash
# Builds the etcd-recovery toolkit image with buildah, offline and
# reproducibly: `FROM scratch` (images/Dockerfile), from parts this machine
# can get, no base image pulled and no Docker engine:
#   - bin/etcd-recovery (`make build`, static)
#   - etcdctl and etcdutl at the version the project builds against
#     (scripts/test-servers.env, built by scripts/test-servers.sh etcd35)
#   - the etcd servers a restore drill runs, static, from the same
#     test-server builds: /usr/local/bin/etcd-3.5 (ETCD35_VERSION) and
#     /usr/local/bin/etcd-3.6 (ETCD36_VERSION), built first when missing
#     (scripts/test-servers.sh etcd35 etcd36)
#   - Debian's busybox-static (a static shell and core utilities) and
#     ca-certificates (the CA bundle Go reads), fetched with apt-get download
#     and unpacked with dpkg -x into ${XDG_CACHE_HOME:-~/.cache}/etcd-recovery/
#     image-parts/ (outside the clone: fresh clones reuse them), never installed.
# Every file gets a fixed owner, mode and mtime (SOURCE_DATE_EPOCH: the
# commit time), so the same tree gives the same image digest.
#
#   scripts/image.sh                        build (skipped when nothing changed)
#   scripts/image.sh --check-reproducible   build, then build again in an empty
#                                           temporary storage and compare digests
#
# Writes bin/image/ref (the reference tests run), bin/image/digest (the
# manifest digest of the OCI archive: what a registry serves once the archive
# is pushed as it is, e.g. skopeo copy oci-archive:... docker://...),
# bin/image/local-digest (podman's), bin/image/id and the archive,
# bin/image/etcd-recovery-<version>.oci.tar. Environment: VERSION (default: git describe),
# IMAGE_NAME (default localhost/etcd-recovery), SOURCE_DATE_EPOCH.
set -euo pipefail

start=$(date +%s.%N)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/test-servers.env
source scripts/test-servers.env

# podman's and buildah's global flags: internal/testing/testenv.PodmanGlobalArgs.
GLOBAL=(--storage-driver vfs)

check=false
case "${1:-}" in
  "") ;;
  --check-reproducible) check=true ;;
  *) echo "usage: scripts/image.sh [--check-reproducible]" >&2; exit 2 ;;
esac

log() { echo "image: $*" >&2; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
die() { echo "image: $*" >&2; exit 1; }
for t in buildah podman; do
  command -v "$t" >/dev/null || die "$t is not installed (make container-tools installs it)"
done

VERSION="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
TAG="$(printf '%s' "$VERSION" | tr -c 'A-Za-z0-9_.-' '_')"
NAME="${IMAGE_NAME:-localhost/etcd-recovery}"
REF="$NAME:$TAG"
EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
OUT="$ROOT/bin/image"
PARTS="${IMAGE_PARTS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-recovery/image-parts}"
SERVERS="$("$ROOT/scripts/servers-dir.sh")"
ETCD_DIR="$SERVERS/etcd-$ETCD35_VERSION"
ETCD36_DIR="$SERVERS/etcd-$ETCD36_VERSION"
mkdir -p "$OUT" "$PARTS"
# One build at a time (a test may check reproducibility while make runs).
exec 9>"$OUT/.lock"
flock 9

# 1. The parts.
make --no-print-directory -C "$ROOT" build VERSION="$VERSION" >&2
scripts/test-servers.sh etcd35 etcd36

# deb_part PKG PREPARE: prints the directory holding Debian package PKG,
# at apt's candidate version: root/ (the package, dpkg -x) and image/ (what
# PREPARE DIR made of it for the image), downloading and preparing it only
# when that version is not cached yet.
apt_updated=false
candidate() { apt-cache show --no-all-versions "$1" 2>/dev/null | sed -n 's/^Version: //p' | head -1; }
deb_part() {
  local pkg="$1" prepare="$2" ver dir tmp stamp cache="$PARTS/$1.candidate"
  # apt-cache is slow: its answer is kept until apt's lists change.
  stamp="$(stat -c %Y /var/lib/apt/lists /var/cache/apt/pkgcache.bin 2>/dev/null | tr '\n' ' ')"
  if [[ -f "$cache" && "$(head -1 "$cache")" == "$stamp" ]]; then
    ver="$(sed -n 2p "$cache")"
  else
    ver="$(candidate "$pkg")"
    if [[ -z "$ver" ]]; then
      log "apt knows no $pkg yet: apt-get update"
      apt-get update -qq >&2; apt_updated=true
      ver="$(candidate "$pkg")"
      [[ -n "$ver" ]] || die "Debian package $pkg not found by apt-cache"
      stamp="$(stat -c %Y /var/lib/apt/lists /var/cache/apt/pkgcache.bin 2>/dev/null | tr '\n' ' ')"
    fi
    printf '%s\n%s\n' "$stamp" "$ver" >"$cache"
  fi
  dir="$PARTS/${pkg}_${ver//:/%3a}"
  if [[ ! -f "$dir/.complete" || ! -d "$dir/image" ]]; then
    log "fetching Debian $pkg $ver into $dir (apt-get download + dpkg -x; not installed)"
    tmp="$(mktemp -d "$PARTS/.tmp.XXXXXX")"
    if ! (cd "$tmp" && apt-get download -qq "$pkg=$ver" >&2 2>/dev/null); then
      $apt_updated || { apt-get update -qq >&2; apt_updated=true; }
      (cd "$tmp" && apt-get download -qq "$pkg=$ver" >&2) || { rm -rf "$tmp"; die "apt-get download $pkg=$ver failed"; }
    fi
    dpkg -x "$tmp"/*.deb "$tmp/root"
    rm -f "$tmp"/*.deb
    "$prepare" "$tmp"
    touch "$tmp/.complete"
    rm -rf "$dir"; mv "$tmp" "$dir"
  fi
  printf '%s\n' "$dir"
}
# busybox-static: /bin/busybox and every applet as a symlink to it, as
# `busybox --install -s` would (linuxrc is an init, not a command).
prepare_busybox() {
  local I="$1/image" applet
  mkdir -p "$I"/{bin,sbin,usr/bin,usr/sbin,usr/share/doc/busybox-static}
  install -m 0755 "$1/root/bin/busybox" "$I/bin/busybox"
  while read -r applet; do
    [[ -e "$I/$applet" || -L "$I/$applet" ]] || ln -s /bin/busybox "$I/$applet"
  done < <("$I/bin/busybox" --list-full | grep -vx linuxrc | LC_ALL=C sort)
  cp "$1/root/usr/share/doc/busybox-static/copyright" "$I/usr/share/doc/busybox-static/"
}
# ca-certificates: the bundle as update-ca-certificates writes it, every
# certificate of the package in order, each ending in a newline (awk adds
# a missing one).
prepare_ca() {
  local I="$1/image"
  mkdir -p "$I/etc/ssl/certs" "$I/usr/share/doc/ca-certificates"
  (cd "$1/root/usr/share/ca-certificates" && find . -name '*.crt' -type f -print0 | LC_ALL=C sort -z | xargs -0 awk 1) \
    >"$I/etc/ssl/certs/ca-certificates.crt"
  [[ -s "$I/etc/ssl/certs/ca-certificates.crt" ]] || die "empty CA bundle from $1"
  cp "$1/root/usr/share/doc/ca-certificates/copyright" "$I/usr/share/doc/ca-certificates/"
}
BUSYBOX="$(deb_part busybox-static prepare_busybox)"
CACERTS="$(deb_part ca-certificates prepare_ca)"
bb_ver="${BUSYBOX##*/busybox-static_}"; bb_ver="${bb_ver//%3a/:}"
ca_ver="${CACERTS##*/ca-certificates_}"; ca_ver="${ca_ver//%3a/:}"

# 2. The build context: rootfs/ is the image's file system, nonroot/ the
# user's home directory. context DIR BINARY
context() {
  local ctx="$1" R="$1/rootfs"
  rm -rf "$ctx"
  mkdir -p "$R"/{etc,home,usr/local/bin,tmp} "$ctx/nonroot"
  install -m 0755 "$2" "$ETCD_DIR/etcdctl" "$ETCD_DIR/etcdutl" "$R/usr/local/bin/"
  # The drill's servers, named etcd-<minor> as drill.Run looks them up.
  install -m 0755 "$ETCD_DIR/etcd" "$R/usr/local/bin/etcd-3.5"
  install -m 0755 "$ETCD36_DIR/etcd" "$R/usr/local/bin/etcd-3.6"
  cp -a "$BUSYBOX/image/." "$CACERTS/image/." "$R/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/bin/sh\n' >"$R/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$R/etc/group"
  printf 'hosts: files dns\n' >"$R/etc/nsswitch.conf"
  # Fixed modes and times (owners are set by the Dockerfile's COPY).
  find "$ctx" -type d -exec chmod 0755 {} +
  find "$ctx" -type f -exec chmod 0644 {} +
  chmod 0755 "$R/bin/busybox" "$R"/usr/local/bin/*
  chmod 1777 "$R/tmp"
  find "$ctx" -exec touch -h -d "@$EPOCH" {} +
}
CTX="$OUT/context"
context "$CTX" bin/etcd-recovery

# 3. Skip the build when the inputs are unchanged and the image still exists.
inputs="$( {
  echo "ref=$REF epoch=$EPOCH buildah=$(buildah --version) etcd=$ETCD35_VERSION etcd36=$ETCD36_VERSION busybox=$bb_ver ca=$ca_ver"
  sha256sum images/Dockerfile | cut -d' ' -f1
  tar --sort=name --numeric-owner --owner=0 --group=0 -C "$CTX" -cf - . | sha256sum | cut -d' ' -f1
} | sha256sum | cut -d' ' -f1)"
old_id="$(cat "$OUT/id" 2>/dev/null || true)"
cur_id="$(podman "${GLOBAL[@]}" image inspect --format '{{.Id}}' "$REF" 2>/dev/null || true)"
ARCHIVE="$OUT/etcd-recovery-$TAG.oci.tar"

# build CONTEXT [global flags...]: buildah's output goes to stderr.
build() {
  local ctx="$1"; shift
  buildah "${GLOBAL[@]}" "$@" bud --isolation chroot --layers=false --timestamp "$EPOCH" --identity-label=false \
    --build-arg VERSION="$VERSION" --build-arg ETCD_VERSION="$ETCD35_VERSION" \
    --build-arg ETCD35_SERVER_VERSION="$ETCD35_VERSION" --build-arg ETCD36_SERVER_VERSION="$ETCD36_VERSION" \
    --build-arg BUSYBOX_VERSION="$bb_ver" --build-arg CA_CERTIFICATES_VERSION="$ca_ver" \
    -f images/Dockerfile -t "$REF" "$ctx" >&2
}
# save ARCHIVE [global flags...]: the image as an OCI archive (gzip layers).
save() {
  local a="$1"; shift
  rm -f "$a.tmp"
  podman "${GLOBAL[@]}" "$@" save --format oci-archive -o "$a.tmp" "$REF" >&2
  mv "$a.tmp" "$a"
}
# archive_digest ARCHIVE: the manifest digest in an OCI archive, which a
# registry serves when the archive's blobs are pushed as they are.
archive_digest() { tar -xOf "$1" index.json | sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p'; }
inspect() { podman "${GLOBAL[@]}" "${@:2}" image inspect --format "$1" "$REF"; }

built=false
if [[ -n "$cur_id" && "$cur_id" == "$old_id" && "$(cat "$OUT/inputs" 2>/dev/null)" == "$inputs" && -f "$ARCHIVE" ]]; then
  log "unchanged: $REF"
else
  b0=$(date +%s.%N)
  build "$CTX"
  build_s=$(since "$b0")
  built=true
  id="$(inspect '{{.Id}}')"
  rm -f "$OUT"/etcd-recovery-*.oci.tar
  save "$ARCHIVE"
  # The image this script built before, if nothing names it any more.
  if [[ -n "$old_id" && "$old_id" != "$id" ]] &&
    [[ "$(podman "${GLOBAL[@]}" image inspect --format '{{len .RepoTags}}' "$old_id" 2>/dev/null)" == 0 ]]; then
    podman "${GLOBAL[@]}" rmi "$old_id" >/dev/null 2>&1 || true
  fi
  echo "$id" >"$OUT/.id.tmp" && mv -f "$OUT/.id.tmp" "$OUT/id"
  echo "$inputs" >"$OUT/.inputs.tmp" && mv -f "$OUT/.inputs.tmp" "$OUT/inputs"
fi
digest="$(inspect '{{.Digest}}')"
push_digest="$(archive_digest "$ARCHIVE")"
size="$(inspect '{{.Size}}')"
# Atomically (a test may read them while --check-reproducible runs).
put() { echo "$2" >"$OUT/.$1.tmp" && mv -f "$OUT/.$1.tmp" "$OUT/$1"; }
put ref "$REF"
put digest "$push_digest"
put local-digest "$digest"
total_s=$(since "$start")

echo "image:        $REF"
echo "digest:       $push_digest (the OCI archive's manifest: what a registry serves after"
echo "              skopeo copy oci-archive:${ARCHIVE#"$ROOT"/} docker://REGISTRY/etcd-recovery:$TAG)"
echo "local digest: $digest (podman's storage, uncompressed layers)"
echo "size:         $((size / 1000000)) MB uncompressed, $(($(stat -c %s "$ARCHIVE") / 1000000)) MB compressed (etcdctl/etcdutl $ETCD35_VERSION, drill servers etcd-3.5 $ETCD35_VERSION and etcd-3.6 $ETCD36_VERSION, busybox-static $bb_ver, ca-certificates $ca_ver)"
echo "archive:      ${ARCHIVE#"$ROOT"/}"
if $built; then
  echo "time:         $total_s s (buildah $build_s s)"
else
  echo "time:         $total_s s (unchanged, not rebuilt)"
fi

# 4. On request: everything again from the same tree, the binary and the
# context included, built in an empty temporary storage: the same digests.
if $check; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  c0=$(date +%s.%N)
  make --no-print-directory -C "$ROOT" build VERSION="$VERSION" BIN="$tmp/etcd-recovery" >&2
  context "$tmp/context" "$tmp/etcd-recovery"
  st=(--root "$tmp/root" --runroot "$tmp/run")
  build "$tmp/context" "${st[@]}"
  again="$(inspect '{{.Digest}}' "${st[@]}")"
  save "$tmp/again.oci.tar" "${st[@]}"
  again_push="$(archive_digest "$tmp/again.oci.tar")"
  podman "${GLOBAL[@]}" "${st[@]}" rmi -a -f >/dev/null 2>&1 || true
  if [[ "$again" != "$digest" || "$again_push" != "$push_digest" ]]; then
    echo "reproducible: NO: a second build of the same tree in an empty storage gave digest $again_push (local $again), not $push_digest (local $digest)" >&2
    if ! d="$(diff -rq --no-dereference "$CTX" "$tmp/context" 2>&1)"; then
      echo "reproducible: the two build contexts differ (did the tree change during the check?):" >&2
      echo "$d" | sed "s|$tmp/||g; s|$ROOT/||g" | head -20 >&2
    else
      echo "reproducible: the two build contexts are identical: buildah or podman is not deterministic here" >&2
    fi
    exit 1
  fi
  echo "reproducible: yes: a second build of the same tree in an empty storage gave the same digest $again_push (local $again) in $(since "$c0") s"
fi
