"""YAML text to plain values, safely and in time linear in its size: one pass over the parser's
event stream (libyaml's, in C, when PyYAML has it) that builds dicts, lists and scalars.

- Nesting is counted as the events arrive and refused past `max_depth`, with the path down to
  where it was crossed: nothing recurses, so no depth is a RecursionError. A parser that scans
  ahead may meet its own limit first (libyaml stops at 1,000 levels; without libyaml, PyYAML's
  scanner is stopped one flow level past ours, since it keeps a pending key per open flow
  collection and checks them all for every token): then the text up to there is counted again,
  which finds the path.
- Scalars are resolved and constructed by PyYAML's SafeLoader rules (`yes` is a bool, `0x1F` an
  int, a `!!python/...` tag is refused), once per distinct value, and a constructor's
  ValueError (February 30th, an int of 5,000 digits) is a YAML error, not a 500. PyYAML's own
  composer and constructor cost 20-65 ms of CPU per KB of a wide or 32-deep document; this, 1-3.
- Aliases are refused (no entity expansion, "billion laughs"), and so are merge keys (`<<`,
  only useful with aliases), collections as mapping keys and collection tags other than plain
  mappings and sequences (`!!set`, `!!omap`).
- A key given twice in one mapping is refused, with its path (`metadata.name`): PyYAML keeps
  the last one without a word, so `nodeType` written twice created the pool the reader of the
  file did not see; Kubernetes refuses it (`mapping key "nodeType" already defined`). Keys that
  are not strings and collide once read (`1` and `true`) are refused as such, not as a duplicate.

Errors are PyYAML's (`yaml.YAMLError`, with a mark) or, for nesting and duplicate keys, a
`ValidationError`.
Pure: no Django.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import ScalarNode
from yaml.scanner import ScannerError

from pools.core.errors import ValidationError
from pools.core.nesting import DEFAULT_MAX_DEPTH, format_path, too_deep

NESTING_PROBLEM = "exceeded maximum nesting depth"  # libyaml's words, used for ours too
_STR, _SEQ, _MAP = "tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"
_MERGE, _VALUE = "tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"
_NO_KEY = object()
_MAX_INT_BITS = 14_000  # about 4,200 digits: Python refuses to print more (sys.int_info.default_max_str_digits)
_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9]*)\Z")  # what SafeLoader resolves to an int, without `_`, octal, hex, 1:30


class _PurePythonParser(yaml.SafeLoader):
    """PyYAML's own parser, for an installation without libyaml, stopped one flow level past
    the limit (`_build` refuses that level; the scanner must not run far ahead of it)."""

    max_depth = DEFAULT_MAX_DEPTH

    def fetch_flow_collection_start(self, TokenClass):  # noqa: ANN001, ANN201, N803 - PyYAML's signature
        if self.flow_level > self.max_depth:
            raise ScannerError("while increasing flow level", None, NESTING_PROBLEM, self.get_mark())
        super().fetch_flow_collection_start(TokenClass)


_Parser = getattr(yaml, "CSafeLoader", None) or _PurePythonParser


def reader_error_at(exc: yaml.reader.ReaderError, text: str) -> tuple[int, int]:
    """The line and column (from 1) of a character the reader refused. Its error has no mark,
    only a position: in characters from PyYAML's reader, in UTF-8 bytes from libyaml's. The
    text before it holds no character the reader refuses, so its line breaks are YAML's."""
    if _Parser is _PurePythonParser:
        before = text[: exc.position]
    else:
        before = text.encode("utf-8")[: exc.position].decode("utf-8", errors="ignore")
    before = before.removeprefix("\ufeff")  # a byte order mark is no column of the first line
    lines = (before + "x").splitlines()  # "x": a break just before still starts a line
    return len(lines), len(lines[-1])


