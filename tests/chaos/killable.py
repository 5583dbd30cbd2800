"""A worker that stops on cue, to be `kill -9`ed there: `python -m tests.chaos.killable ARGS`.

ARGS are `manage.py`'s (`reconcile --once`, `repair --once`, `meter --once`) or
`task DOTTED.PATH` for a django-q2 task body (`task billing.tasks.meter_pending`, the hourly
metering and budget task). The process is that command, unchanged, except for what the
environment asks (the product code has no test hooks; the chaos lives here):

- `CHAOS_KILL` (JSON): `{"target": "module:Qual.name", "when": "before"|"after", "nth": 1,
  "match": {kwarg: value}}`. The target function is wrapped; on its `nth` call whose keyword
  arguments match, before or after the real call, the worker writes `CHAOS_ARRIVED` (a file
  path) and waits there for the test to `kill -9` it. "after" a call that commits on its own
  is a kill after commit and before the follow-up write; "after" a write made inside an open
  `transaction.atomic()` is a kill before commit. A worker nobody kills dies by SIGKILL after
  `CHAOS_WAIT_S` seconds anyway, so no orphan outlives a broken test.
- `CHAOS_STEP_SECONDS`: every step of the simulated cloud's provisioning takes this long
  (0: a node goes from Ordering to Ready in one pass; the tests need passes, not minutes).
- `CHAOS_NOW` (ISO 8601): the worker's clock (`django.utils.timezone.now`), fixed, for
  commands that read the clock rather than take `--now` (metering, budgets).
- `CHAOS_GO` (a file path): start warm: set Django up, then wait for that file before running
  the command (a process start costs more than most passes; the test overlaps them).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import signal
import sys
import time
from datetime import datetime


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    _clock_set(os.environ.get("CHAOS_NOW", ""))
    _steps_set(os.environ.get("CHAOS_STEP_SECONDS", ""))
    if os.environ.get("CHAOS_KILL"):
        _kill_install(json.loads(os.environ["CHAOS_KILL"]))
    if os.environ.get("CHAOS_GO") and not _wait_for(os.environ["CHAOS_GO"]):
        print("chaos: never told to go", file=sys.stderr)
        return 3
    if argv[:1] == ["task"]:
        module, _, name = argv[1].rpartition(".")
        print(f"task {argv[1]}: {getattr(importlib.import_module(module), name)()}", flush=True)
        return 0
    from django.core.management import call_command

    call_command(*argv)
    return 0


def _wait_for(path: str) -> bool:
    deadline = time.monotonic() + float(os.environ.get("CHAOS_WAIT_S", "60"))
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _clock_set(value: str) -> None:
    if not value:
        return
    from django.utils import timezone

    moment = datetime.fromisoformat(value)
    timezone.now = lambda: moment


def _steps_set(value: str) -> None:
    if value == "":
        return
    from django.conf import settings

    settings.EBCLOUD_SIM_STEP_SECONDS = dict.fromkeys(settings.SIM_STEP_SECONDS_REALISTIC, int(value))


def _kill_install(spec: dict) -> None:
    module_name, _, qualname = spec["target"].partition(":")
    owner = importlib.import_module(module_name)
    *path, attr = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    real = getattr(owner, attr)
    when, nth, match = spec.get("when", "before"), int(spec.get("nth", 1)), spec.get("match", {})
    calls = 0

    @functools.wraps(real)
    def wrapper(*args, **kwargs):
        nonlocal calls
        if any(kwargs.get(key) != value for key, value in match.items()):
            return real(*args, **kwargs)
        calls += 1
        if calls == nth and when == "before":
            _stop_here(f"{spec['target']} before call {nth}")
        result = real(*args, **kwargs)
        if calls == nth and when == "after":
            _stop_here(f"{spec['target']} after call {nth}")
        return result

    setattr(owner, attr, wrapper)


def _stop_here(where: str) -> None:
    """Tell the test where we are, then wait for its `kill -9` (or deliver it ourselves)."""
    arrived = os.environ.get("CHAOS_ARRIVED")
    if arrived:
        with open(arrived + ".tmp", "w") as fh:
            fh.write(where)
        os.replace(arrived + ".tmp", arrived)
    print(f"chaos: stopped at {where}, waiting for kill -9", file=sys.stderr, flush=True)
    deadline = time.monotonic() + float(os.environ.get("CHAOS_WAIT_S", "60"))
    while time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
