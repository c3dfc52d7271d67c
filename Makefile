# kshard — run `make help` for the targets. The two that matter: `make demo`, `make test`.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO        ?= go
BIN       := $(CURDIR)/bin
TOOLS     := $(CURDIR)/hack/tools.sh
CLUSTER   := $(CURDIR)/hack/cluster.sh
PKGS      := ./cmd/... ./pkg/...
# Seeds of the deterministic sharding simulation run by `make test`; `make soak` runs more.
SIM_SEEDS ?= 1000

.PHONY: help
help: ## show this help
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

.PHONY: build
build: ## build the kshard binaries into ./bin, and the tests' audit-shard (the shard with the test-only kshard-audit controller)
	@mkdir -p $(BIN)
	$(GO) build -trimpath -o $(BIN)/ ./cmd/... ./test/cmd/...

.PHONY: tools
tools: ## build the control plane, kwok and lint tools into the cache (once)
	$(TOOLS) all

.PHONY: test
test: test-unit test-integration ## unit tests (-race) and integration tests on the real control plane

.PHONY: test-unit
test-unit: ## unit tests with the race detector
	@echo '$(GO) test -race -count=1 $(PKGS)'; start=$$(date +%s); \
	  $(GO) test -race -count=1 $(PKGS); rc=$$?; \
	  echo "[test-unit] $$(( $$(date +%s) - start )) s (build and test)"; exit $$rc

.PHONY: test-integration
test-integration: ## integration tests against the local control plane (started if not up)
	$(CURDIR)/hack/test-integration.sh

.PHONY: bench
bench: build ## Go benchmarks: the packages', the sharding measurements, throughput vs shards and the capacity curve at kcm's limits, workloads, namespace life, DaemonSets and StatefulSets vs upstream, EndpointSlices vs upstream (hours)
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)
	$(TOOLS) cluster
	KSHARD_BIN_DIR=$(BIN) $(GO) test ./test/bench/sharding -run '^$$' -bench . -benchtime=1x -timeout 45m -v
	KSHARD_BIN_DIR=$(BIN) $(GO) test ./test/bench/scaleout -run '^$$' -bench . -benchtime=1x -timeout 300m -v
	$(CURDIR)/hack/cluster-upstream.sh up
	KSHARD_BIN_DIR=$(BIN) $(GO) test ./test/bench/workloads -run '^$$' -bench . -benchtime=1x -timeout 60m -v
	KSHARD_BIN_DIR=$(BIN) $(GO) test ./test/bench/namespacelife -run '^$$' -bench . -benchtime=1x -timeout 150m -v
	KSHARD_BIN_DIR=$(BIN) $(GO) test ./test/integration/namespacelife -run '^$$' -bench NewNamespaceLatency -benchtime=1x -timeout 30m -v
	KSHARD_BIN_DIR=$(BIN) $(GO) test ./test/bench/statefuldaemon -run '^$$' -bench . -benchtime=1x -timeout 180m -v
	KSHARD_BIN_DIR=$(BIN) $(GO) test ./test/bench/endpointslice -run '^$$' -bench . -benchtime=1x -timeout 180m -v

# The large-cluster benchmark's own control plane: a folder and ports apart from the
# default cluster's (23790/26443) and the reference one's (24790/27443); its etcd data
# (the 10,000-namespace fixture) is kept between runs.
LARGE_ENV := KSHARD_CLUSTER_DIR=$(CURDIR)/_output/cluster-large KSHARD_ETCD_PORT=25790 KSHARD_ETCD_PEER_PORT=25800 \
	KSHARD_APISERVER_PORT=28443 KSHARD_SCHEDULER_PORT=22259 KSHARD_KCM_PORT=22257 KSHARD_KWOK_PORT=22247 KSHARD_KEEP_DATA=1 KSHARD_METRICS=0