def load_all(text: str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[Any]:
    """Every document of `text`, as dicts, lists and scalars."""
    try:
        return _build(text, max_depth)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if getattr(exc, "problem", None) != NESTING_PROBLEM or mark is None:
            raise
        where = f" at line {mark.line + 1}, column {mark.column + 1}"
    try:
        _build(text[: mark.index], max_depth)  # refuses with the path (the text ends too soon)
    except yaml.YAMLError:
        pass
    raise too_deep("", max_depth, where)


def _key_again(mapping: dict, key: Any, path: list, event: ScalarEvent) -> ValidationError:
    """A key equal to one the mapping already has: the same key twice, or keys that are not
    strings and only equal once read (`1` and `true`, `1` and `1.0`: Python's 1 == True == 1.0),
    which YAML counts as different keys and a document never has (its keys are strings, as in
    JSON), so the message says that rather than "duplicate"."""
    mark = event.start_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    earlier = next(k for k in mapping if k == key)
    if earlier.__class__ is key.__class__:
        field = format_path([*path, key if key.__class__ is str else str(key)])
        return ValidationError(f"duplicate key: a key may appear only once in a mapping (again at {where})", field=field)
    return ValidationError(
        f"keys must be strings (quote numbers and booleans): {_shown(event.value)} at {where} is read as {key!r}, "
        f"which equals the key {earlier!r} before it",
        field=format_path([*path, event.value]),
    )


def _scalars(parser):
    """scalar(event, as_key) -> its value by SafeLoader's implicit resolvers and constructors.
    Most plain scalars never reach them: one whose first character starts no implicit type
    (`app`, `train-pool-a`) and a quoted one are strings, a plain decimal is an int; the rest are
    resolved and constructed once per distinct text."""
    constructors = parser.yaml_constructors
    undefined = constructors[None]
    anywhere = parser.yaml_implicit_resolvers.get(None, [])  # first character -> [(tag, regexp)], as BaseResolver.resolve
    resolvers = {first: (*candidates, *anywhere) for first, candidates in parser.yaml_implicit_resolvers.items() if first is not None}
    node = ScalarNode(None, None)  # one node, refilled: scalar constructors read it and keep nothing
    tags: dict[str, str] = {}  # plain scalar -> its resolved tag
    values: dict[tuple, Any] = {}  # (tag, scalar) -> its value

    def scalar(event: ScalarEvent, as_key: bool) -> Any:
        value, tag = event.value, event.tag
        if tag is None:
            if not event.implicit[0] or (value and value[0] not in resolvers):
                return value
            if len(value) < 100 and _DECIMAL.match(value):
                return int(value)
            tag = tags.get(value)
            if tag is None:
                tag = tags[value] = next((found for found, regexp in resolvers.get(value[:1], anywhere) if regexp.match(value)), _STR)
        elif tag == "!":
            return value
        if as_key and tag == _MERGE:
            raise ConstructorError(None, None, "merge keys (<<) are not accepted", event.start_mark)
        if tag == _STR or (as_key and tag == _VALUE):
            return value
        lookup = (tag, value)
        try:
            return values[lookup]
        except KeyError:
            node.tag, node.value, node.start_mark, node.end_mark, node.style = tag, value, event.start_mark, event.end_mark, event.style
            constructed = values[lookup] = _constructed(constructors.get(tag, undefined), parser, node)
            return constructed  # immutable (str, int, float, bool, None, bytes, date): shared

    return scalar


def _constructed(constructor, parser, node: ScalarNode) -> Any:
    """A constructor's ValueError (February 30th, an int past Python's 4,300 digits) as PyYAML's
    own error, not a 500; and no int too long to print (`0x` and 50,000 `f`s)."""
    try:
        value = constructor(parser, node)
    except (ValueError, OverflowError) as exc:
        raise ConstructorError(None, None, f"{_shown(node.value)} is not a valid {node.tag.rsplit(':', 1)[-1]}", node.start_mark) from exc
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        raise ConstructorError(None, None, f"{_shown(node.value)} is too large a number", node.start_mark)
    return value


def _shown(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "…")


def _collection(event, kind, parser) -> list | dict:
    tag = event.tag
    plain = _SEQ if kind is SequenceStartEvent else _MAP
    if tag is None or tag == "!" or tag == plain:
        return [] if kind is SequenceStartEvent else {}
    if tag in parser.yaml_constructors:
        problem = f"the tag {tag!r} is not accepted (plain mappings and sequences only)"
    else:
        problem = f"could not determine a constructor for the tag {tag!r}"
    raise ConstructorError(None, None, problem, event.start_mark)


def _build(text: str, max_depth: int) -> list[Any]:
    parser = _Parser(text)
    if isinstance(parser, _PurePythonParser):
        parser.max_depth = max_depth
    scalar = _scalars(parser)
    documents: list[Any] = []
    stack: list[tuple] = []  # (collection, its pending key) of every open collection's parent
    path: list[str | int] = []  # where each open collection below a document's root sits
    current: Any = None  # the collection being filled; None between documents
    key: Any = _NO_KEY  # in a mapping: the key whose value comes next
    try:
        while True:
            event = parser.get_event()
            kind = event.__class__
            if kind is ScalarEvent:
                value, opened = scalar(event, current.__class__ is dict and key is _NO_KEY), False
            elif kind is SequenceStartEvent or kind is MappingStartEvent:
                value, opened = _collection(event, kind, parser), True
            elif kind is SequenceEndEvent or kind is MappingEndEvent:
                current, key = stack.pop()
                if stack:
                    path.pop()
                continue
            elif kind is AliasEvent:
                raise ComposerError(None, None, "YAML aliases are not accepted", event.start_mark)
            elif kind is StreamEndEvent:
                return documents
            else:  # stream and document start and end
                continue
            if current is None:
                segment = None
                documents.append(value)
            elif current.__class__ is list:
                segment = len(current)
                current.append(value)
            elif key is _NO_KEY:
                if opened:
                    raise ConstructorError("while constructing a mapping", None, "found unhashable key", event.start_mark)
                if value in current:
                    raise _key_again(current, value, path, event)
                key = value
                continue
            else:
                segment = key if key.__class__ is str else str(key)
                current[key], key = value, _NO_KEY
            if opened:
                if len(stack) >= max_depth:
                    mark = event.start_mark
                    where = f" at line {mark.line + 1}, column {mark.column + 1}"
                    raise too_deep(format_path([*path, segment]), max_depth, where)
                stack.append((current, key))
                if current is not None:
                    path.append(segment)
                current = value
    finally:
        parser.dispose()

