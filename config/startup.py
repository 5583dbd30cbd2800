"""The settings, loaded before a process does anything else, so that a misconfigured environment
is one readable line instead of Django's traceback of wherever the settings were first read.

config/env.py and config/settings.py refuse a value that cannot work with ImproperlyConfigured
and a message naming the variable; Django would render it under some forty lines of its own
frames (the first command that touched a setting). Here:

- Commands (manage.py: every management command, `qcluster` and `demo` included): the line
  `error: <why>` on stderr and exit code 2. Nothing ran, as with a usage mistake (click and
  argparse exit 2 there too); a command that ran and failed exits 1 (CommandError, the CLI).
- Servers (config/wsgi.py, config/asgi.py): the same line on stderr, then the exception raised
  again without the settings' frames, so that the server fails its start as it does for any
  application that does not import (granian stops, gunicorn halts). A SystemExit there would be
  one worker that exited, which a server may simply start again, and again.

Only ImproperlyConfigured raised while loading the settings is caught: any other exception is a
bug and keeps its traceback, and so does an ImproperlyConfigured raised later by a command.
"""

from __future__ import annotations

import sys

from django.core.exceptions import ImproperlyConfigured

EXIT_MISCONFIGURED = 2


def _settings_load() -> None:
    from django.conf import settings

    settings.INSTALLED_APPS  # noqa: B018 - importing the settings module runs every check in it


def misconfigured_line(exc: ImproperlyConfigured) -> str:
    """`error: <message>` on one line, whatever the message holds."""
    return "error: " + " ".join(str(exc).splitlines())


def settings_or_exit() -> None:
    """Load the settings, or say why not in one line on stderr and exit 2 (commands)."""
    try:
        _settings_load()
    except ImproperlyConfigured as exc:
        sys.stderr.write(misconfigured_line(exc) + "\n")
        raise SystemExit(EXIT_MISCONFIGURED) from None


def settings_or_raise() -> None:
    """Load the settings, or say why not in one line on stderr and raise again (servers)."""
    try:
        _settings_load()
    except ImproperlyConfigured as exc:
        sys.stderr.write(misconfigured_line(exc) + "\n")
        sys.stderr.flush()
        raise ImproperlyConfigured(str(exc)) from None
