"""Hikyaku settings: one module, read from the environment.

With no environment at all the broker runs on a SQLite file, the in-memory channel layer and
eager Celery, so `make run` serves a working broker. DATABASE_URL, REDIS_URL and
CELERY_BROKER_URL switch to Postgres and Redis. Every variable is documented in .env.example.
"""

from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
# The key of an older default, refused wherever it is still configured.
DEV_SECRET_KEY = "dev-insecure-hikyaku-secret-key-change-me"

env = environ.Env()
if env.bool("HIKYAKU_READ_DOT_ENV", default=False):
    environ.Env.read_env(BASE_DIR / ".env")

# Safe to expose by default (`make run` with HOST=0.0.0.0 included): debug pages only with
# DJANGO_DEBUG=true (`make dev`).
DEBUG = env.bool("DJANGO_DEBUG", default=False)

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'hikyaku.sqlite3'}")
}


def _secret_key_file() -> Path:
    """Where a generated key is kept: beside the SQLite file (in its folder, whatever the
    file's name, so the test database's servers share the test process's key), else in the
    project folder."""
    name = DATABASES["default"].get("NAME") or ""
    if DATABASES["default"]["ENGINE"].endswith("sqlite3") and name and name != ":memory:":
        return Path(name).parent / "hikyaku.secret_key"
    return BASE_DIR / "hikyaku.secret_key"


def _generated_secret_key(path: Path) -> str:
    """The key in `path`, created on first use (mode 0600). Every process of one install
    reads the same file, so sessions survive restarts; two first starts at once agree,
    because the file appears whole or not at all (a hard link, not a write in place)."""
    import os
    import secrets

    if not path.exists():
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
        try:
            os.link(scratch, path)
        except FileExistsError:
            pass
        finally:
            scratch.unlink()
    return path.read_text().strip()


SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="") or _generated_secret_key(
    Path(env.str("HIKYAKU_SECRET_KEY_FILE", default=str(_secret_key_file())))
)
if not DEBUG and SECRET_KEY == DEV_SECRET_KEY:
    raise ImproperlyConfigured(
        "DJANGO_DEBUG is off but DJANGO_SECRET_KEY is the old development key: set a real "
        "secret, or unset it to have one generated."
    )
HIKYAKU_BASE_URL = env.str("HIKYAKU_BASE_URL", default="").rstrip("/")
# Loopback names by default; serving other clients (HOST=0.0.0.0) means naming the host they
# use in DJANGO_ALLOWED_HOSTS (or HIKYAKU_BASE_URL).
_default_hosts = ["localhost", "127.0.0.1", "[::1]"]
if HIKYAKU_BASE_URL:
    from urllib.parse import urlsplit

    _default_hosts.append(urlsplit(HIKYAKU_BASE_URL).hostname or "localhost")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["*"] if DEBUG else _default_hosts)
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.sites",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "channels",
    "tenants",
    "agents",
    "messaging",
    "webui",
]

MIDDLEWARE = [
    "hikyaku.request_log.request_log_middleware",
    "hikyaku.client_address.client_address_middleware",
    "django.middleware.security.SecurityMiddleware",
    "hikyaku.middleware.security_headers_middleware",
    "hikyaku.error_pages.machine_errors_middleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "hikyaku.middleware.BodyLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "allauth.account.middleware.AccountMiddleware",
]

ROOT_URLCONF = "hikyaku.urls"
WSGI_APPLICATION = "hikyaku.wsgi.application"
ASGI_APPLICATION = "hikyaku.asgi.application"

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
                "webui.context_processors.navigation",
            ],
        },
    },
]

# Database: a SQLite file by default, Postgres via DATABASE_URL. Connections are not kept
# across requests (CONN_MAX_AGE=0) because persistent connections leak under ASGI; the
# WSGI web processes may opt in with DATABASE_CONN_MAX_AGE.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=0)
# A health check costs a `SELECT 1` round trip on every request. Without it, a persistent
# WSGI connection broken by a database restart fails one request (503; clients retry with the
# same messageId) and is then replaced. The ASGI processes' pooled threads notice an idle
# connection the server hung up on without a round trip (messaging/stream/db.py). Turn it on where that single failure matters more.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool("DATABASE_CONN_HEALTH_CHECKS", default=False)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Django's backend, whose writers in one process take turns on a lock instead of in
    # SQLite's sleeping busy handler (hikyaku/sqlite3/base.py).
    DATABASES["default"]["ENGINE"] = "hikyaku.sqlite3"
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
    }
    # A file, not :memory:, so server processes started by the tests share the test database.
    DATABASES["default"]["TEST"] = {
        "NAME": env.str("SQLITE_TEST_NAME", default=str(BASE_DIR / "test-hikyaku.sqlite3"))
    }
