"""`GET /healthz`: the probe of a load balancer or of Kubernetes (liveness and readiness).

In the spirit of the Kubernetes API server's /livez and /readyz: plain, fast, no
authentication. 200 `{"status": "ok"}` when the database answers `SELECT 1`; otherwise 503
with a short reason, never a 500, so the balancer takes the host out until the database is back.
The error itself goes to the log (`ebcloud.monitoring`), not to the anonymous caller.

Cheap: one round trip, no session, no user, no template. Never cached (`Cache-Control:
no-store`). `SECURE_REDIRECT_EXEMPT` answers it over plain HTTP, where every other path is
redirected to https, so a probe sent straight to the web server works.
"""

from __future__ import annotations

import logging

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

log = logging.getLogger("ebcloud.monitoring")


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as error:  # any failure to reach the database is "not ready", never a 500
        log.warning("/healthz: the database did not answer: %s: %s", type(error).__name__, error)
        return JsonResponse({"status": "unavailable", "reason": "the database did not answer"}, status=503)
    return JsonResponse({"status": "ok"})
