"""Strict parsers for settings read from environment variables.

Every setting of the product comes from the environment (twelve-factor); a value that does not
parse stops the process at start with the variable's name, instead of misbehaving later.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name} must be at most {maximum}, got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_float(name: str, default: float, *, minimum: float | None = None, maximum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from exc
    if value != value or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ImproperlyConfigured(f"{name} must be between {minimum} and {maximum}, got {raw!r}")
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...] | list[str]) -> str:
    """One of `choices`, exactly as written there (a typo stops the process at start, not every
    controller later)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return value


# The names `logging` knows (`logging.getLevelNamesMapping()`, Python 3.11), fixed here so the
# message lists them in a stable order.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def env_log_level(name: str, default: str) -> str:
    """A logging level name in any case (`info` is `INFO`); an unknown one stops the process."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().upper()
    if value == "WARN":
        value = "WARNING"
    if value not in LOG_LEVELS:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(LOG_LEVELS)} (any case), got {raw!r}")
    return value
