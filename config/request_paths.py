"""A request path with a control character (NUL, a newline, DEL, C1) names nothing here: every
name in our URLs is a Kubernetes or DNS name, which has none. Such a path is answered 404 before
any view runs; otherwise a view would look the name up, and PostgreSQL refuses even to compare
text holding NUL (a 500)."""

from __future__ import annotations

import re

from django.http import Http404

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


class ControlCharacterPathMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if CONTROL.search(request.path):
            raise Http404("no object has a name with control characters")
        return self.get_response(request)
