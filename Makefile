# The two commands: `make run` (serve the embedded platform) and `make test` (the whole suite).

PYTHON ?= python3
VENV ?= .venv
HOST ?= 127.0.0.1
PORT ?= 8000
BIN := $(VENV)/bin

# The services pass of the suite: PostgreSQL and Redis. Each worker of each checkout gets a test
# database of its own (test_test_<checkout>_<worker>) and claims a free Redis db of 1-15
# (tests/isolation.py), so two checkouts can run the suite at once.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
TEST_REDIS_URL ?= redis://127.0.0.1:6379/0
# pytest-xdist workers per pass. Two per core: a good part of the suite waits on servers,
# browsers and clocks, and four workers fill that wait (the two cores stay below full).
# Whole modules are dealt out, the long ones first (`slow` in tests/conftest.py).
TEST_WORKERS ?= 4
XDIST := -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder
PYTEST_ARGS ?=
# The suite starts a few hundred Python processes (workers, servers, commands): with bytecode
# caching turned off in the environment, each would compile everything it imports again.
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE
# Debian's Chromium, for the control room's browser tests (never a downloaded browser).
CHROMIUM ?= /usr/bin/chromium
# Debian's nginx, for the tests that put it in front of the gateway (they run their own).
NGINX ?= /usr/sbin/nginx
# The coding-agent CLIs the tests in tests/agents drive through the gateway (Claude Code,
# Codex), at the versions its package-lock.json pins, from the npm registry.
AGENTS := tests/agents
AGENT_CLIS := $(AGENTS)/node_modules/.package-lock.json

.PHONY: run test test-embedded test-services check lint format typecheck install clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed: make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# What serving needs: the project and its runtime dependencies, nothing of the development tools.
$(VENV)/.served: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

# The development tools too (the suite, the linters, the SDKs and browsers it drives): for
# `make test` and `make check`.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $@ $(VENV)/.served

install: $(VENV)/.installed

## run: install what serving needs, migrate, load the 50 answers and the demo set-up, and serve
## on HOST:PORT
run: $(VENV)/.served
# /metrics in multi-process mode (PROMETHEUS_MULTIPROC_DIR set): earlier processes' files go first.
	@if [ -n "$$PROMETHEUS_MULTIPROC_DIR" ]; then mkdir -p "$$PROMETHEUS_MULTIPROC_DIR" && \
		find "$$PROMETHEUS_MULTIPROC_DIR" -maxdepth 1 -name '*.db' -delete; fi
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py bootstrap --demo
	@echo "Serving on http://$(HOST):$(PORT)/  (admin: http://$(HOST):$(PORT)/admin/)"
# --no-proxy-headers: the gateway reads X-Forwarded-For itself, as TRUSTED_PROXY_HOPS says.
	$(BIN)/uvicorn failover_site.asgi:application --host $(HOST) --port $(PORT) --lifespan on \
		--no-proxy-headers --loop failover_site.event_loop:new_event_loop

## test: the whole suite, embedded (SQLite, in-process state) then on PostgreSQL + Redis
test: test-embedded test-services

# Installed from Debian's packages when missing and this is root; else the browser tests skip
# (and fail under REQUIRE_SERVICES=1, as in CI).
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing Debian's chromium for the browser tests"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null); \
	else echo "No $(CHROMIUM) (apt-get install chromium): the browser tests will skip"; fi

# The same for nginx. Its package would start its own service on port 80: a policy-rc.d that
# refuses (unless one is there already) keeps it from starting, and it is left disabled.
$(NGINX):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing Debian's nginx for the tests behind it (its service left stopped)"; \
		guard=; if [ ! -e /usr/sbin/policy-rc.d ]; then guard=1; \
			printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; fi; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx >/dev/null); \
		status=$$?; if [ -n "$$guard" ]; then rm -f /usr/sbin/policy-rc.d; fi; \
		if command -v systemctl >/dev/null; then systemctl disable nginx >/dev/null 2>&1; fi; \
		update-rc.d nginx disable >/dev/null 2>&1; exit $$status; \
	else echo "No $(NGINX) (apt-get install nginx): the tests behind nginx will skip"; fi

# Installed again whenever the lock changes (npm ci writes node_modules/.package-lock.json);
# without node and npm the agents' tests skip (and fail under REQUIRE_SERVICES=1, as in CI).
$(AGENT_CLIS): $(AGENTS)/package-lock.json
	@if command -v node >/dev/null && command -v npm >/dev/null; then \
		echo "Installing the coding-agent CLIs for $(AGENTS) (npm ci)"; \
		npm ci --prefix $(AGENTS) --no-audit --no-fund --loglevel=error >/dev/null; \
	else echo "No node and npm: the tests of the coding-agent CLIs will skip"; fi

test-embedded: $(VENV)/.installed $(CHROMIUM) $(NGINX) $(AGENT_CLIS)
	$(TEST_ENV) -u DATABASE_URL -u REDIS_URL -u CELERY_BROKER_URL ENV_FILE= DEBUG=true \
		$(BIN)/pytest -m "not services" $(XDIST) $(PYTEST_ARGS)

# Set REQUIRE_SERVICES=1 (CI does) to fail instead of skipping when the services are down, and
# to fail any test that skips. The browser tests drive the control room once, in the embedded
# pass; the admin on PostgreSQL and Redis is tested here without a browser. The coding-agent
# CLIs too run in the embedded pass only: what they test is the doors, the same on either store.
test-services: $(VENV)/.installed $(CHROMIUM) $(NGINX) $(AGENT_CLIS)
	$(TEST_ENV) ENV_FILE= DEBUG=true DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) \
		FAILOVER_TEST_PASS=services FAILOVER_REQUIRE_SERVICES=$(REQUIRE_SERVICES) \
		$(BIN)/pytest -m "not backend_free and not browser and not agents" $(XDIST) $(PYTEST_ARGS)

## check: lint, types and the whole suite
check: lint typecheck test

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: $(VENV)/.installed
	$(BIN)/mypy failover_site providers billing alerts gateway edge control_room runtime devtools

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
