"""The report parser's physics and column checks (issue "no 500 and no stalled agent on hostile
input", item 2): every number finite, non-negative, within 64 bits and within the plausible
range of its metric (docs/operator.md), memory used and free at most the total; anything else
is a ValidationError naming the field's path, never a value that reaches the database."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitoring.report_parse import (
    BIGINT_MAX,
    FB_TOTAL,
    FB_USED,
    GPU_TEMP,
    GPU_UTIL,
    MAX_GPU_MEMORY_MIB,
    MAX_GPUS,
    METRIC_RANGES,
    batch_parse,
)
from pools.core.errors import ValidationError

POWER = "DCGM_FI_DEV_POWER_USAGE"
SANE = {"index": 0, FB_USED: 40000, FB_TOTAL: 81920, GPU_UTIL: 75, GPU_TEMP: 61, POWER: 312.5}
AT = 1_764_547_200  # 2025-12-01 in seconds since the epoch: a clock that is set


def parse(*gpus, **report):
    return batch_parse({"reports": [{"seq": 1, "at": AT, "gpus": list(gpus), **report}]}, max_batch=10)


def refused(*gpus, **report) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        parse(*gpus, **report)
    return {e.field: e.message for e in caught.value.errors}


def test_a_sane_gpu_passes_unchanged():
    assert parse(SANE).reports[0].gpus == [SANE]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (FB_USED, -5000),  # was an IntegrityError (a PositiveBigIntegerField sums it)
        (FB_USED, 10**30),  # was an OverflowError on SQLite's INTEGER
        (FB_USED, 1e308),  # a float where MiB are whole: and beyond any column
        (FB_USED, 40000.5),
        (FB_USED, math.inf),  # `1e309` in JSON
        (FB_TOTAL, MAX_GPU_MEMORY_MIB + 1),
        (GPU_UTIL, 1e308),  # was shown on /metrics and the node page
        (GPU_UTIL, 100.5),
        (GPU_UTIL, -1),
        (GPU_UTIL, math.nan),
        (GPU_TEMP, 151),
        (GPU_TEMP, -40),
        (POWER, 5000.1),
        (POWER, -math.inf),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2**63),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1.5),
        ("DCGM_FI_DEV_SOMETHING_NEW", 2**63),  # any DCGM field: within a BIGINT
        ("DCGM_FI_DEV_SOMETHING_NEW", -1),
        ("DCGM_FI_DEV_SOMETHING_NEW", math.inf),
    ],
)
def test_out_of_range_metrics_are_refused_at_their_path(field, value):
    errors = refused({**SANE, field: value}, seq=1)
    assert list(errors) == [f"reports[0].gpus[0].{field}"], errors


def test_memory_used_or_free_beyond_the_total_is_refused_at_the_used_field():
    errors = refused({**SANE, FB_USED: 90000})
    assert errors == {f"reports[0].gpus[0].{FB_USED}": f"must not exceed {FB_TOTAL} (81920 MiB)"}
    assert list(refused({**SANE, "DCGM_FI_DEV_FB_FREE": 81921})) == ["reports[0].gpus[0].DCGM_FI_DEV_FB_FREE"]
    assert parse({**SANE, FB_USED: 81920, "DCGM_FI_DEV_FB_FREE": 0}).reports[0].gpus[0][FB_USED] == 81920


def test_the_path_names_the_report_and_the_gpu_as_the_body_nests_them():
    body = {"reports": [{"seq": 1, "at": AT, "gpus": [SANE]}, {"seq": 2, "at": AT, "gpus": [SANE, SANE, SANE, {**SANE, "index": 3, FB_USED: -5000}]},
                        {"seq": 3, "at": AT, "gpus": [{**SANE, GPU_UTIL: 1e308}]}]}
    with pytest.raises(ValidationError) as caught:
        batch_parse(body, max_batch=10)
    assert [e.field for e in caught.value.errors] == ["reports[1].gpus[3].DCGM_FI_DEV_FB_USED", "reports[2].gpus[0].DCGM_FI_DEV_GPU_UTIL"]


@pytest.mark.parametrize("index", [-1, MAX_GPUS, 10**30, 1.0, True])
def test_a_gpu_index_is_within_the_node(index):
    assert list(refused({**SANE, "index": index})) == ["reports[0].gpus[0].index"]


@pytest.mark.parametrize("at", [-1, 1e309, 10**30, 1e308])
def test_report_times_in_seconds_are_non_negative_and_finite(at):
    assert "reports[0].at" in refused(SANE, at=at)


@pytest.mark.parametrize("at", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"])
def test_report_times_whose_offset_leaves_the_calendar_are_refused(at):
    """In UTC these are year 10000 and year 0: a 500 on SQLite's write, and on PostgreSQL a row
    that broke the node's page until it was pruned."""
    assert "reports[0].at" in refused(SANE, at=at)


