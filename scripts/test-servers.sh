#!/usr/bin/env bash
# Builds or downloads the real servers the tests run against, once, into a
# gitignored cache keyed by version. Installs no system package or service. Idempotent: a server already in the cache
# is not rebuilt. Prints nothing but progress on stderr.
#
#   scripts/test-servers.sh [etcd34|etcd35|etcd36|minio|kube-apiserver|kubectl|promtool|all]...
#
# Cache root: $TEST_SERVERS_DIR, default <repo>/.cache/servers.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${TEST_SERVERS_DIR:-$ROOT/.cache/servers}"
# shellcheck source=scripts/test-servers.env
source "$ROOT/scripts/test-servers.env"

log() { echo "test-servers: $*" >&2; }
mkdir -p "$CACHE"

# build_etcd VERSION: a tiny module whose mains call etcdmain.Main (server),
# ctlv3 (etcdctl) and etcdutl, because `go install` of the server module
# fails on its replace directives.
build_etcd() {
  local ver="$1" dir="$CACHE/etcd-$1"
  if [[ -x "$dir/etcd" && -x "$dir/etcdctl" && -x "$dir/etcdutl" ]]; then return; fi
  log "building etcd $ver into $dir"
  local src; src="$(mktemp -d)"
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
    mkdir -p "$dir.tmp"
    CGO_ENABLED=0 go build -trimpath -o "$dir.tmp/etcd" ./etcd
    CGO_ENABLED=0 go build -trimpath -o "$dir.tmp/etcdctl" ./etcdctl
    CGO_ENABLED=0 go build -trimpath -o "$dir.tmp/etcdutl" ./etcdutl
  )
  rm -rf "$dir" "$src"; mv "$dir.tmp" "$dir"
}

# debian_has PACKAGE VERSION: apt's package lists offer that exact version
# for download (`apt-cache show pkg=ver` exits 0 even when it has none).
debian_has() { apt-cache madison "$1" 2>/dev/null | awk -v v="$2" '$3 == v { found = 1 } END { exit !found }'; }

