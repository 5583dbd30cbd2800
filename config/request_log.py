"""Logging filters that keep the web server's log to one line per meaningful thing.

The demo's own agents report several times a second and every page fetches static files; their
successful requests would drown everything else in runserver's access log (failures still show).
And Django logs a PermissionDenied (403) with its traceback: expected refusals are one line.
"""

from __future__ import annotations

import logging


class QuietPaths(logging.Filter):
    """Drops access-log records (the `django.server` logger) of successful requests whose path
    starts with one of `prefixes`."""

    def __init__(self, prefixes: list[str] | tuple[str, ...] = ()):
        super().__init__()
        self.prefixes = tuple(prefixes)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.prefixes or getattr(record, "status_code", 500) >= 400:
            return True
        return not request_path(record).startswith(self.prefixes)


def request_path(record: logging.LogRecord) -> str:
    """The path of runserver's request line ("GET /path?q HTTP/1.1"), the first argument of its
    access-log record; empty for any other record."""
    args = record.args if isinstance(record.args, tuple) else ()
    parts = str(args[0]).split() if args else []
    return parts[1] if len(parts) >= 2 else ""


class OneLineClientErrors(logging.Filter):
    """Keeps a 4xx record of the `django.request` logger to its message: a refusal is the
    product working, not a bug, so no traceback (5xx keep theirs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", 500) < 500:
            record.exc_info = None
            record.exc_text = None
        return True