.PHONY: bench-large
bench-large: build ## upstream vs kshard (1, 2, 4 shards) at 10,000 namespaces / 50,000 pods on a cluster of its own (KSHARD_BENCH_* knobs, e.g. KSHARD_BENCH_REPETITIONS=3; takes an hour or more, not in `make bench`)
	$(TOOLS) cluster
	$(LARGE_ENV) $(CLUSTER) up
	$(LARGE_ENV) KSHARD_KUBECONFIG=$(CURDIR)/_output/cluster-large/kubeconfig KSHARD_BIN_DIR=$(BIN) \
	  $(GO) test ./test/bench/largecluster -run '^$$' -bench . -benchtime=1x -timeout 240m -v; \
	  rc=$$?; $(LARGE_ENV) $(CLUSTER) down; exit $$rc

.PHONY: image
image: ## container image of both binaries (no Docker engine) as a tarball under _output/image; prints path and digest
	$(CURDIR)/hack/image.sh build
	$(CURDIR)/hack/image.sh verify

.PHONY: chart-test
chart-test: build ## Helm chart: lint, template, server-side dry-run, RBAC proof, image (also part of `make test`)
	$(TOOLS) cluster helm
	$(CLUSTER) up
	KSHARD_BIN_DIR=$(BIN) $(GO) test -count=1 -v ./test/integration/chart

.PHONY: failover
FAILOVER_RUNS ?= 20
failover: build ## coordinator leader failovers with the chart's timings: SIGKILL and SIGSTOP, FAILOVER_RUNS each (default 20, ~30 min)
	$(TOOLS) cluster
	$(CLUSTER) up
	KSHARD_FAILOVER=1 KSHARD_FAILOVER_RUNS=$(FAILOVER_RUNS) KSHARD_BIN_DIR=$(BIN) $(GO) test -count=1 -v -timeout 120m ./test/failover

.PHONY: chaos
CHAOS_DURATION ?= 30m
CHAOS_TIMEOUT ?= 60m
chaos: build ## chaos on the real control plane (test/chaos): random faults while Deployments roll out, CHAOS_DURATION (default 30m); CHAOS_SEED=n replays a run; CHAOS_FAULTS=a,b picks fault kinds
	$(TOOLS) cluster
	$(CLUSTER) up
	KSHARD_CHAOS=1 KSHARD_CHAOS_DURATION=$(CHAOS_DURATION) $(if $(CHAOS_SEED),KSHARD_CHAOS_SEED=$(CHAOS_SEED)) $(if $(CHAOS_FAULTS),KSHARD_CHAOS_FAULTS=$(CHAOS_FAULTS)) KSHARD_BIN_DIR=$(BIN) \
	  $(GO) test -p 1 -count=1 -timeout $(CHAOS_TIMEOUT) -run '^TestChaos$$' -v ./test/chaos

.PHONY: batch-stress
batch-stress: build ## batch controllers under sharding (test/batchstress): 3 shards, 304 Jobs and 30 CronJobs while shards scale out, in and one is SIGKILLed (~10 min)
	$(TOOLS) cluster
	$(CLUSTER) up
	KSHARD_BATCH_STRESS=1 KSHARD_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout 40m -run '^TestBatchStress$$' -v ./test/batchstress

.PHONY: workload-stress
workload-stress: build ## workload controllers under sharding (test/workloadstress): StatefulSets, DaemonSets and PodDisruptionBudgets rolling while shards scale out, in and one is SIGKILLed (~10 min)
	$(TOOLS) cluster
	$(CLUSTER) up
	KSHARD_WORKLOAD_STRESS=1 KSHARD_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout 40m -run '^TestWorkloadStress$$' -v ./test/workloadstress

.PHONY: endpoint-stress
endpoint-stress: build ## the EndpointSlice controller under sharding (test/endpointstress): Services whose pods churn while 3 shards scale out to 5, in to 2 and one is SIGKILLed; kube-apiserver audits slice writes (~10 min)
	$(TOOLS) cluster
	KSHARD_APISERVER_AUDIT=1 $(CLUSTER) up
	KSHARD_ENDPOINT_STRESS=1 KSHARD_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout 40m -run '^TestEndpointStress$$' -v ./test/endpointstress

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	$(TOOLS) staticcheck
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$$($(TOOLS) path staticcheck) ./...

.PHONY: verify
verify: ## go.mod files tidy, generated code fresh
	$(CURDIR)/hack/verify.sh

.PHONY: cluster-up
cluster-up: ## start the local control plane (etcd, apiserver, scheduler, controller-manager, kwok)
	$(TOOLS) cluster
	$(CLUSTER) up

