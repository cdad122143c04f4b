# The front door. A fresh machine needs only Python 3.11: `make run`, then `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
UV_VERSION := 0.13.9
VENV := .venv
UV := .tools/bin/uv
INSTALLED := $(VENV)/.installed
REGISTRY ?= us-docker.pkg.dev/my-project/tpu-image-pipeline
TAG ?= 0.1.0
IMAGES := $(notdir $(patsubst %/Dockerfile,%,$(wildcard containers/*/Dockerfile)))
export UV_PYTHON_DOWNLOADS := never

.DEFAULT_GOAL := help
.PHONY: help setup run test test-heavy lint format compile lock images clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(INSTALLED): pyproject.toml uv.lock | $(UV)
	$(UV) sync --locked --python $(PYTHON)
	@touch $@

setup: $(INSTALLED) ## create .venv and install the locked dependencies
run: setup ## run the whole pipeline locally (kfp.local) on the demo digits
	$(VENV)/bin/python -m pipeline run-local

test: setup lint ## lint, then run the tests (all but the heavy ones)
	$(VENV)/bin/python -m pytest -m "not heavy"

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

images: ## build and push containers/<name> as $(REGISTRY)/<name>:$(TAG) (Docker, or Cloud Build through gcloud)
	@if docker info >/dev/null 2>&1; then \
		for name in $(IMAGES); do \
			docker build -f containers/$$name/Dockerfile -t $(REGISTRY)/$$name:$(TAG) . && \
			docker push $(REGISTRY)/$$name:$(TAG) || exit 1; \
		done; \
	elif command -v gcloud >/dev/null 2>&1; then \
		for name in $(IMAGES); do \
			gcloud builds submit . --config containers/cloudbuild.yaml \
				--substitutions _DOCKERFILE=containers/$$name/Dockerfile,_IMAGE=$(REGISTRY)/$$name:$(TAG) || exit 1; \
		done; \
	else \
		echo "error: neither a Docker engine nor gcloud here: run 'make images' where one of them is" >&2; exit 2; \
	fi

clean: ## remove local runs and caches (keeps .venv)
	rm -rf runs .pytest_cache .ruff_cache
