# MessageHub. `make run` starts the service on the embedded store; `make test`
# runs every test (what CI runs). Tools are pinned and installed into .bin.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

GO  ?= go
BIN := $(CURDIR)/.bin
export PATH := $(BIN):$(PATH)

BUF_VERSION                := v1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
PROTOC_GEN_VTPROTO_VERSION := v0.6.0
GRPC_GATEWAY_VERSION       := v2.32.0
GHZ_VERSION                := v0.120.0
GOLANGCI_LINT_VERSION      := v2.15.0
GOTESTSUM_VERSION          := v1.13.0

# One stamp per tool and version, so changing a pin reinstalls that tool.
BUF                := $(BIN)/.buf-$(BUF_VERSION)
PROTOC_GEN_GO      := $(BIN)/.protoc-gen-go-$(PROTOC_GEN_GO_VERSION)
PROTOC_GEN_GO_GRPC := $(BIN)/.protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)
PROTOC_GEN_VTPROTO := $(BIN)/.protoc-gen-go-vtproto-$(PROTOC_GEN_VTPROTO_VERSION)
PROTOC_GEN_GATEWAY := $(BIN)/.protoc-gen-grpc-gateway-$(GRPC_GATEWAY_VERSION)
PROTOC_GEN_OPENAPI := $(BIN)/.protoc-gen-openapiv2-$(GRPC_GATEWAY_VERSION)
GHZ                := $(BIN)/.ghz-$(GHZ_VERSION)
GOLANGCI_LINT      := $(BIN)/.golangci-lint-$(GOLANGCI_LINT_VERSION)
GOTESTSUM          := $(BIN)/.gotestsum-$(GOTESTSUM_VERSION)

BENCHTIME ?= 1x
ARGS      ?=

INGEST_DURATION ?= 5s

# make load: how long and how many calls each ghz run may take (see
# test/load/ghz/README.md), and how long each native scenario runs.
GHZ_N         ?= 20000
GHZ_C         ?= 50
GHZ_Z         ?= 60s
LOAD_DURATION ?= 5s

.PHONY: all tools generate check-generated cross lint build run test test-quick bench load ingest-vs-postgres dev-tokens clean
all: lint build test

GENERATORS := $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) $(PROTOC_GEN_VTPROTO) $(PROTOC_GEN_GATEWAY) $(PROTOC_GEN_OPENAPI)

tools: $(GENERATORS) $(GOLANGCI_LINT) $(GOTESTSUM) ## install the pinned tools into .bin (ghz: make load installs it)

$(BUF):
	@echo "==> installing buf $(BUF_VERSION) into .bin (once, about 4 minutes)"
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	touch $@
$(PROTOC_GEN_GO):
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	touch $@
$(PROTOC_GEN_GO_GRPC):
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	touch $@
$(PROTOC_GEN_VTPROTO):
	GOBIN=$(BIN) $(GO) install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@$(PROTOC_GEN_VTPROTO_VERSION)
	touch $@
