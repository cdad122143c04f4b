# The front door. A fresh machine needs only Python 3.11: `make run`, then `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
UV_VERSION := 0.13.9
VENV := .venv
UV := .tools/bin/uv
INSTALLED := $(VENV)/.installed
REGISTRY ?= us-docker.pkg.dev/my-project/tpu-image-pipeline
TAG ?= 0.1.0
IMAGES := $(notdir $(patsubst %/Dockerfile,%,$(wildcard containers/*/Dockerfile)))
# base images: empty keeps each Dockerfile's default (pinned by digest); a mirror's reference replaces it, e.g.
# PYTHON_BASE=europe-docker.pkg.dev/acme/mirror/python:3.11.7-slim-bookworm (here: the local-docker stand-in's tag)
PYTHON_BASE ?=
BEAM_BASE ?=
PINNED_PYTHON := $(shell sed -n 's/^ARG BASE_IMAGE=//p' containers/pipeline/Dockerfile)
# the base image of containers/$$name: the TPU trainer is built on the pipeline image of the same registry and tag
BASE_OF = case $$name in beam-worker) echo "$(BEAM_BASE)";; train-tpu) echo "$(REGISTRY)/pipeline:$(TAG)";; \
	*) echo "$(PYTHON_BASE)";; esac
# images `make images` leaves out, e.g. SKIP_IMAGES=beam-worker where Beam's SDK image cannot be pulled
SKIP_IMAGES ?=
export UV_PYTHON_DOWNLOADS := never

.DEFAULT_GOAL := help
.PHONY: help setup run test test-heavy test-browser lint format compile lock images test-images clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# --compile-bytecode: every step, test and CLI call is a fresh Python that imports TensorFlow; without .pyc files
# (PYTHONDONTWRITEBYTECODE, or a read-only venv) each import compiles it again, 17 s against 9 s here
$(INSTALLED): pyproject.toml uv.lock | $(UV)
	$(UV) sync --locked --compile-bytecode --python $(PYTHON)
	@touch $@

setup: $(INSTALLED) ## create .venv and install the locked dependencies
run: setup ## run the whole pipeline locally (kfp.local) on the demo digits
	$(VENV)/bin/python -m pipeline run-local

# make test's pytest workers (pytest-xdist): whole test files go to workers, the longest first (tests/conftest.py)
TEST_WORKERS ?= 2

test: setup lint ## lint, then run the tests (all but the heavy ones and the images'), on TEST_WORKERS workers
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not heavy and not images and not browser"

test-heavy: setup ## the heavy tests: the simulated year of scheduled retraining (six whole-DAG runs, ~6 min)
	$(VENV)/bin/python -m pytest -m heavy

lint: setup ## ruff lint and format check, hadolint on every Dockerfile
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/hadolint containers/*/Dockerfile

format: setup ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

compile: setup ## compile the DAG to pipeline.yaml
	$(VENV)/bin/python -m pipeline compile --registry $(REGISTRY) --tag $(TAG)

lock: | $(UV) ## re-resolve uv.lock after editing pyproject.toml
	$(UV) lock --python $(PYTHON)

images: ## build every containers/<name>/Dockerfile as $(REGISTRY)/<name>:$(TAG) (train-tpu on pipeline); PUSH=1 pushes
	@if docker info >/dev/null 2>&1; then \
		for name in $(filter-out $(SKIP_IMAGES),$(IMAGES)); do \
			base=$$($(BASE_OF)); \
			echo "building $(REGISTRY)/$$name:$(TAG)"; \
			docker build --network host -f containers/$$name/Dockerfile $${base:+--build-arg BASE_IMAGE=$$base} \
				-t $(REGISTRY)/$$name:$(TAG) . || exit 1; \
			if [ -n "$(PUSH)" ]; then docker push $(REGISTRY)/$$name:$(TAG) || exit 1; fi; \
		done; \
	elif command -v gcloud >/dev/null 2>&1; then \
		for name in $(filter-out $(SKIP_IMAGES),$(IMAGES)); do \
			base=$$($(BASE_OF)); \
			gcloud builds submit . --config containers/cloudbuild.yaml \
				--substitutions _DOCKERFILE=containers/$$name/Dockerfile,_IMAGE=$(REGISTRY)/$$name:$(TAG),_BASE_IMAGE=$$base \
				|| exit 1; \
		done; \
	else \
		echo "error: neither a Docker engine nor gcloud here: run 'make images' where one of them is" >&2; exit 2; \
	fi

test-browser: setup ## the report drawn by a headless Chromium (installs Debian's chromium with apt-get if missing)
	@[ -n "$$TPU_PIPELINE_BROWSER" ] || command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
		echo "installing Debian's chromium (apt-get)"; \
		$$([ "$$(id -u)" = 0 ] || echo sudo) apt-get install -y --no-install-recommends chromium >/dev/null \
		|| { echo "error: no chromium and apt-get could not install it: install a Chromium, or set TPU_PIPELINE_BROWSER" >&2; exit 2; }; }
	$(VENV)/bin/python -m pytest -m browser

test-images: setup ## build the images, smoke-test each, run the whole DAG in them (DockerRunner) against SubprocessRunner
	$(MAKE) images SKIP_IMAGES="beam-worker $(SKIP_IMAGES)"
	@echo "building the beam-worker layer on $(or $(PYTHON_BASE),the pinned Python image) (Beam's SDK image is not pulled)"
	docker build --network host -f containers/beam-worker/Dockerfile \
		--build-arg BASE_IMAGE=$(or $(PYTHON_BASE),$(PINNED_PYTHON)) -t $(REGISTRY)/beam-worker-layer:$(TAG) .
	REGISTRY=$(REGISTRY) TAG=$(TAG) $(VENV)/bin/python -m pytest -m images -p no:cacheprovider

clean: ## remove local runs and caches (keeps .venv)
	rm -rf runs .pytest_cache .ruff_cache
