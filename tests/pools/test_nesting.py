"""Parsing is bounded before it is expensive (issue "No 500 and no stalled agent on hostile
input", item 1): every parser entry point, fed nested, wide and huge JSON and YAML (lists, maps,
both, flow and block style), refuses what is too deep or too big with a ValidationError (the API
parsers: a 4xx APIException), never anything else, in at most 5 ms of CPU per KB and with memory
that grows with the size, not the depth. And the YAML loader built for it (one pass over libyaml's
events, pools/core/yaml_loading.py) reads what PyYAML's SafeLoader reads.

The HTTP endpoints with the same bodies are tests/test_bad_input_depth.py.
"""

from __future__ import annotations

import gc
import io
import json
import time
import tracemalloc

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import APIException

from pools.api.parsers import BodyJSONParser, JSONParser, YAMLParser
from pools.core import yaml_loading
from pools.core.documents import load_yaml
from pools.core.errors import ValidationError
from pools.core.nesting import DEFAULT_MAX_DEPTH, json_check_depth, json_too_deep

MS_PER_KB = 5.0
SPEC_BYTES = 64 * 1024
DEPTH = "nested deeper than 32 levels"


# --- documents: (text, how deep it truly nests), built as text (json.dumps would recurse) -------

JSON_LEAVES = ["1", '"x"', "[]", "{}", "true", "null", '"[{\\"]"', "-0.5e+3"]
YAML_LEAVES = ["1", "x", "[]", "{}", "yes", "~", "0x1F", "'q'", '"[{"', "2026-11-30", "1.5"]


def _leaf_depth(leaf: str) -> int:
    return 1 if leaf in ("[]", "{}") else 0


def flow(depth: int, kinds: str, width: int, leaf: str, key: str) -> tuple[str, int]:
    """JSON (key '"k"') or YAML flow style (key 'k'): `depth` levels of lists and maps in the
    order of `kinds` (cycled) around a list of `width` leaves."""
    opens = ["[" if kinds[i % len(kinds)] == "l" else "{" + key + ": " for i in range(depth)]
    closes = ["]" if kinds[i % len(kinds)] == "l" else "}" for i in reversed(range(depth))]
    inner = "[" + ",".join([leaf] * width) + "]" if width else leaf
    return "".join(opens) + inner + "".join(closes), depth + (1 if width else 0) + _leaf_depth(leaf)


def block(depth: int, kinds: str, width: int, leaf: str) -> tuple[str, int]:
    """YAML block style: each level two spaces deeper (`k:` or `-`), then `width` items."""
    lines = [" " * (2 * i) + ("-" if kinds[i % len(kinds)] == "l" else "k:") for i in range(depth)]
    indent = " " * (2 * depth)
    lines += [f"{indent}- {leaf}" for _ in range(width)] if width else [indent + leaf]
    return "\n".join(lines) + "\n", depth + (1 if width else 0) + _leaf_depth(leaf)