$(PROTOC_GEN_GATEWAY):
	GOBIN=$(BIN) $(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
	touch $@
$(PROTOC_GEN_OPENAPI):
	GOBIN=$(BIN) $(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY_VERSION)
	touch $@
$(GHZ):
	GOBIN=$(BIN) $(GO) install github.com/bojand/ghz/cmd/ghz@$(GHZ_VERSION)
	touch $@
$(GOLANGCI_LINT):
	@echo "==> installing golangci-lint $(GOLANGCI_LINT_VERSION) into .bin (once, a few minutes)"
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	touch $@
$(GOTESTSUM):
	@echo "==> installing gotestsum $(GOTESTSUM_VERSION) into .bin (once)"
	GOBIN=$(BIN) $(GO) install gotest.tools/gotestsum@$(GOTESTSUM_VERSION)
	touch $@

# gen/openapi/openapi.go (the go:embed of the OpenAPI documents) is the one
# file under gen/ written by hand, so only generated files are removed.
# cmd/apidoc completes protoc-gen-openapiv2's document into openapi2.json and
# converts it to openapi3.json.
generate: $(GENERATORS) ## regenerate gen/ from proto/ (committed; must not change)
	rm -rf gen/messagehub gen/gateway
	rm -f gen/openapi/*.json
	$(BIN)/buf generate
	$(GO) run ./cmd/apidoc gen/openapi/messagehub.swagger.json gen/openapi

check-generated: generate ## fail when gen/ differs from what `make generate` makes from proto/
	@if ! git diff --quiet -- gen || [ -n "$$(git ls-files --others --exclude-standard gen)" ]; then \
		echo "gen/ is not what make generate makes from proto/ (commit the regenerated files):"; \
		git status --short -- gen; exit 1; fi

# The hub is built for Linux containers, but nothing in it may need Unix:
# the disk guard has a part per system.
cross: ## build the binary for Windows and macOS (no cgo) to keep it portable
	GOOS=windows GOARCH=amd64 CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/messagehub
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/messagehub

lint: $(BUF) $(GOLANGCI_LINT) ## buf lint, gofmt, go vet, golangci-lint
	$(BIN)/buf lint proto
	@unformatted="$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/golangci-lint run ./...

# What ships is pure Go (as the Dockerfile builds it): no cgo, so a cold build
# compiles no C.
build: ## build .bin/messagehub (pure Go, as shipped)
	@echo "==> building .bin/messagehub (CGO_ENABLED=0; a first build downloads and compiles the dependencies, about a minute)"
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o $(BIN)/messagehub ./cmd/messagehub

run: build ## run the service on the embedded store in ./data (ARGS="--grpc-addr ..." to override)
	@echo "==> starting .bin/messagehub $(ARGS) (embedded store in ./data; Ctrl-C stops it)"
	$(BIN)/messagehub $(ARGS)

# Hubs started by tests pick a free HTTP port rather than the default 8080,
# so that test packages running side by side do not collide.
test: export MESSAGEHUB_HTTP_ADDR ?= 127.0.0.1:0
test-quick: export MESSAGEHUB_HTTP_ADDR ?= 127.0.0.1:0
# Compiling with the race detector is the longest silent step on a fresh
# machine, so it runs first with a line per package compiled; gotestsum then
# prints every test as it ends, so a long package is never silent either.
test: $(GOTESTSUM) ## vet and every test of the main module, with the race detector
	@echo "==> compiling every package with the race detector (a line per package; a fresh machine takes several minutes)"
	$(GO) build -race -v ./... 2>&1 | sed -u 's/^/    compiled /'
	@echo "==> go vet"
	$(GO) vet ./...
	@echo "==> go test -race (the first run also installs the Cosmos DB test server and Azurite from the npm registry)"
	$(BIN)/gotestsum --format testname --format-hide-empty-pkg -- -race -count=1 -timeout 30m ./...

test-quick: $(GOTESTSUM) ## every test without the race detector: a first check
	@echo "==> go test (no race detector; the first run installs the Cosmos DB test server and Azurite from the npm registry)"
	$(BIN)/gotestsum --format testname --format-hide-empty-pkg -- -count=1 -timeout 30m ./...

dev-tokens: ## tokens for a domain, an actor and an admin, the signing key and its JWKS in ./dev-auth, to try --auth jwt (reuses the key: earlier tokens stay valid)
	$(GO) run ./cmd/devtoken --out dev-auth

bench: ## Go benchmarks (BENCHTIME=3s for stable numbers)
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) ./...

load: export MESSAGEHUB_HTTP_ADDR ?= 127.0.0.1:0
load: $(GHZ) ## load test on loopback: the native tool and ghz (GHZ_N, GHZ_C, GHZ_Z, LOAD_DURATION)
	GHZ=$(BIN)/ghz GHZ_N=$(GHZ_N) GHZ_C=$(GHZ_C) GHZ_Z=$(GHZ_Z) LOAD_DURATION=$(LOAD_DURATION) \
		test/load/ghz/load.sh

ingest-vs-postgres: ## ingest side by side with a private PostgreSQL 15 cluster (INGEST_DURATION, default 5s)
	test/load/postgres/run.sh $(INGEST_DURATION)

clean:
	rm -rf $(BIN) coverage.out coverage.html
