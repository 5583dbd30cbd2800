"""JSON text to plain values as the API reads it: each object's keys unique, every string text.

- `json.loads` keeps the last of two equal keys: `{"metadata": {"name": "a", "name": "b"}}`
  created pool `b` without a word, and which of the two a reader of the file believes depends
  on where they look. Kubernetes' strict field validation refuses such a body (`json: duplicate
  field "name"`); so does this, with the path of the key (`metadata.name`) as the field of a
  400. YAML's equivalent is in pools/core/yaml_loading.py.
- `"\\ud800"` (half of a surrogate pair, alone) is a string that is no Unicode text: no database
  stores it and no encoder writes it (a 500 where a reject reason held one). Refused with its
  path; only a body that holds such an escape is walked.

Pure: no Django.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from pools.core.errors import ValidationError
from pools.core.nesting import format_path

DUPLICATE_KEY = "duplicate key: a key may appear only once in an object"
LONE_SURROGATE = "not Unicode text: a \\uD800-\\uDFFF escape that is not half of a surrogate pair"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # may be a pair, or an escaped backslash: then checked


class _Duplicated(dict):
    """An object in which `key` appeared more than once (only refused bodies build one)."""

    __slots__ = ("key",)


def loads_unique_keys(text: str, *, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """`json.loads(text)`, but an object with a key twice is a `ValidationError` naming the key's
    path; ValueError for text that is not JSON, as `json.loads`."""
    duplicated: list[_Duplicated] = []

    def pairs(items: list[tuple[str, Any]]) -> dict:
        value = dict(items)
        if len(value) == len(items):
            return value
        seen: set[str] = set()
        marked = _Duplicated(value)
        marked.key = next(key for key, _ in items if key in seen or seen.add(key))
        duplicated.append(marked)
        return marked

    document = json.loads(text, parse_constant=parse_constant, object_pairs_hook=pairs)
    if duplicated:
        raise ValidationError(DUPLICATE_KEY, field=_first_duplicate_path(document))
    refuse_lone_surrogates(text, document)
    return document


def refuse_lone_surrogates(text: str, document: Any) -> None:
    """A `ValidationError` naming the first string (or key) of `document`, parsed from the JSON
    `text`, that holds a lone surrogate; nothing when `text` has no such escape."""
    if _SURROGATE_ESCAPE.search(text) is None:
        return
    stack: list[tuple[Any, list[str | int]]] = [(document, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if not _encodable(value):
                raise ValidationError(LONE_SURROGATE, field=_shown(format_path(path)))
        elif isinstance(value, dict):
            for key, child in reversed(value.items()):
                if not _encodable(key):
                    raise ValidationError(LONE_SURROGATE, field=_shown(format_path([*path, key])))
                stack.append((child, [*path, key]))
        elif isinstance(value, list):
            stack.extend((child, [*path, index]) for index, child in reversed(list(enumerate(value))))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(path: str) -> str:
    """The path as text an answer can carry (its lone surrogates written as `\\ud800`)."""
    return path.encode("utf-8", "backslashreplace").decode("utf-8")


def _first_duplicate_path(document: Any) -> str:
    """The path of the first duplicated key in document order (walked without recursion)."""
    stack: list[tuple[Any, list[str | int]]] = [(document, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, _Duplicated):
            return format_path([*path, value.key])
        if isinstance(value, dict):
            stack.extend((child, [*path, key]) for key, child in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((child, [*path, index]) for index, child in reversed(list(enumerate(value))))
    return ""
