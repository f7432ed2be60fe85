import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agenttest.settings")
application = get_wsgi_application()

from agenthost.runtimes.entry import keep_team_code_out  # noqa: E402 — needs the apps loaded

# The web process: the team's code runs in child processes, never here (decision 0033).
keep_team_code_out()
