"""Settings, read from the environment.

With no environment at all the platform runs embedded: a SQLite file under DATA_DIR, in-process
shared state, DEBUG on and a development secret generated once into DATA_DIR. Setting
DATABASE_URL and REDIS_URL moves it onto PostgreSQL and Redis; DEBUG=false makes it a production
deployment, which refuses to start without SECRET_KEY and ALLOWED_HOSTS. `.env.example` lists
every variable.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from pathlib import Path

import environ
from csp.constants import NONCE, NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from gateway.engine.secret_destinations import VENDOR_DESTINATIONS, destinations_parse

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
# An explicit environment always wins over the file; ENV_FILE="" turns the file off.
_env_file = os.environ.get("ENV_FILE", str(BASE_DIR / ".env"))
if _env_file and Path(_env_file).is_file():
    env.read_env(_env_file, overwrite=False)

DEBUG = env.bool("DEBUG", default=True)
DATA_DIR = Path(env.str("DATA_DIR", default=str(BASE_DIR / "var")))


def _development_secret_key() -> str:
    """A per-checkout secret kept in DATA_DIR, so sessions survive a restart."""
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    key_file = DATA_DIR / "development-secret-key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


if DEBUG:
    SECRET_KEY = env.str("SECRET_KEY", default="") or _development_secret_key()
    ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
else:
    SECRET_KEY = env.str("SECRET_KEY", default="")
    if len(SECRET_KEY) < 50:
        raise ImproperlyConfigured(
            "SECRET_KEY must be set to a random string of at least 50 characters when "
            "DEBUG=false (generate one with: python -c 'import secrets; "
            "print(secrets.token_urlsafe(50))')."
        )
    ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=[])
    if not ALLOWED_HOSTS:
        raise ImproperlyConfigured(
            "ALLOWED_HOSTS must list the host names this deployment answers to when "
            "DEBUG=false (comma-separated, e.g. ALLOWED_HOSTS=gateway.example.com)."
        )

CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
# How many reverse proxies stand in front of the serving processes. With 0 the peer's address
# is the client's (anonymous requests are limited per client address); with N, the N-th entry
# of X-Forwarded-For from the right (anything before it the client can forge), read by the
# gateway itself (`edge.api.access.client_address`), never by uvicorn.
TRUSTED_PROXY_HOPS = env.int("TRUSTED_PROXY_HOPS", default=0)
if TRUSTED_PROXY_HOPS < 0:
    raise ImproperlyConfigured("TRUSTED_PROXY_HOPS must be 0 or the number of proxies in front.")

# CORS on the API (django-cors-headers, in API_MIDDLEWARE): the origins are the client apps'
# and the anonymous widget's, from the admin (`runtime.wiring`), not settings.
# Keys travel as headers, never cookies, so no credentials mode.
CORS_URLS_REGEX = r"^/(api|v1)/"
CORS_ALLOWED_ORIGINS: list[str] = []
CORS_ALLOW_METHODS = ["GET", "POST", "OPTIONS"]
# "*" covers any request header (the SDKs send their own, e.g. OpenAI's x-stainless-*) except
# Authorization, which the Fetch standard wants named.
CORS_ALLOW_HEADERS = ["*", "authorization"]
CORS_EXPOSE_HEADERS = [
    "X-Request-Id",
    "X-Failover-Tier",
    "X-Failover-Provider",
    "X-Failover-Cache-Age",
    "Retry-After",
]
CORS_PREFLIGHT_MAX_AGE = 600

INSTALLED_APPS = [
    "failover_site.apps.FailoverAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "corsheaders",
    "csp",  # the admin's Content-Security-Policy (CONTENT_SECURITY_POLICY below)
    "template_partials",
    "failover_site.apps.FailoverSiteConfig",
    "providers",
    "billing",
    "alerts",
    "runtime.apps.RuntimeConfig",
    "devtools.apps.DevToolsConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "failover_site.urls"
ASGI_APPLICATION = "failover_site.asgi.application"

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
                "control_room.context.control_room",
            ],
        },
    },
]

# Database: a SQLite file unless DATABASE_URL names another (PostgreSQL through psycopg 3).
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'failover.sqlite3'}")
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    # Under ASGI each request may run on a different thread; a short busy timeout rides out
    # the brief write locks of the admin and the ledger flush instead of failing a request.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("timeout", 20)
    # A transaction that reads then writes (the kill switch, an alert's cooldown check) takes
    # the write lock when it begins, so it waits its turn rather than failing at once with
    # "database is locked" when it meets the ledger's flush.
    DATABASES["default"]["OPTIONS"].setdefault("transaction_mode", "IMMEDIATE")
else:
    # Under ASGI, persistent connections outlive the request's thread; Django's docs advise 0.
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=0)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Shared state: in-process memory unless REDIS_URL is set. Breakers, budget counters, the answer
# cache and the config version live here, so several serving processes behave as one.
REDIS_URL = env.str("REDIS_URL", default="")
STATE_BACKEND = "redis" if REDIS_URL else "memory"

if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "failover",
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# The pool under the provider adapters: "native", whole answers and streams on the gateway's
# own HTTP/1.1 connections; "aiohttp", all on aiohttp's; "httpx", httpx's own.
PROVIDER_HTTP_CLIENT = env.str("PROVIDER_HTTP_CLIENT", default="native")
if PROVIDER_HTTP_CLIENT not in ("native", "aiohttp", "httpx"):
    raise ImproperlyConfigured("PROVIDER_HTTP_CLIENT must be native, aiohttp or httpx.")


def _internal_addresses(name: str, default: list[str]) -> list[str]:  # loopback, private
    found = [part.strip().lower() for part in env.list(name, default=default) if part.strip()]
    if not set(found) <= {"loopback", "private"}:
        raise ImproperlyConfigured(f"{name} is a comma-separated list of loopback and private.")
    return found


# The outbound URL policy (gateway/engine/outbound.py): the internal addresses a provider's or an
# alert channel's URL may reach besides the public internet: "loopback" (127.0.0.0/8, ::1: an
# Ollama on this machine), "private" (RFC 1918, CGNAT, fc00::/7), both, or none (production's
# default; DEBUG allows loopback, for the demo). Link-local and metadata addresses: never.
OUTBOUND_ALLOW = _internal_addresses("OUTBOUND_ALLOW", ["loopback"] if DEBUG else [])
# Images given by URL, fetched for Ollama: internal addresses only as this says (none by default).
IMAGE_FETCH_ALLOW = _internal_addresses("IMAGE_FETCH_ALLOW", [])

# Secret variables: the environment variables a provider's API key variable or an alert
# channel's config may name. A name must start with one of the prefixes or be listed; the
# platform's own settings (Django's, and every variable this file reads) never qualify, whatever
# these say. The default names are the ones the demo and the docs use.
SECRET_ENV_PREFIXES = env.list("SECRET_ENV_PREFIXES", default=["FAILOVER_SECRET_"])
SECRET_ENV_NAMES = env.list(
    "SECRET_ENV_NAMES",
    default=[
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "TELEGRAM_BOT_TOKEN",
        "SLACK_WEBHOOK_URL",
        "ALERT_WEBHOOK_SECRET",
    ],
)

# Where each secret variable may be sent (gateway/engine/secret_destinations.py): the demo's
# names to their vendors' APIs; a deployment declares the rest, and may re-declare those, as
# NAME=https://host[:port][;…] entries, comma-separated (a host may be *.domain). A secret goes
# nowhere else: a provider or channel pairing it with another scheme, host or port is refused
# when saved and sends nothing. In the embedded mode (DEBUG) every secret may also go to this
# machine (localhost, loopback IPs); a production deployment declares such a place like any other.
try:
    SECRET_DESTINATIONS = {
        **VENDOR_DESTINATIONS,
        **destinations_parse(env.list("SECRET_DESTINATIONS", default=[])),
    }
except ValueError as exc:
    raise ImproperlyConfigured(f"SECRET_DESTINATIONS: {exc}.") from exc
SECRET_DESTINATIONS_LOOPBACK = DEBUG

# Background work: Celery on the Redis broker in production. Without a broker the same job
# functions run inside the serving process.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
# Who runs the background jobs (the sentinel, the keepalive, alert delivery, the watchdog):
# "celery" (a worker with beat on CELERY_BROKER_URL) or "inprocess" (asyncio tasks and a few
# threads inside each serving process). Default: celery when there is a broker.
BACKGROUND_JOBS = env.str("BACKGROUND_JOBS", default="celery" if CELERY_BROKER_URL else "inprocess")
if BACKGROUND_JOBS not in ("celery", "inprocess"):
    raise ImproperlyConfigured("BACKGROUND_JOBS must be celery or inprocess.")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(BASE_DIR / "var" / "static")))
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").is_dir() else []
# The ASGI app serves static files itself when this is on (the embedded default); in production
# a reverse proxy serves STATIC_ROOT after `manage.py collectstatic`.
SERVE_STATIC = env.bool("SERVE_STATIC", default=DEBUG)

# Request bodies: the pages' cap (the admin's). The API's limits, by endpoint, are below.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("DATA_UPLOAD_MAX_MEMORY_SIZE", default=1024 * 1024)
# Seconds a request's body may take to arrive, from its headers: past it the request is answered
# 408 and its connection closed, so a client that drips its body, or announces more than it
# sends, can't hold a connection open (every page and the API; edge/handlers.py).
REQUEST_BODY_TIMEOUT_S = env.float("REQUEST_BODY_TIMEOUT_S", default=10.0)
if REQUEST_BODY_TIMEOUT_S <= 0:
    raise ImproperlyConfigured("REQUEST_BODY_TIMEOUT_S must be a number of seconds above 0.")
# The API's body limits in bytes, by endpoint (edge.api.arrival.body_limit_for), held to as
# a body arrives: a long conversation or a full embeddings batch is megabytes, the rest small.
for _setting in ("BODY_LIMIT_CHAT_BYTES", "BODY_LIMIT_EMBEDDINGS_BYTES", "BODY_LIMIT_API_BYTES"):
    _size = env.str(_setting, default="1024").strip()
    if not _size.isdecimal() or int(_size) < 1024:
        raise ImproperlyConfigured(f"{_setting} must be a whole number of bytes, at least 1024.")
BODY_LIMIT_CHAT_BYTES = env.int("BODY_LIMIT_CHAT_BYTES", default=4 * 1024 * 1024)
BODY_LIMIT_EMBEDDINGS_BYTES = env.int("BODY_LIMIT_EMBEDDINGS_BYTES", default=4 * 1024 * 1024)
BODY_LIMIT_API_BYTES = env.int("BODY_LIMIT_API_BYTES", default=64 * 1024)

# Production hardening, on whenever DEBUG is off; each has a switch for deployments behind a
# proxy that terminates TLS itself.
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https")
    if env.bool("TRUST_X_FORWARDED_PROTO", default=False)
    else None
)
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=not DEBUG)
# The probes must answer over plain HTTP inside the cluster. The API is never redirected either:
# an API client follows a redirect badly (a POST comes back as a GET, its key sent in clear
# first); it is refused instead, below.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$", r"^api/", r"^v1/"]
# Refuse the API over plain HTTP (403, code https_required), as the pages are redirected.
API_REQUIRE_HTTPS = env.bool("API_REQUIRE_HTTPS", default=SECURE_SSL_REDIRECT)
# The API's own middleware (it skips MIDDLEWARE: no sessions, no CSRF). Every entry runs on the
# event loop, so it must be async-capable and do no blocking I/O (edge/api_middleware.py).
API_MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # CORS for the client apps' origins (the CORS_* settings above): preflights answered here.
    "edge.cors.ApiCorsMiddleware",
]
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=not DEBUG)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# The pages' Content-Security-Policy (django-csp): everything from this origin, no inline script
# or style (an inline script would need the request's nonce), no framing. The admin and the
# control room's htmx pages keep to it; the API sends its own, stricter one.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# Admin log-in throttle (failover_site/admin_login.py): after this many failed log-ins for one
# user name from one client address, or from one address for any names, within the window, that
# address is refused (for the name, or for all) for the window's length. A user name failed this
# many times from every address together raises an alert and gets one failure per address for
# the rest of the window; the name itself is never locked. Counted in the cache (Redis with
# REDIS_URL), so it holds across serving processes.
ADMIN_LOGIN_MAX_FAILURES = env.int("ADMIN_LOGIN_MAX_FAILURES", default=5)
ADMIN_LOGIN_WINDOW_S = env.int("ADMIN_LOGIN_WINDOW_S", default=15 * 60)
ADMIN_LOGIN_NAME_ALERT_FAILURES = env.int(
    "ADMIN_LOGIN_NAME_ALERT_FAILURES", default=10 * ADMIN_LOGIN_MAX_FAILURES
)

# The addresses (or networks) /readyz names its failing check to; anyone else gets only
# ready / not ready, since the error text describes the database and Redis.
PROBE_DETAIL_ALLOWED_IPS = env.list("PROBE_DETAIL_ALLOWED_IPS", default=["127.0.0.1", "::1"])

# Who may scrape /metrics (edge/metrics_scrape.py): the bearer token Prometheus sends
# (`authorization: {credentials: ...}` in its scrape config) and/or the addresses or networks
# it scrapes from (the caller's address as TRUSTED_PROXY_HOPS says). Both set: both required.
# Neither: /metrics refuses everyone (403), the safe default.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
if METRICS_TOKEN and len(METRICS_TOKEN) < 32:
    raise ImproperlyConfigured(
        "METRICS_TOKEN must be at least 32 characters (python -c 'import secrets; "
        "print(secrets.token_urlsafe(32))')."
    )
METRICS_ALLOWED_IPS = env.list("METRICS_ALLOWED_IPS", default=[])
for _setting, _networks in (
    ("PROBE_DETAIL_ALLOWED_IPS", PROBE_DETAIL_ALLOWED_IPS),
    ("METRICS_ALLOWED_IPS", METRICS_ALLOWED_IPS),
):
    try:
        for _network in _networks:
            ipaddress.ip_network(_network, strict=False)
    except ValueError as _error:
        raise ImproperlyConfigured(f"{_setting}: {_error}") from None
# Several serving processes on one machine: prometheus-client's multi-process mode, which reads
# this variable itself. Set it where the workers start, for the command that empties the
# directory before they do to see it too (docs/operations.md, "Running in production").
_metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
if _metrics_dir and not Path(_metrics_dir).is_dir():
    raise ImproperlyConfigured(f"PROMETHEUS_MULTIPROC_DIR: {_metrics_dir} is not a directory.")

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        # One line per upstream call is noise at thousands of requests a second.
        "httpx": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}

# Alert e-mail: how the e-mail alert channel's messages go out. EMAIL_URL, read by
# django-environ: smtp+tls://user:password@smtp.example.com:587 (STARTTLS),
# smtp+ssl://user:password@smtp.example.com:465 (TLS from the start), or consolemail:// (the
# default: written to the log, nothing sent).
_email = env.email_url("EMAIL_URL", default="consolemail://")
EMAIL_BACKEND = _email["EMAIL_BACKEND"]
EMAIL_HOST = _email.get("EMAIL_HOST") or "localhost"
EMAIL_USE_TLS = bool(_email.get("EMAIL_USE_TLS"))
EMAIL_USE_SSL = bool(_email.get("EMAIL_USE_SSL"))
EMAIL_PORT = _email.get("EMAIL_PORT") or (465 if EMAIL_USE_SSL else 587 if EMAIL_USE_TLS else 25)
EMAIL_HOST_USER = _email.get("EMAIL_HOST_USER") or ""
EMAIL_HOST_PASSWORD = _email.get("EMAIL_HOST_PASSWORD") or ""
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="failover-gateway@localhost")
# A mail server that stalls must not hold an alert delivery for long.
EMAIL_TIMEOUT = 10
