#!/usr/bin/env bash
# Builds or installs the real servers the tests run against, once, into a
# gitignored cache keyed by version. Idempotent: a server already in the cache
# is not rebuilt. Prints nothing but progress on stderr.
#
#   scripts/test-servers.sh [etcd34|etcd35|etcd36|minio|kube-apiserver|all]...
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

# etcd 3.4 comes from Debian's etcd-server package (the generation the seeds
# run). Copied into the cache so tests find every server in one place.
install_etcd34() {
  if [[ -x "$CACHE/etcd-debian/etcd" ]]; then return; fi
  if ! command -v /usr/bin/etcd >/dev/null 2>&1; then
    log "installing Debian etcd-server and etcd-client"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends etcd-server etcd-client >&2
    # The package may start a system etcd on 2379; tests never use it, but stop it.
    (service etcd stop || true) >/dev/null 2>&1
  fi
  mkdir -p "$CACHE/etcd-debian.tmp"
  cp /usr/bin/etcd "$CACHE/etcd-debian.tmp/etcd"
  if [[ -x /usr/bin/etcdctl ]]; then cp /usr/bin/etcdctl "$CACHE/etcd-debian.tmp/etcdctl"; fi
  rm -rf "$CACHE/etcd-debian"; mv "$CACHE/etcd-debian.tmp" "$CACHE/etcd-debian"
  "$CACHE/etcd-debian/etcd" --version | head -1 >&2
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

targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(all)
for t in "${targets[@]}"; do
  case "$t" in
    etcd34) install_etcd34 ;;
    etcd35) build_etcd "$ETCD35_VERSION" ;;
    etcd36) build_etcd "$ETCD36_VERSION" ;;
    minio) build_minio ;;
    kube-apiserver) build_kube_apiserver ;;
    all) install_etcd34; build_etcd "$ETCD35_VERSION"; build_etcd "$ETCD36_VERSION"; build_minio; build_kube_apiserver ;;
    *) log "unknown target $t"; exit 2 ;;
  esac
done
