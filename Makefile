# etcd-recovery. `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/armada/etcd-recovery/internal/version.Version=$(VERSION)
BIN := bin/etcd-recovery
IMAGE ?= etcd-recovery:$(VERSION)
# Integration tests start many real servers; two packages at a time fit 2 cores.
TEST_FLAGS ?= -count=1 -p 2 -parallel 4 -timeout 75m

.PHONY: all build cross test test-servers bench demo image container-tools vet clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/etcd-recovery

# The binary for every platform an SRE runs it on (it must start everywhere:
# Linux-only code lives in _linux.go files). Only the binary is built, one
# platform after the other, into a throwaway directory: with a warm build
# cache about 10-15 s per platform on 2 busy cores (about 5 min each when
# the cache is cold).
CROSS_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
cross:
	@out=$$(mktemp -d) && trap 'rm -rf "$$out"' EXIT && \
	for p in $(CROSS_PLATFORMS); do \
		echo "cross: $$p"; \
		CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -o "$$out/etcd-recovery-$${p%/*}-$${p#*/}" ./cmd/etcd-recovery || exit 1; \
	done

# Builds or downloads the real test servers once, into .cache/servers (etcd 3.4
# is Debian's package unpacked there, never installed).
test-servers:
	scripts/test-servers.sh etcd34 etcd35 etcd36 minio kube-apiserver kubectl promtool

vet:
	$(GO) vet ./...

# Everything, nothing skipped, against real etcd 3.4/3.5/3.6 and MinIO.
# metrics first: its 1,000-refresh memory test (about 20 min) is the long
# pole, so it runs beside every other package instead of after them.
test: test-servers vet cross container-tools image
	$(GO) test $(TEST_FLAGS) ./metrics/ $$($(GO) list ./... | grep -v '/metrics$$')

# Benchmarks against the manual baselines, in one run; prints ratios and peak RSS.
bench: test-servers build
	scripts/bench.sh

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