def test_a_report_time_with_an_offset_is_kept_in_utc():
    (report,) = parse(SANE, at="2026-12-01T08:30:00+08:00").reports
    assert report.at == datetime(2026, 12, 1, 0, 30, tzinfo=UTC) and report.at.utcoffset() == timedelta(0)


@pytest.mark.parametrize("text", ["\x1b]0;PWNED\x07", "a\x00b", "csi\x9b"])
def test_control_characters_in_the_agents_text_are_refused(text):
    assert list(refused({**SANE, "name": text})) == ["reports[0].gpus[0].name"]
    assert list(refused(SANE, driverVersion=text)) == ["reports[0].driverVersion"]
    with pytest.raises(ValidationError) as caught:
        batch_parse({"reports": [{"seq": 1, "at": AT}], "acks": [{"id": 1, "ok": True, "message": text}]}, max_batch=10)
    assert [e.field for e in caught.value.errors] == ["acks[0].message"]


def test_an_acks_message_may_span_lines():
    batch = batch_parse({"reports": [{"seq": 1, "at": AT}], "acks": [{"id": 1, "ok": False, "message": "line\n\tnext"}]}, max_batch=10)
    assert batch.acks[0].message == "line\n\tnext"


def test_an_acks_outcome_is_a_boolean_and_absent_or_null_is_a_failure():
    """`"ok": "false"` was read as true (a command reported done that failed)."""
    batch = batch_parse({"reports": [{"seq": 1, "at": AT}], "acks": [{"id": 1, "ok": True}, {"id": 2}, {"id": 3, "ok": None}]}, max_batch=10)
    assert [(a.command_id, a.ok) for a in batch.acks] == [(1, True), (2, False), (3, False)]
    for value in ("false", 1, 0, [], {}):
        with pytest.raises(ValidationError) as caught:
            batch_parse({"reports": [{"seq": 1, "at": AT}], "acks": [{"id": 1, "ok": value}]}, max_batch=10)
        assert [(e.field, e.message) for e in caught.value.errors] == [("acks[0].ok", "must be true or false")]


@pytest.mark.parametrize("value", [5, True, False, 0, "ab", "", {"x": 1}, 1.5])
def test_a_list_field_of_another_type_is_refused_whole_and_null_is_an_empty_list(value):
    """acks, gpus and xids: a number was a TypeError (a 500), a string or an object was walked
    (`acks[0]: must be an object` for `"ab"`)."""
    with pytest.raises(ValidationError) as caught:
        batch_parse({"reports": [{"seq": 1, "at": AT, "gpus": value, "xids": value}], "acks": value}, max_batch=10)
    assert [(e.field, e.message) for e in caught.value.errors] == [
        ("reports[0].gpus", f"must be a list of at most {MAX_GPUS} GPUs"),
        ("reports[0].xids", "must be a list of at most 256 Xid events"),
        ("acks", "must be a list"),
    ]
    batch = batch_parse({"reports": [{"seq": 1, "at": AT, "gpus": None, "xids": None}], "acks": None}, max_batch=10)
    assert (batch.reports[0].gpus, batch.reports[0].xids, batch.acks) == ([], [], [])


def in_range(key: str, value) -> bool:
    """The oracle: what METRIC_RANGES (and the generic rule) say about one value."""
    low, high, integer, _ = METRIC_RANGES.get(key, (0, BIGINT_MAX, False, ""))
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return (not integer or isinstance(value, int)) and low <= value <= high


KEYS = [FB_USED, FB_TOTAL, GPU_UTIL, GPU_TEMP, POWER, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_SOMETHING_NEW"]
NUMBERS = st.one_of(
    st.integers(min_value=-10, max_value=2**64),
    st.sampled_from([0, 100, 150, 5000, MAX_GPU_MEMORY_MIB, BIGINT_MAX, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
)


@given(values=st.dictionaries(st.sampled_from(KEYS), NUMBERS, max_size=len(KEYS)), twice=st.booleans())
def test_the_parser_accepts_a_gpu_exactly_when_every_value_is_in_range(values, twice):
    """The shortcut for sane GPUs (set operations, a min and a sum) and the field-by-field
    path agree with the ranges, whether or not the keys were seen before."""
    gpu = {"index": 0, **values}
    total = gpu.get(FB_TOTAL)
    expected = all(in_range(k, v) for k, v in values.items()) and (total is None or gpu.get(FB_USED, 0) <= total)
    for _ in range(2 if twice else 1):
        try:
            parsed = parse(gpu).reports[0].gpus[0]
        except ValidationError:
            assert not expected, gpu
        else:
            assert expected and parsed == gpu, gpu