.PHONY: cluster-down
cluster-down: ## stop the local control plane (and the real node's, if one runs)
	$(CLUSTER) down
	@if [ -d $(CURDIR)/_output/cluster-node/run ]; then $(NODE_ENV) $(CLUSTER) down; fi

# The real node's control plane: a folder and ports of its own (clear of make test's,
# the upstream's and the large cluster's), so helm-e2e never meets another test's kshard.
NODE_ENV := KSHARD_CLUSTER_DIR=$(CURDIR)/_output/cluster-node KSHARD_ETCD_PORT=24190 KSHARD_ETCD_PEER_PORT=24200 \
	KSHARD_APISERVER_PORT=26843 KSHARD_SCHEDULER_PORT=20659 KSHARD_KCM_PORT=20657 KSHARD_KWOK_PORT=20647

.PHONY: node-up
node-up: ## a control plane of its own (_output/cluster-node) with one real node: kubelet, containerd, kube-proxy, CoreDNS (root; hack/node.sh)
	$(TOOLS) cluster node
	$(NODE_ENV) $(CLUSTER) up
	$(NODE_ENV) $(CURDIR)/hack/node.sh up

.PHONY: node-down
node-down: ## stop the real node and its control plane, leaving the machine as it was
	$(NODE_ENV) $(CLUSTER) down

.PHONY: helm-e2e
helm-e2e: build ## the chart installed with helm on a real node: pods, fence, scaling, PDB, failover, upgrade, Prometheus and the dashboards, uninstall (run by CI; root)
	$(TOOLS) cluster helm node prometheus
	$(CURDIR)/hack/image.sh build
	$(NODE_ENV) $(CLUSTER) up && $(NODE_ENV) $(CURDIR)/hack/node.sh up && \
	  $(NODE_ENV) $(CURDIR)/hack/node.sh import $(CURDIR)/_output/image/kshard-*-linux-*.tar && \
	  $(NODE_ENV) KSHARD_BIN_DIR=$(BIN) $(GO) test -count=1 -v -timeout 20m ./test/e2e/helm; \
	  rc=$$?; $(NODE_ENV) $(CLUSTER) down; exit $$rc

.PHONY: cluster-status
cluster-status: ## show the local control plane's processes
	$(CLUSTER) status

.PHONY: demo
demo: build tools ## build everything; start the control plane, 2 coordinators and 3 shards; apply a sample workload
	$(CURDIR)/hack/demo.sh up

.PHONY: demo-scale
demo-scale: ## scale the running demo's shards to SHARDS=n (graceful scale-in; scale-out waits until new shards own partitions)
	$(CURDIR)/hack/demo.sh scale "$(SHARDS)"

.PHONY: demo-down
demo-down: ## stop the demo and the control plane
	$(CURDIR)/hack/demo.sh down

.PHONY: clean
clean: ## remove build output (not the tool cache)
	rm -rf $(BIN) $(CURDIR)/_output

.PHONY: generate
generate: ## regenerate protobuf/gRPC code (protoc from Debian's protobuf-compiler)
	$(CURDIR)/hack/generate.sh

.PHONY: soak
soak: ## the deterministic sharding simulation over 100,000 seeds (minutes)
	$(GO) test ./pkg/sharding/sim -run TestSimulation -sim.seeds=100000 -timeout 0 -v

# --- Fuzzing -------------------------------------------------------------------------
# Go fuzz targets of the wire protocol's validation (pkg/sharding/protocol) and of both
# state machines fed validated wire messages (pkg/sharding/handoff). `make test` replays
# their seeds and testdata/fuzz corpora; `make fuzz` runs each target for FUZZTIME.
FUZZTIME  ?= 300000x
FUZZFLAGS ?= -fuzzminimizetime 200x
FUZZ_TARGETS := protocol:FuzzProtocolReportFromWire protocol:FuzzProtocolCommandFromWire handoff:FuzzShard handoff:FuzzCoordinator

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME (default 300000x each; e.g. FUZZTIME=10m)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "fuzz $${t#*:}"; \
	  $(GO) test ./pkg/sharding/$${t%%:*} -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS); \
	done