@st.composite
def documents(draw, styles=("json", "yaml-flow", "yaml-block")):
    style = draw(st.sampled_from(styles))
    depth = draw(st.one_of(st.integers(0, 40), st.integers(40, 30_000)))
    if style == "yaml-block":
        depth = min(depth, 300)  # indentation: 300 levels are already 90 KB
    kinds = draw(st.text("lm", min_size=1, max_size=4))
    width = draw(st.one_of(st.integers(0, 4), st.integers(4, 40_000)))
    leaf = draw(st.sampled_from(JSON_LEAVES if style == "json" else YAML_LEAVES))
    if style == "yaml-block":
        width = min(width, 200_000 // (2 * depth + 4))  # each item is indented as deep as it nests
    text, true_depth = block(depth, kinds, width, leaf) if style == "yaml-block" else flow(depth, kinds, width, leaf, '"k"' if style == "json" else "k")
    return style, text, true_depth


def huge_documents():
    """Over the size limits: a wide JSON list of 2-4 MB (agent API) and 70-500 KB ones."""
    return st.tuples(st.sampled_from([70_000, 500_000, 2_100_000, 4_000_000]), st.sampled_from(["1", "[]", '"x"'])).map(
        lambda sized: ("json", "[" + ",".join([sized[1]] * (sized[0] // (len(sized[1]) + 1))) + "]", 1 + _leaf_depth(sized[1]))
    )


# --- measuring one call ----------------------------------------------------------------------------


def outcome(call):
    """('ok', value) or ('refused', message); anything else (RecursionError, ValueError) fails."""
    try:
        return "ok", call()
    except ValidationError as exc:
        return "refused", str(exc)
    except APIException as exc:
        assert 400 <= exc.status_code < 500, exc.status_code
        return "refused", str(exc.detail)


def measured(call, size: int):
    """The outcome, after checking the call's CPU (the best of two runs, without tracemalloc,
    which slows allocation) and its memory peak (a separate run under tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        result = outcome(call)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    cpu = []
    for _ in range(2):
        gc.collect()
        start = time.process_time()
        outcome(call)
        cpu.append(time.process_time() - start)
    kilobytes = max(1.0, size / 1024)
    assert min(cpu) * 1000 <= MS_PER_KB * kilobytes, f"{min(cpu) * 1000:.1f} ms of CPU for {kilobytes:.0f} KB"
    # Memory grows with the size (the text, its copies, the values parsed from it), never with
    # the depth: a refused body holds little more than the text.
    bound = (4 if result[0] == "refused" else 40) * size + 2 * 1024 * 1024
    assert peak <= bound, f"peak {peak / 1e6:.1f} MB for a {size / 1e3:.0f} KB body ({result[0]})"
    return result


def parse_with(parser_class, text: str):
    body = text.encode()
    return lambda: parser_class().parse(io.BytesIO(body), parser_context={"encoding": "utf-8"})


def assert_bounded(result, true_depth: int, size: int, limit: int) -> None:
    kind, detail = result
    if size > limit:
        assert kind == "refused" and "larger than" in detail, detail
    elif true_depth > DEFAULT_MAX_DEPTH:
        assert kind == "refused" and DEPTH in detail, detail
    else:
        assert DEPTH not in str(detail)


HYPOTHESIS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@HYPOTHESIS
@given(documents(styles=("json",)) | huge_documents())
def test_json_check_depth_refuses_exactly_what_is_too_deep_in_linear_time(document):
    _, text, true_depth = document
    kind, detail = measured(lambda: json_check_depth(text), len(text.encode()))
    assert (kind == "refused") == (true_depth > DEFAULT_MAX_DEPTH), detail
    assert json_too_deep(text.encode(), DEFAULT_MAX_DEPTH) == (true_depth > DEFAULT_MAX_DEPTH)


@HYPOTHESIS
@given(documents())
def test_load_yaml_is_bounded_for_json_and_yaml(document):
    _, text, true_depth = document
    size = len(text.encode())
    assert_bounded(measured(lambda: load_yaml(text, max_bytes=SPEC_BYTES), size), true_depth, size, SPEC_BYTES)


@HYPOTHESIS
@given(documents(styles=("json",)) | huge_documents())
def test_the_api_json_parser_is_bounded(document):
    _, text, true_depth = document
    size = len(text.encode())
    assert_bounded(measured(parse_with(JSONParser, text), size), true_depth, size, SPEC_BYTES)


@HYPOTHESIS
@given(documents(styles=("json",)) | huge_documents())
def test_the_agent_json_parser_is_bounded(document):
    _, text, true_depth = document
    size = len(text.encode())
    result = measured(parse_with(BodyJSONParser, text), size)
    assert_bounded(result, true_depth, size, 2 * 1024 * 1024)


@HYPOTHESIS
@given(documents())
def test_the_api_yaml_parser_is_bounded(document):
    _, text, true_depth = document
    size = len(text.encode())
    assert_bounded(measured(parse_with(YAMLParser, text), size), true_depth, size, SPEC_BYTES)


def test_the_generated_documents_nest_as_built():
    """Guards the generators: the true depth they report is the depth of what they build."""
    def depth(value):
        if isinstance(value, list):
            return 1 + max(map(depth, value), default=0)
        if isinstance(value, dict):
            return 1 + max(map(depth, value.values()), default=0)
        return 0

    for kinds in ("l", "m", "lm", "mml"):
        for nest, width in ((0, 0), (3, 0), (5, 2), (2, 7)):
            for leaf in ("1", "[]", "{}"):
                text, true_depth = flow(nest, kinds, width, leaf, '"k"')
                assert depth(json.loads(text)) == true_depth
                text, true_depth = block(nest, kinds, width, leaf)
                assert depth(yaml.safe_load(text)) == true_depth


# --- 64 KiB of YAML, in the shapes that cost the most: at most 0.3 s -----------------------------


def _fill(head: str, item: str, tail: str = "", limit: int = SPEC_BYTES) -> str:
    count = (limit - len(head) - len(tail)) // len(item)
    return head + item * count + tail


def _cut(items: str, limit: int = SPEC_BYTES) -> str:
    """A flow list of distinct items cut to the last whole item that fits."""
    return items[: items.rfind(",", 0, limit - 1)] + "]"


WORST_YAML = {
    "deep-flow-lists": "[" * SPEC_BYTES,
    "deep-flow-maps": _fill("", "{a: "),
    "deep-compact-lists": _fill("", "- "),
    "deep-block": "".join(" " * i + "-\n" for i in range(350)),
    "wide-tiny-ints": _fill("a: [", "1,", "1]"),
    "wide-distinct-hex": _cut("a: [" + ",".join(f"0x{i:x}" for i in range(11_000))),
    "wide-distinct-floats": _cut("a: [" + ",".join(f"{i}.5" for i in range(11_000))),
    "wide-bools-and-nulls": _fill("a: [", "yes,no,~,", "1]"),
    "wide-empty-lists": _fill("a: [", "[],", "1]"),
    "wide-empty-maps": _fill("a: [", "{},", "1]"),
    "block-keys": "".join(f"k{i}: v\n" for i in range(7_000)),
    "block-items": _fill("a:\n", "- x\n"),
    "lines-32-deep": _fill("", "- " + "[" * 31 + "1" + "]" * 31 + "\n"),
    "many-documents": _fill("", "---\na: 1\n"),
}


@pytest.mark.parametrize("case", sorted(WORST_YAML))
def test_64_kib_of_yaml_costs_at_most_0_3_s_whatever_its_shape(case):
    text = WORST_YAML[case]
    assert 60_000 <= len(text.encode()) <= SPEC_BYTES
    cpu = []
    for _ in range(3):
        gc.collect()
        start = time.process_time()
        outcome(lambda: load_yaml(text, max_bytes=SPEC_BYTES))
        cpu.append(time.process_time() - start)
    assert min(cpu) <= 0.3 and min(cpu) * 1000 / (len(text) / 1024) <= MS_PER_KB, cpu


# --- the YAML loader reads what SafeLoader reads -------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20),
    st.sampled_from(["yes", "No", "on", "~", "0x1F", "017", "1_000", "1:30", "2026-11-30", "2026-11-30 06:00:00Z", ".inf", "<<", "="]),
)  # fmt: skip
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=30)


@pytest.fixture(params=["libyaml", "pure-python"])
def parser(request, monkeypatch):
    """Both of the loader's parsers: libyaml's (PyYAML's wheels have it) and PyYAML's own."""
    if request.param == "pure-python":
        monkeypatch.setattr(yaml_loading, "_Parser", yaml_loading._PurePythonParser)
    return request.param


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=values, flow_style=st.sampled_from([None, True, False]))
def test_the_loader_reads_what_safeloader_reads(parser, value, flow_style):
    text = yaml.safe_dump(value, default_flow_style=flow_style, allow_unicode=True)
    assume("&id" not in text)  # the same object twice: an alias, refused by design
    assert yaml_loading.load_all(text) == list(yaml.safe_load_all(text))


REFUSED = {
    "alias": ("a: &x [1]\nb: *x\n", "YAML aliases are not accepted"),
    "merge-key": ("a: 1\n<<: {b: 2}\n", "merge keys (<<) are not accepted"),
    "python-tag": ("!!python/object/apply:os.system ['echo pwned']\n", "could not determine a constructor"),
    "set": ("a: !!set {x, y}\n", "is not accepted (plain mappings and sequences only)"),
    "list-as-key": ("? [a]\n: 1\n", "found unhashable key"),
    "int-past-4300-digits": ("a: " + "9" * 5000, "is not a valid int"),
    "hex-too-long-to-print": ("a: 0x" + "f" * 5000, "too large a number"),
    "february-30": ("a: 2026-02-30", "is not a valid timestamp"),
    "not-a-float": ("a: !!float lots", "is not a valid float"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_loader_refuses_what_it_must_with_a_yaml_error(parser, case):
    text, problem = REFUSED[case]
    with pytest.raises(yaml.YAMLError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        yaml_loading.load_all(text)


@pytest.mark.parametrize(("text", "path"), [
    ("[" * 40, "[0]" * 32),
    ("[" * 3000 + "]" * 3000, "[0]" * 32),
    ("spec:\n  nodeLabels:\n    a: " + "{b: " * 40, "spec.nodeLabels.a" + ".b" * 29),
    ("- [1, 2, {k: " + "[" * 40, "[0][2].k" + "[0]" * 29),
    ("".join(" " * i + "k:\n" for i in range(40)), "k" + ".k" * 31),
    ("{'': " * 40, '""' + '.""' * 31),
    ("- " * 40, "[0]" * 32),
])  # fmt: skip
def test_the_loader_names_the_path_down_to_where_the_limit_was_crossed(parser, text, path):
    with pytest.raises(ValidationError) as refused:
        yaml_loading.load_all(text)
    (error,) = refused.value.errors
    assert error.field == path and error.message.startswith(DEPTH + " at line ")


def test_the_depth_limit_is_the_argument(parser):
    assert yaml_loading.load_all("[" * 40 + "]" * 40, max_depth=40)
    with pytest.raises(ValidationError, match="nested deeper than 16 levels"):
        yaml_loading.load_all("[" * 17 + "]" * 17, max_depth=16)
    with pytest.raises(ValidationError, match="nested deeper than 16 levels"):
        json_check_depth("[" * 17 + "]" * 17, max_depth=16)
    json_check_depth("[" * 16 + "]" * 16, max_depth=16)


@pytest.mark.parametrize(("text", "deep"), [
    ('["[[[[[[", "\\"[[[[[["]', False),  # brackets in strings, an escaped quote
    ('["\\\\", [[[[[[]]]]]]]', True),  # an escaped backslash ends the string
    ('"' + "[" * 10, False),  # an unterminated string hides the rest
    ("]]]]]][[[[[[", True),  # stray closers close nothing
    ("[[[[[[", True),  # unclosed ones count
    ("[[[[[]]]]][[[[[]]]]]", False),
])  # fmt: skip
def test_json_depth_honours_strings_and_escapes(text, deep):
    assert json_too_deep(text.encode(), 5) is deep


# --- a key twice in one mapping or object: refused with its path, as Kubernetes does ------------

DUPLICATE_YAML = {
    "top-level": ("spec: {}\nspec: {}\n", "spec", 2),
    "nested-block": ("apiVersion: x\nmetadata:\n  name: a\n  labels: {}\n  name: b\n", "metadata.name", 5),
    "flow-json-style": ('{"metadata": {"name": "dupj-a", "name": "dupj-b"}}', "metadata.name", 1),
    "in-a-list": ("items:\n- a: 1\n  a: 2\n", "items[0].a", 3),
    "int-keys": ("m:\n  1: x\n  1: y\n", "m.1", 3),
}


@pytest.mark.parametrize("case", sorted(DUPLICATE_YAML))
def test_the_loader_refuses_a_key_given_twice_naming_its_path_and_line(parser, case):
    text, path, line = DUPLICATE_YAML[case]
    with pytest.raises(ValidationError) as refused:
        yaml_loading.load_all(text)
    (error,) = refused.value.errors
    assert error.field == path and error.message.startswith("duplicate key") and f"at line {line}," in error.message


def test_the_loader_keeps_equal_keys_of_different_mappings_and_types(parser):
    assert yaml_loading.load_all("a: {x: 1}\nb: {x: 2}\nc: {1: i, '1': s}\n") == [{"a": {"x": 1}, "b": {"x": 2}, "c": {1: "i", "1": "s"}}]


@pytest.mark.parametrize(("text", "path"), [
    ('{"metadata": {"name": "dupj-a", "name": "dupj-b"}}', "metadata.name"),
    ('{"a": 1, "a": 1}', "a"),
    ('[{"ok": 1}, {"spec": {"nodeType": "GPU_8_CARD", "nodeType": "GPU_4_CARD"}}]', "[1].spec.nodeType"),
    ('{"a": {"x": 1, "x": 2}, "b": {"y": 1, "y": 2}}', "a.x"),  # the first in document order
])  # fmt: skip
def test_the_api_json_parser_refuses_a_key_given_twice_naming_its_path(text, path):
    with pytest.raises(ValidationError) as refused:
        JSONParser().parse(io.BytesIO(text.encode()), "application/json", {})
    (error,) = refused.value.errors
    assert (error.field, error.message) == (path, "duplicate key: a key may appear only once in an object")
    assert JSONParser().parse(io.BytesIO(b'{"a": {"x": 1}, "b": {"x": 2}}'), "application/json", {}) == {"a": {"x": 1}, "b": {"x": 2}}
