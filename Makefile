# kcl-artifact-controller
SHELL := /usr/bin/env bash
GO ?= go
export CGO_ENABLED ?= 0
BIN := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/kcl-flux/kcl-artifact-controller/internal/version.Version=$(VERSION)

.PHONY: all build libkcl testbin fluxcli test conformance bench vet fmt

all: build

## libkcl: fetch the official KCL engine (npm) and build its Node-API stub into bin/
libkcl:
	@bash hack/libkcl.sh

## build: bin/kcl-artifact-controller, with its KCL worker (bin/kcl-worker) and the engine library beside it
build: libkcl
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/kcl-artifact-controller ./cmd/kcl-artifact-controller
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/kcl-worker ./cmd/kcl-worker

## testbin: kube-apiserver, etcd, source-controller, kustomize-controller and
## image-reflector-controller built from source into bin/ (cached by version; a cold build takes
## about 25 minutes on two cores)
testbin:
	@bash hack/testbin.sh

.PHONY: imagereflector
## imagereflector: only testbin's image-reflector-controller step (binary, CRDs in bin/crds*, env
## files), for a bin/ built before it was part of testbin; nothing else is rebuilt
imagereflector:
	@bash hack/imagereflector.sh

## fluxcli: the flux CLI (v2.9.5) built from the Go module proxy into bin/flux-cli/flux, for the
## tests of the flux-kcl plugin (cached by version; a cold build takes about 4 minutes on two cores)
fluxcli:
	@bash hack/fluxcli.sh

.PHONY: build-plugin flux-plugin plugin-dist
## build-plugin: bin/flux-kcl, the flux CLI plugin (`flux kcl`): static (CGO_ENABLED=0), without the engine, stamped as the controller
build-plugin:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/flux-kcl ./cmd/flux-kcl

## flux-plugin: build-plugin, then install it where flux finds it: $$FLUXCD_PLUGINS, else ~/.fluxcd/plugins
flux-plugin: build-plugin
	@bash hack/flux-plugin.sh $(BIN)/flux-kcl

# The platforms of a release of the plugin (os/arch, comma-separated), and where its archives
# will be downloaded from (default: the GitHub release v<version> of plugins/kcl.yaml's source).
PLUGIN_PLATFORMS ?= linux/amd64,linux/arm64,darwin/amd64,darwin/arm64
PLUGIN_URL_BASE ?=
## plugin-dist: dist/flux-kcl_<version>_<os>_<arch>.tar.gz per PLUGIN_PLATFORMS, and dist/kcl.yaml and dist/catalog.yaml for the Flux plugin catalog (from plugins/kcl.yaml, with each archive's sha256)
plugin-dist:
	$(GO) run ./release/plugindist --version $(VERSION) --out dist --platforms $(PLUGIN_PLATFORMS) $(if $(PLUGIN_URL_BASE),--url-base $(PLUGIN_URL_BASE))

# What the tests need: the engine, the built binary, and envtest's and Flux's binaries.
# bin/testbin.env is the default Flux line (2.10); bin/testbin-flux<line>.env each line.
# Each suite of `make test` runs through hack/timed.sh, which keeps its log and wall time in
# $(TEST_TIMES); the run ends with a time summary (hack/test-summary.sh), so CI's budget shows.
TEST_TIMES = $(BIN)/test-times
TIMED = bash hack/timed.sh $(TEST_TIMES)
TEST_ENV = set -a && . $(BIN)/testbin.env && set +a && KCL_LIB=$(BIN)/libkcl.so KCL_BINARY=$(BIN)/kcl-artifact-controller
# The suites that start real Flux controllers run again on the other lines testbin built
# (bin/testbin-other-lines).

