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
# from it when the order drifts). replicate holds
# TestSecondSiteDownTenMinutes (about 13 min, its second site down for a real
# 10 min, the machine mostly idle): it starts with the first, beside deploy.
SLOW_FIRST := ./deploy/ ./replicate/ ./kube/ ./fleet/ ./runbooks/ ./restore/ ./drill/ ./internal/testing/faultmatrix/ ./metrics/

# The race detector (go test -race), beside the main run. RACE_PKGS are the
# packages whose code runs goroutines of its own, by their tests:
# internal/fanout (bounded parallelism), internal/store/... (the COS
# watchdog's timers, parallel parts, batched deletes), internal/catalog and internal/prune
# (prune and drill records fan out), inspect (members probed at once;
# internal/probe has no tests: its code runs in inspect's and backup's),
# backup (the snapshot stream: receive, compress, upload), restore (the
# download: fetch, decrypt, decompress, hash), kube (--parallel clusters,
# the drill limiter) and metrics (the exporter's and the push's fan-out).
# No other package starts a goroutine (internal/testing/ is harness). -race
# instruments every package in a test binary, so a race in plumbing is
# caught by any test that runs it. RACE_RUN picks each package's
# concurrency tests: the whole suites would double the run's load.
# Measured 2026-11-25 on a 2-core VM shared with other builds, the race
# build warm: the lane alone took 115 s at load 2-7 (53 tests, the
# longest 21 s) and 4 min 30 s at load 8-15 (kube's TestBackupAllDrill
# then 170 s); beside the main run it ends well before deploy's
# TestShippedPods. The race build of its packages (one graph of about 940
# packages, the harness's Kubernetes client included) took 11 min 51 s
# with an empty build cache at load 12-16: race-build starts it beside
# the server builds.
RACE_PKGS := ./internal/fanout/ ./internal/store/... ./internal/catalog/ ./internal/prune/ ./inspect/ ./backup/ ./restore/ ./drill/ ./kube/ ./fleet/ ./metrics/
RACE_RUN := ^(TestForEach.*|TestLimiter.*|TestConformance.*|TestUploads|TestRetries|TestPutGetMultipart|TestStallGetBody|TestStallSilentEndpoint|TestMinThroughput.*|TestPutCancelledAborts|TestPutSurvivesFrozenServer|TestDelete.*|TestPrune.*|TestBackupPrune|TestDrillRecords|TestInspectTwoClusters|TestInspectFrozenMember|TestBackupEncrypted|TestBackupCancelled|TestBackupConcurrentRunsDistinct|TestBackupStoreFaults|TestRestoreEncryptedTampered|TestRestoreCancelled|TestDrillEncrypted|TestRestoreDryRunChangesNothing|TestBackupAllDrill|TestPushBackupsAndDrills|TestExporterFrozenStore)$$
RACE_FLAGS ?= -race -count=1 -p 2 -parallel 4 -timeout 30m

.PHONY: all build cross cross-check test test-prereqs test-servers race-build bench soak demo image container-tools vet clean

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
	@# helm (about 5 CPU-minutes, 9 min at a load of 8-15) beside the others.
	@scripts/test-servers.sh helm & helm=$$!; \
	scripts/test-servers.sh etcd34 etcd35 etcd36 minio kube-apiserver kubectl kube-controller-manager promtool age; rc=$$?; \
	wait $$helm || rc=1; exit $$rc

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
#
# The race lane (RACE_PKGS, RACE_RUN) runs beside the main run, its output
# in bin/test-race.log; a race, or any failure there, fails make test.
#
# The tests run with a private TMPDIR (scripts/test-tmpdir.sh), removed
# when they end however they end: a test that leaves anything behind there
# fails the run, since a leak repeated over many runs fills the machine's
# disk (as one did: 393 copies of the 76 MB test binary). Before they
# start, the filesystem of TMPDIR must have TEST_DISK_GIB free: a full disk
# fails tests in ways that look like flakes (a MinIO answering 507, an etcd
# member exiting). Measured 2026-11-25: a run's disk use peaked 9.8 and
# 12.2 GiB above its start (TestShippedPods' 1.2 GiB database, its backups,
# drills and restored data dirs are most of it; the test binaries' build
# cache entries the rest).
TEST_DISK_GIB ?= 12
test: container-tools test-prereqs image
	@mkdir -p bin
	@scripts/test-tmpdir.sh check $(TEST_DISK_GIB)
	@tmp=$$(scripts/test-tmpdir.sh make) && trap 'rm -rf "$$tmp"' EXIT && export TMPDIR="$$tmp" && \
	{ $(GO) test $(RACE_FLAGS) -run '$(RACE_RUN)' $(RACE_PKGS) > bin/test-race.log 2>&1 & race=$$!; } && \
	set -o pipefail; pkgs=$$( { $(GO) list $(SLOW_FIRST) && $(GO) list ./...; } | awk '!seen[$$0]++') && \
		$(GO) test -json $(TEST_FLAGS) $$pkgs | $(GO) run ./internal/testing/cmd/testreport -json bin/test-report.json; rc=$$?; \
	if wait $$race; then echo "race: ok, no data race in $(RACE_PKGS) (bin/test-race.log)"; \
	else echo "race: FAILED (bin/test-race.log):"; grep -v '^ok ' bin/test-race.log | tail -n 300; rc=1; fi; \
	scripts/test-tmpdir.sh left "$$tmp" || rc=1; \
	exit $$rc

# The steps before the tests, side by side (make -j4): a build of the test
# servers leaves a core idle while it links or downloads, and vet, the
# type-check and the race build fill it.
test-prereqs: container-tools
	@$(MAKE) --no-print-directory -j4 -Oline test-servers vet cross-check race-build

# Compiles, with -race, every package the race lane's test binaries import
# (compile only, nothing linked or run; with a warm cache a few seconds),
# so that on a new machine that compile overlaps the server builds instead
# of the tests.
race-build:
	@$(GO) list -deps -test $(RACE_PKGS) | grep -v -e ' ' -e '\.test$$' | xargs $(GO) build -race

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

# Pins the image `make image` built (bin/image/digest) by digest in the
# chart's values (deploy/values.yaml image.digest): every pod the chart
# renders then runs exactly that image. Push the image (its OCI archive)
# under icr.io/armada/etcd-recovery first.
MANIFESTS_DIGEST ?= bin/image/digest
MANIFESTS_DIR ?= deploy
.PHONY: manifests
manifests:
	@d=$$(cat $(MANIFESTS_DIGEST) 2>/dev/null); \
	if ! [[ $$d =~ ^sha256:[0-9a-f]{64}$$ ]]; then echo "manifests: no image digest in $(MANIFESTS_DIGEST) (run make image first)" >&2; exit 1; fi; \
	sed -i -E "/^image:$$/,/^  digest:/ s|^(  digest: ).*|\1$$d|" $(MANIFESTS_DIR)/values.yaml || exit 1; \
	echo "manifests: $(MANIFESTS_DIR)/ runs icr.io/armada/etcd-recovery@$$d"

# Renders the chart (deploy/) for a fleet values file, as Argo CD, Flux or
# `helm upgrade --install` would, with the helm of the test-server cache
# (scripts/test-servers.sh helm): make render VALUES=fleet.yaml > fleet-rendered.yaml
VALUES ?= deploy/testdata/fleet-values.yaml
.PHONY: render
render:
	@scripts/test-servers.sh helm
	@"$$(scripts/servers-dir.sh)/helm-$$(. scripts/test-servers.env && echo $$HELM_VERSION)/helm" template etcd-recovery deploy/ -f $(VALUES)
