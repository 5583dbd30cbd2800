# The two commands of the README: `make run` starts the product, `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
HOST ?= 127.0.0.1
PORT ?= 8000
# The demo runs the simulated cloud fast (each provisioning step takes seconds, not minutes);
# the tests keep the realistic durations.
run: export EBCLOUD_SIM_FAST ?= true
# The demo runs as production does, over plain HTTP on this machine: DEBUG off (the site's own
# error pages, never Django's debug pages listing the URL patterns; static files hashed and
# gzipped, served by WhiteNoise), a signing key kept in var/demo-secret-key, no redirect to
# https and no Secure-only cookies (there is no TLS on 127.0.0.1), e-mail printed to the console.
run: export DEBUG ?= false
run: export SECRET_KEY ?= $(shell cat var/demo-secret-key 2>/dev/null)
run: export ALLOWED_HOSTS ?= 127.0.0.1,localhost,$(HOST)
run: export SECURE_SSL_REDIRECT ?= false
run: export SESSION_COOKIE_SECURE ?= false
run: export CSRF_COOKIE_SECURE ?= false
run: export EMAIL_BACKEND ?= django.core.mail.backends.console.EmailBackend

.PHONY: run test install install-test k8s-binaries lint format clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

var/demo-secret-key:
	mkdir -p var
	umask 077; $(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))' > $@

# Static files under content-hashed names with .gz copies (CompressedManifestStaticFilesStorage),
# collected again only when a static file or the installed packages (plotly, htmx) change.
STATIC_SOURCES := $(shell find static pools/static billing/static monitoring/static -type f 2>/dev/null)
var/static/staticfiles.json: $(STATIC_SOURCES) $(VENV)/.installed
	$(PY) manage.py collectstatic --noinput -v0

# axe-core (npm, exact version in package-lock.json) for the browser tests' accessibility checks.
node_modules/axe-core/axe.min.js: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# A real kube-apiserver, etcd and kube-scheduler for tests/k8s, built from the Go module proxy at
# the versions in k8s/versions.env (once per version; later runs reuse var/k8s/<version>/bin).
k8s-binaries:
	bash k8s/build.sh

install-test: $(VENV)/.installed-test node_modules/axe-core/axe.min.js k8s-binaries

# Web server + django-q2 worker + the simulated fleet (agents over HTTP, a replayed workload,
# GPU faults; pools/demo/fleet.py) on the embedded defaults (SQLite, simulated cloud, demo data).
# All three run in the background; Ctrl-C, or the first of them to exit, stops the others
# (SIGTERM). EBCLOUD_DEMO_SPEED sets how fast the replayed trace runs.
run: install var/demo-secret-key var/static/staticfiles.json
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	@echo "Serving http://$(HOST):$(PORT)/ (Ctrl-C stops the server, the worker and the fleet)"
	@bash -c 'trap "trap - TERM; kill 0" INT TERM EXIT; $(PY) manage.py qcluster & $(PY) manage.py demo_fleet --server http://$(HOST):$(PORT) & $(PY) manage.py runserver --noreload $(HOST):$(PORT) & wait -n'

test: install-test
	$(BIN)/ruff check .
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) -m pytest

lint: install-test
	$(BIN)/ruff check .

format: install-test
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache node_modules
