"""The WSGI application: Django's handler, except for the agents' reports.

`/api/agent/v1/reports/` takes one request per node every 15 s (about 670 a second at 10,000
nodes), so it is served by a handler with only the middleware it needs, which answers a steady
report before entering it (config/lean_handler.py);
every other path, and any other spelling of that one, goes through the full chain.
"""

import os

from django.core.wsgi import get_wsgi_application

from config.startup import settings_or_raise

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
settings_or_raise()  # a misconfigured environment: its one line on stderr, then the server's own failed start
full_application = get_wsgi_application()  # sets Django up before the lean handler is built

from config.lean_handler import AgentReportsHandler  # noqa: E402  (needs the settings above)

AGENT_REPORTS_PATH = "/api/agent/v1/reports/"
agent_reports_application = AgentReportsHandler()


def application(request_environ, start_response):
    """The WSGI entry point (the request's CGI variables, not the process's environment)."""
    if request_environ.get("PATH_INFO") == AGENT_REPORTS_PATH:
        return agent_reports_application(request_environ, start_response)
    return full_application(request_environ, start_response)
