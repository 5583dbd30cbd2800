"""Settings of the control plane, all read from environment variables.

The embedded defaults (SQLite file, simulated cloud, DEBUG) make `make run` work on a fresh
machine; production sets DATABASE_URL, SECRET_KEY, ALLOWED_HOSTS and DEBUG=false.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_choice, env_float, env_int, env_list, env_log_level, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
_var_dir = env_str("EBCLOUD_VAR_DIR", str(BASE_DIR / "var"))
if not _var_dir.strip():  # Path("") is the current directory, whichever that is
    raise ImproperlyConfigured("EBCLOUD_VAR_DIR must be a directory path, got an empty value")
VAR_DIR = Path(_var_dir)


def _make_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImproperlyConfigured(f"EBCLOUD_VAR_DIR: cannot create {str(path)!r}: {exc.strerror or exc}") from None


_make_dir(VAR_DIR)  # the SQLite file, demo logins, agent buffers

TESTING = "pytest" in sys.modules or env_bool("EBCLOUD_TESTING", False)
DEBUG = env_bool("DEBUG", True)
SECRET_KEY = env_str("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is false")
    SECRET_KEY = "insecure-development-key-only-for-debug-mode"  # noqa: S105
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# Production transport security (on whenever DEBUG is off; a TLS-terminating proxy sets
# X-Forwarded-Proto). Each can be turned off explicitly for an unusual deployment.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # a load balancer's plain-HTTP probe (monitoring/health.py) is answered, not redirected
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy on every response, whatever DEBUG says (config/csp.py): scripts and
# styles from this origin only (htmx, plotly, Swagger UI and our own code are static files), no
# inline script, no inline style attribute, no eval, no plugins, no framing. The one exception,
# for styles only: plotly.js (v4.1.1, the plotly package's plotly.min.js) adds two <style>
# elements when it loads, allowed by the hash of their exact text: an empty one that it fills
# through the CSSOM (its own chart styles) and MapLibre's stylesheet. Another plotly version
# may change the second; the browser tests then fail with the hash to put here. Empty: no header.
PLOTLY_STYLE_HASHES = ["'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='", "'sha256-ji27qzEtxXZW+7dun6UwjHXJ18e6WAin1VvNtkzIE/o='"]
EBCLOUD_CONTENT_SECURITY_POLICY = env_str("EBCLOUD_CONTENT_SECURITY_POLICY", "; ".join([
    "default-src 'self'", "script-src 'self'", " ".join(["style-src 'self'", *PLOTLY_STYLE_HASHES]), "img-src 'self' data: blob:",
    "font-src 'self'", "connect-src 'self'", "object-src 'none'", "base-uri 'self'", "form-action 'self'", "frame-ancestors 'none'",
]))
CSRF_FAILURE_VIEW = "pools.api.errors.csrf_failure"  # the API's JSON shape under /api/, the site's own page elsewhere

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "django_q",
    "axes",
    "pools",
    "billing",
    "monitoring",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.csp.ContentSecurityPolicyMiddleware",
    "pools.api.errors.ApiErrorsMiddleware",  # /api/: 413 for a body over the limit, errors in the API's shape
    "config.request_paths.ControlCharacterPathMiddleware",  # a path with NUL or another control character: 404
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "pools.services.audit.AuditActorMiddleware",  # who acts, for the audit signals (pools/signals.py)
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires
]

# Login throttling (django-axes): lock a username from one IP after repeated failures.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("AXES_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_USERNAME_CALLABLE = "config.login_attempts.attempt_username"  # bounded: no 500 for an overlong name

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "pools.context_processors.roles",
            ],
        },
    }
]

DATABASE_URL_SHAPE = "postgres://USER:PASSWORD@HOST:PORT/NAME[?sslmode=...] (or sqlite:///PATH)"


def _database(url: str, conn_max_age: int) -> dict:
    """DATABASE_URL parsed, or one line saying what is wrong with it (never its password)."""
    if not url.strip():
        raise ImproperlyConfigured(f"DATABASE_URL is set but empty; expected {DATABASE_URL_SHAPE}, or unset it for the SQLite file")
    try:
        # Health checks: a connection kept across requests (conn_max_age) that the database
        # closed (restart, failover, idle timeout) is replaced before use, not a 500 or a lost task.
        config = dj_database_url.parse(url, conn_max_age=conn_max_age, conn_health_checks=True)
    except (ValueError, TypeError) as exc:  # dj_database_url's UnknownSchemeError and ParseError
        scheme = url.split("://", 1)[0] if "://" in url else None
        why = "no scheme://" if scheme is None else f"unknown scheme {scheme!r}" if type(exc).__name__ == "UnknownSchemeError" else "it does not parse"
        raise ImproperlyConfigured(f"DATABASE_URL is not a database URL ({why}); expected {DATABASE_URL_SHAPE}") from None
    if not config.get("NAME"):
        raise ImproperlyConfigured(f"DATABASE_URL names no database; expected {DATABASE_URL_SHAPE}")
    return config


DATABASES = {
    "default": _database(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'ebcloud.sqlite3'}"),
        env_int("DATABASE_CONN_MAX_AGE", 0, minimum=0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (web, worker, demo fleet) share the file: wait for locks instead of
    # failing, take the write lock when a transaction begins (a read lock upgraded later can
    # fail at once with "database is locked"), and let readers go on beside the writer (WAL).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=20, transaction_mode="IMMEDIATE", init_command="PRAGMA journal_mode=WAL;"
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
if TESTING:  # hashing with PBKDF2 costs ~0.25 s per test user; tests need no strength
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "pools:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
_make_dir(STATIC_ROOT)
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "pools.staticfinders.PackageFileFinder",  # plotly.min.js from the installed plotly package
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Each file under a name with its content's hash (cached for a year by browsers and proxies,
    # a new version gets a new name) plus a .gz copy that WhiteNoise serves to browsers that
    # accept it; `collectstatic` writes both (make run does). With DEBUG on, `{% static %}` gives
    # the plain names and needs no collectstatic; tests keep the plain storage (no manifest).
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage" if TESTING else "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}



# runserver's access log leaves out the successful requests of the demo's agents and of static
# files unless EBCLOUD_LOG_DEMO_REQUESTS is true; a 4xx is one line without a traceback
# (config/request_log.py).
EBCLOUD_LOG_DEMO_REQUESTS = env_bool("EBCLOUD_LOG_DEMO_REQUESTS", False)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "quiet_paths": {"()": "config.request_log.QuietPaths", "prefixes": [] if EBCLOUD_LOG_DEMO_REQUESTS else ["/api/agent/", STATIC_URL]},
        "one_line_client_errors": {"()": "config.request_log.OneLineClientErrors"},
    },
    "formatters": {"django.server": {"()": "django.utils.log.ServerFormatter", "format": "[{server_time}] {message}", "style": "{"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler"},
        "django.server": {"class": "logging.StreamHandler", "formatter": "django.server", "filters": ["quiet_paths"]},
    },
    "loggers": {
        "ebcloud": {"handlers": ["console"], "level": env_log_level("LOG_LEVEL", "INFO")},
        "django.server": {"handlers": ["django.server"], "level": "INFO", "propagate": False},
        # A request that failed on the server (500) prints its traceback, DEBUG on or off (off,
        # Django's own logging would only mail it to ADMINS); a refused one (4xx) is one line.
        "django.request": {"handlers": ["console"], "level": "WARNING", "propagate": False, "filters": ["one_line_client_errors"]},
    },
}


REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "pools.api.parsers.JSONParser",  # DRF's, with the spec size limit
        "pools.api.parsers.YAMLParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "pools.api.errors.exception_handler",
    # No DEFAULT_PAGINATION_CLASS/PAGE_SIZE: lists are chunked by `?limit=&continue=` the Kubernetes
    # way (pools/api/chunking.py); DRF's paginators would never run on these plain views.
}
SPECTACULAR_SETTINGS = {
    "TITLE": "EBCloud GPU node pools API",
    "DESCRIPTION": "Declare, order, size and inspect subscription GPU node pools.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI from the installed sidecar package: no CDN (there is no internet).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "pools.api.schema_hooks.declare_unsupported_media_type",
        "pools.api.schema_hooks.declare_request_too_large",
        "pools.api.schema_hooks.declare_bad_query",
    ],
}

# django-q2 with the ORM broker: at-least-once delivery on the same database (design §5).
Q_CLUSTER = {
    "name": "ebcloud",
    "orm": "default",
    "workers": env_int("Q_WORKERS", 2, minimum=1),
    "timeout": 60,
    "retry": 120,
    "catch_up": False,
    "max_attempts": 3,
    # The last 250 successes per schedule, not 250 in all: the per-minute tasks would prune the
    # hourly metering's latest success, which /metrics reports (monitoring/metrics.py).
    "save_limit_per": "group",
    "sync": TESTING,
    "log_level": env_log_level("Q_LOG_LEVEL", "INFO"),  # `manage.py demo`: WARNING (failures only)
}

# Product settings.
EBCLOUD_MAX_NODES_PER_POOL = env_int("EBCLOUD_MAX_NODES_PER_POOL", 100, minimum=1)
EBCLOUD_MAX_SPEC_BYTES = env_int("EBCLOUD_MAX_SPEC_BYTES", 64 * 1024, minimum=1024)
# Arrays and objects (YAML: sequences and mappings) inside each other in any JSON or YAML body or
# imported document: deeper is a 400, found in time linear in the size before a parser recurses
# (pools/core/nesting.py). The deepest valid document (a Pod with node affinity) nests 10.
EBCLOUD_MAX_DOCUMENT_DEPTH = env_int("EBCLOUD_MAX_DOCUMENT_DEPTH", 32, minimum=16, maximum=256)
# Any request body (Django's limit for form data; the API answers 413 above it before reading).
DATA_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024

# Providers and the lifecycle controller (issue 3; pools/providers, pools/controllers/lifecycle.py).
# The names each accepts are checked here, at start (a typo would otherwise pass `manage.py check`
# and fail every controller); pools/providers/__init__.py maps each name to its implementation.
EBCLOUD_CLOUD_PROVIDERS = ("simulated",)
EBCLOUD_CLUSTER_BACKENDS = ("simulated", "kubernetes")
EBCLOUD_CLOUD_PROVIDER = env_choice("EBCLOUD_CLOUD_PROVIDER", "simulated", EBCLOUD_CLOUD_PROVIDERS)
# The cluster: `simulated` (the embedded default) or `kubernetes` (a real one), from EBCLOUD_CLUSTER.
EBCLOUD_CLUSTER_BACKEND = env_choice("EBCLOUD_CLUSTER", "simulated", EBCLOUD_CLUSTER_BACKENDS)
# The cluster of EBCLOUD_CLUSTER=kubernetes: a kubeconfig file (empty: $KUBECONFIG or
# ~/.kube/config, else the in-cluster service account).
EBCLOUD_KUBECONFIG = env_str("EBCLOUD_KUBECONFIG", "")
# Seconds an API call of that cluster may take to connect (TLS handshake included) and between
# two reads of its answer; past them the call fails and is retried later (a watch waits its own
# timeoutSeconds more). Without a bound a hung API server stalls every controller that calls it.
EBCLOUD_KUBE_TIMEOUT_SECONDS = env_float("EBCLOUD_KUBE_TIMEOUT_SECONDS", 15.0, minimum=0.1)
# The credentials the simulated cloud's machines' kubelets join a real cluster with (empty: the
# control plane's own, EBCLOUD_KUBECONFIG).
EBCLOUD_SIM_KUBELET_KUBECONFIG = env_str("EBCLOUD_SIM_KUBELET_KUBECONFIG", "")
# Simulated cloud: each provisioning step's duration; a node is Ready in about 4 minutes, or
# 3 with a prewarmed image (D4). EBCLOUD_SIM_FAST=true (the demo) makes every step 2 seconds.
SIM_STEP_SECONDS_REALISTIC = {"boot": 60, "image_pull": 45, "driver_install": 90, "kubelet_install": 30, "kubelet_join": 20}
SIM_STEP_SECONDS_FAST = dict.fromkeys(SIM_STEP_SECONDS_REALISTIC, 2)
EBCLOUD_SIM_STEP_SECONDS = SIM_STEP_SECONDS_FAST if env_bool("EBCLOUD_SIM_FAST", False) else SIM_STEP_SECONDS_REALISTIC
EBCLOUD_SIM_PREWARMED_IMAGES = env_list("EBCLOUD_SIM_PREWARMED_IMAGES", ["ubuntu-22.04-cuda-12.2-prewarmed"])
EBCLOUD_SIM_FAILURE_RATES: dict[str, float] = {}  # step -> probability, e.g. {"image_pull": 0.1}
EBCLOUD_SIM_STOCK_GPUS = env_int("EBCLOUD_SIM_STOCK_GPUS", 256, minimum=0)  # per zone and GPU model
EBCLOUD_SIM_STOCK: dict[str, int] = {}  # "cn-east-2a/A100_80G" -> GPUs, overriding the default
EBCLOUD_SIM_ACCOUNT = env_str("EBCLOUD_SIM_ACCOUNT", "default")
EBCLOUD_SIM_RECLAIM_NOTICE_SECONDS = env_int("EBCLOUD_SIM_RECLAIM_NOTICE_SECONDS", 120, minimum=0)
EBCLOUD_SIM_DISK_GB = env_int("EBCLOUD_SIM_DISK_GB", 500, minimum=0)  # system + data disk per machine
EBCLOUD_SIM_CROSS_ZONE_GB_PER_HOUR: dict[str, float] = {}  # zone -> GB per machine-hour crossing zones (D4)
EBCLOUD_SIM_RECLAIM_RATE_PER_HOUR = 0.0  # chance per hour that a preemptible machine is reclaimed (D2)
# Chance per GPU-hour that a running simulated GPU raises an Xid (issue 6), drawn by a hash of the
# seed, node, GPU and hour; 0 keeps tests deterministic. Admins inject one with `manage.py inject_fault`.
EBCLOUD_SIM_XID_RATE = env_float("EBCLOUD_SIM_XID_RATE", 0.0, minimum=0.0, maximum=1.0)
EBCLOUD_SIM_XID_SEED = env_int("EBCLOUD_SIM_XID_SEED", 0)
# Controller: retries with exponential backoff, leases (D2), drains, heartbeats (D1), claims.
EBCLOUD_PROVISION_MAX_ATTEMPTS = env_int("EBCLOUD_PROVISION_MAX_ATTEMPTS", 5, minimum=1)
EBCLOUD_BACKOFF_BASE_SECONDS = env_int("EBCLOUD_BACKOFF_BASE_SECONDS", 30, minimum=1)
EBCLOUD_BACKOFF_CAP_SECONDS = env_int("EBCLOUD_BACKOFF_CAP_SECONDS", 600, minimum=1)
# An on-demand (burst) node not Ready this long after it was requested is given up and its pool's
# scale-ups back off, so the team's other pools take its pods (Cluster Autoscaler's
# --max-node-provision-time, 15 minutes). Monthly and preemptible nodes are bought: never given up.
EBCLOUD_MAX_NODE_PROVISION_SECONDS = env_int("EBCLOUD_MAX_NODE_PROVISION_SECONDS", 15 * 60, minimum=60)
EBCLOUD_LEASE_NOTICE_SECONDS = env_int("EBCLOUD_LEASE_NOTICE_SECONDS", 3 * 24 * 3600, minimum=0)
EBCLOUD_DRAIN_TIMEOUT_SECONDS = env_int("EBCLOUD_DRAIN_TIMEOUT_SECONDS", 600, minimum=0)
EBCLOUD_HEARTBEAT_GRACE_SECONDS = env_int("EBCLOUD_HEARTBEAT_GRACE_SECONDS", 300, minimum=1)
# A GPU reset or reboot its node agent has not acknowledged this long after it was queued counts
# as failed, and the repair ladder climbs (pools/controllers/repair.py).
EBCLOUD_REPAIR_COMMAND_TIMEOUT_SECONDS = env_int("EBCLOUD_REPAIR_COMMAND_TIMEOUT_SECONDS", 900, minimum=60)
EBCLOUD_RECONCILE_CLAIM_SECONDS = env_int("EBCLOUD_RECONCILE_CLAIM_SECONDS", 120, minimum=1)

# Monitoring (issue 6; monitoring/): agent join and credentials, report ingest, /metrics.
EBCLOUD_JOIN_TOKEN_TTL_SECONDS = env_int("EBCLOUD_JOIN_TOKEN_TTL_SECONDS", 3600, minimum=60)
EBCLOUD_JOIN_TOKEN_MAX_TTL_SECONDS = env_int("EBCLOUD_JOIN_TOKEN_MAX_TTL_SECONDS", 24 * 3600, minimum=60)
# Reports more than this many sequence numbers above the highest contiguous one are refused
# (the agent sends its buffer oldest first, so only a broken agent gets there).
EBCLOUD_AGENT_SEQ_WINDOW = env_int("EBCLOUD_AGENT_SEQ_WINDOW", 10000, minimum=1)
EBCLOUD_AGENT_MAX_BATCH = env_int("EBCLOUD_AGENT_MAX_BATCH", 500, minimum=1)
# The report ingest prepares its two statements on PostgreSQL (monitoring/ingest_sql.py); turn
# off behind a transaction-pooling PgBouncer without max_prepared_statements (before 1.21).
EBCLOUD_AGENT_PREPARED_STATEMENTS = env_bool("EBCLOUD_AGENT_PREPARED_STATEMENTS", True)
# Raw reports are kept this long (the per-minute PoolSample rollups stay); pruned by the rollup.
EBCLOUD_AGENT_REPORT_RETENTION_HOURS = env_int("EBCLOUD_AGENT_REPORT_RETENTION_HOURS", 72, minimum=1)
# /metrics: with a token, only `Authorization: Bearer <token>` may scrape (from anywhere);
# without one, only the loopback interface may (a Prometheus or an exporter on the same host).
EBCLOUD_METRICS_TOKEN = env_str("EBCLOUD_METRICS_TOKEN", "")
# The scheduler extender (/api/scheduler/v1/): kube-scheduler's secret, sent as the password of
# the user `kube-scheduler` in its configuration's urlPrefix; empty: nobody may call it.
EBCLOUD_SCHEDULER_EXTENDER_TOKEN = env_str("EBCLOUD_SCHEDULER_EXTENDER_TOKEN", "")

# Metering splits each hour by pool into this many parts, one task each, so that several workers
# meter an hour together (set it to the number of worker processes of all qclusters).
EBCLOUD_METER_PARTS = env_int("EBCLOUD_METER_PARTS", 1, minimum=1, maximum=64)
# The per-minute passes (the lifecycle controller, the autoscaler) split the same way, by pool,
# into this many tasks, so that several workers share a tick (same advice).
EBCLOUD_TICK_PARTS = env_int("EBCLOUD_TICK_PARTS", 1, minimum=1, maximum=64)
# The autoscaler: Pending pods of a priority below this never trigger a scale-up (Cluster
# Autoscaler's --expendable-pods-priority-cutoff, same default): they wait for spare room.
EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF = env_int("EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF", -10)

# Alerts (budgets and capacity; pools/services/notifications.py): where they go besides the
# in-app list and the mail to the team's leads. The EBCLOUD_BUDGET_* names of earlier releases
# are still read when the new ones are unset.
EBCLOUD_ALERT_EMAILS = env_list("EBCLOUD_ALERT_EMAILS", env_list("EBCLOUD_BUDGET_ALERT_EMAILS", []))
EBCLOUD_ALERT_WEBHOOK_URL = env_str("EBCLOUD_ALERT_WEBHOOK_URL", env_str("EBCLOUD_BUDGET_WEBHOOK_URL", ""))

# The living demo (`make run`, `manage.py demo_fleet`): where its agents report, how fast the
# replayed trace runs, how often the control loops tick, when the first GPU fault comes.
EBCLOUD_DEMO_SERVER = env_str("EBCLOUD_DEMO_SERVER", "http://127.0.0.1:8000")
EBCLOUD_DEMO_SPEED = env_int("EBCLOUD_DEMO_SPEED", 60, minimum=1)
EBCLOUD_DEMO_TICK_SECONDS = env_int("EBCLOUD_DEMO_TICK_SECONDS", 3, minimum=1)
EBCLOUD_DEMO_FAULT_AFTER_SECONDS = env_int("EBCLOUD_DEMO_FAULT_AFTER_SECONDS", 45, minimum=0)
EBCLOUD_TRACE_DIR = Path(env_str("EBCLOUD_TRACE_DIR", str(BASE_DIR.parent / "shared" / "data" / "alibaba-gpu-v2023")))
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend" if DEBUG else "django.core.mail.backends.smtp.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "ebcloud-pools@localhost")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
# Seconds an SMTP connection may block; alert delivery plans its time budget with it.
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