IS_POSTGRES = DATABASES["default"]["ENGINE"].startswith("django.db.backends.postgresql")
if IS_POSTGRES:
    # libpq waits forever for an unreachable host by default; /readyz and requests should fail
    # fast instead (DATABASE_URL's own ?connect_timeout= wins).
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", env.int("DATABASE_CONNECT_TIMEOUT", default=5)
    )
    # Parameters bound by the server, and statements prepared once a connection has run them
    # five times: planning was most of Postgres's CPU per send and per ack (the hot
    # statements are planned in ~0.5–1 ms and run in ~0.2 ms; `make bench`). Needs a
    # connection that keeps its session: turn it off (DATABASE_SERVER_SIDE_BINDING=0) behind
    # a transaction-pooling PgBouncer older than 1.21.
    if env.bool("DATABASE_SERVER_SIDE_BINDING", default=True):
        DATABASES["default"]["OPTIONS"].setdefault("server_side_binding", True)
        DATABASES["default"]["OPTIONS"].setdefault(
            "prepare_threshold", env.int("DATABASE_PREPARE_THRESHOLD", default=5)
        )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "tenants.User"
SITE_ID = 1

AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# django-allauth: email login, no usernames.
ACCOUNT_USER_MODEL_USERNAME_FIELD = None
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*", "password2*"]
ACCOUNT_EMAIL_VERIFICATION = env.str("HIKYAKU_EMAIL_VERIFICATION", default="optional")
ACCOUNT_LOGOUT_ON_GET = False
# What people's e-mails say they come from (the Site's name too: webui/apps.py).
HIKYAKU_SITE_NAME = env.str("HIKYAKU_SITE_NAME", default="Hikyaku")
ACCOUNT_EMAIL_SUBJECT_PREFIX = f"[{HIKYAKU_SITE_NAME}] "
LOGIN_REDIRECT_URL = "/ui/"
LOGIN_URL = "/accounts/login/"
ACCOUNT_LOGOUT_REDIRECT_URL = "/accounts/login/"
EMAIL_BACKEND = env.str(
    "DJANGO_EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend"
)
DEFAULT_FROM_EMAIL = env.str("DJANGO_DEFAULT_FROM_EMAIL", default="hikyaku@localhost")

# An OpenID Connect provider (e.g. Auth0) is offered only when configured.
OIDC_CLIENT_ID = env.str("HIKYAKU_OIDC_CLIENT_ID", default="")
SOCIALACCOUNT_PROVIDERS = {}
if OIDC_CLIENT_ID:
    INSTALLED_APPS.append("allauth.socialaccount.providers.openid_connect")
    SOCIALACCOUNT_PROVIDERS["openid_connect"] = {
        "APPS": [
            {
                "provider_id": env.str("HIKYAKU_OIDC_PROVIDER_ID", default="oidc"),
                "name": env.str("HIKYAKU_OIDC_NAME", default="Single sign-on"),
                "client_id": OIDC_CLIENT_ID,
                "secret": env.str("HIKYAKU_OIDC_CLIENT_SECRET", default=""),
                "settings": {"server_url": env.str("HIKYAKU_OIDC_SERVER_URL", default="")},
            }
        ]
    }

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = env.str("DJANGO_STATIC_ROOT", default=str(BASE_DIR / "staticfiles"))
# WhiteNoise serves static files from every server (uvicorn, granian, daphne). It finds them in
# the apps and static/ as well, so `make run` and tests need no collectstatic first.
WHITENOISE_USE_FINDERS = True

