"""The one settings module: everything that differs between a demo and production is read from the environment —
and, for what a team's repository says (plugins, providers, MCP servers), from its agenttest.toml, which the
environment overrides."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from agenttest.env import env_bool, env_cache, env_float, env_int, env_list, env_str
from common.plugin_packages import plugin_packages
from common.project_file import ProjectFileError, project_read

BASE_DIR = Path(__file__).resolve().parent.parent

# The project file (agenttest.toml, common/project_file.py): AGENTTEST_CONFIG, else the nearest one from the working
# directory up to the repository's root. The variables below override what it says. A bad file is not raised here:
# the `agenttest` command refuses it before Django starts (exit 2), and the system check reports it (agenttest.E011).
try:
    _PROJECT = project_read()
    AGENTTEST_PROJECT_PROBLEMS: list[str] = []
except ProjectFileError as _error:
    _PROJECT = None
    AGENTTEST_PROJECT_PROBLEMS = _error.lines()

# A project's commands use the project's database: with a project file, its var_dir (var/ beside it by default).
# Without one, installed as a package BASE_DIR is site-packages, where the database and the broker file must never
# land, so they go to ./var in the working directory; from a checkout (the demo, an editable install used without a
# project file) to the checkout's var/.
_FROM_CHECKOUT = (BASE_DIR / "manage.py").is_file()
_DEFAULT_VAR_DIR = (
    _PROJECT.var_dir if _PROJECT else BASE_DIR / "var" if _FROM_CHECKOUT else Path.cwd() / "var"
)
VAR_DIR = Path(env_str("AGENTTEST_VAR_DIR", str(_DEFAULT_VAR_DIR))).absolute()
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("AGENTTEST_DEBUG", False)
SECRET_KEY = env_str("AGENTTEST_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "AGENTTEST_SECRET_KEY is required when AGENTTEST_DEBUG is off "
            "(set AGENTTEST_DEBUG=1 for a local demo, or give a long random secret key)."
        )
    SECRET_KEY = "django-insecure-agenttest-local-development-only"

# The order-support demo (agenttest_demo) is a plugin like any other: AGENTTEST_DEMO=1 names it among the plugins, and
# its package brings its app (demo_setup) and its models as any plugin package may (common/plugin_packages.py).
AGENTTEST_DEMO = env_bool("AGENTTEST_DEMO", False)

# Plugins (module paths) to import at start-up, besides the installed `agenttest.plugins` entry points.
AGENTTEST_PLUGINS = [
    *(["agenttest_demo.registration"] if AGENTTEST_DEMO else []),
    *env_list("AGENTTEST_PLUGINS", _PROJECT.plugins if _PROJECT else []),
]
_PLUGIN_PACKAGES = plugin_packages(AGENTTEST_PLUGINS, search=[str(_PROJECT.directory)] if _PROJECT else [])

ALLOWED_HOSTS = env_list("AGENTTEST_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("AGENTTEST_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # agenthost first: agenttest's ready() loads the plugins, which need the host's built-ins registered.
    "agenthost",
    "agenttest",
    *env_list("AGENTTEST_HARNESS_APPS", ["cases", "runs", "recording", "traces"]),
]
# A plugin package that is a Django app (the demo's, for demo_setup).
INSTALLED_APPS += [plugin.name for plugin in _PLUGIN_PACKAGES if plugin.is_app and plugin.name not in INSTALLED_APPS]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before anything serves a request: an ingest-only token gets 403 everywhere but POST /v1/traces.
    *(["traces.middleware.IngestTokenOnlyIngests"] if "traces" in INSTALLED_APPS else []),
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "agenttest.pages.NotFoundPageMiddleware",
]

ROOT_URLCONF = "agenttest.urls"
WSGI_APPLICATION = "agenttest.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The project's templates and static files live in the agenttest app, so they install with the package.
        # Overrides of templates another app ships (the admin's base_site.html) must be found before that app's:
        # agenttest comes after django.contrib.admin in INSTALLED_APPS, so they sit in a folder searched first.
        "DIRS": [BASE_DIR / "agenttest" / "templates" / "overrides"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "agenttest.pages.site_nav",
            ],
        },
    },
]
# Django's form renderer with its plainest widget templates written out in Python (agenttest/forms_renderer.py): the
# admin's case review page spent nearly half its time rendering them.
FORM_RENDERER = "agenttest.forms_renderer.FormRenderer"

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'agenttest.sqlite3'}"),
        conn_max_age=env_int("AGENTTEST_DB_CONN_MAX_AGE", 0, minimum=0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web requests and the worker write to one SQLite file; WAL plus a busy timeout keeps them from failing each other.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        # synchronous=NORMAL is WAL's recommended level: a power cut may lose the last commits, never corrupt.
        {
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
        }
    )
    # A file, not memory, so a worker process started by a test sees the same data; one per test process.
    DATABASES["default"].setdefault("TEST", {})["NAME"] = str(VAR_DIR / f"test-agenttest-{os.getpid()}.sqlite3")
if env_str("AGENTTEST_SQL_DATABASE_URL"):
    DATABASES["agent_sql"] = dj_database_url.parse(env_str("AGENTTEST_SQL_DATABASE_URL"))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Throttle counts live here, so every web process must see the same cache: N processes with their own memory would
# allow N times the rate. The default is a table in the database (created by `migrate`); Redis in production.
CACHES = {"default": env_cache("AGENTTEST_CACHE_URL", "db://")}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# Security: production defaults when DEBUG is off; each can be relaxed from the environment behind a proxy.
SECURE_SSL_REDIRECT = env_bool("AGENTTEST_SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = env_bool("AGENTTEST_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int("AGENTTEST_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("AGENTTEST_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("AGENTTEST_HSTS_PRELOAD", False)
SECURE_CONTENT_TYPE_NOSNIFF = True
if env_bool("AGENTTEST_BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

EMAIL_BACKEND = env_str(
    "AGENTTEST_EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend" if DEBUG else "django.core.mail.backends.smtp.EmailBackend",
)
# With DEBUG off the SMTP server must be named rather than guessed; checks.py refuses SMTP without one.
EMAIL_HOST = env_str("AGENTTEST_EMAIL_HOST", "localhost" if DEBUG else "")
EMAIL_PORT = env_int("AGENTTEST_EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("AGENTTEST_EMAIL_USER")
EMAIL_HOST_PASSWORD = env_str("AGENTTEST_EMAIL_PASSWORD")
EMAIL_USE_TLS = env_bool("AGENTTEST_EMAIL_USE_TLS", False)
# The directory the file-based backend writes each message to (checks.py refuses the backend without one).
EMAIL_FILE_PATH = env_str("AGENTTEST_EMAIL_FILE_PATH") or None
DEFAULT_FROM_EMAIL = env_str("AGENTTEST_DEFAULT_FROM_EMAIL", "agenttest@localhost")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "common.api.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "EXCEPTION_HANDLER": "common.api.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_RATES": {
        "run_trigger": env_str("AGENTTEST_THROTTLE_RUNS", "60/hour"),
        "recording": env_str("AGENTTEST_THROTTLE_RECORDING", "120/hour"),
        # OTLP exporters send a batch every few seconds per process (the Python SDK: every 5 s, 512 spans at most).
        "traces": env_str("AGENTTEST_THROTTLE_TRACES", "600/minute"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "agenttest API",
    "DESCRIPTION": "Regression tests for LLM agents: agents, conversations, suites, cases and runs.",
    "VERSION": "1.0.0",
    # The case document's schema comes from pydantic (JSON Schema 2020-12: `type: null` in anyOf), which OpenAPI 3.1
    # takes as it is and 3.0 does not.
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "COMPONENT_SPLIT_REQUEST": True,
    # Served by the app itself: agenttest must work offline, with no CDN.
    "ENUM_NAME_OVERRIDES": {
        # The case document's enums are cases/schema.py's (values, no labels): its pydantic models describe the API.
        "CaseTypeEnum": "cases.schema.CASE_TYPES",
        "AssertionTypeEnum": "cases.schema.ASSERTION_TYPES",
        "CaseSourceEnum": "cases.models.Case.Source",
        "RunStatusEnum": "runs.models.Run.Status",
        "RunModeEnum": "runs.models.Run.Mode",
        "ResultStatusEnum": "runs.models.CaseResult.Status",
        "MessageRoleEnum": "agenthost.models.Message.Role",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "agenttest.openapi.distinct_schema_titles",
    ],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Celery. The embedded default keeps messages in a SQLite file next to the database: no server to install.
# See docs/decisions/0001-embedded-broker.md for why this transport and not kombu's filesystem one.
BROKER_URL = env_str("AGENTTEST_BROKER_URL", f"sqla+sqlite:///{VAR_DIR / 'broker.sqlite3'}")
CELERY_BROKER_URL = BROKER_URL
CELERY_BROKER_CONNECTION_TIMEOUT = env_float("AGENTTEST_BROKER_TIMEOUT", 3.0)
# kombu's SQL transport hands every transport option to SQLAlchemy's create_engine: a SQLite file gets the time a
# write waits for the lock its workers' polling holds (SQLite's own 5 s turned a busy machine's publish into "the run
# queue is unavailable"), another database nothing. Redis gets socket timeouts so a dead server is an error, not a
# hang.
CELERY_BROKER_TRANSPORT_OPTIONS = (
    {"connect_args": {"timeout": env_float("AGENTTEST_BROKER_SQLITE_LOCK_TIMEOUT", 30.0)}}
    if BROKER_URL.startswith("sqla+sqlite")
    else {}
    if BROKER_URL.startswith("sqla+")
    else {
        "socket_connect_timeout": 3,
        "socket_timeout": 10,
    }
)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {"runs.tasks.*": {"queue": "runs"}}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

AGENTTEST_PROJECT_FILE = str(_PROJECT.path) if _PROJECT else ""
# Plugin modules and runtime entry points are importable from it (agenttest/plugin_loading.py).
AGENTTEST_PROJECT_DIR = str(_PROJECT.directory) if _PROJECT else ""
# `agenttest run`'s defaults ([run]), its DIR the project's directory unless the file names another.
AGENTTEST_RUN_DEFAULTS = {"directory": _PROJECT.directory, **_PROJECT.run} if _PROJECT else {}

# Model providers: a TOML file, else the project file's, else OpenAI when its key is set, after the models plugin
# packages bring (the demo's simulated ones when it is on).
AGENTTEST_PROVIDERS_FILE = env_str("AGENTTEST_PROVIDERS_FILE")
# MCP servers whose tools agents may declare: a TOML (or .json) file of [servers.<name>] tables, else the project
# file's; "" and none there = none.
AGENTTEST_MCP_FILE = env_str("AGENTTEST_MCP_FILE")
# The provider:model that splits a conversation into cases when none is chosen ("" = always ask).
AGENTTEST_EXTRACTION_MODEL = env_str("AGENTTEST_EXTRACTION_MODEL")
AGENTTEST_MAX_STEPS = env_int("AGENTTEST_MAX_STEPS", 10, minimum=1)
AGENTTEST_HTTP_ALLOWED_HOSTS = env_list("AGENTTEST_HTTP_ALLOWED_HOSTS")
AGENTTEST_HTTP_TIMEOUT = env_float("AGENTTEST_HTTP_TIMEOUT", 10.0)
AGENTTEST_SQL_DATABASE = env_str("AGENTTEST_SQL_DATABASE", "agent_sql" if "agent_sql" in DATABASES else "")
AGENTTEST_SQL_ROW_LIMIT = env_int("AGENTTEST_SQL_ROW_LIMIT", 100, minimum=1)
AGENTTEST_TWILIO_ACCOUNT_SID = env_str("AGENTTEST_TWILIO_ACCOUNT_SID")
AGENTTEST_TWILIO_AUTH_TOKEN = env_str("AGENTTEST_TWILIO_AUTH_TOKEN")
AGENTTEST_TWILIO_FROM = env_str("AGENTTEST_TWILIO_FROM")
AGENTTEST_TWILIO_API_BASE = env_str("AGENTTEST_TWILIO_API_BASE", "https://api.twilio.com")
AGENTTEST_REDACT_PATTERNS = env_list("AGENTTEST_REDACT_PATTERNS")
# More key names whose values are secrets (regular expressions a whole key matches), beyond agenthost.redaction's own.
AGENTTEST_REDACT_KEYS = env_list("AGENTTEST_REDACT_KEYS")
# The longest a web request (a chat turn, an extraction) may take: the web server's worker timeout, and how long a
# turn holds its conversation before another send may take it over.
AGENTTEST_REQUEST_TIMEOUT = env_int("AGENTTEST_REQUEST_TIMEOUT", 300, minimum=5)
# The longest the check of a runtime agent's entry point may take when the agent is saved: its module is imported in
# a child process (decision 0033), which is stopped past this.
AGENTTEST_ENTRY_CHECK_TIMEOUT = env_int("AGENTTEST_ENTRY_CHECK_TIMEOUT", 60, minimum=1)
# A run belongs to the executor holding its lease; the lease is renewed every third of this. Only a run whose lease
# expired (its executor died) is swept.
AGENTTEST_RUN_LEASE_SECONDS = env_int("AGENTTEST_RUN_LEASE_SECONDS", 60, minimum=3)
# The OTLP traces receiver (POST /v1/traces) and `agenttest traces import`: the largest body (and JSON Lines line)
# taken, counted before and after decompression; the most spans in one request; the longest text kept per attribute
# (longer values are cut, with a marker); how many days imported spans are kept (0: for ever).
AGENTTEST_TRACES_MAX_BODY_BYTES = env_int("AGENTTEST_TRACES_MAX_BODY_BYTES", 8 * 1024 * 1024, minimum=1024)
AGENTTEST_TRACES_MAX_SPANS = env_int("AGENTTEST_TRACES_MAX_SPANS", 10_000, minimum=1)
AGENTTEST_TRACES_MAX_VALUE_CHARS = env_int("AGENTTEST_TRACES_MAX_VALUE_CHARS", 256 * 1024, minimum=64)
# Attribute values (array items and key-value entries at every level), events and links one request may hold: what
# decoding costs is counted before it is paid (an 8 KB gzip body can hold millions of empty values).
AGENTTEST_TRACES_MAX_VALUES = env_int("AGENTTEST_TRACES_MAX_VALUES", 200_000, minimum=100)
AGENTTEST_TRACES_RETENTION_DAYS = env_int("AGENTTEST_TRACES_RETENTION_DAYS", 30, minimum=0)
# How many conversations one OTLP request writes or updates itself, and how many more it queues for a worker (on the
# runs queue); any beyond both wait for their next span, or `traces import`.
AGENTTEST_TRACES_CONVERSATIONS_PER_REQUEST = env_int("AGENTTEST_TRACES_CONVERSATIONS_PER_REQUEST", 20, minimum=0)
AGENTTEST_TRACES_CONVERSATIONS_QUEUED_PER_REQUEST = env_int(
    "AGENTTEST_TRACES_CONVERSATIONS_QUEUED_PER_REQUEST", 1000, minimum=0
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact": {"()": "agenthost.redaction.RedactingLogFilter"}},
    "formatters": {
        "django.server": {"()": "django.utils.log.ServerFormatter", "format": "[{server_time}] {message}", "style": "{"}
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "filters": ["redact"]},
        "django.server": {"class": "logging.StreamHandler", "filters": ["redact"], "formatter": "django.server"},
    },
    "root": {"handlers": ["console"], "level": env_str("AGENTTEST_LOG_LEVEL", "INFO")},
    # The openai SDK sends through httpx2; one INFO line per model request is noise. So is the MCP SDK's session
    # chatter ("Received session ID", "GET stream disconnected, reconnecting…") in `apply`/`run` output.
    "loggers": {"httpx": {"level": "WARNING"}, "httpx2": {"level": "WARNING"}, "openai": {"level": "WARNING"},
                "mcp": {"level": "WARNING"},
                # Django's own configuration gives `django` a console handler of its own (with DEBUG on) and lets it
                # propagate to the root's: every `django.*` line ("Not Found: …") was printed twice. Its lines go
                # through the root's handler only, redacted like every other. Naming `django` resets its children,
                # so runserver's request lines (`django.server`) are declared again as Django declares them.
                "django": {"handlers": []},
                "django.server": {"handlers": ["django.server"], "level": "INFO", "propagate": False}},
}

from common.provider_config import default_providers, load_providers  # noqa: E402  (a pure module, safe here)

# What agenttest configures when no file names providers: the models plugin packages bring, OpenAI with its key.
AGENTTEST_DEFAULT_PROVIDERS = {
    **{
        name: spec
        for package in _PLUGIN_PACKAGES if package.providers_file
        for name, spec in load_providers(str(package.providers_file)).items()
    },
    **default_providers(),
}
if AGENTTEST_PROVIDERS_FILE:
    AGENTTEST_PROVIDERS = load_providers(AGENTTEST_PROVIDERS_FILE)
elif _PROJECT and _PROJECT.providers is not None:
    AGENTTEST_PROVIDERS = _PROJECT.providers
else:
    AGENTTEST_PROVIDERS = AGENTTEST_DEFAULT_PROVIDERS
# A kind's file options (the scripted kind's `script`, …) are relative to the directory of the file that set them.
AGENTTEST_PROVIDERS_DIR = (
    os.path.dirname(os.path.abspath(AGENTTEST_PROVIDERS_FILE)) if AGENTTEST_PROVIDERS_FILE
    else str(_PROJECT.providers_file.parent) if _PROJECT and _PROJECT.providers_file else ""
)

from common.mcp_config import load_mcp_servers  # noqa: E402  (pure, like the providers' file)

AGENTTEST_MCP_SERVERS = (
    load_mcp_servers(AGENTTEST_MCP_FILE) if AGENTTEST_MCP_FILE
    else (_PROJECT.mcp_servers or {}) if _PROJECT else {}
)
