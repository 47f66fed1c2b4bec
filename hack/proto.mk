# Go types of the KCL engine's gpyrpc spec (internal/kcllib/gpyrpc): protoc with protoc-gen-go at
# the version of google.golang.org/protobuf in go.mod, built into bin/tools (cached by version).
# spec.proto stays byte-identical to KCL's; its Go package is given with protoc's M option. Included
# by the Makefile, which defines GO and BIN.

GO ?= go
BIN ?= $(CURDIR)/bin

PROTO_DIR := internal/kcllib
PROTO_FILE := gpyrpc/spec.proto
PROTO_GO_PACKAGE := github.com/kcl-flux/kcl-artifact-controller/internal/kcllib/gpyrpc
PROTOC ?= protoc
# Expanded only by the recipe below, so that other targets do not run go list.
PROTOC_GEN_GO_VERSION ?= $(shell $(GO) list -m -f '{{.Version}}' google.golang.org/protobuf)
PROTOC_GEN_GO_DIR = $(BIN)/tools/protoc-gen-go-$(PROTOC_GEN_GO_VERSION)

.PHONY: proto
## proto: regenerate internal/kcllib/gpyrpc/spec.pb.go from spec.proto (needs protoc: apt-get install protobuf-compiler)
proto:
	@command -v $(PROTOC) >/dev/null 2>&1 || { echo "make proto: '$(PROTOC)' not found; install protoc (Debian/Ubuntu: apt-get install -y protobuf-compiler) or point PROTOC at it" >&2; exit 1; }
	@gen='$(PROTOC_GEN_GO_DIR)'; test -x "$$gen/protoc-gen-go" || { \
		echo "installing protoc-gen-go $(PROTOC_GEN_GO_VERSION) into $$gen"; \
		GOBIN="$$gen" $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION); }
	$(PROTOC) -I $(PROTO_DIR) --plugin=protoc-gen-go=$(PROTOC_GEN_GO_DIR)/protoc-gen-go \
		--go_out=$(PROTO_DIR) --go_opt=paths=source_relative \
		--go_opt=M$(PROTO_FILE)='$(PROTO_GO_PACKAGE);gpyrpc' \
		$(PROTO_DIR)/$(PROTO_FILE)
