"""How deeply a request body nests, checked in time linear in its size before a parser recurses.

Python's `json` and PyYAML's composer recurse once per level: `[` repeated 10,000 times was a
RecursionError (a 500) on every endpoint that parses a body, and PyYAML's pure-Python scanner
kept one pending key per open flow collection, so 64 KB of `[` cost 2 s of CPU. A JSON body is
measured here first, on its raw bytes (brackets outside strings, escapes honoured; passes of
`bytes.replace`/`translate` and one regular expression, all in C); YAML is bounded while its
events stream by `pools.core.yaml_loading`. Both refuse with a `ValidationError` whose field is
the path down to where the limit was crossed (`spec.nodeLabels.a.b`, `[0][0][0]`), found by a
slower scan that only a refused body pays for. Pure: no Django.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from itertools import accumulate

from pools.core.errors import ValidationError

DEFAULT_MAX_DEPTH = 32  # settings.EBCLOUD_MAX_DOCUMENT_DEPTH; the deepest valid document (a Pod with node affinity) nests 10
KEY_SHOWN = 64  # characters of a key shown in a path

# The path finder's tokens: a JSON string, or an unterminated one up to the end of the text (so
# that a quote which closes nothing never restarts the search at every later quote: quadratic).
_STRING = r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)'
_TOKENS = re.compile(_STRING + r"|[\[\]{},:]", re.DOTALL)
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_QUOTED = re.compile(rb'"[^"]*+(?:"|\Z)')
_PARENS = bytes.maketrans(b"[{]}", b"(())")
_STEP = {ord("("): 1, ord(")"): -1}


def too_deep(path: str, max_depth: int, where: str = "") -> ValidationError:
    return ValidationError(f"nested deeper than {max_depth} levels{where}", field=path or "body")


def format_path(segments: Iterable[str | int]) -> str:
    """`["spec", "containers", 0, "resources"]` -> `spec.containers[0].resources`."""
    path = ""
    for segment in segments:
        if isinstance(segment, int):
            path += f"[{segment}]"
        else:
            text = (segment if len(segment) <= KEY_SHOWN else segment[:KEY_SHOWN] + "…") or '""'
            path += f".{text}" if path else text
    return path


def json_too_deep(data: bytes, max_depth: int) -> bool:
    """Whether more than `max_depth` arrays and objects are open at once somewhere in the JSON
    `data` (UTF-8: no byte of a multi-byte character is ASCII). Unclosed ones count as open, a
    stray closing bracket closes nothing: never less than the depth `json.loads` would reach.
    Everything runs in C (bytes.replace, bytes.translate, one regular expression) but the last,
    rare case; a body of agent reports costs about a quarter of its `json.loads`."""
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return False
    # Escaped backslashes, then escaped quotes, go; then all but quotes and brackets; then
    # adjacent quotes (an empty string, or one string's end and the next one's start: removing
    # them moves no bracket in or out of a string); then what is left inside strings.
    skeleton = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    skeleton = brackets = _QUOTED.sub(b"", skeleton).translate(_PARENS)
    for _ in range(max_depth):  # each pass removes the innermost pairs
        shorter = skeleton.replace(b"()", b"")
        if len(shorter) == len(skeleton):
            break
        skeleton = shorter
    if b"()" in skeleton:  # a pair with more than max_depth levels inside it
        return True
    unclosed = skeleton.count(b"(")  # what is left is `)...)(...(`
    if unclosed == 0:
        return False
    if unclosed > max_depth:
        return True
    # Unclosed brackets (a truncated body) around pairs: count exactly.
    return max(accumulate(map(_STEP.__getitem__, brackets), lambda depth, step: max(depth + step, 0))) > max_depth


def json_check_depth(text: str | bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
    """Refuse JSON nested deeper than `max_depth` before `json.loads` sees it."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if json_too_deep(data, max_depth):
        raise too_deep(_json_path(data.decode("utf-8", "replace"), max_depth), max_depth)


def _json_key(token: str) -> str:
    try:
        key = json.loads(token)
    except ValueError:
        key = token[1:-1]
    return key if isinstance(key, str) else token


def _json_path(text: str, max_depth: int) -> str:
    """The path to the array or object that opens level `max_depth + 1` (only on refusal)."""
    frames: list[list] = []  # [index or key, is_object, expecting_key]
    for match in _TOKENS.finditer(text):
        token = match.group()
        top = frames[-1] if frames else None
        if token[0] == '"':
            if top is not None and top[1] and top[2]:
                top[0] = _json_key(token)
        elif token in "[{":
            if len(frames) == max_depth:
                return format_path("?" if segment is None else segment for segment, _, _ in frames)
            frames.append([None, True, True] if token == "{" else [0, False, False])
        elif token in "]}":
            if frames:
                frames.pop()
        elif top is not None and token == ",":
            if top[1]:
                top[2] = True
            else:
                top[0] += 1
        elif top is not None and token == ":":
            top[2] = False
    return ""
