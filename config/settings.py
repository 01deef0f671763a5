"""Django settings. Every value an operator can change is read from the environment here, and only here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("NEXUM_DATA_DIR", BASE_DIR / "data"))
DATA_DIR.mkdir(parents=True, exist_ok=True)


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return default if raw in (None, "") else int(raw)


def _env_list(name: str, default: str = "") -> list[str]:
    return [entry.strip() for entry in os.environ.get(name, default).split(",") if entry.strip()]


DEBUG = _env_bool("NEXUM_DEBUG", True)
SECRET_KEY = os.environ.get("NEXUM_SECRET_KEY") or ("nexum-insecure-development-key" if DEBUG else "")
if not SECRET_KEY:
    raise RuntimeError("NEXUM_SECRET_KEY must be set when NEXUM_DEBUG is off")
ALLOWED_HOSTS = [
    h for h in os.environ.get("NEXUM_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",") if h
]

# --- HTTPS: strict by default when debug is off (``check --deploy`` clean); each one can be relaxed -------
# Behind a TLS-terminating proxy, gunicorn's forwarded_allow_ips makes X-Forwarded-Proto count (see
# deploy/gunicorn.conf.py), so Django sees https requests as secure without SECURE_PROXY_SSL_HEADER.
SECURE_SSL_REDIRECT = _env_bool("NEXUM_SECURE_SSL_REDIRECT", not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^api/v1/health$"]  # load balancers probe health over plain HTTP
SECURE_HSTS_SECONDS = _env_int("NEXUM_SECURE_HSTS_SECONDS", 0 if DEBUG else 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("NEXUM_SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = _env_bool("NEXUM_SECURE_HSTS_PRELOAD", not DEBUG)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _env_bool("NEXUM_SECURE_COOKIES", not DEBUG)
CSRF_TRUSTED_ORIGINS = _env_list("NEXUM_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "nexum.eventstore",
    "tasks_app",
    "context_app.world",
    "context_app.catalog",
    "context_app.resolution",
    "context_app.compilation",
    "verification_app",
    "nexum.work",
    "nexum_web",
    "nexum_web.ui",
    "nexum_web.mcp",
    "nexum_web.webhooks",
    "config.apps.BootstrapConfig",  # last: wires the apps above into the layers below (config/bootstrap.py)
]

MIDDLEWARE = [
    "nexum.adapters.logs.RequestIdMiddleware",
    "nexum_web.api.metrics.RequestMetricsMiddleware",
    "nexum_web.api.middleware.ApiCorsMiddleware",
    "nexum_web.api.middleware.ApiGZipMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "nexum_web.api.middleware.MethodCheckMiddleware",
    "nexum_web.api.positions.PositionMiddleware",
]

ROOT_URLCONF = "nexum_web.urls"
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
            ],
        },
    },
]

# --- Database: PostgreSQL in production, a SQLite file as the embedded default -----------------------------
DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{DATA_DIR / 'nexum.sqlite3'}"
# Persistent connections (checked before reuse) outside debug; the development server opens a thread per
# request, which would leave one idle connection behind per request.
_database = dj_database_url.parse(
    DATABASE_URL,
    conn_max_age=_env_int("NEXUM_DB_CONN_MAX_AGE", 0 if DEBUG else 60),
    conn_health_checks=True,
)
if _database["ENGINE"] == "django.db.backends.sqlite3":
    # Our backend adds the SQL function the append-only triggers consult (see config/dbbackends).
    _database["ENGINE"] = "config.dbbackends.sqlite3"
    _database["OPTIONS"] = {
        # BEGIN IMMEDIATE: a writer takes the database lock when its transaction starts, so appends are
        # serialized and global positions are assigned in commit order.
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    _database["TEST"] = {"NAME": str(DATA_DIR / "test-nexum.sqlite3")}
else:
    # The event log's append binds its parameters on the server (nexum/eventstore/store.py): psycopg prepares
    # each of its statements on a connection once it has run there this many times, instead of the server
    # planning it on every append. Off (None) behind a pooler that cannot keep prepared statements (PgBouncer
    # in transaction mode before 1.21). Django's other statements inline their values and are never prepared.
    _database.setdefault("OPTIONS", {})["prepare_threshold"] = (
        5 if _env_bool("NEXUM_DB_PREPARED_STATEMENTS", True) else None
    )
DATABASES = {"default": _database}
# An optional streaming replica of the primary (issue 26 item 3): compiles read from it once it has
# replayed the caller's last write (``Nexum-Min-Position``), waiting at most NEXUM_REPLICA_WAIT_MS for it,
# else from the primary. Writes always go to the primary (nexum/eventstore/replica.py).
NEXUM_READ_DATABASE_URL = os.environ.get("NEXUM_READ_DATABASE_URL", "")
NEXUM_REPLICA_WAIT_MS = _env_int("NEXUM_REPLICA_WAIT_MS", 500)
if NEXUM_READ_DATABASE_URL:
    _replica = dj_database_url.parse(
        NEXUM_READ_DATABASE_URL,
        conn_max_age=_database["CONN_MAX_AGE"],
        conn_health_checks=True,
    )
    if _replica["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured("NEXUM_READ_DATABASE_URL must name a PostgreSQL streaming replica")
    # Connecting to a stopped replica must fail fast, and so must a statement the standby holds up (behind
    # a lock it replays, say): the read then falls back to the primary.
    _replica["OPTIONS"] = {
        "connect_timeout": _env_int("NEXUM_REPLICA_CONNECT_TIMEOUT", 2),
        "options": f"-c statement_timeout={_env_int('NEXUM_REPLICA_STATEMENT_TIMEOUT_MS', 30000)}",
    }
    _replica["TEST"] = {"MIRROR": "default"}
    DATABASES["replica"] = _replica
    DATABASE_ROUTERS = ["nexum.eventstore.replica.ReadReplicaRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("NEXUM_STATIC_ROOT", DATA_DIR / "static"))
# Static files are served by WhiteNoise: from the apps' folders in debug, from ``collectstatic``'s output
# (compressed, with content-hashed names cached for a year) otherwise.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = WHITENOISE_AUTOREFRESH = DEBUG
LOGIN_URL = "/admin/login/"

# --- REST API -----------------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["nexum_web.api.auth.AgentTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": [
        "nexum_web.api.auth.IsProjectAgent",
        "nexum_web.api.auth.OperatorOnlyOperations",
        "nexum_web.api.strict.DeclaredQueryOnly",
    ],
    "EXCEPTION_HANDLER": "nexum_web.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "nexum_web.api.schema.RoleAwareSchema",
    "DEFAULT_METADATA_CLASS": "nexum_web.api.metadata.DescriptionMetadata",
    "DEFAULT_PARSER_CLASSES": ["nexum_web.api.parsers.DepthLimitedJSONParser"],
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Nexum API",
    "DESCRIPTION": "World state, context compilation and verification for LLM agents.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Tags and default names start after /api/: /metrics, outside the schema, must not widen the prefix.
    "SCHEMA_PATH_PREFIX": r"/api/",
    # Request bodies get components of their own, where a string that may not be blank says minLength 1.
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI and Redoc from this server's static files (drf-spectacular-sidecar), never from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # One name per choice set used by several serializers.
    "ENUM_NAME_OVERRIDES": {
        "CompileRequestStatusEnum": "nexum.core.compilation.events.REQUEST_STATUSES",
        "TaskStateEnum": "nexum.core.tasks.lifecycle.TASK_STATES",
        "TrustClassEnum": "nexum_web.api.auth.TRUST_CLASS_CHOICES",
    },
}

# Traces (nexum.adapters.telemetry): on when OTEL_EXPORTER_OTLP_ENDPOINT is set; with this, a span per SQL
# statement.
NEXUM_TRACE_SQL = _env_bool("NEXUM_TRACE_SQL", False)

# --- Celery: eager in process when no broker is configured, real workers otherwise ------------------------
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Queues by kind of work, each consumed by a worker pool of its own under `make serve` (deploy/serve.sh), so
# a backlog of one kind never delays another: completions (the gate's checks), compiles (queued compiles),
# webhooks (deliveries, which wait on receivers) and the default queue (async resolves, health pings). A
# worker started without -Q consumes every queue listed here.
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_ROUTES = {
    "nexum.verification.run_completion": {"queue": "completions"},
    "nexum.compile_context": {"queue": "compiles"},
    "nexum.webhooks.deliver": {"queue": "webhooks"},
}
CELERY_TASK_QUEUES = {
    name: {} for name in [CELERY_TASK_DEFAULT_QUEUE, *(r["queue"] for r in CELERY_TASK_ROUTES.values())]
}

# --- Nexum --------------------------------------------------------------------------------------------------
NEXUM_ARTIFACT_ROOT = Path(os.environ.get("NEXUM_ARTIFACT_ROOT", DATA_DIR / "artifacts"))
NEXUM_ARTIFACT_MAX_BYTES = _env_int("NEXUM_ARTIFACT_MAX_BYTES", 10 * 1024 * 1024)
# The largest request body read: an artifact at the cap sent as base64, plus 64 KiB for the other members.
# A larger body is 413 ``too_large`` before it is read (nexum_web.api.errors).
DATA_UPLOAD_MAX_MEMORY_SIZE = (NEXUM_ARTIFACT_MAX_BYTES + 2) // 3 * 4 + 64 * 1024
# Extra tokenizer encodings an operator supplies as local files, "name=/path/file,…": a file ending in .json
# is a Hugging Face tokenizer.json, any other a tiktoken BPE file (.tiktoken). Nothing is ever downloaded.
NEXUM_TOKENIZER_ENCODINGS = {
    name.strip(): path.strip()
    for name, path in (
        entry.split("=", 1)
        for entry in os.environ.get("NEXUM_TOKENIZER_ENCODINGS", "").split(",")
        if "=" in entry
    )
}
# Encodings every world item's token count is stored in when it is recorded (W4): those of the model cards in
# use. An item recorded before an encoding was added is counted when compiled, or once by
# ``item_token_counts_ensure``.
NEXUM_ITEM_ENCODINGS = [
    name.strip() for name in os.environ.get("NEXUM_ITEM_ENCODINGS", "cl100k_base").split(",") if name.strip()
]
# The compile's candidate cache (context_app/compilation/candidates.py), per process: its estimated size in
# MiB before the least recently used tasks are dropped.
NEXUM_COMPILE_CACHE_MB = _env_int("NEXUM_COMPILE_CACHE_MB", 256)
# The SSE event stream (nexum_web/api/stream.py): a connection closes after at most this many seconds (the
# client resumes with Last-Event-ID), polls the log this often while idle, and sends a comment this often when
# idle.
NEXUM_EVENT_STREAM_MAX_S = _env_int("NEXUM_EVENT_STREAM_MAX_S", 25)
NEXUM_EVENT_STREAM_POLL_S = _env_int("NEXUM_EVENT_STREAM_POLL_MS", 500) / 1000
NEXUM_EVENT_STREAM_HEARTBEAT_S = _env_int("NEXUM_EVENT_STREAM_HEARTBEAT_S", 15)
# A browser opens the stream with a single-use ticket (nexum_web/api/stream_tickets.py) that lasts this long.
NEXUM_EVENT_STREAM_TICKET_S = _env_int("NEXUM_EVENT_STREAM_TICKET_S", 60)
if NEXUM_EVENT_STREAM_TICKET_S < 1:
    raise RuntimeError("NEXUM_EVENT_STREAM_TICKET_S must be at least 1")
# The origins (scheme://host[:port]) whose pages may call the API from a browser (api/middleware.py).
NEXUM_CORS_ORIGINS = [origin.rstrip("/") for origin in _env_list("NEXUM_CORS_ORIGINS")]
# Open streams are bounded (nexum_web/api/stream_slots.py), since each holds a request thread while it lasts:
# NEXUM_EVENT_STREAMS_PER_TOKEN per token and NEXUM_EVENT_STREAMS_MAX in all, counted across the server's
# processes; and a process gives streams all its threads but one. Under gunicorn, deploy/gunicorn.conf.py
# tells each worker its process's NEXUM_WEB_THREADS and NEXUM_WEB_WORKERS as finally configured; elsewhere
# (runserver, tests: a thread per request) no process bound applies.
NEXUM_WEB_THREADS = _env_int("NEXUM_WEB_THREADS", 0) or None
NEXUM_WEB_WORKERS = _env_int("NEXUM_WEB_WORKERS", 0) or None
NEXUM_EVENT_STREAMS_PER_PROCESS = None if NEXUM_WEB_THREADS is None else NEXUM_WEB_THREADS - 1
NEXUM_EVENT_STREAMS_PER_TOKEN = _env_int("NEXUM_EVENT_STREAMS_PER_TOKEN", 4)
NEXUM_EVENT_STREAMS_MAX = _env_int(
    "NEXUM_EVENT_STREAMS_MAX",
    64
    if NEXUM_EVENT_STREAMS_PER_PROCESS is None or NEXUM_WEB_WORKERS is None
    else max(1, NEXUM_WEB_WORKERS * NEXUM_EVENT_STREAMS_PER_PROCESS),
)
if NEXUM_EVENT_STREAMS_PER_TOKEN < 1 or NEXUM_EVENT_STREAMS_MAX < 1:
    raise RuntimeError("NEXUM_EVENT_STREAMS_PER_TOKEN and NEXUM_EVENT_STREAMS_MAX must be at least 1")
# A fact or evidence item is left out ("below_relevance") when it scores under this share of the way from the
# typical candidate's score to the best of its section (compiler version 5; 0 turns the floor off). Recorded
# with every compile, so a change replays exactly.
NEXUM_RELEVANCE_FLOOR = float(os.environ.get("NEXUM_RELEVANCE_FLOOR", "0.2"))
# The usage ledger (issue 28): a card whose p95 drift ((provider - nexum) / nexum prompt tokens) is above this
# is flagged on the dashboard and in GET /api/v1/models; drift is taken over a card's latest
# NEXUM_USAGE_DRIFT_WINDOW reports.
NEXUM_USAGE_DRIFT_THRESHOLD = float(os.environ.get("NEXUM_USAGE_DRIFT_THRESHOLD", "0.05"))
NEXUM_USAGE_DRIFT_WINDOW = _env_int("NEXUM_USAGE_DRIFT_WINDOW", 1000)
if NEXUM_USAGE_DRIFT_WINDOW < 1:
    raise RuntimeError("NEXUM_USAGE_DRIFT_WINDOW must be at least 1")
# The embedder that gives world items their vectors when they are stored and a compile its query vector
# (issue 24): "wordllama" (the default, shipped with its wheel), "none" (relevance by words alone) or
# "package.module:factory". Recorded with every compile; vectors of an earlier embedder are kept.
NEXUM_EMBEDDER = os.environ.get("NEXUM_EMBEDDER", "wordllama")
NEXUM_DEMO_TOKEN = os.environ.get("NEXUM_DEMO_TOKEN", "nx_demo_local_development_only")
NEXUM_DEMO_OPERATOR_TOKEN = os.environ.get(
    "NEXUM_DEMO_OPERATOR_TOKEN", "nx_demo_operator_local_development_only"
)

# --- Context resolver (SPEC R3, R7) -------------------------------------------------------------------------
# Per-project HMAC-SHA256 keys for signed items, "project-slug=key,…" (a project id works as the name too).
# Kept out of the event log and the database on purpose: a key is a secret, the log is exported by the feed.
NEXUM_SIGNING_KEYS = dict(
    item.split("=", 1) for item in os.environ.get("NEXUM_SIGNING_KEYS", "").split(",") if "=" in item
)
# Default resolve budget (items and tokens); a resolve request may ask for less or more.
NEXUM_RESOLVE_BUDGET = {
    "max_items": _env_int("NEXUM_RESOLVE_MAX_ITEMS", 40),
    "max_tokens": _env_int("NEXUM_RESOLVE_MAX_TOKENS", 8000),
}
# Workers import the resolver's tasks (its app is a sub-app that autodiscovery does not reach).
CELERY_IMPORTS = ["context_app.resolution.tasks"]

# --- Verification gate: the command sandbox (SPEC V1, V8) -------------------------------------------------
# Each project's checks run in its own folder <workspace root>/<project slug>, and see no other project's.
# Executables must be on the operator's allowlist (bare names found on the scrubbed PATH, or absolute paths),
# comma-separated. Empty allowlist: no command check runs.
NEXUM_WORKSPACE_ROOT = Path(os.environ.get("NEXUM_WORKSPACE_ROOT", DATA_DIR / "workspace"))
# "bwrap": every command check runs inside bubblewrap (nexum/adapters/sandbox/bubblewrap.py); where bwrap is
# missing, checks fail with sandbox_unavailable. "none" runs them unsandboxed: for a development machine only,
# never implied.
NEXUM_SANDBOX = os.environ.get("NEXUM_SANDBOX", "bwrap").strip().lower()
# Extra host paths every check sees read-only (a toolchain outside /usr), comma-separated.
NEXUM_SANDBOX_RO_PATHS = [
    entry.strip() for entry in os.environ.get("NEXUM_SANDBOX_RO_PATHS", "").split(",") if entry.strip()
]
# A worker running as root holds each check's process limit in a pids cgroup created below this folder
# (empty: "nexum-checks" at the top of the pids hierarchy, found in /proc/self/mountinfo).
NEXUM_SANDBOX_CGROUP = os.environ.get("NEXUM_SANDBOX_CGROUP", "").strip() or None
# A worker running as root runs each sandbox as this unprivileged host user and group (no supplementary
# groups), so nothing a check leaves in its folder belongs to host root. Default 65534 (nobody, nogroup): it
# exists on every Linux system and owns no service's files; give checks a uid of their own where other
# services run as nobody. 0 unsets it: a root worker then refuses command checks (sandbox_unavailable).
NEXUM_SANDBOX_HOST_UID = _env_int("NEXUM_SANDBOX_HOST_UID", 65534) or None
NEXUM_SANDBOX_HOST_GID = _env_int("NEXUM_SANDBOX_HOST_GID", 65534) or None
# In development the default allows this interpreter, so the demo world's pytest check can run.
NEXUM_CHECK_EXECUTABLES = [
    entry.strip()
    for entry in os.environ.get("NEXUM_CHECK_EXECUTABLES", sys.executable if DEBUG else "").split(",")
    if entry.strip()
]
NEXUM_CHECK_ENV_ALLOWLIST = [
    name.strip()
    for name in os.environ.get("NEXUM_CHECK_ENV_ALLOWLIST", "PATH,HOME,LANG,LC_ALL,TZ").split(",")
    if name.strip()
]
NEXUM_CHECK_MAX_TIMEOUT_S = float(os.environ.get("NEXUM_CHECK_MAX_TIMEOUT_S", "3600"))
NEXUM_CHECK_MAX_OUTPUT_BYTES = _env_int("NEXUM_CHECK_MAX_OUTPUT_BYTES", 1024 * 1024)
NEXUM_CHECK_CPU_SECONDS = _env_int("NEXUM_CHECK_CPU_SECONDS", 300) or None
NEXUM_CHECK_ADDRESS_SPACE_BYTES = _env_int("NEXUM_CHECK_ADDRESS_SPACE_BYTES", 4 * 1024**3) or None
# Processes a check may have at once (a pids cgroup for a root worker, RLIMIT_NPROC otherwise); 0 unsets it.
NEXUM_CHECK_MAX_PROCESSES = _env_int("NEXUM_CHECK_MAX_PROCESSES", 256) or None
NEXUM_CHECK_MAX_FILE_SIZE_BYTES = _env_int("NEXUM_CHECK_MAX_FILE_SIZE_BYTES", 256 * 1024**2) or None
# The size of a check's private /tmp (a tmpfs, held in memory); 0 unsets it.
NEXUM_CHECK_TMP_BYTES = _env_int("NEXUM_CHECK_TMP_BYTES", 256 * 1024**2) or None
# Python callables that callable checks may name ("package.module:function"), imported only when named.
NEXUM_CHECK_CALLABLES = [
    entry.strip() for entry in os.environ.get("NEXUM_CHECK_CALLABLES", "").split(",") if entry.strip()
]

# --- Context sources: where they may read (issue 12) ------------------------------------------------------
# Read-only copies an operator publishes as repository content, one folder per project, <root>/<slug>: the
# agent cannot write there (its workspace is NEXUM_WORKSPACE_ROOT), so a source over one keeps its trust
# class, where a source over the workspace yields agent_reported items at most (SPEC R4a).
NEXUM_PUBLISHED_ROOT = Path(os.environ.get("NEXUM_PUBLISHED_ROOT", DATA_DIR / "published"))
# Folders that folder, docs and tickets_json sources may read inside, comma-separated. Default: the workspace
# root and the published root (where each project reads only its own folder, <root>/<slug>) and the
# repository's examples/. Never the data directory, the artifact store or the database file, whatever is
# listed.
NEXUM_SOURCE_ROOTS = [
    Path(entry.strip()) for entry in os.environ.get("NEXUM_SOURCE_ROOTS", "").split(",") if entry.strip()
] or [NEXUM_WORKSPACE_ROOT, NEXUM_PUBLISHED_ROOT, BASE_DIR / "examples"]
# Hosts http_json sources may fetch from: "host" (every port) or "host:port", comma-separated; empty: none.
# Loopback, private and link-local addresses are reached only when that address itself is listed.
NEXUM_SOURCE_HTTP_ALLOW = [
    entry.strip() for entry in os.environ.get("NEXUM_SOURCE_HTTP_ALLOW", "").split(",") if entry.strip()
]

# --- Work in flight: leases, the dispatcher, the workers' retries (see nexum/work) --------------------------
# A lease not renewed for NEXUM_LEASE_TTL_S is dead and may be taken over; a worker renews it every
# NEXUM_LEASE_HEARTBEAT_S while it runs the request.
NEXUM_LEASE_TTL_S = float(os.environ.get("NEXUM_LEASE_TTL_S", "30"))
NEXUM_LEASE_HEARTBEAT_S = float(os.environ.get("NEXUM_LEASE_HEARTBEAT_S", str(NEXUM_LEASE_TTL_S / 3)))
if not 0 < NEXUM_LEASE_HEARTBEAT_S < NEXUM_LEASE_TTL_S:
    raise RuntimeError("NEXUM_LEASE_HEARTBEAT_S must be positive and below NEXUM_LEASE_TTL_S")
# The dispatcher (manage.py nexum_dispatcher) passes every NEXUM_DISPATCH_INTERVAL_S and sends again a request
# pending for NEXUM_DISPATCH_AFTER_S that nobody holds a lease on; each further send of it waits twice as long
# as the previous one, up to NEXUM_DISPATCH_BACKOFF_MAX_S.
NEXUM_DISPATCH_INTERVAL_S = float(os.environ.get("NEXUM_DISPATCH_INTERVAL_S", "5"))
NEXUM_DISPATCH_AFTER_S = float(os.environ.get("NEXUM_DISPATCH_AFTER_S", "15"))
NEXUM_DISPATCH_BACKOFF_MAX_S = float(os.environ.get("NEXUM_DISPATCH_BACKOFF_MAX_S", "45"))
# Without a broker, the serving process runs requests left pending by a process that died
# (nexum/work/embedded.py); 0 turns that off.
NEXUM_EMBEDDED_DISPATCHER = _env_bool("NEXUM_EMBEDDED_DISPATCHER", True)
# At most this many of one project's completion requests, queued compiles, queued resolves (and webhook
# deliveries, below) are in flight at a time (sent to the workers and not yet answered); the others wait their
# turn and are sent as these finish, so one project's backlog never queues ahead of another project's
# requests. A cap at least a pool's processes lets one project alone use the whole pool.
NEXUM_COMPLETION_IN_FLIGHT_PER_PROJECT = _env_int("NEXUM_COMPLETION_IN_FLIGHT_PER_PROJECT", 8)
NEXUM_COMPILE_IN_FLIGHT_PER_PROJECT = _env_int("NEXUM_COMPILE_IN_FLIGHT_PER_PROJECT", 4)
NEXUM_RESOLVE_IN_FLIGHT_PER_PROJECT = _env_int("NEXUM_RESOLVE_IN_FLIGHT_PER_PROJECT", 4)
# Retention (context_app/compilation/retention.py): stored compiled contexts, bundles and check output older
# than this many days are pruned to their digests (a project's own policy, PUT /api/v1/project/retention,
# overrides each); unset: kept for ever. With a broker, the dispatcher's pass records a run for each project
# with a policy every NEXUM_RETENTION_INTERVAL_S; manage.py nexum_retention runs them now.
NEXUM_RETENTION_CONTEXT_DAYS = _env_int("NEXUM_RETENTION_CONTEXT_DAYS", 0) or None
NEXUM_RETENTION_BUNDLE_DAYS = _env_int("NEXUM_RETENTION_BUNDLE_DAYS", 0) or None
NEXUM_RETENTION_CHECK_OUTPUT_DAYS = _env_int("NEXUM_RETENTION_CHECK_OUTPUT_DAYS", 0) or None
for _days in (NEXUM_RETENTION_CONTEXT_DAYS, NEXUM_RETENTION_BUNDLE_DAYS, NEXUM_RETENTION_CHECK_OUTPUT_DAYS):
    if _days is not None and not 1 <= _days <= 36_500:
        raise RuntimeError("NEXUM_RETENTION_*_DAYS must be a number of days from 1 to 36500, or unset")
NEXUM_RETENTION_INTERVAL_S = _env_int("NEXUM_RETENTION_INTERVAL_S", 86_400)
if NEXUM_RETENTION_INTERVAL_S < 1:
    raise RuntimeError("NEXUM_RETENTION_INTERVAL_S must be at least 1")
NEXUM_RETENTION_IN_FLIGHT_PER_PROJECT = 1
# Webhooks (nexum_web/webhooks): a delivery is retried NEXUM_WEBHOOK_BACKOFF_S × 1, 2, 4 … s after a failed
# attempt (at most NEXUM_WEBHOOK_BACKOFF_MAX_S), and given up after NEXUM_WEBHOOK_MAX_ATTEMPTS attempts; an
# attempt waits NEXUM_WEBHOOK_TIMEOUT_S for the answer. Their URLs' hosts must be on NEXUM_SOURCE_HTTP_ALLOW.
NEXUM_WEBHOOK_MAX_ATTEMPTS = _env_int("NEXUM_WEBHOOK_MAX_ATTEMPTS", 10)
NEXUM_WEBHOOK_BACKOFF_S = float(os.environ.get("NEXUM_WEBHOOK_BACKOFF_S", "10"))
NEXUM_WEBHOOK_BACKOFF_MAX_S = float(os.environ.get("NEXUM_WEBHOOK_BACKOFF_MAX_S", "3600"))
NEXUM_WEBHOOK_TIMEOUT_S = float(os.environ.get("NEXUM_WEBHOOK_TIMEOUT_S", "10"))
# At most this many deliveries of one project are sent to the workers at a time (queued or being attempted);
# the dispatcher sends the others as these finish, so one project's backlog never queues ahead of another's.
NEXUM_WEBHOOK_IN_FLIGHT_PER_PROJECT = _env_int("NEXUM_WEBHOOK_IN_FLIGHT_PER_PROJECT", 4)
for _cap in ("COMPLETION", "COMPILE", "WEBHOOK"):
    if globals()[f"NEXUM_{_cap}_IN_FLIGHT_PER_PROJECT"] < 1:
        raise RuntimeError(f"NEXUM_{_cap}_IN_FLIGHT_PER_PROJECT must be at least 1")
# A task that meets a database error retries up to this many times, waiting 1, 2, 4 … s, at most the max:
# with the defaults the retries span about two minutes of outage, then the dispatcher takes over.
NEXUM_TASK_MAX_RETRIES = _env_int("NEXUM_TASK_MAX_RETRIES", 8)
NEXUM_TASK_RETRY_BACKOFF_MAX_S = _env_int("NEXUM_TASK_RETRY_BACKOFF_MAX_S", 30)
# Redis redelivers a message not acknowledged within the visibility timeout. Tasks acknowledge late, so it
# must outlast the longest check (NEXUM_CHECK_MAX_TIMEOUT_S) or a check still running would be delivered
# again (the lease would hold the copy off; this only avoids the noise). A dead worker's message does not wait
# for it: the dispatcher sends its request again once its lease has expired.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": _env_int("NEXUM_CELERY_VISIBILITY_TIMEOUT", int(NEXUM_CHECK_MAX_TIMEOUT_S) + 300),
    "socket_connect_timeout": 3,
}
# A request thread or the dispatcher gives up on a broker that is down within about a second: the request is
# committed already and the dispatcher sends it once the broker is back.
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.3,
    "interval_max": 0.5,
}
# A worker never gives up reconnecting to its broker, and a check running while the broker blips runs to its
# end: its decision is in the database, the unacknowledged message finds it decided.
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False

# --- Metrics: Prometheus' scrape at /metrics (see nexum/adapters/metrics.py, nexum_web/api/metrics.py) ------
# NEXUM_METRICS_TOKEN: the bearer token a Prometheus server scrapes with (an operator token works too).
# PROMETHEUS_MULTIPROC_DIR (prometheus_client's own, set by deploy/serve.sh): the folder where every process
# keeps its counts, so that a scrape sums them; an existing folder, or unset for one process's counts.
NEXUM_METRICS_TOKEN = os.environ.get("NEXUM_METRICS_TOKEN", "")
METRICS_TOKEN_MIN_CHARS = 24
if NEXUM_METRICS_TOKEN and not (
    len(NEXUM_METRICS_TOKEN) >= METRICS_TOKEN_MIN_CHARS
    and NEXUM_METRICS_TOKEN.isascii()
    and NEXUM_METRICS_TOKEN.isprintable()
    and " " not in NEXUM_METRICS_TOKEN
):
    raise ImproperlyConfigured(
        f"NEXUM_METRICS_TOKEN must be at least {METRICS_TOKEN_MIN_CHARS} printable ASCII characters without"
        " spaces (say, python -c 'import secrets; print(secrets.token_urlsafe(32))')"
    )
_metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
if _metrics_dir and not os.path.isdir(_metrics_dir):
    raise ImproperlyConfigured(
        f"PROMETHEUS_MULTIPROC_DIR is {_metrics_dir!r}, which is not a folder: create it"
        " (deploy/serve.sh does) or unset it"
    )

# --- Logs: JSON lines on stderr with the request id, debug on or off (see nexum/adapters/logs.py) -----------
NEXUM_LOG_LEVEL = os.environ.get("NEXUM_LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "nexum.adapters.logs.RequestIdFilter"}},
    "formatters": {"json": {"()": "nexum.adapters.logs.JsonFormatter"}},
    "handlers": {
        "stderr": {"class": "logging.StreamHandler", "filters": ["request_id"], "formatter": "json"},
    },
    "root": {"handlers": ["stderr"], "level": NEXUM_LOG_LEVEL},
    # Django's own records (a 500's traceback on django.request) go to the same handler, debug on or off.
    "loggers": {
        "django": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        # The MCP SDK's transport logs a session starting and ending at INFO for every stateless /mcp request.
        "mcp.server.streamable_http": {"level": "WARNING"},
        "mcp.server.streamable_http_manager": {"level": "WARNING"},
    },
}