# etcd 3.4 comes from Debian's etcd-server and etcd-client packages (the
# generation the seeds run) at ETCD34_DEBIAN_VERSION, DOWNLOADED and UNPACKED
# into the cache: never installed, so no system etcd service is created or
# started. The binaries need only glibc (the package depends on libc6 >= 2.34).
# apt-get download needs no root; only when apt's package lists lack the
# version is `apt-get update` run (root: it refreshes the lists, installs
# nothing).
fetch_etcd34() {
  local ver="$ETCD34_DEBIAN_VERSION" dir="$CACHE/etcd-debian"
  if [[ -x "$dir/etcd" && -x "$dir/etcdctl" && "$(cat "$dir/VERSION" 2>/dev/null)" == "$ver" ]]; then return; fi
  if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    log "etcd 3.4 is Debian's etcd-server $ver: downloading it needs apt-get and dpkg-deb (a Debian or Ubuntu host)"
    exit 1
  fi
  log "etcd 3.4: downloading Debian's etcd-server and etcd-client $ver, unpacking into $dir (not installed)"
  if ! debian_has etcd-server "$ver" || ! debian_has etcd-client "$ver"; then
    if [[ $(id -u) -ne 0 ]]; then
      log "apt's package lists have no etcd-server/etcd-client $ver (they have: $(apt-cache madison etcd-server 2>/dev/null | awk '{print $3}' | tr '\n' ' ')): run 'apt-get update' as root (it refreshes the lists, installs nothing) and retry, or set ETCD34_DEBIAN_VERSION in scripts/test-servers.env"
      exit 1
    fi
    log "apt-get update: refreshing apt's package lists (nothing is installed)"
    apt-get update -qq >&2
    if ! debian_has etcd-server "$ver" || ! debian_has etcd-client "$ver"; then
      log "Debian's archive has no etcd-server/etcd-client $ver (it has: $(apt-cache madison etcd-server 2>/dev/null | awk '{print $3}' | tr '\n' ' ')): set ETCD34_DEBIAN_VERSION in scripts/test-servers.env"
      exit 1
    fi
  fi
  (
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    # apt fetches as its sandbox user _apt when run as root: let it write here.
    if [[ $(id -u) -eq 0 ]] && id _apt >/dev/null 2>&1; then chown _apt "$tmp"; fi
    cd "$tmp"
    apt-get download -qq "etcd-server=$ver" "etcd-client=$ver" >&2
    mkdir unpacked
    for deb in ./*.deb; do dpkg-deb -x "$deb" unpacked; done
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    cp unpacked/usr/bin/etcd unpacked/usr/bin/etcdctl "$dir.tmp/"
    if ! "$dir.tmp/etcd" --version >/dev/null 2>&1 || ! "$dir.tmp/etcdctl" version >/dev/null 2>&1; then
      log "the unpacked etcd $ver does not run here: $(ldd "$dir.tmp/etcd" 2>&1 | tr '\n' ' ')"
      exit 1
    fi
    echo "$ver" >"$dir.tmp/VERSION"
  )
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
  log "etcd 3.4: $("$dir/etcd" --version | head -1)"
}

build_minio() {
  local dir="$CACHE/minio-$MINIO_VERSION"
  if [[ -x "$dir/minio" ]]; then return; fi
  log "building minio $MINIO_VERSION into $dir (about 3 min)"
  mkdir -p "$dir.tmp"
  GOBIN="$dir.tmp" CGO_ENABLED=0 go install "github.com/minio/minio@$MINIO_VERSION"
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
}

# kube-apiserver: a module requiring k8s.io/kubernetes with every k8s.io/*
# staging module replaced by its published v0.x.y.
build_kube_apiserver() {
  local dir="$CACHE/kube-apiserver-$KUBE_VERSION"
  if [[ -x "$dir/kube-apiserver" ]]; then return; fi
  log "building kube-apiserver $KUBE_VERSION into $dir (about 5 min)"
  local src staging; src="$(mktemp -d)"
  staging="v0.${KUBE_VERSION#v1.}"
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
  (
    cd "$src"
    printf 'module etcdrecovery.local/kube-test-server\n\ngo 1.25\n' >go.mod
    local kmod; kmod="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    {
      echo "require k8s.io/kubernetes $KUBE_VERSION"
      grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "$kmod" | awk '{print $1}' | grep -v sample-cli-plugin |
        while read -r m; do echo "replace $m => $m $staging"; done
    } >>go.mod
    go mod tidy >&2
    mkdir -p "$dir.tmp"
    # The version the binary reports (/version), as Kubernetes' own build sets it.
    CGO_ENABLED=0 go build -trimpath -ldflags "-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2)" \
      -o "$dir.tmp/kube-apiserver" ./kube-apiserver
  )
  rm -rf "$dir" "$src"; mv "$dir.tmp" "$dir"
}

# kubectl: `kubectl kustomize deploy/` and the RBAC tests' kubectl calls. A
# tiny main as Kubernetes' own cmd/kubectl, against the published
# k8s.io/kubectl module of the same release as kube-apiserver.
build_kubectl() {
  local dir="$CACHE/kubectl-$KUBE_VERSION"
  if [[ -x "$dir/kubectl" ]]; then return; fi
  log "building kubectl $KUBE_VERSION into $dir (about 2 min)"
  local src staging; src="$(mktemp -d)"
  staging="v0.${KUBE_VERSION#v1.}"
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
  (
    cd "$src"
    printf 'module etcdrecovery.local/kubectl\n\ngo 1.25\n' >go.mod
    go get "k8s.io/kubectl@$staging" "k8s.io/component-base@$staging" >&2
    go mod tidy >&2
    mkdir -p "$dir.tmp"
    CGO_ENABLED=0 go build -trimpath -ldflags "-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION" -o "$dir.tmp/kubectl" ./kubectl
  )
  rm -rf "$dir" "$src"; mv "$dir.tmp" "$dir"
}

# promtool: Prometheus' rule checker and unit tester (`promtool check rules`,
# `promtool test rules`, `promtool check metrics`). A tiny module that requires
# the prometheus module at PROMTOOL_VERSION and builds its cmd/promtool:
# `go install` of it fails on Prometheus' replace directives.
build_promtool() {
  local dir="$CACHE/promtool-$PROMTOOL_VERSION"
  if [[ -x "$dir/promtool" ]]; then return; fi
  log "building promtool $PROMTOOL_VERSION into $dir (about 4 min)"
  local src; src="$(mktemp -d)"
  (
    cd "$src"
    printf 'module etcdrecovery.local/promtool\n\ngo 1.25\n' >go.mod
    go get "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION" >&2
    mkdir -p "$dir.tmp"
    CGO_ENABLED=0 go build -trimpath -o "$dir.tmp/promtool" github.com/prometheus/prometheus/cmd/promtool
    "$dir.tmp/promtool" --version >&2
  )
  rm -rf "$dir" "$src"; mv "$dir.tmp" "$dir"
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
    promtool) build_promtool ;;
    all) fetch_etcd34; build_etcd "$ETCD35_VERSION"; build_etcd "$ETCD36_VERSION"; build_minio; build_kube_apiserver; build_kubectl; build_promtool ;;
    *) log "unknown target $t"; exit 2 ;;
  esac
done
