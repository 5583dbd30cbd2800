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


class ConflictError(Exception):
    """The request is valid but the object's state forbids it: HTTP 409."""


class QuotaExceeded(ValidationError):
    """A quota refusal, naming region, model, requested, in use and limit (seed T1)."""
