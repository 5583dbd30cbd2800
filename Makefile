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

# One step prepares the database and the demo data, then the web server, a django-q2 worker and
# the simulated fleet (agents over HTTP, a replayed workload, GPU faults; pools/demo/fleet.py)
# run on the embedded defaults (SQLite, simulated cloud, demo data), each in its own process
# group under `manage.py demo` (pools/demo/supervisor.py). Ctrl-C, or the exit of any of them,
# stops them all. EBCLOUD_DEMO_SPEED sets how fast the replayed trace runs;
# EBCLOUD_LOG_DEMO_REQUESTS=true logs the agents' and static files' requests too.
run: install var/demo-secret-key var/static/staticfiles.json
	$(PY) manage.py demo --host $(HOST) --port $(PORT)

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