## test: every test (engine isolation, render, controller on envtest, KCL conformance, Flux smoke
## test, end to end, the node suite) on the default Flux line, then the smoke and end-to-end suites on the others
test: build testbin nodebin image previous-release fluxcli promtool prometheus
	@rm -rf $(TEST_TIMES)
	$(TEST_ENV) $(TIMED) packages $(GO) test -count=1 -timeout 40m $$($(GO) list ./... | grep -v '/test/node$$')
	@# the node suite alone: it runs a kubelet and four controllers as Pods on two cores
	$(TEST_ENV) $(TIMED) node $(GO) test -count=1 -timeout 45m ./test/node/
	@for line in $$(cat $(BIN)/testbin-other-lines); do $(TIMED) flux-$$line $(MAKE) --no-print-directory test-flux FLUX_LINE=$$line || exit 1; done
	@# the CRDs of lines whose controllers could not be built still check what this controller writes
	@for d in $(BIN)/crds-*; do cmp -s $$d/.pins $(BIN)/crds/.pins && continue; \
		echo "== controller suite against the CRDs of Flux $${d##*crds-}"; \
		$(TEST_ENV) FLUX_CRDS_DIR=$$d $(TIMED) crds-$${d##*crds-} $(GO) test -count=1 ./internal/controller/ || exit 1; done
	@bash hack/test-summary.sh $(TEST_TIMES)

.PHONY: test-flux
## test-flux: the suites that run real Flux controllers (smoke, end to end) on FLUX_LINE (2.9 or 2.10)
test-flux: build testbin fluxcli
	@test -f $(BIN)/testbin-flux$(FLUX_LINE).env || { echo "no Flux line '$(FLUX_LINE)' in bin/ (make testbin builds 2.9 and 2.10)"; exit 1; }
	@echo "== smoke and end-to-end suites on Flux $(FLUX_LINE)"
	set -a && . $(BIN)/testbin-flux$(FLUX_LINE).env && set +a && KCL_LIB=$(BIN)/libkcl.so KCL_BINARY=$(BIN)/kcl-artifact-controller \
		$(GO) test -count=1 -timeout 20m ./test/smoke/ ./test/e2e/

## conformance: only the KCL conformance suite, verbose
conformance: build
	KCL_LIB=$(BIN)/libkcl.so KCL_BINARY=$(BIN)/kcl-artifact-controller $(GO) test -count=1 -run TestConformance -v ./test/conformance/

## bench: worker-pool render vs in-process render, a cold worker, and what a warm worker keeps (kcl-worker and the controller binary)
bench: build
	KCL_LIB=$(BIN)/libkcl.so KCL_BINARY=$(BIN)/kcl-artifact-controller $(GO) test -run '^$$' -bench . -benchtime 200x -count 3 ./internal/kclworker/ | tee $(BIN)/bench.txt
	@awk -f hack/bench-ratio.awk $(BIN)/bench.txt

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

fmt:
	gofmt -w $$(git ls-files '*.go')

CONTROLLER_GEN_VERSION ?= v0.20.1
CONTROLLER_GEN := $(BIN)/tools/controller-gen-$(CONTROLLER_GEN_VERSION)/controller-gen

$(CONTROLLER_GEN):
	@echo "installing controller-gen $(CONTROLLER_GEN_VERSION) into $(@D)"
	GOBIN=$(@D) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

.PHONY: generate manifests api-docs verify
## verify: generated code, CRDs, RBAC, API reference, go.mod and formatting are what the sources say (CI runs it)
verify: generate manifests api-docs monitoring
	$(GO) mod tidy
	cd api && $(GO) mod tidy
	gofmt -w $$(git ls-files '*.go')
	@git diff --exit-code || { echo "generated files, go.mod or formatting are out of date: run 'make verify' and commit"; exit 1; }

## generate: deepcopy functions of the API types
generate: $(CONTROLLER_GEN)
	cd api && $(CONTROLLER_GEN) object:headerFile=../hack/boilerplate.go.txt paths=./...

## manifests: CRDs and RBAC into config/
manifests: $(CONTROLLER_GEN)
	cd api && $(CONTROLLER_GEN) crd paths=./... output:crd:artifacts:config=../config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=kcl-artifact-controller paths=./internal/... output:rbac:artifacts:config=config/rbac

# The API reference is generated as Flux's is: gen-crd-api-reference-docs with Flux's templates
# (hack/api-docs), which also show each field's default, enum and bounds.
GEN_CRD_API_REFERENCE_DOCS_VERSION ?= v0.3.0
GEN_CRD_API_REFERENCE_DOCS := $(BIN)/tools/gen-crd-api-reference-docs-$(GEN_CRD_API_REFERENCE_DOCS_VERSION)/gen-crd-api-reference-docs

$(GEN_CRD_API_REFERENCE_DOCS):
	@echo "installing gen-crd-api-reference-docs $(GEN_CRD_API_REFERENCE_DOCS_VERSION) into $(@D)"
	GOBIN=$(@D) $(GO) install github.com/ahmetb/gen-crd-api-reference-docs@$(GEN_CRD_API_REFERENCE_DOCS_VERSION)

## api-docs: docs/api/v1alpha1/kcl.md, the API reference, from the Go types of api/v1alpha1 and their comments
api-docs: $(GEN_CRD_API_REFERENCE_DOCS)
	@mkdir -p docs/api/v1alpha1
	$(GEN_CRD_API_REFERENCE_DOCS) -api-dir=./api/v1alpha1 -config=hack/api-docs/config.json \
		-template-dir=hack/api-docs/template -out-file=docs/api/v1alpha1/kcl.md

.PHONY: promtool prometheus monitoring test-monitoring
## promtool: promtool of Prometheus (github.com/prometheus/prometheus/cmd/promtool, PROMETHEUS_VERSION) built from source into bin/ (cached by version; a cold build takes about 6 minutes on two cores)
promtool:
	@bash hack/promtool.sh

## prometheus: the Prometheus server (github.com/prometheus/prometheus/cmd/prometheus, the same PROMETHEUS_VERSION as promtool, without the web UI's assets) built from source into bin/, for test/fluxenv's StartPrometheus (cached by version)
prometheus:
	@bash hack/prometheus.sh

## monitoring: config/monitoring/prometheus-rule.yaml from the plain rule file config/monitoring/rules/
monitoring:
	$(GO) run ./hack/prometheusrule

## test-monitoring: the operations pack (config/monitoring): kube-state-metrics config against the CRD, promtool check and unit tests of the alerts, dashboard
test-monitoring: promtool
	$(GO) test -count=1 -v ./test/monitoring/

include hack/dev.mk
include hack/demo.mk
include hack/bench-scale.mk
include hack/proto.mk
include hack/node.mk
