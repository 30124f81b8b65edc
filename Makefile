# ascend-fleet developer entry points. `make demo` and `make test` work on a fresh machine
# with nothing but Python 3.11+ and pip: both install what they need into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
CRD    := crds/inference.ascendfleet.io_ascendinferences.yaml

.PHONY: setup test lint unit crds demo bench images clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	# The real Helm library; it declares Python >= 3.12 but runs on 3.11.
	$(BIN)/pip install -q --ignore-requires-python 'helm-sdkpy>=0.1.30,<0.2'
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check operator tests bench
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest

crds: setup
	$(BIN)/ascend-fleet crd > $(CRD)

demo: setup
	@echo "The embedded demo (ascend-fleet dev) is not built yet. It will start a local Kubernetes API,"
	@echo "a kubelet simulator with simulated engines, a real Prometheus and the operator, then apply"
	@echo "examples/demo.yaml. Until then: $(BIN)/ascend-fleet plan examples/qwen-7b-tp4-pp2-dp2.yaml"

bench: setup
	$(BIN)/python -m bench.policy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# The operator and engine images (images/*/Dockerfile), tagged with the package version. Where no Docker
# engine answers, say so and succeed: `make test` checks the Dockerfiles without one.
# REGISTRY=registry.example.com/ai tags them for another registry (nothing is pushed).
images:
	@if ! docker info >/dev/null 2>&1; then \
	  echo "No Docker engine is reachable (docker info failed), so no images were built; make test still checks the Dockerfiles."; \
	  exit 0; \
	fi; \
	set -e; \
	version=$$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml); \
	registry=$${REGISTRY:-ghcr.io/ascend-fleet}; \
	for image in operator vllm-ascend sglang; do \
	  echo "docker build -f images/$$image/Dockerfile -t $$registry/$$image:$$version ."; \
	  DOCKER_BUILDKIT=1 docker build -f images/$$image/Dockerfile -t $$registry/$$image:$$version .; \
	done
