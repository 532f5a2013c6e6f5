# etcd-recovery. `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/armada/etcd-recovery/internal/version.Version=$(VERSION)
BIN := bin/etcd-recovery
IMAGE ?= etcd-recovery:$(VERSION)
# Integration tests start many real servers; two packages at a time fit 2 cores.
TEST_FLAGS ?= -count=1 -p 2 -parallel 4 -timeout 75m

.PHONY: all build cross test test-servers bench demo image vet clean

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

# Builds or installs the real test servers once, into .cache/servers.
test-servers:
	scripts/test-servers.sh etcd34 etcd35 etcd36 minio kube-apiserver

vet:
	$(GO) vet ./...

# Everything, nothing skipped, against real etcd 3.4/3.5/3.6 and MinIO.
test: test-servers vet cross
	$(GO) test $(TEST_FLAGS) ./...

# Benchmarks against the manual baselines, in one run; prints ratios and peak RSS.
bench: test-servers build
	scripts/bench.sh

# A local 3-member etcd cluster and MinIO on loopback, some data, a backup, the listing.
demo: test-servers build
	scripts/demo.sh

# The toolkit image (needs a Docker engine).
image:
	docker build -f images/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE) .

clean:
	rm -rf bin demo-data
