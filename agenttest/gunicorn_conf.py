"""gunicorn's settings for the Procfile's web process: `gunicorn agenttest.wsgi -c python:agenttest.gunicorn_conf`.

A chat turn and an extraction run the whole model loop inside their request, so a request may last as long as
AGENTTEST_REQUEST_TIMEOUT — the one setting for it, read from Django's settings so the app, this file and
`manage.py check` agree. Anything here can still be overridden with gunicorn's own flags or GUNICORN_CMD_ARGS;
the number of worker processes is gunicorn's WEB_CONCURRENCY.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agenttest.settings")

from django.conf import settings  # noqa: E402

# Past the request limit, so a request that uses all of it still gets its answer written and its worker is not
# killed mid-turn; gunicorn's own default (30 s) is shorter than one slow model call.
_MARGIN_SECONDS = 30

# A long turn holds a thread, not the whole process: the worker's other threads keep answering other requests, and
# gthread's timeout only fires when the worker itself stops responding, never because one request is slow.
worker_class = "gthread"
threads = 8
timeout = settings.AGENTTEST_REQUEST_TIMEOUT + _MARGIN_SECONDS
# A restart or deploy lets requests in flight finish instead of cutting off a turn that is running tools.
graceful_timeout = settings.AGENTTEST_REQUEST_TIMEOUT + _MARGIN_SECONDS
