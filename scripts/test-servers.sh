#!/usr/bin/env bash
# Builds or downloads the real servers the tests run against, once, into a
# cache OUTSIDE the clone, keyed by version, so that every clone on the
# machine (CI checks out a fresh one each run) reuses them. Installs no system
# package or service. Idempotent: a server already in the cache is not
# rebuilt. Each is built in a temporary directory beside its final one and
# renamed into place only once complete, so a half-built server (an
# interrupted run, a full disk) is never taken for a built one; concurrent
# runs are serialised by a lock per server. Prints nothing but progress on stderr.
#
#   scripts/test-servers.sh [etcd34|etcd35|etcd36|minio|kube-apiserver|kubectl|kube-controller-manager|promtool|age|helm|all]...
#
# Cache root: $TEST_SERVERS_DIR, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/etcd-recovery/test-servers (also what
# internal/testing/testenv.ServersDir and scripts/servers-dir.sh answer).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$("$ROOT/scripts/servers-dir.sh")"
# shellcheck source=scripts/test-servers.env
source "$ROOT/scripts/test-servers.env"

log() { echo "test-servers: $*" >&2; }
mkdir -p "$CACHE"
# lock DIR: one builder at a time per server (two clones' `make test` may
# start together); a run that waited finds the server built and returns.
# The lock is per server, so that building one never waits on another.
lock() { exec 8>"$1.lock"; flock 8; }

# scratch: a temporary build directory, removed when the script exits,
# however it exits (a failed build included: make test fails a run whose
# tests leave anything in TMPDIR, and this script runs inside one).
# It sets SCRATCH_DIR (not printed: a $(...) subshell would lose the
# registration).
SCRATCH=()
trap 'rm -rf ${SCRATCH[@]+"${SCRATCH[@]}"}' EXIT
scratch() { SCRATCH_DIR="$(mktemp -d)"; SCRATCH+=("$SCRATCH_DIR"); }

