# Hikyaku: `make run` serves the broker on the embedded default, `make test` runs the suite.
# Needs only Python >= 3.11 and make; everything else comes from requirements.lock.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
STAMP := $(VENV)/.installed

.PHONY: run test lint format venv migrate bench bench-streams bench-cluster tck cluster cluster-stop cluster-status clean lock

$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing dependencies from requirements.lock (first run takes a minute)..."
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $(STAMP)

venv: $(STAMP)

migrate: $(STAMP)
	@$(BIN)/python manage.py migrate --no-input -v0

run: migrate
	@$(BIN)/python manage.py bootstrap
	@echo "Serving Hikyaku on http://$(HOST):$(PORT)/  (admin: /admin/, web UI: /ui/, API docs: /api/docs/)"
	@$(BIN)/uvicorn hikyaku.asgi:application --host $(HOST) --port $(PORT) --no-access-log --timeout-graceful-shutdown 3

test: $(STAMP)
	@$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	@$(BIN)/ruff check .
	@$(BIN)/ruff format --check .

format: $(STAMP)
	@$(BIN)/ruff check --fix .
	@$(BIN)/ruff format .

# The production topology on this machine's Postgres and Redis (scripts/cluster.py documents
# the CLUSTER_* / DATABASE_URL / REDIS_URL knobs): 2 granian web, 1 uvicorn stream, worker, beat.
cluster: $(STAMP)
	@$(BIN)/python scripts/cluster.py start

cluster-stop:
	@$(BIN)/python scripts/cluster.py stop

cluster-status:
	@$(BIN)/python scripts/cluster.py status

# Hikyaku (0.3 and 1.0 paths), the old broker it replaces and the embedded default, side by
# side in alternating rounds (bench/run.py). Writes bench/results/latest.json and history.jsonl.
bench: $(STAMP)
	@$(BIN)/python -m bench.run $(BENCH_ARGS)

# One web process against two (same threads, same connections) on the `make cluster`
# topology: sends/s, CPU per send, cores busy (bench/cluster.py). Writes bench/results/cluster.json.
bench-cluster: $(STAMP)
	@$(BIN)/python -m bench.cluster $(BENCH_ARGS)

# Live streams (issue 4 targets): needs Postgres on 127.0.0.1:5432 and redis-server on PATH.
bench-streams: $(STAMP)
	@$(BIN)/python -m bench.streams $(BENCH_ARGS)
# The A2A TCK against a public agent's own endpoint (conformance/run.py); needs the TCK
# archive in ../shared/tools/ (or TCK_ARCHIVE) and PyPI for the TCK's own environment.
tck: $(STAMP)
	@$(BIN)/python -m conformance.run

lock:
	uv pip compile pyproject.toml --extra dev -o requirements.lock --python-version 3.11 --generate-hashes

clean:
	rm -rf $(VENV) hikyaku.sqlite3