# Security headers.
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
# Secure cookies need HTTPS: on by default when the public URL is https (the proxy's TLS);
# `make run` serves plain HTTP, where a browser would drop them and no login would hold.
SESSION_COOKIE_SECURE = env.bool(
    "DJANGO_SECURE_COOKIES", default=HIKYAKU_BASE_URL.startswith("https://")
)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Redis: channel layer (doorbells) and, unless CELERY_BROKER_URL says otherwise, Celery.
REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": "hikyaku"},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# The cache holds the web UI's login throttling (django-allauth's rate limits): with Redis,
# every web process counts the same failed logins; without it, each process its own.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "hikyaku.cache.ForgivingRedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "hikyaku",
            "OPTIONS": {"socket_timeout": 0.5, "socket_connect_timeout": 0.5},
        }
    }

CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Separate queues let several deployments (or test runs) share one Redis.
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_TASK_DEFAULT_QUEUE", default="celery")
# `celery -A hikyaku beat` runs these; `python manage.py purge` runs the purge on demand.
CELERY_BEAT_SCHEDULE: dict = {
    "purge-expired-data": {
        "task": "messaging.purge_expired",
        "schedule": env.float("HIKYAKU_PURGE_INTERVAL_SECONDS", default=3600.0),
    },
    "retry-due-webhooks": {
        "task": "messaging.retry_due_webhooks",
        "schedule": env.float("HIKYAKU_WEBHOOK_SWEEP_SECONDS", default=60.0),
    },
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["hikyaku.parsers.StrictJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "hikyaku.negotiation.JSONRegardless",
    "EXCEPTION_HANDLER": "hikyaku.errors.rest_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Hikyaku API",
    "DESCRIPTION": "The Hikyaku broker: the agent registry and task timelines (REST), and "
    "messaging, the core API, as A2A JSON-RPC methods at `POST /a2a/` (tag *A2A JSON-RPC*). "
    "Task states and verbs: README, Task states and Messaging.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Every operation authenticates with a bearer credential (docs/PROTOCOL.md §2): an agent token,
    # or a tenant API key (plus X-Agent-Id when acting as an agent).
    "APPEND_COMPONENTS": {
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "Agent token (hka_…), or tenant API key (hky_…) with X-Agent-Id.",
            }
        }
    },
    "SECURITY": [{"bearer": []}],
    # The JSON-RPC methods (messaging/a2a/openapi.py).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "messaging.a2a.openapi.add_json_rpc_methods",
    ],
    # Swagger UI from the installed package (drf-spectacular-sidecar), so /api/docs/ works
    # offline; no call to a public validator either.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
}

