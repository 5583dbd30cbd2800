"""A WSGI handler with its own short middleware chain, for the one endpoint that is called
hundreds of times a second by programs: the node agents' reports (`/api/agent/v1/reports/`,
every node every 15 s; issue 23).

Django's handler runs every request through all of `settings.MIDDLEWARE`: sessions, CSRF,
authentication, messages, htmx, django-axes, the audit actor, the Content-Security-Policy and
clickjacking headers, whitenoise. An agent's report uses none of them: it carries no cookie,
is authenticated by its own bearer credential in the view, renders no page and is never
framed. Those layers cost about a third of a report's instructions in Python
(docs/benchmarks.md), so `config.wsgi` sends this path to a `LeanHandler` whose chain keeps
only what the endpoint's answers depend on (`AGENT_REPORT_MIDDLEWARE`):

- SecurityMiddleware: the HTTPS redirect when `SECURE_SSL_REDIRECT` is on, and its headers;
- ApiErrorsMiddleware: the 413 for a body declared over the limit before anything reads it,
  and the API's error shape for any error answer;
- CommonMiddleware: the `ALLOWED_HOSTS` check (a bad Host is a 400 here as elsewhere) and
  the Content-Length header of the answer.

Everything else is Django's own handler: the request_started and request_finished signals
(so database connections are opened, checked and closed as for every other request), URL
resolution, the view, `convert_exception_to_response` around each layer and the 400/403/404/500
handlers of the root URLconf. tests/monitoring/test_ingest_fast_path.py holds both paths to the
same answers.
"""

from __future__ import annotations

from django.core.exceptions import MiddlewareNotUsed
from django.core.handlers.exception import convert_exception_to_response, response_for_exception
from django.core.handlers.wsgi import WSGIHandler
from django.middleware.common import CommonMiddleware
from django.middleware.security import SecurityMiddleware
from django.utils.module_loading import import_string

AGENT_REPORT_MIDDLEWARE = (
    "django.middleware.security.SecurityMiddleware",
    "pools.api.errors.ApiErrorsMiddleware",
    "django.middleware.common.CommonMiddleware",
)


class LeanHandler(WSGIHandler):
    """Django's WSGI handler over `middleware` instead of `settings.MIDDLEWARE` (sync only:
    it serves WSGI; the listed classes must keep `settings.MIDDLEWARE`'s relative order)."""

    def __init__(self, middleware: tuple[str, ...]):
        self.middleware = middleware
        super().__init__()

    def load_middleware(self, is_async: bool = False) -> None:
        """BaseHandler.load_middleware's synchronous case over `self.middleware`."""
        if is_async:
            raise RuntimeError("LeanHandler serves WSGI only")
        self._view_middleware, self._template_response_middleware, self._exception_middleware = [], [], []
        handler = convert_exception_to_response(self._get_response)
        for path in reversed(self.middleware):
            try:
                instance = import_string(path)(handler)
            except MiddlewareNotUsed:
                continue
            if hasattr(instance, "process_view"):
                self._view_middleware.insert(0, instance.process_view)
            if hasattr(instance, "process_template_response"):
                self._template_response_middleware.append(instance.process_template_response)
            if hasattr(instance, "process_exception"):
                self._exception_middleware.append(instance.process_exception)
            handler = convert_exception_to_response(instance)
        self._middleware_chain = handler


class AgentReportsHandler(LeanHandler):
    """The agents' reports handler: a steady report is answered before the middleware chain,
    URL resolution and the view class are entered, by the view's own answer
    (`monitoring.api.views.reports_answered_fast`) with the chain's request and response
    phases applied around it; anything that function does not answer goes down the chain.

    Those generic layers were a ninth of a steady report's instructions in the web process
    (1.857 -> 1.645 M on PostgreSQL, docs/benchmarks.md), for nothing a steady report uses.
    Django's own `WSGIHandler.__call__` and `get_response` still run (the request signals, the
    WSGIRequest, the URLconf, the logging of error answers). What the chain would do is kept:

    - SecurityMiddleware's request phase (the HTTPS redirect) and its headers;
    - CommonMiddleware's request phase (ALLOWED_HOSTS, DISALLOWED_USER_AGENTS, PREPEND_WWW) and
      its Content-Length;
    - ApiErrorsMiddleware: its 413 cannot apply (the fast answer takes bodies within the limit
      only) and every answer given here is in the API's error shape already;
    - an exception raised while answering becomes the answer Django's handler gives it
      (`response_for_exception`: the API's 500, logged).

    Where a request phase would answer or raise, the chain runs instead and answers as always.
    tests/monitoring/test_ingest_fast_path.py holds it to the full chain's answers.
    """

    def __init__(self):
        super().__init__(AGENT_REPORT_MIDDLEWARE)

    def load_middleware(self, is_async: bool = False) -> None:
        from monitoring.api.views import reports_answered_fast  # needs the apps loaded

        super().load_middleware(is_async)
        chain = self._middleware_chain
        security, common = SecurityMiddleware(chain), CommonMiddleware(chain)

        def answered(request):
            try:
                if security.process_request(request) is not None or common.process_request(request) is not None:
                    return None
            except Exception:  # a bad Host, a refused user agent: the chain answers it
                return None
            try:
                response = reports_answered_fast(request)
            except Exception as exc:  # answered as convert_exception_to_response would
                response = response_for_exception(request, exc)
            if response is None:
                return None
            return security.process_response(request, common.process_response(request, response))

        self._middleware_chain = lambda request: answered(request) or chain(request)
