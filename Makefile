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
.PHONY: help setup run test test-profiles profile-env test-heavy test-browser bench lint format house compile lock mutants images test-images clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}' \
		| sed -e 's|$$(REGISTRY)|$(REGISTRY)|g' -e 's|$$(TAG)|$(TAG)|g'

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# --compile-bytecode: every step, test and CLI call is a fresh Python that imports TensorFlow; without .pyc files
# (PYTHONDONTWRITEBYTECODE, or a read-only venv) each import compiles it again, 17 s against 9 s here
$(INSTALLED): pyproject.toml uv.lock | $(UV)
	$(UV) sync --locked --extra docker --compile-bytecode --python $(PYTHON)
	@touch $@

setup: $(INSTALLED) ## create .venv and install the locked dependencies
run: setup ## run the whole pipeline locally (kfp.local) on the demo digits
	$(VENV)/bin/python -m pipeline run-local

# make test's pytest workers (pytest-xdist): whole test files go to workers, the longest first (tests/conftest.py).
# Three on two cores: a worker often waits on the steps and CLI processes it started, and a third keeps both cores
# busy (1.9 cores busy on average, against 1.7 with two; about 6 GB of memory at the peak)
TEST_WORKERS ?= 3
# make test PROFILE=...: the suite as another kind of host runs it. The CPU flags that `--precision auto` follows
# (TPU_PIPELINE_CPU_FLAGS), and the instruction sets oneDNN (TensorFlow) and XLA (JAX) may use, capped: a profile
# cannot give this CPU what it lacks (AMX kernels need an AMX CPU), only choose as that host would and stay below it
PROFILE ?= host
PROFILES := host noavx512 avx512bf16 amx
CHECK_PROFILE = case " $(PROFILES) " in *" $(PROFILE) "*) ;; \
	*) echo "error: PROFILE=$(PROFILE) is not a profile: use one of $(PROFILES)" >&2; exit 2;; esac
PROFILE_ENV_host :=
# (TensorFlow turns oneDNN on by default only on CPUs with AVX512-VNNI, AVX-VNNI, AVX512-BF16 or AMX: off here, as on
# such a host; capped at AVX2 while on, its bfloat16 convolutions refuse to run, which no real host does)
PROFILE_ENV_noavx512 := TPU_PIPELINE_CPU_FLAGS="sse4_2 avx avx2 fma" ONEDNN_MAX_CPU_ISA=AVX2 \
	TF_ENABLE_ONEDNN_OPTS=0 XLA_FLAGS="--xla_cpu_max_isa=AVX2"
PROFILE_ENV_avx512bf16 := TPU_PIPELINE_CPU_FLAGS="avx2 avx512f avx512bw avx512_bf16" \
	ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16
PROFILE_ENV_amx := TPU_PIPELINE_CPU_FLAGS="avx2 avx512f avx512bw avx512_bf16 amx_tile amx_bf16 amx_int8" \
	ONEDNN_MAX_CPU_ISA=AVX512_CORE_AMX

test: setup lint ## lint, then run the tests (all but the heavy ones and the images'); PROFILE=noavx512|avx512bf16|amx
	@$(CHECK_PROFILE)
	$(PROFILE_ENV_$(PROFILE)) $(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		-m "not heavy and not images and not browser"

test-profiles: setup lint ## make test under every host profile in turn (about four times make test's time)
	@for profile in $(PROFILES); do echo "== PROFILE=$$profile"; $(MAKE) --no-print-directory test PROFILE=$$profile || exit 1; done

profile-env: ## print the environment of PROFILE=... (bench/spread.py reads it)
	@$(CHECK_PROFILE)
	@echo '$(PROFILE_ENV_$(PROFILE))'

test-heavy: setup ## the heavy tests: the simulated year of scheduled retraining (seven whole-DAG runs, 2 to 7 min)
	$(VENV)/bin/python -m pytest -m heavy

bench: setup ## how each step grows from 10^3 to 10^6 files (bench/scale.py), make run's steps against bare Keras (bench/loop.py)
	$(VENV)/bin/python bench/scale.py
	$(VENV)/bin/python bench/loop.py

# mutation testing, outside make test and CI (tests/mutation.py; mutmut from the lock's `mutants` group): GROUPS=a,b
# runs only those groups; ONLY=untried goes on with what a stopped run left and tries the code changed since,
# ONLY=survivors tries the survivors again
GROUPS ?=
ONLY ?= all
mutants: setup ## mutation testing of the code whose wrong answer is silent: the score of each group, the survivors
	$(UV) run --locked --group mutants python -m tests.mutation --groups "$(GROUPS)" --only $(ONLY)

lint: setup ## ruff lint and format check, deptry (every import declared, every dependency used), hadolint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/deptry .
	$(VENV)/bin/hadolint containers/*/Dockerfile

format: setup ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

house: setup ## the code's shape: modality branches outside components/modalities/, long files, format opt-outs
	$(VENV)/bin/python -m tests.house

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
