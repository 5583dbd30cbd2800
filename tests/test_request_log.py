"""The web server's log keeps one line per meaningful thing (config/request_log.py): no access
log for the demo agents' and static files' successful requests, and a 403 without traceback."""

from __future__ import annotations

import io
import logging

from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseForbidden
from django.test import RequestFactory
from django.utils.log import log_response

from config.request_log import OneLineClientErrors, QuietPaths


def _access_record(request_line: str, status: int) -> logging.LogRecord:
    """What runserver's WSGIRequestHandler.log_message logs for one request."""
    return logging.LogRecord("django.server", logging.INFO, __file__, 0, '"%s" %s %s',
                             (request_line, str(status), "42"), None)


def _with_status(record: logging.LogRecord, status: int) -> logging.LogRecord:
    record.status_code = status
    return record


def test_successful_agent_and_static_requests_are_not_logged_unless_asked():
    quiet = QuietPaths(["/api/agent/", "/static/"])
    line = lambda request, status: quiet.filter(_with_status(_access_record(request, status), status))  # noqa: E731
    assert not line("POST /api/agent/v1/simulated-faults/ HTTP/1.1", 200)
    assert not line("POST /api/agent/v1/reports/ HTTP/1.1", 202)
    assert not line("GET /static/css/app.css HTTP/1.1", 304)
    assert line("POST /api/agent/v1/reports/ HTTP/1.1", 401)  # failures stay
    assert line("GET /pools/ HTTP/1.1", 200)
    assert line("GET /api/v1/nodepools/ HTTP/1.1", 200)
    assert QuietPaths([]).filter(_with_status(_access_record("POST /api/agent/v1/reports/ HTTP/1.1", 200), 200))


def test_the_demo_settings_quiet_the_agents_and_static_files(settings):
    configured = settings.LOGGING["filters"]["quiet_paths"]
    assert settings.EBCLOUD_LOG_DEMO_REQUESTS is False
    assert configured["prefixes"] == ["/api/agent/", settings.STATIC_URL]


def _logged(response, exception=None) -> str:
    """What Django's own request logging prints, through the configured `django.request` logger."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        request = RequestFactory().get("/fragmentation/")
        try:
            raise exception or RuntimeError("no exception")
        except Exception as exc:  # noqa: BLE001 - raised to carry a traceback, as in a view
            log_response("Forbidden (Permission denied): %s", request.path, response=response, request=request,
                         exception=exc)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def test_a_403_is_one_line_without_traceback():
    assert OneLineClientErrors in {type(f) for f in logging.getLogger("django.request").filters}
    output = _logged(HttpResponseForbidden(), PermissionDenied("not your team"))
    assert output.strip() == "Forbidden (Permission denied): /fragmentation/"


def test_a_500_keeps_its_traceback():
    output = _logged(HttpResponse(status=500), RuntimeError("boom"))
    assert "Traceback" in output and "RuntimeError: boom" in output
