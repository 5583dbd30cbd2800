"""The error types every front door maps the same way (design §6).

`ValidationError` carries field paths (`spec.nodeCount.min`) so that the API can answer
`{"errors": [{"field": ..., "message": ...}]}`, the form can show the message beside the field,
and the CLI can print one readable line. It never imports Django, so the pure core can raise it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class ValidationError(Exception):
    """Bad input: HTTP 400. Holds every problem found, each with its field path."""

    def __init__(self, errors: list[FieldError] | FieldError | str, field: str = ""):
        if isinstance(errors, str):
            errors = [FieldError(field, errors)]
        elif isinstance(errors, FieldError):
            errors = [errors]
        self.errors: list[FieldError] = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1
_CONTROL_NAMES = {"\n": "newline", "\t": "tab"}


def control_characters(value: str, *, allowed: str = "") -> str:
    """What is wrong with the control characters (C0, DEL, C1) in `value`, "" when there are
    none besides `allowed` (newline and tab, where a text may span lines). Such characters
    steer terminals (`\\x1b]0;...\\x07` retitles one) and PostgreSQL cannot store NUL."""
    if _CONTROL.search(value) is None:  # the common case, in C
        return ""
    for match in _CONTROL.finditer(value):
        if match.group() not in allowed:
            besides = " and ".join(_CONTROL_NAMES.get(c, ascii(c)) for c in allowed)
            return (f"control characters{' other than ' + besides if besides else ''} are not allowed "
                    f"(found {ascii(match.group())[1:-1]} at position {match.start()})")
    return ""


def free_text(value: object, *, field: str, max_length: int, required: str = "") -> str:
    """A person's free text (a reject reason, a note), stripped and checked the same way by
    every service: a string, present when `required` (the message if not), at most
    `max_length` characters, no control characters but newline and tab (NUL cannot be stored
    in PostgreSQL; escape sequences would steer the terminal of whoever reads it in the CLI)."""
    if not isinstance(value, str):
        raise ValidationError("must be a string", field=field)
    value = value.strip()
    if required and not value:
        raise ValidationError(required, field=field)
    if len(value) > max_length:
        raise ValidationError(f"at most {max_length} characters", field=field)
    if problem := control_characters(value, allowed="\n\t"):
        raise ValidationError(problem, field=field)
    return value


def repeats(items: list) -> list[tuple[int, object]]:
    """(index, item) of each entry a list gives again after an earlier one; in one pass, as a
    64 KiB spec holds tens of thousands of entries (the prefix scanned per entry took seconds)."""
    seen: set = set()
    found = []
    for i, item in enumerate(items):
        if item in seen:
            found.append((i, item))
        seen.add(item)
    return found


def listed_twice(item: object) -> str:
    """The one wording for an entry of a list that must hold each once (a zone, a team, a budget
    threshold), so that the API, the forms and the CLI say it alike."""
    return f"{item} is listed twice"


# The spellings a boolean query parameter takes (`?detail=1`, `?namespace=no`, `?plan=true`).
FLAG_TRUE = ("1", "true", "yes")
FLAG_FALSE = ("0", "false", "no")


def query_flag(params, name: str, *, default: bool = False) -> bool:
    """A boolean query parameter; absent or empty is `default`. Any other spelling than
    FLAG_TRUE's or FLAG_FALSE's is a ValidationError naming it: read as false (or true) in
    silence, `?detail=maybe` answered a different export than the one asked for."""
    value = params.get(name) or ""
    if not value:
        return default
    if value in FLAG_TRUE:
        return True
    if value in FLAG_FALSE:
        return False
    choices = ", ".join(FLAG_TRUE + FLAG_FALSE)
    raise ValidationError(f"must be one of {choices}", field=name)


class ConflictError(Exception):
    """The request is valid but the object's state forbids it: HTTP 409."""


class StaleVersion(ConflictError):
    """A replace made from a version of the object older than the stored one (optimistic
    concurrency, as the Kubernetes API server's 409 "the object has been modified")."""

    def __init__(self, what: str, read: int, current: int):
        self.read, self.current = read, current
        super().__init__(
            f"{what} has changed since it was read (resourceVersion {read}, now {current}); "
            "get it again, make your change on that and send it again"
        )


class Unavailable(Exception):
    """What the answer needs cannot be reached now (a real cluster's API server): HTTP 503."""


class QuotaExceeded(ValidationError):
    """A quota refusal, naming region, model, requested, in use and limit (seed T1)."""
