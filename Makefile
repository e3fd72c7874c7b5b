# jetrl — `make run` trains on the built-in tasks with an embedded NATS; `make test` runs every test.
GO      ?= go
BIN     ?= bin
OUT     ?= out/run
MINUTES ?= 4
TASKS   ?= alfworld
SERVICES := env rollout replay-buffer advantage-normalizer trainer
MODULES  := proto shared services/env services/rollout services/replay-buffer services/advantage-normalizer services/trainer cmd/jetrl tests
SHELL    := /bin/bash
export CGO_ENABLED ?= 0

.PHONY: all build run test test-unit test-e2e vet fmt-check bench clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/jetrl ./cmd/jetrl
	@for s in $(SERVICES); do echo "$(GO) build -o $(BIN)/jetrl-$$s ./services/$$s/cmd/jetrl-$$s"; \
		$(GO) build -o $(BIN)/jetrl-$$s ./services/$$s/cmd/jetrl-$$s || exit 1; done
	$(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

run: build
	$(BIN)/jetrl up --tasks $(TASKS) --minutes $(MINUTES) --out $(OUT)

test: fmt-check vet build test-unit test-e2e test-containers

fmt-check:
	@bad=$$(gofmt -l $(MODULES)); if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi

vet:
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

# Unit and package tests of every module, with the race detector; then the allocation bounds, which only
# hold without it (the race detector makes sync.Pool drop values).
test-unit:
	@for m in $(filter-out tests,$(MODULES)); do echo "== $$m"; (cd $$m && CGO_ENABLED=1 $(GO) test -race -count=1 ./...) || exit 1; done
	cd shared && $(GO) test -count=1 -run 'Allocates' ./codec/

# End-to-end tests: the mesh learning on an embedded server, the services as separate processes.
test-e2e: build
	cd tests && JETRL_BIN=$(abspath $(BIN)) $(GO) test -count=1 -timeout 25m -v ./...

# Every Go benchmark of every module with allocations: episode encode/decode (shared/codec), policy forward,
# backward and weights (shared/policy), advantages (services/advantage-normalizer), env steps and sessions.
BENCHTIME ?= 1s
bench:
	@for m in $(filter-out tests,$(MODULES)); do echo "== $$m"; (cd $$m && $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./...) || exit 1; done

clean:
	rm -rf $(BIN) out

# Scratch images of the five services and nats-server from the static binaries in bin/ (nothing is pulled):
# jetrl/<service>:dev and jetrl/nats-server:dev. See deploy/ and docker-compose.yml.
IMAGE_TAG ?= dev
.PHONY: images
images: build
	$(GO) build -o $(BIN)/jetrl-healthcheck ./cmd/jetrl/healthcheck
	@for s in $(SERVICES) nats-server; do echo "docker build -f deploy/docker/$$s.Dockerfile -t jetrl/$$s:$(IMAGE_TAG) ."; \
		docker build -q -f deploy/docker/$$s.Dockerfile -t jetrl/$$s:$(IMAGE_TAG) . || exit 1; done

# The mesh from those images with testcontainers-go (tests/containers, its own module outside go.work, build
# tag `containers`): a 3-node NATS cluster, 2 env hosts, 2 rollouts and the other stages on a private Docker
# network, faults injected one after another, every episode accounted for by id; the fault table is written
# to $(FAULT_TABLE)/faults.md. Part of `make test`. Without a Docker engine it is skipped with a warning,
# except with CI=true, where that is an error.
FAULT_TABLE ?= out/faults
.PHONY: test-containers docker-check
test-containers: docker-check
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory images && \
		cd tests/containers && GOWORK=off $(GO) vet -tags containers ./... && run=jetrl-$$$$-$$(date +%s) && \
		{ GOWORK=off TESTCONTAINERS_RYUK_DISABLED=true JETRL_IMAGE_TAG=$(IMAGE_TAG) JETRL_BIN=$(abspath $(BIN)) JETRL_TEST_RUN=$$run \
		JETRL_FAULT_TABLE=$(abspath $(FAULT_TABLE)) $(GO) test -tags containers -count=1 -timeout 28m -v ./...; rc=$$?; \
		docker ps -aq --filter label=jetrl.run=$$run | xargs -r docker rm -fv >/dev/null; \
		docker network ls -q --filter label=jetrl.run=$$run | xargs -r docker network rm >/dev/null; exit $$rc; }; fi
docker-check:
	@if ! docker info >/dev/null 2>&1; then \
		if [ "$${CI:-}" = "true" ]; then echo "FATAL: CI=true but no Docker engine is reachable: the container tests cannot run" >&2; exit 1; fi; \
		echo "WARNING: no Docker engine reachable: the container tests (make test-containers) are SKIPPED" >&2; fi
