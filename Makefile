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
GOLANGCI_LINT_VERSION      := v2.15.0

# One stamp per tool and version, so changing a pin reinstalls that tool.
BUF                := $(BIN)/.buf-$(BUF_VERSION)
PROTOC_GEN_GO      := $(BIN)/.protoc-gen-go-$(PROTOC_GEN_GO_VERSION)
PROTOC_GEN_GO_GRPC := $(BIN)/.protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)
GOLANGCI_LINT      := $(BIN)/.golangci-lint-$(GOLANGCI_LINT_VERSION)

BENCHTIME ?= 1x
ARGS      ?=

.PHONY: all tools generate lint build run test bench clean
all: lint build test

tools: $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) $(GOLANGCI_LINT) ## install the pinned tools into .bin

$(BUF):
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	touch $@
$(PROTOC_GEN_GO):
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	touch $@
$(PROTOC_GEN_GO_GRPC):
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	touch $@
$(GOLANGCI_LINT):
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	touch $@

generate: $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) ## regenerate gen/ from proto/ (committed; must not change)
	rm -rf gen
	$(BIN)/buf generate

lint: $(BUF) $(GOLANGCI_LINT) ## buf lint, gofmt, go vet, golangci-lint
	$(BIN)/buf lint proto
	@unformatted="$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/golangci-lint run ./...

build: ## build bin/messagehub
	$(GO) build -o $(BIN)/messagehub ./cmd/messagehub

run: ## run the service on the embedded store in ./data (ARGS="--grpc-addr ..." to override)
	$(GO) run ./cmd/messagehub $(ARGS)

test: ## vet and every test of the main module, with the race detector
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 30m ./...

bench: ## Go benchmarks (BENCHTIME=3s for stable numbers)
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) ./...

clean:
	rm -rf $(BIN) coverage.out coverage.html
