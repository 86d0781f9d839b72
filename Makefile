# Two commands do all the set-up on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install assets screenshots serve serve-daphne worker beat test test-embedded lint format clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed assets

## assets: the dashboard's third-party browser code, installed from npm (never committed)
ASSETS_DIR := dashboard/static/dashboard/vendor
UPLOT_DIST := dashboard/frontend/node_modules/uplot/dist
$(ASSETS_DIR)/uPlot.iife.min.js: dashboard/frontend/package.json dashboard/frontend/package-lock.json
	cd dashboard/frontend && npm ci --no-audit --no-fund --loglevel=error
	cp $(UPLOT_DIST)/uPlot.iife.min.js $(UPLOT_DIST)/uPlot.min.css $(ASSETS_DIR)/

assets: $(ASSETS_DIR)/uPlot.iife.min.js

## screenshots: PNGs of every dashboard page in var/screenshots/ (demo data, headless Chromium)
screenshots: install
	$(BIN)/python -m dashboard.screenshots --out var/screenshots

## serve: migrate, make sure the demo organization and key exist, serve WORKERS uvicorn processes
## on one port (default 1 embedded, the core count with DATABASE_URL and REDIS_URL set; more than
## one without REDIS_URL is refused) through config/serve.py, which exits 0 after a graceful
## shutdown (no access log: every request is stored as a run, and the log line costs ~1 ms of CPU)
override WORKERS := $(or $(WORKERS),$(if $(and $(DATABASE_URL),$(REDIS_URL)),$(shell nproc),1))
serve: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py bootstrap
	$(BIN)/python -m config.serve --host $(HOST) --port $(PORT) --workers $(WORKERS) \
		--loop uvloop --http httptools --no-access-log

## serve-daphne: the same app on daphne (channels' runserver)
serve-daphne: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py bootstrap
	$(BIN)/python manage.py runserver $(HOST):$(PORT)

## worker: a Celery worker for background jobs (needs REDIS_URL; embedded mode runs them eagerly)
worker: install
	$(BIN)/celery -A config worker --loglevel INFO

## beat: the Celery scheduler (retention purge hourly, usage rollups every 5 minutes, a dead
## worker's runs closed as interrupted every 10 s)
beat: install
	$(BIN)/celery -A config beat --loglevel INFO --schedule var/celerybeat-schedule

## test: lint, then the whole suite on Postgres and Redis (DATABASE_URL / REDIS_URL)
test: install lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## test-embedded: the suite on the embedded default `make serve` runs (a SQLite file, the memory
## backplane, in-memory channel layer and cache, eager Celery), less the tests that need Postgres
## or Redis (markers `postgres`, `redis` in pyproject.toml)
test-embedded: install
	MORTAR_TEST_BACKENDS=embedded $(BIN)/python -m pytest -m "not postgres and not redis" $(PYTEST_ARGS)

## bench: Mortar beside LiteLLM and the mock model server (~15 min; needs wrk, Postgres, Redis),
## then the run writer's crash log: CPU per chunk appended (a few seconds, bench/chunklog_bench.py).
## Before/after in one run: BENCH_ARGS='--baseline REF' also serves Mortar at git revision REF
## (a temporary worktree, same venv) interleaved with the working tree; add --no-litellm to skip
## LiteLLM, --quick for one short round. The harness is bench/harness/ (bench/run.py runs it).
bench: install
	command -v wrk >/dev/null || (apt-get update && apt-get install -y wrk)
	$(BIN)/python bench/run.py $(BENCH_ARGS)
	$(BIN)/python bench/chunklog_bench.py

## lint: ruff, the types (mypy with django-stubs, [tool.mypy]) and the layers between apps
## (import-linter, [tool.importlinter] in pyproject.toml)
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
