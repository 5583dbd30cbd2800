"""The error types every front door maps the same way (design §6).

`ValidationError` carries field paths (`spec.nodeCount.min`) so that the API can answer
`{"errors": [{"field": ..., "message": ...}]}`, the form can show the message beside the field,
and the CLI can print one readable line. It never imports Django, so the pure core can raise it.
"""

from __future__ import annotations

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


def free_text(value: object, *, field: str, max_length: int, required: str = "") -> str:
    """A person's free text (a reject reason, a note), stripped and checked the same way by
    every service: a string, present when `required` (the message if not), at most
    `max_length` characters, no NUL (PostgreSQL cannot store it)."""
    if not isinstance(value, str):
        raise ValidationError("must be a string", field=field)
    value = value.strip()
    if required and not value:
        raise ValidationError(required, field=field)
    if len(value) > max_length:
        raise ValidationError(f"at most {max_length} characters", field=field)
    if "\x00" in value:
        raise ValidationError("null characters are not allowed", field=field)
    return value


class ConflictError(Exception):
    """The request is valid but the object's state forbids it: HTTP 409."""


class QuotaExceeded(ValidationError):
    """A quota refusal, naming region, model, requested, in use and limit (seed T1)."""
