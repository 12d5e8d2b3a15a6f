# Hikyaku: `make run` serves the broker on the embedded default, `make test` runs the suite.
# Needs only Python >= 3.11 and make; everything else comes from requirements.lock.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
STAMP := $(VENV)/.installed

.PHONY: help run dev test test-pg lint format venv migrate bench bench-streams bench-cluster tck cluster cluster-stop cluster-status clean lock

# `make help` lists the targets: every target with a `## text` comment on its line.
help:  ## this list
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  make %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing dependencies from requirements.lock (first run takes a minute)..."
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $(STAMP)

venv: $(STAMP)  ## create .venv from requirements.lock

migrate: $(STAMP)  ## apply database migrations
	@$(BIN)/python manage.py migrate --no-input -v0

# Debug off (safe with HOST=0.0.0.0: no debug pages), a secret key generated beside the SQLite
# file, plain-text logs for a terminal. Other clients than this machine's: set
# DJANGO_ALLOWED_HOSTS to the name they use.
SERVE = $(BIN)/uvicorn hikyaku.asgi:application --host $(HOST) --port $(PORT) --no-access-log --timeout-graceful-shutdown 3

run: migrate  ## serve the broker on HOST:PORT (default 127.0.0.1:8000), debug off
	@$(BIN)/python manage.py bootstrap
	@echo "Serving Hikyaku on http://$(HOST):$(PORT)/  (admin: /admin/, web UI: /ui/, API docs: /api/docs/)"
	@[ -n "$$DJANGO_ALLOWED_HOSTS" ] || case "$(HOST)" in 127.*|localhost|::1) ;; *) echo "Other machines reach it once DJANGO_ALLOWED_HOSTS names the host they use (e.g. DJANGO_ALLOWED_HOSTS=myhost.lan make run HOST=$(HOST))." ;; esac
	@HIKYAKU_LOG_FORMAT=$${HIKYAKU_LOG_FORMAT:-text} $(SERVE)

dev: migrate  ## like run, with Django's debug pages (never where others can reach it)
	@$(BIN)/python manage.py bootstrap
	@echo "Serving Hikyaku in DEBUG mode on http://$(HOST):$(PORT)/"
	@DJANGO_DEBUG=true $(SERVE)

# The suite on the embedded default (SQLite, in-memory channel layer, eager Celery: what
# `make run` serves), whatever DATABASE_URL/REDIS_URL the shell has; `make test-pg` runs it on
# Postgres and Redis (docs/TESTING.md).
TEST_ENV = env -u DATABASE_URL -u REDIS_URL -u CELERY_BROKER_URL
TEST_PG_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/hikyaku
TEST_PG_REDIS_URL ?= redis://127.0.0.1:6379/0

test: $(STAMP)  ## the test suite on SQLite (PYTEST_ARGS="tests/messaging -q" for part of it)
	@$(TEST_ENV) $(BIN)/python -m pytest $(PYTEST_ARGS)

test-pg: $(STAMP)  ## the test suite on Postgres + Redis (DATABASE_URL, REDIS_URL; default: local)
	@DATABASE_URL="$${DATABASE_URL:-$(TEST_PG_DATABASE_URL)}" REDIS_URL="$${REDIS_URL:-$(TEST_PG_REDIS_URL)}" \
		$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff check and format check, and the import contracts (pyproject.toml)
	@$(BIN)/ruff check .
	@$(BIN)/ruff format --check .
	@$(BIN)/lint-imports

format: $(STAMP)  ## ruff fix and format
	@$(BIN)/ruff check --fix .
	@$(BIN)/ruff format .

# The production topology on this machine's Postgres and Redis (scripts/cluster.py documents
# the CLUSTER_* / DATABASE_URL / REDIS_URL knobs): 2 granian web, 1 uvicorn stream, worker, beat.
cluster: $(STAMP)  ## the production topology on local Postgres and Redis
	@$(BIN)/python scripts/cluster.py start

cluster-stop:  ## stop it
	@$(BIN)/python scripts/cluster.py stop

cluster-status:  ## show its processes
	@$(BIN)/python scripts/cluster.py status

# Hikyaku (0.3 and 1.0 paths), the old broker it replaces and the embedded default, side by
# side in alternating rounds (bench/run.py). Writes bench/results/latest.json and history.jsonl.
bench: $(STAMP)  ## Hikyaku and the broker it replaces, side by side (Postgres, Redis, wrk)
	@$(BIN)/python -m bench.run $(BENCH_ARGS)

# One web process against two (same threads, same connections) on the `make cluster`
# topology: sends/s, CPU per send, cores busy (bench/cluster.py). Writes bench/results/cluster.json.
bench-cluster: $(STAMP)  ## one web process against two
	@$(BIN)/python -m bench.cluster $(BENCH_ARGS)

# Live streams (issue 4 targets): needs Postgres on 127.0.0.1:5432 and redis-server on PATH.
bench-streams: $(STAMP)  ## the live-stream benchmark
	@$(BIN)/python -m bench.streams $(BENCH_ARGS)

# The A2A TCK against a public agent's own endpoint (conformance/run.py); needs the TCK
# archive in ../shared/tools/ (or TCK_ARCHIVE) and PyPI for the TCK's own environment.
tck: $(STAMP)  ## the A2A conformance kit against an agent
	@$(BIN)/python -m conformance.run

lock:  ## regenerate requirements.lock from pyproject.toml
	uv pip compile pyproject.toml --extra dev -o requirements.lock --python-version 3.11 --generate-hashes --universal

clean:  ## remove .venv, the SQLite database and its secret key
	rm -rf $(VENV) hikyaku.sqlite3 hikyaku.secret_key
