"""Mortar's settings, read from the environment.

With nothing set, Mortar runs embedded: SQLite under ``var/``, an in-memory channel layer and
cache, and Celery tasks run eagerly in-process. Set ``DATABASE_URL`` and ``REDIS_URL`` for the
production shape (Postgres, Redis). Every variable is listed in ``.env.example``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from core.http.forwarding import trusted_proxies

# Django's generic classes subscriptable at run time, as the type checker sees them.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("MORTAR_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, "").strip() or default


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), not {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "").strip()
if not SECRET_KEY:
    if not DEBUG and os.environ.get("MORTAR_REQUIRE_SECRET_KEY"):
        raise ImproperlyConfigured("SECRET_KEY must be set")
    # The embedded default: a per-checkout key kept under var/, never in the repository.
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        from django.core.management.utils import get_random_secret_key

        key_file.write_text(get_random_secret_key())
        key_file.chmod(0o600)
    SECRET_KEY = key_file.read_text().strip()

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "axes",  # sign-in throttling: failed attempts per username and address
    "ninja",  # its Swagger UI assets, served from here: /v1/docs works offline
    "accounts",
    "gateway",
    "telemetry",
    "billing",
    "replay",
    "dashboard",
]

MIDDLEWARE = [
    "core.http.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a locked-out sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
APPEND_SLASH = False
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = os.environ.get("DATABASE_URL", "").strip()
if DATABASE_URL:
    # A connection per request, closed when it ends (CONN_MAX_AGE 0): under ASGI each request
    # runs on a thread of its own, and a connection kept open would stay behind with it. The
    # long-lived threads (the run writer, the hot path's reads) keep theirs: core/db.py.
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # A database that silently stops answering must fail fast, so the run writer spills
        # to its spool instead of hanging (libpq parameters).
        DATABASES["default"].setdefault("OPTIONS", {}).update(
            {
                "connect_timeout": 5,
                "keepalives": 1,
                "keepalives_idle": 10,
                "keepalives_interval": 5,
                "keepalives_count": 3,
            }
        )
else:
    DATABASES = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(VAR_DIR / "mortar.sqlite3")}
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # One SQLite file, written by the server's run writer thread, its request threads and any
    # other process (`manage.py`, a second server): readers never wait for the writer (WAL),
    # a writer waits its turn for up to `timeout` seconds rather than failing at once, and a
    # transaction takes the write lock when it begins (IMMEDIATE): one that read first and
    # wrote later could not wait for it, it would fail with "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL;",
            "transaction_mode": "IMMEDIATE",
        }
    )
# Test runs pick their own database name so two suites on one server never collide.
if os.environ.get("MORTAR_TEST_DB_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": os.environ["MORTAR_TEST_DB_NAME"]}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Every Redis key and channel-layer group is prefixed, so a test run and a running server (or
# two test runs) sharing one Redis never see each other's data.
REDIS_URL = os.environ.get("REDIS_URL", "").strip()
REDIS_PREFIX = env_str("MORTAR_REDIS_PREFIX", "mortar")

if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": REDIS_PREFIX,
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # No read timeout: the layer's receive blocks in Redis (BZPOPMIN, 5 s at a
                # time), and redis-py 8's default socket timeout (5 s) ended it with a
                # TimeoutError that killed the dashboard's idle websocket consumers
                # (django/channels_redis#422).
                "hosts": [{"address": REDIS_URL, "socket_timeout": None}],
                "prefix": f"{REDIS_PREFIX}:asgi",
            },
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
# Without Redis there is no beat to refresh the usage rollups: the dashboard's pages that read
# them refresh them in-process (telemetry/services/rollups.py, `usage_rollups_keep_fresh`).
MORTAR_ROLLUPS_IN_PROCESS = env_bool("MORTAR_ROLLUPS_IN_PROCESS", not REDIS_URL)
CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": f"{REDIS_PREFIX}:celery:"}
# `celery -A config beat` runs these: the purge of runs past their organization's retention,
# and the usage rollups the dashboard reads instead of scanning runs. Schedules are in seconds.
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE = {
    "purge-expired-runs": {"task": "telemetry.tasks.purge_expired_runs", "schedule": 3600.0},
    # The run store's day partitions, a week ahead (Postgres): hourly, so a missed day or a
    # beat down for a while still finds them made well before they fill.
    "ensure-run-partitions": {"task": "telemetry.tasks.ensure_run_partitions", "schedule": 3600.0},
    "rollup-usage": {
        "task": "telemetry.tasks.rollup_usage",
        "schedule": 300.0,
        "kwargs": {"hours": 2},
    },
    # A budget hold whose worker died expires (its deployment's total timeout + 60 s) and is
    # charged from the run's stored usage by this pass (docs/budgets-and-rate-limits.md).
    # Runs of a worker that died (its lease expired) are closed as `interrupted`; the live
    # workers do it too, this covers a deployment whose workers all died at once.
    "interrupt-orphaned-runs": {
        "task": "telemetry.tasks.interrupt_orphaned_runs",
        "schedule": 10.0,
        "options": {"expires": 10.0},  # a pass not started in time is superseded by the next
    },
    "reconcile-budget-holds": {
        "task": "billing.tasks.reconcile_budget_holds",
        "schedule": 60.0,
    },
    # Runs the writer's spool drains after a long database outage land in hours the
    # five-minute refresh no longer looks at; once a day, look back two days.
    "rollup-usage-late-runs": {
        "task": "telemetry.tasks.rollup_usage",
        "schedule": 86400.0,
        "kwargs": {"hours": 48},
    },
}

# The API's dispatch reads the raw body itself and answers one over 4 MiB with a 413 in the
# route's envelope. The dashboard's forms (a re-run's fields, the playground's request) carry
# bodies as large, so Django's own limit, which would answer an HTML 400 first, is off.
MORTAR_MAX_BODY_BYTES = 4 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = None

MORTAR_DEFAULT_MODEL = env_str("MORTAR_DEFAULT_MODEL", "Qwen/Qwen2.5-7B-Instruct")
# Seconds of model-server silence before Mortar sends a `: ping` comment (10 by default:
# a proxy or a client that times out an idle connection sees traffic well before it would).
MORTAR_PING_SECONDS = float(os.environ.get("MORTAR_PING_SECONDS", "") or 10)
# Run writer: how many rows are written at once without waiting (a writer behind takes up to eight
# times as many in one transaction), and how long a row may wait for its batch.
MORTAR_WRITER_BATCH_SIZE = env_int("MORTAR_WRITER_BATCH_SIZE", 2000)
MORTAR_WRITER_INTERVAL_MS = env_int("MORTAR_WRITER_INTERVAL_MS", 50)
# Queued rows past which the writer spills to its spool file under var/ instead of memory.
MORTAR_WRITER_SPILL_AT = env_int("MORTAR_WRITER_SPILL_AT", 50_000)
# Each worker process renews a lease in the database every third of this; once a worker's lease
# has expired its runs still in progress are closed as `interrupted` (docs/reliability.md):
# within this plus one renewal interval of a crash.
MORTAR_WORKER_LEASE_SECONDS = env_int("MORTAR_WORKER_LEASE_SECONDS", 30)
if MORTAR_WORKER_LEASE_SECONDS < 1:
    raise ImproperlyConfigured("MORTAR_WORKER_LEASE_SECONDS must be at least 1")
# On SIGTERM a worker stops accepting and lets generations in flight finish for this many
# seconds, then stops the rest (stored as `stopped`, error code `worker_shutdown`) and exits
# (docs/operating/deploying.md). Keep it below the orchestrator's kill timeout.
MORTAR_SHUTDOWN_GRACE_SECONDS = env_float("MORTAR_SHUTDOWN_GRACE_SECONDS", 30.0)
if MORTAR_SHUTDOWN_GRACE_SECONDS < 0:
    raise ImproperlyConfigured("MORTAR_SHUTDOWN_GRACE_SECONDS must not be negative")
# Concurrent `GET /v1/telemetry/stream` streams one organization, and one key, may hold on one
# worker process; past them a 429 `too_many_streams` (docs/reliability.md).
MORTAR_TELEMETRY_STREAMS_PER_ORG = env_int("MORTAR_TELEMETRY_STREAMS_PER_ORG", 50)
MORTAR_TELEMETRY_STREAMS_PER_KEY = env_int("MORTAR_TELEMETRY_STREAMS_PER_KEY", 20)
# Allocations between two young-generation garbage collections in a server process (Python's
# default is 700). Streams allocate a few objects per chunk, and at 700 a collection runs
# every few hundred chunks; under 1,000 streams those pauses were most of the p99 added gap
# (docs/performance.md). 0 keeps Python's default.
MORTAR_GC_YOUNG_THRESHOLD = env_int("MORTAR_GC_YOUNG_THRESHOLD", 50_000)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# The operator dashboard's sign-in; staff land on its overview.
# Sign-in (the dashboard's and the admin's) is throttled by django-axes: after
# MORTAR_SIGNIN_FAILURE_LIMIT failures for one username from one address, that pair is locked
# out for MORTAR_SIGNIN_LOCKOUT_MINUTES after its last failure (a 429 with the sign-in page
# saying so); a success clears the count. `manage.py axes_reset_username NAME` lifts a lockout.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
try:
    # Only these proxies' X-Forwarded-For is honoured (config/serve.py gives uvicorn the same).
    TRUSTED_PROXIES = trusted_proxies(os.environ.get("MORTAR_TRUSTED_PROXIES", ""))
except ValueError as error:
    raise ImproperlyConfigured(f"MORTAR_TRUSTED_PROXIES: {error}") from None
AXES_FAILURE_LIMIT = env_int("MORTAR_SIGNIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("MORTAR_SIGNIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "dashboard.lockout.locked_out"
# Failures are counted per address: the connection's, or the client's a trusted proxy names.
AXES_CLIENT_IP_CALLABLE = "dashboard.lockout.client_ip"
AXES_HTTP_RESPONSE_CODE = 429
LOGIN_URL = "dashboard:login"
LOGIN_REDIRECT_URL = "dashboard:overview"
LOGOUT_REDIRECT_URL = "dashboard:login"

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# Operators' signals (docs/operating/observing.md). `/metrics` wants this as a Bearer token
# when it is set. `json`: every log line a JSON object, and one line per request (a run).
MORTAR_METRICS_TOKEN = os.environ.get("MORTAR_METRICS_TOKEN", "").strip()
MORTAR_LOG_FORMAT = env_str("MORTAR_LOG_FORMAT", "plain").lower()
if MORTAR_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured("MORTAR_LOG_FORMAT must be `plain` or `json`")
# Traces of /v1/ requests over OTLP/HTTP, only when an endpoint is set; the exporter reads the
# other OTEL_* variables itself (docs/operating/observing.md).
OTEL_EXPORTER_OTLP_ENDPOINT = env_str("OTEL_EXPORTER_OTLP_ENDPOINT", "")
OTEL_SERVICE_NAME = env_str("OTEL_SERVICE_NAME", "mortar")
# Browser clients of /v1/ (docs/api/chat-completions.md): `*`, or the origins allowed,
# comma-separated.
MORTAR_CORS_ORIGINS = env_list("MORTAR_CORS_ORIGINS", ["*"])

LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "core.logs.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": MORTAR_LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # httpx logs every outbound request at INFO: one line per completion, on the hot path.
    "loggers": {"httpx": {"level": "WARNING"}, "httpcore": {"level": "WARNING"}},
}
if MORTAR_LOG_FORMAT == "json":
    # uvicorn's own lines (start, stop, errors) in the same format, through the same handler.
    LOGGING["loggers"]["uvicorn"] = {"handlers": ["console"], "level": "INFO", "propagate": False}