# build_etcd VERSION: a tiny module whose mains call etcdmain.Main (server),
# ctlv3 (etcdctl) and etcdutl, because `go install` of the server module
# fails on its replace directives.
build_etcd() {
  local ver="$1" dir="$CACHE/etcd-$1"
  lock "$dir"
  if [[ -x "$dir/etcd" && -x "$dir/etcdctl" && -x "$dir/etcdutl" ]]; then return; fi
  log "building etcd $ver into $dir"
  scratch; local src="$SCRATCH_DIR"
  mkdir -p "$src/etcd" "$src/etcdctl" "$src/etcdutl"
  cat >"$src/go.mod" <<MOD
module etcdrecovery.local/etcd-test-server

go 1.23
MOD
  cat >"$src/etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  cat >"$src/etcdctl/main.go" <<'GO'
package main

import "go.etcd.io/etcd/etcdctl/v3/ctlv3"

func main() { ctlv3.MustStart() }
GO
  cat >"$src/etcdutl/main.go" <<'GO'
package main

import (
	"os"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/etcdutl/v3/etcdutl"
)

func main() {
	root := &cobra.Command{Use: "etcdutl"}
	root.PersistentFlags().StringVarP(&etcdutl.OutputFormat, "write-out", "w", "simple", "output format")
	root.AddCommand(etcdutl.NewSnapshotCommand(), etcdutl.NewVersionCommand())
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
GO
  (
    cd "$src"
    go get "go.etcd.io/etcd/server/v3@$ver" "go.etcd.io/etcd/etcdctl/v3@$ver" "go.etcd.io/etcd/etcdutl/v3@$ver" >&2
    go mod tidy >&2
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    CGO_ENABLED=0 go build -trimpath -o "$dir.tmp/etcd" ./etcd
    CGO_ENABLED=0 go build -trimpath -o "$dir.tmp/etcdctl" ./etcdctl
    CGO_ENABLED=0 go build -trimpath -o "$dir.tmp/etcdutl" ./etcdutl
  )
  rm -rf "$dir" "$src"; mv "$dir.tmp" "$dir"
}

# debian_has PACKAGE VERSION: apt's package lists offer that exact version
# for download (`apt-cache show pkg=ver` exits 0 even when it has none).
debian_has() { apt-cache madison "$1" 2>/dev/null | awk -v v="$2" '$3 == v { found = 1 } END { exit !found }'; }

# debian_fetch "PKG..." VERSION DIR FILE...: downloads Debian's packages PKG
# at VERSION (apt-get download: no root needed, nothing installed; `apt-get
# update` only when apt's lists lack that version, which needs root),
# unpacks them (dpkg-deb -x) and puts FILE... (paths inside the packages)
# into DIR, renamed into place once complete, with DIR/VERSION.
debian_fetch() {
  local pkgs="$1" ver="$2" dir="$3"; shift 3
  local p
  if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    log "$pkgs $ver are Debian packages: downloading them needs apt-get and dpkg-deb (a Debian or Ubuntu host)"
    exit 1
  fi
  for p in $pkgs; do
    debian_has "$p" "$ver" && continue
    if [[ $(id -u) -ne 0 ]]; then
      log "apt's package lists have no $p $ver (they have: $(apt-cache madison "$p" 2>/dev/null | awk '{print $3}' | tr '\n' ' ')): run 'apt-get update' as root (it refreshes the lists, installs nothing) and retry, or change the version in scripts/test-servers.env"
      exit 1
    fi
    log "apt-get update: refreshing apt's package lists (nothing is installed)"
    apt-get update -qq >&2
    if ! debian_has "$p" "$ver"; then
      log "Debian's archive has no $p $ver (it has: $(apt-cache madison "$p" 2>/dev/null | awk '{print $3}' | tr '\n' ' ')): change the version in scripts/test-servers.env"
      exit 1
    fi
  done
  (
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    # apt fetches as its sandbox user _apt when run as root: let it write here.
    if [[ $(id -u) -eq 0 ]] && id _apt >/dev/null 2>&1; then chown _apt "$tmp"; fi
    cd "$tmp"
    local args=()
    for p in $pkgs; do args+=("$p=$ver"); done
    apt-get download -qq "${args[@]}" >&2
    mkdir unpacked
    for deb in ./*.deb; do dpkg-deb -x "$deb" unpacked; done
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    for f in "$@"; do cp "unpacked/$f" "$dir.tmp/"; done
    echo "$ver" >"$dir.tmp/VERSION"
  )
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
}

# etcd 3.4 comes from Debian's etcd-server and etcd-client packages (the
# generation the seeds run) at ETCD34_DEBIAN_VERSION, DOWNLOADED and UNPACKED
# into the cache: never installed, so no system etcd service is created or
# started. The binaries need only glibc (the package depends on libc6 >= 2.34).
# apt-get download needs no root; only when apt's package lists lack the
# version is `apt-get update` run (root: it refreshes the lists, installs
# nothing).
fetch_etcd34() {
  local ver="$ETCD34_DEBIAN_VERSION" dir="$CACHE/etcd-debian-$ETCD34_DEBIAN_VERSION"
  lock "$dir"
  if [[ -x "$dir/etcd" && -x "$dir/etcdctl" && "$(cat "$dir/VERSION" 2>/dev/null)" == "$ver" ]]; then return; fi
  log "etcd 3.4: downloading Debian's etcd-server and etcd-client $ver, unpacking into $dir (not installed)"
  debian_fetch "etcd-server etcd-client" "$ver" "$dir" usr/bin/etcd usr/bin/etcdctl
  if ! "$dir/etcd" --version >/dev/null 2>&1 || ! "$dir/etcdctl" version >/dev/null 2>&1; then
    log "the unpacked etcd $ver does not run here: $(ldd "$dir/etcd" 2>&1 | tr '\n' ' ')"
    rm -rf "$dir"
    exit 1
  fi
  log "etcd 3.4: $("$dir/etcd" --version | head -1)"
}

build_minio() {
  local dir="$CACHE/minio-$MINIO_VERSION"
  lock "$dir"
  if [[ -x "$dir/minio" ]]; then return; fi
  log "building minio $MINIO_VERSION into $dir (about 3 min)"
  rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
  GOBIN="$dir.tmp" CGO_ENABLED=0 go install "github.com/minio/minio@$MINIO_VERSION"
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
}

# kube_module DIR: a module in DIR requiring k8s.io/kubernetes at
# KUBE_VERSION with every k8s.io/* staging module replaced by its published
# v0.x.y. kube-apiserver and kubectl are both built in such a module, so
# that their shared packages resolve to the same versions and kubectl's
# build reuses what kube-apiserver's compiled (about 30 s instead of 2 min).
kube_module() {
  local src="$1" staging="v0.${KUBE_VERSION#v1.}"
  printf 'module etcdrecovery.local/kube-test-server\n\ngo 1.25\n' >"$src/go.mod"
  local kmod; kmod="$(cd "$src" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  {
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "$kmod" | awk '{print $1}' | grep -v sample-cli-plugin |
      while read -r m; do echo "replace $m => $m $staging"; done
  } >>"$src/go.mod"
}

# The version the binaries report (/version), as Kubernetes' own build sets it.
kube_ldflags() {
  echo "-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2)"
}

build_kube_apiserver() {
  local dir="$CACHE/kube-apiserver-$KUBE_VERSION"
  lock "$dir"
  if [[ -x "$dir/kube-apiserver" ]]; then return; fi
  log "building kube-apiserver $KUBE_VERSION into $dir (about 5 min)"
  scratch; local src="$SCRATCH_DIR"
  mkdir -p "$src/kube-apiserver"
  cat >"$src/kube-apiserver/main.go" <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }
GO
  kube_module "$src"
  (
    cd "$src"
    go mod tidy >&2
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    CGO_ENABLED=0 go build -trimpath -ldflags "$(kube_ldflags)" -o "$dir.tmp/kube-apiserver" ./kube-apiserver
  )
  rm -rf "$dir" "$src"; mv "$dir.tmp" "$dir"
}

# kubectl: `kubectl kustomize deploy/` and the RBAC tests' kubectl calls. A
# tiny main as Kubernetes' own cmd/kubectl, in the same kind of module as
# kube-apiserver (the same release, the same dependency versions).
build_kubectl() {
  local dir="$CACHE/kubectl-$KUBE_VERSION"
  lock "$dir"
  if [[ -x "$dir/kubectl" ]]; then return; fi
  log "building kubectl $KUBE_VERSION into $dir (about 30 s after kube-apiserver, 2 min alone)"
  scratch; local src="$SCRATCH_DIR"
  mkdir -p "$src/kubectl"
  cat >"$src/kubectl/main.go" <<'GO'
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
GO
  kube_module "$src"
  (
    cd "$src"
    go mod tidy >&2
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    CGO_ENABLED=0 go build -trimpath -ldflags "$(kube_ldflags)" -o "$dir.tmp/kubectl" ./kubectl
  )
  rm -rf "$dir" "$src"; mv "$dir.tmp" "$dir"
}

# kube-controller-manager: the namespace controller and the garbage
# collector for the tests that need a deleted namespace finalized and owner
# references honoured by the real controllers (testenv.StartKubeControllerManager,
# opt-in per test). Built like kubectl, in the same kind of module as
# kube-apiserver, so that its build reuses what kube-apiserver's compiled.
build_kube_controller_manager() {
  local dir="$CACHE/kube-controller-manager-$KUBE_VERSION"
  lock "$dir"
  if [[ -x "$dir/kube-controller-manager" ]]; then return; fi
  log "building kube-controller-manager $KUBE_VERSION into $dir (about 3 min after kube-apiserver)"
  scratch; local src="$SCRATCH_DIR"
  mkdir -p "$src/kube-controller-manager"
  cat >"$src/kube-controller-manager/main.go" <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() { os.Exit(cli.Run(app.NewControllerManagerCommand())) }
GO
  kube_module "$src"
  (
    cd "$src"
    go mod tidy >&2
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    CGO_ENABLED=0 go build -trimpath -ldflags "$(kube_ldflags)" -o "$dir.tmp/kube-controller-manager" ./kube-controller-manager
  )
  rm -rf "$dir" "$src"; mv "$dir.tmp" "$dir"
}

# promtool: Prometheus' rule checker and unit tester (`promtool check rules`,
# `promtool test rules`, `promtool check metrics`), from Debian's prometheus
# package at PROMTOOL_DEBIAN_VERSION, DOWNLOADED and UNPACKED into the cache
# like etcd 3.4 (never installed: no prometheus service is created). Built
# from the Go module proxy it took about 4 min of a new machine's 25-min
# test budget (it compiles every service discovery); the package is a 19 MB
# download. Its promtool is static.
fetch_promtool() {
  local ver="$PROMTOOL_DEBIAN_VERSION" dir="$CACHE/promtool-debian-$PROMTOOL_DEBIAN_VERSION"
  lock "$dir"
  if [[ -x "$dir/promtool" ]]; then return; fi
  log "promtool: downloading Debian's prometheus $ver, unpacking its promtool into $dir (not installed)"
  debian_fetch prometheus "$ver" "$dir" usr/bin/promtool
  "$dir/promtool" --version 2>&1 | head -1 >&2
}

# age: the age file-encryption tool (`age -d -i IDENTITY`), which the
# runbook's manual fallback uses to decrypt an encrypted backup with stock
# tools; from Debian's age package at AGE_DEBIAN_VERSION, DOWNLOADED and
# UNPACKED into the cache like etcd 3.4 (never installed). It is static
# (Go), a 1.5 MB download.
fetch_age() {
  local ver="$AGE_DEBIAN_VERSION" dir="$CACHE/age-debian-$AGE_DEBIAN_VERSION"
  lock "$dir"
  if [[ -x "$dir/age" && -x "$dir/age-keygen" ]]; then return; fi
  log "age: downloading Debian's age $ver, unpacking its age and age-keygen into $dir (not installed)"
  debian_fetch age "$ver" "$dir" usr/bin/age usr/bin/age-keygen
  log "age: $("$dir/age" --version 2>&1 | head -1)"
}

# helm: renders the chart (deploy/) in the tests and `make render`. Its own
# module graph (go install pkg@version), never the project's: as a library
# helm v3.22 would raise client-go past the module's pinned v0.36.
build_helm() {
  local dir="$CACHE/helm-$HELM_VERSION"
  lock "$dir"
  if [[ -x "$dir/helm" ]]; then return; fi
  log "building helm $HELM_VERSION into $dir (about 4 min on 2 busy cores)"
  rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
  GOBIN="$dir.tmp" CGO_ENABLED=0 go install -trimpath "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
}

targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(all)
for t in "${targets[@]}"; do
  case "$t" in
    etcd34) fetch_etcd34 ;;
    etcd35) build_etcd "$ETCD35_VERSION" ;;
    etcd36) build_etcd "$ETCD36_VERSION" ;;
    minio) build_minio ;;
    kube-apiserver) build_kube_apiserver ;;
    kubectl) build_kubectl ;;
    kube-controller-manager) build_kube_controller_manager ;;
    promtool) fetch_promtool ;;
    age) fetch_age ;;
    helm) build_helm ;;
    all) fetch_etcd34; build_etcd "$ETCD35_VERSION"; build_etcd "$ETCD36_VERSION"; build_minio; build_kube_apiserver; build_kubectl; build_kube_controller_manager; fetch_promtool; fetch_age; build_helm ;;
    *) log "unknown target $t"; exit 2 ;;
  esac
done
