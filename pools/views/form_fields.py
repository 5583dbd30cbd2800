"""Number and time fields for the web forms that read digits as the API and the CLI read them.

Django's `IntegerField`, `DecimalField`, `FloatField` and `DateTimeField` parse with Python's
`int()`, `Decimal()`, `float()` and `strptime`, which also take other scripts' digits (`"٣"` is
3) and underscores (`"1_0"` is 10). The API and the CLI refuse both (`pools.core.numbers`), so
a pool's minimum of `٣` nodes was accepted in the browser and refused everywhere else. These
fields refuse such text with the field's own "enter a number" message before Django parses it.
"""

from __future__ import annotations

from django import forms


def _plain(field: forms.Field, value: object) -> object:
    """`value` when it is written in ASCII without underscores; else the field's invalid error."""
    if isinstance(value, str) and (not value.isascii() or "_" in value):
        raise forms.ValidationError(field.error_messages["invalid"], code="invalid")
    return value


class IntegerField(forms.IntegerField):
    def to_python(self, value):
        return super().to_python(_plain(self, value))


class DecimalField(forms.DecimalField):
    def to_python(self, value):
        return super().to_python(_plain(self, value))


class FloatField(forms.FloatField):
    def to_python(self, value):
        return super().to_python(_plain(self, value))


class DateTimeField(forms.DateTimeField):
    def to_python(self, value):
        return super().to_python(_plain(self, value))
