# etcd-recovery. `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/armada/etcd-recovery/internal/version.Version=$(VERSION)
BIN := bin/etcd-recovery
IMAGE ?= etcd-recovery:$(VERSION)
# Integration tests start many real servers and mostly wait on them (a run
# keeps the 2 cores about half busy): three packages at a time.
TEST_FLAGS ?= -count=1 -p 3 -parallel 4 -timeout 40m
# The longest packages first, so that the lanes of -p end together
# (testreport prints the slowest at the end of every run: update this list
# from it when the order drifts).
SLOW_FIRST := ./deploy/ ./kube/ ./runbooks/ ./restore/ ./internal/testing/faultmatrix/ ./metrics/

.PHONY: all build cross cross-check test test-prereqs test-servers bench soak demo image container-tools vet clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/etcd-recovery

# The binary for every platform an SRE runs it on (it must start everywhere:
# Linux-only code lives in _linux.go files). Only the binary is built, one
# platform after the other, into a throwaway directory: with a warm build
# cache about 10-15 s per platform on 2 busy cores (about 3-5 min each when
# the cache is cold).
CROSS_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
# make test type-checks the binary with its whole import graph for one
# non-Linux Unix and for Windows (internal/testing/cmd/typecheck: from
# source, nothing compiled; about 40 s for both, where two cold builds take
# several minutes). Together they catch every Linux-only identifier (a
# syscall, a /proc reader, an fadvise) used outside a _linux.go file or a
# build tag anywhere in the binary's import graph, and every Unix-only one
# in the Windows build. linux/amd64 is the test build itself. Not caught:
# what only the compiler's back end or the linker sees (assembly, a
# go:linkname target missing on a platform; this module's one go:linkname
# is in a _linux.go file), an arm64-only or darwin/amd64-only break (no file
# is per-architecture), and test files (the tests run on Linux only).
# `make cross` builds all five release binaries.
CROSS_CHECK_PLATFORMS := darwin/arm64 windows/amd64
cross-check:
	$(GO) run ./internal/testing/cmd/typecheck $(CROSS_CHECK_PLATFORMS)

cross:
	@out=$$(mktemp -d) && trap 'rm -rf "$$out"' EXIT && \
	for p in $(CROSS_PLATFORMS); do \
		echo "cross: $$p"; \
		CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -o "$$out/etcd-recovery-$${p%/*}-$${p#*/}" ./cmd/etcd-recovery || exit 1; \
	done

# Builds or downloads the real test servers once, into a cache outside the
# clone keyed by version (scripts/servers-dir.sh prints it; etcd 3.4 is
# Debian's package unpacked there, never installed).
test-servers:
	scripts/test-servers.sh etcd34 etcd35 etcd36 minio kube-apiserver kubectl promtool

vet:
	$(GO) vet ./...

# Everything, nothing skipped (a skipped test fails the run), against real
# etcd 3.4/3.5/3.6, MinIO, kube-apiserver, promtool and the toolkit image.
# testreport prints one line a package, the output of what failed, and the
# 10 slowest packages and tests; the raw stream is kept in
# bin/test-report.json.
#
# Its prerequisites run in order: the Debian packages first (apt takes its
# locks one at a time), then test-prereqs, then the image.
test: container-tools test-prereqs image
	@mkdir -p bin
	@set -o pipefail; pkgs=$$( { $(GO) list $(SLOW_FIRST) && $(GO) list ./...; } | awk '!seen[$$0]++') && \
		$(GO) test -json $(TEST_FLAGS) $$pkgs | $(GO) run ./internal/testing/cmd/testreport -json bin/test-report.json

# The steps before the tests, side by side (make -j3): a build of the test
# servers leaves a core idle while it links or downloads, and vet fills it.
test-prereqs: container-tools
	@$(MAKE) --no-print-directory -j3 -Oline test-servers vet cross-check

# Benchmarks against the manual baselines, in one run; prints ratios and
# peak RSS. The exporter's 1,000-refresh soak (make soak) is one of them.
bench: test-servers build
	scripts/bench.sh

# The exporter's memory over 1,000 refreshes of 100 clusters (about 20 min):
# a benchmark, not a test; make test runs a 40-refresh soak that fails on
# a leak of 4 KiB a refresh (TestExporterLeak100). Its numbers are appended to bin/measurements/exporter-memory.txt.
soak: test-servers
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkExporterSoak1000$$' -benchtime 1x -timeout 60m -v ./metrics/

# A local 3-member etcd cluster and MinIO on loopback, some data, a backup, the listing.
# Builds only what it runs (etcd 3.5, MinIO, the tool); installs nothing, needs no root.
demo: build
	scripts/test-servers.sh etcd35 minio
	scripts/demo.sh

# The toolkit image, built offline and reproducibly with buildah from
# images/Dockerfile (FROM scratch): bin/image/ref, bin/image/digest and an
# OCI archive for a registry push. Skipped when nothing changed.
image: container-tools
	VERSION=$(VERSION) scripts/image.sh

# Debian's podman, buildah and runc, which the image tests need: installed
# (saying so first) only if missing.
container-tools:
	@scripts/container-tools.sh

clean:
	rm -rf bin demo-data

# Pins the image `make image` built (bin/image/digest) by digest in deploy/'s
# kustomizations: `kubectl apply -k deploy/` then runs exactly that image.
# Push the image (its OCI archive) under icr.io/armada/etcd-recovery first.
MANIFESTS_DIGEST ?= bin/image/digest
MANIFESTS_DIR ?= deploy
.PHONY: manifests
manifests:
	@d=$$(cat $(MANIFESTS_DIGEST) 2>/dev/null); \
	if ! [[ $$d =~ ^sha256:[0-9a-f]{64}$$ ]]; then echo "manifests: no image digest in $(MANIFESTS_DIGEST) (run make image first)" >&2; exit 1; fi; \
	for k in $(MANIFESTS_DIR)/kustomization.yaml $(MANIFESTS_DIR)/templates/kustomization.yaml; do \
		sed -i -E "/^- name: icr\.io\/armada\/etcd-recovery$$/,/^  digest:/ s|^(  digest: ).*|\1$$d|" $$k || exit 1; \
	done; \
	echo "manifests: $(MANIFESTS_DIR)/ runs icr.io/armada/etcd-recovery@$$d"