# Product settings.
HIKYAKU_MAX_BODY_BYTES = env.int("HIKYAKU_MAX_BODY_BYTES", default=1024 * 1024)
# The tools /mcp offers: core, all, or a comma list of names (hikyaku_client/mcp_profiles.py).
HIKYAKU_MCP_TOOLS = env.str("HIKYAKU_MCP_TOOLS", default="all")
DATA_UPLOAD_MAX_MEMORY_SIZE = HIKYAKU_MAX_BODY_BYTES
HIKYAKU_MAX_MESSAGE_BYTES = env.int("HIKYAKU_MAX_MESSAGE_BYTES", default=256 * 1024)
HIKYAKU_MAX_PARTS = env.int("HIKYAKU_MAX_PARTS", default=64)
HIKYAKU_MAX_METADATA_BYTES = env.int("HIKYAKU_MAX_METADATA_BYTES", default=16 * 1024)
HIKYAKU_MAX_AGENTS_PER_TENANT = env.int("HIKYAKU_MAX_AGENTS_PER_TENANT", default=10_000)
HIKYAKU_MAX_THREAD_DEPTH = env.int("HIKYAKU_MAX_THREAD_DEPTH", default=16)
HIKYAKU_RATE_LIMIT_PER_MINUTE = env.int("HIKYAKU_RATE_LIMIT_PER_MINUTE", default=1200)
# Every credential of a tenant together (its agents' tokens, its keys), so that minting agents
# does not multiply a tenant's budget; and failed authentications per client address (over
# it, that address's authentications get 429 until the minute ends). 0 turns either off.
HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE = env.int("HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE", default=6000)
HIKYAKU_AUTH_FAILURES_PER_MINUTE = env.int("HIKYAKU_AUTH_FAILURES_PER_MINUTE", default=60)
HIKYAKU_RETENTION_DAYS = env.int("HIKYAKU_RETENTION_DAYS", default=30)
HIKYAKU_DEREGISTERED_TTL_DAYS = env.int("HIKYAKU_DEREGISTERED_TTL_DAYS", default=7)
# last_used_at / last_seen_at are written at most this often per key or agent.
HIKYAKU_TOUCH_INTERVAL_SECONDS = env.int("HIKYAKU_TOUCH_INTERVAL_SECONDS", default=60)
# Streams (messaging/stream): DB threads per stream process (never one per stream), keepalive
# comments, the periodic catch-up scan that covers lost doorbells, and how often open streams
# re-check their credentials / session. Web (WSGI) processes serve no streams: they hand them
# to the stream processes (messaging/stream/handoff.py).
HIKYAKU_STREAM_DB_THREADS = env.int("HIKYAKU_STREAM_DB_THREADS", default=8)
# An ASGI process answers the broker's JSON-RPC calls on this many threads, each keeping its
# database connection (hikyaku/lean.py). Two cost as much CPU per call as eight, with a lower
# p99 and fewer connections (docs/MEASUREMENTS.md, "Request threads per web process").
HIKYAKU_API_THREADS = env.int("HIKYAKU_API_THREADS", default=2)
HIKYAKU_STREAM_KEEPALIVE_SECONDS = env.float("HIKYAKU_STREAM_KEEPALIVE_SECONDS", default=25.0)
HIKYAKU_STREAM_SCAN_SECONDS = env.float("HIKYAKU_STREAM_SCAN_SECONDS", default=1.0)
HIKYAKU_STREAM_CHECK_SECONDS = env.float("HIKYAKU_STREAM_CHECK_SECONDS", default=2.0)

# Retention (messaging/retention.py): terminal tasks and their events after
# HIKYAKU_RETENTION_DAYS, deregistered agents and all their tasks after
# HIKYAKU_DEREGISTERED_TTL_DAYS, webhook delivery logs after HIKYAKU_WEBHOOK_LOG_DAYS.
HIKYAKU_WEBHOOK_LOG_DAYS = env.int("HIKYAKU_WEBHOOK_LOG_DAYS", default=14)
HIKYAKU_PURGE_BATCH_SIZE = env.int("HIKYAKU_PURGE_BATCH_SIZE", default=1000)

# Webhooks and A2A push notifications (docs/WEBHOOKS.md). Destinations resolving to
# loopback/private/link-local addresses are refused unless listed here (hosts or CIDRs).
HIKYAKU_WEBHOOK_ALLOWED_HOSTS = env.list("HIKYAKU_WEBHOOK_ALLOWED_HOSTS", default=[])
HIKYAKU_WEBHOOK_TIMEOUT_SECONDS = env.float("HIKYAKU_WEBHOOK_TIMEOUT_SECONDS", default=5.0)
HIKYAKU_WEBHOOK_MAX_ATTEMPTS = env.int("HIKYAKU_WEBHOOK_MAX_ATTEMPTS", default=8)
HIKYAKU_WEBHOOK_BACKOFF_SECONDS = env.float("HIKYAKU_WEBHOOK_BACKOFF_SECONDS", default=2.0)
HIKYAKU_WEBHOOK_BACKOFF_CAP_SECONDS = env.float(
    "HIKYAKU_WEBHOOK_BACKOFF_CAP_SECONDS", default=600.0
)
# Beat's sweeper runs every HIKYAKU_WEBHOOK_SWEEP_SECONDS (60) and re-enqueues pending
# deliveries overdue by this much: lost enqueues, and attempts whose worker died mid-POST
# (their row stays claimed for the lease, 3 × timeout + 30 s, then falls due).
HIKYAKU_WEBHOOK_SWEEP_GRACE_SECONDS = env.int("HIKYAKU_WEBHOOK_SWEEP_GRACE_SECONDS", default=60)
# Fairness (docs/WEBHOOKS.md): attempts in flight at once, across every process, per tenant and
# per destination (scheme, host, port); 0 turns a cap off. Over a cap a delivery waits in the
# database, not in a thread. The embedded default runs attempts on HIKYAKU_WEBHOOK_THREADS
# background threads; keep the tenant cap below that (and below a Celery worker's concurrency)
# so that one tenant's slow receiver always leaves threads for everyone else.
HIKYAKU_WEBHOOK_TENANT_CONCURRENCY = env.int("HIKYAKU_WEBHOOK_TENANT_CONCURRENCY", default=2)
HIKYAKU_WEBHOOK_DESTINATION_CONCURRENCY = env.int(
    "HIKYAKU_WEBHOOK_DESTINATION_CONCURRENCY", default=4
)
HIKYAKU_WEBHOOK_THREADS = env.int("HIKYAKU_WEBHOOK_THREADS", default=8)

