# make test: create .venv, install jobq with its dev tools, lint, type-check, run the tests
#   (their jobq commands forked from a preloaded server, tests/forkserver; JOBQ_TESTS_EXEC=1
#   exec's each instead).
# make test-under-load: the same tests (not the lint) with two CPU-burning processes beside
#   them: a test that fails there has a race to find, never a retry to add.
# make demo: a job's life on both backends (examples/life), then a quick drain figure.
# make docs: the documentation site (mkdocs.yml) built strict into build/site (in make test).
# make stack: the compose demo stack run natively (local servers; consumers, producer and
#   Prometheus as processes); stops after 120 s or on Ctrl-C. STACK_ARGS="--seconds 600 --scale 2"
# make chaos: the fault suite (restarts and crashes the local servers, and starts them
#   again; not part of `make test`).
# make cluster: the failover drills on servers of their own (a 3-node RabbitMQ cluster, a
#   PostgreSQL primary and standby; the machine's own servers untouched). CLUSTER_ARGS="--repeat 2"
# make bench-enqueue: enqueue rates (one at a time, batched, transactional) and jobq relay,
#   side by side, 3 runs each. ENQUEUE_ARGS="--repeat 5"
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: docs test test-services test-step1 test-django unit-core unit-tools test-beside test-broker test-under-load test-serial test-postgres demo stack lint unit install clean chaos chaos-steady cluster bench-enqueue bench-quick

# uv installs in seconds what pip takes most of a minute for (a third of a fresh clone's CI
# budget); pip does it where uv cannot be had. Compiled to bytecode as pip does: this machine
# sets PYTHONDONTWRITEBYTECODE, and every CLI a test starts would compile psycopg and the rest.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	{ $(VENV)/bin/pip install -q uv && \
	  VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/uv pip install -q --compile-bytecode -e '.[dev]'; } || \
	  $(VENV)/bin/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks faults tools examples
	$(PY) -m mypy src examples/shop examples/life examples/fastapi_shop
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m tools.sizes

# The tests in two steps. (1) `test-services`: the integration and contract tests that use
# RabbitMQ, on WORKERS processes (every test has its own schema or queues; most of a test's time
# is spent waiting for a server or a consumer, so more workers than cores; one test at a time to
# each, the longest, marked `slow`, first), with beside them the Django project's tests and the
# unit tests that need no installed tool. (2) `test-beside`: what restarts or crashes the
# broker (the `serial` mark) alone on RabbitMQ, then the tests of the stack and the dashboard's
# browser (TOOLS: they need docker-compose, prometheus and chromium, which .ci/run installs
# during step 1); beside them what does not use RabbitMQ: the PostgreSQL-only tests (PG_ONLY),
# the lint, the docs build and the unit tests that need tools. The bytecode is compiled first: this machine sets
# PYTHONDONTWRITEBYTECODE, and every CLI a test starts would compile jobq again. Four workers,
# not more: six took more connections than PostgreSQL's max_connections (100).
WORKERS ?= 4
PYTEST  := $(PY) -m pytest -q -p no:cacheprovider
SPREAD  := --dist load --maxschedchunk 1
PG_ONLY := tests/integration/test_pg_*.py tests/integration/test_postgres*.py examples/fastapi_shop/test_app.py
TOOLS   := tests/integration/test_dashboard_browser.py tests/integration/test_stack_native.py
STEP1   := -n $(WORKERS) $(SPREAD) -m "not serial" $(addprefix --ignore-glob=,$(PG_ONLY) $(TOOLS)) \
           tests/integration tests/contract
BESIDE  := test-broker test-postgres lint unit-tools docs
test: test-services
	$(MAKE) --no-print-directory test-beside

test-services: $(STAMP)
	$(PY) -m compileall -q src tests
	$(MAKE) --no-print-directory -j3 -O test-step1 test-django unit-core

test-step1: $(STAMP)
	$(PYTEST) $(STEP1)

# jobq.contrib.django on a Django project (tests/django_project): pytest-django makes its test
# database on the local PostgreSQL. Beside step 1: one of its tests uses RabbitMQ.
test-django: $(STAMP)
	$(PYTEST) -p pytest_django --ds tests.django_project.settings tests/django_project

test-beside:
	$(MAKE) --no-print-directory -j5 -O $(BESIDE)

test-serial: $(STAMP)
	$(PYTEST) -m serial tests/integration

test-postgres: $(STAMP)
	$(PYTEST) -n 3 $(SPREAD) $(wildcard $(PG_ONLY))

# The TOOLS tests use RabbitMQ too: after the serial ones, never while they restart it.
test-broker: test-serial
	$(PYTEST) -n 2 $(TOOLS)

test-under-load: $(STAMP)
	tools/under_load.sh $(MAKE) --no-print-directory test-services
	tools/under_load.sh $(MAKE) --no-print-directory test-beside

# KEDA's CRD schemas for tests/unit/test_kubernetes.py (npm, pinned by package-lock.json).
tests/keda/node_modules: tests/keda/package.json tests/keda/package-lock.json
	npm ci --prefix tests/keda --silent --no-audit --no-fund
	touch $@

# examples/shop's own tests (jobq.testing, no server) run with the unit tests. Those that need
# no tool .ci/run installs (unit-core) run beside step 1, which leaves a core free most of the
# time (its tests wait on servers and consumers); the others (unit-tools: docker-compose,
# promtool, node) in step 2.
UNIT_TOOLS := tests/unit/test_stack_files.py tests/unit/test_kubernetes.py
unit: unit-core unit-tools

unit-core: $(STAMP)
	$(PYTEST) tests/unit examples/shop $(addprefix --ignore=,$(UNIT_TOOLS))

unit-tools: $(STAMP) tests/keda/node_modules
	$(PYTEST) $(UNIT_TOOLS)

# The documentation site (mkdocs.yml), built strict: a broken link, a page left out of the
# nav or an API name that no longer resolves fails it. `mkdocs serve` to read it locally.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -q

demo: $(STAMP)
	$(PY) -m examples.life

# The quick side-by-side benchmark of every target (the full one: python -m benchmarks).
bench-quick: $(STAMP)
	$(PY) -m benchmarks.demo

STACK_ARGS ?=
stack: $(STAMP)
	$(PY) -m tools.stack $(STACK_ARGS)

# 50,000 jobs per transport under kill -9, a server restart and crash, cut connections; see
# faults/suite.py. CHAOS_ARGS="--jobs 5000" for a quick run.
chaos: $(STAMP)
	$(PY) -m faults $(CHAOS_ARGS)

# Faults under a steady 300 jobs/s: two consumers, kill -9 three times, pg_terminate_backend
# twice a second, a server with no connection slot free, handlers that block the event loop;
# the tail, the backlog and losses judged; see faults/steady.py. STEADY_ARGS="--repeat 3".
STEADY_ARGS ?=
chaos-steady: $(STAMP)
	$(PY) -m faults.steady $(STEADY_ARGS)

# The quorum leader killed -9, the primary crashed and its standby promoted, each during a
# drain with a producer going on; see faults/cluster/__init__.py.
CLUSTER_ARGS ?=
cluster: $(STAMP)
	$(PY) -m faults.cluster $(CLUSTER_ARGS)

# Enqueue rates side by side: one at a time, batched, transactional, and jobq relay.
ENQUEUE_ARGS ?=
bench-enqueue: $(STAMP)
	$(PY) -m benchmarks.enqueue $(ENQUEUE_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