# Observability (README, Operations). /metrics is open to loopback callers that did not come
# through a proxy, to bearer HIKYAKU_METRICS_TOKEN, and to HIKYAKU_METRICS_ALLOWED_IPS (IPs or
# CIDRs); everyone else gets 404. A Celery worker serves the same on
# HIKYAKU_WORKER_METRICS_PORT when set.
HIKYAKU_METRICS_TOKEN = env.str("HIKYAKU_METRICS_TOKEN", default="")
HIKYAKU_METRICS_ALLOWED_IPS = env.list("HIKYAKU_METRICS_ALLOWED_IPS", default=[])
HIKYAKU_METRICS_LOOPBACK = env.bool("HIKYAKU_METRICS_LOOPBACK", default=True)
HIKYAKU_WORKER_METRICS_HOST = env.str("HIKYAKU_WORKER_METRICS_HOST", default="127.0.0.1")
HIKYAKU_WORKER_METRICS_PORT = env.int("HIKYAKU_WORKER_METRICS_PORT", default=0)
# One access line per request on the hikyaku.request logger (hikyaku/request_log.py).
HIKYAKU_REQUEST_LOG = env.bool("HIKYAKU_REQUEST_LOG", default=True)

# Agents as A2A peers (docs/PROTOCOL.md §8, docs/PEERS.md). A blocking SendMessage on an agent's own
# endpoint waits at most HIKYAKU_BLOCKING_TIMEOUT_SECONDS for the agent to answer, in a stream
# process and without a thread (messaging/waiting.py); at most HIKYAKU_MAX_BLOCKING_WAITS such
# waits run per stream process (beyond that SendMessage answers at once, as with
# returnImmediately).
HIKYAKU_BLOCKING_TIMEOUT_SECONDS = env.float("HIKYAKU_BLOCKING_TIMEOUT_SECONDS", default=25.0)
HIKYAKU_MAX_BLOCKING_WAITS = env.int("HIKYAKU_MAX_BLOCKING_WAITS", default=1000)
# Anonymous callers of public agents are rate limited per client address.
HIKYAKU_ANONYMOUS_RATE_LIMIT_PER_MINUTE = env.int(
    "HIKYAKU_ANONYMOUS_RATE_LIMIT_PER_MINUTE", default=60
)
# Reverse proxies in front of the broker that append to X-Forwarded-For (0: trust nobody and
# use the connection's peer address as the client address).
HIKYAKU_TRUSTED_PROXY_HOPS = env.int("HIKYAKU_TRUSTED_PROXY_HOPS", default=0)
# The web UI's login limits (django-allauth) find the client's address by the same rule.
ALLAUTH_TRUSTED_PROXY_COUNT = HIKYAKU_TRUSTED_PROXY_HOPS
# Media types an agent accepts from A2A callers (its card's defaultInputModes, plus the
# inputModes of its skills). By default everything: the broker cannot know what an ephemeral
# agent handles, and the agent can reject a task itself. With a narrower list, other parts get
# ContentTypeNotSupportedError (-32005).
HIKYAKU_PEER_INPUT_MODES = env.list(
    "HIKYAKU_PEER_INPUT_MODES", default=["text/plain", "application/json", "*/*"]
)

LOG_FORMAT = env.str("HIKYAKU_LOG_FORMAT", default="text" if DEBUG else "json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "hikyaku.logging.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env.str("HIKYAKU_LOG_LEVEL", default="INFO")},
    # httpx logs every request at INFO; the /mcp tools call the broker in-process through it.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}
