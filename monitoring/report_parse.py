"""Shape and check an agent's report batch (pure; no Django). Hand-written rather than a DRF
serializer because it runs for every heartbeat of every node: at 10,000 nodes that is hundreds
of batches a second, and this costs microseconds.

Vocabulary: per-GPU metrics use DCGM field names (`DCGM_FI_DEV_FB_USED`, MiB); any numeric
`DCGM_FI_*` field is kept, so the agent can report more than the server reads.

Every number is checked against physics and against the column it may end up in (issue "no 500
on hostile input"): finite, non-negative, at most 2**63 - 1 (a BIGINT), and for the fields the
server reads, within the plausible range of `METRIC_RANGES` (memory used and free at most the
total). docs/operator.md lists the ranges; a value outside them is a 400 naming its path
(`reports[2].gpus[3].DCGM_FI_DEV_FB_USED`), and nothing of the batch is stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from operator import le
from typing import Any

from pools.core.errors import FieldError, ValidationError, control_characters

FB_USED = "DCGM_FI_DEV_FB_USED"
FB_TOTAL = "DCGM_FI_DEV_FB_TOTAL"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
GPU_TEXT_FIELDS = ("uuid", "name")
MAX_GPUS = 64
MAX_XIDS = 256


@dataclass(frozen=True)
class Xid:
    xid: int
    at: datetime
    gpu_index: int | None = None


@dataclass(frozen=True)
class Report:
    seq: int
    at: datetime
    driver_version: str = ""
    cuda_version: str = ""
    gpus: list[dict[str, Any]] = field(default_factory=list)
    xids: list[Xid] = field(default_factory=list)


@dataclass(frozen=True)
class Ack:
    command_id: int
    ok: bool
    message: str = ""


@dataclass(frozen=True)
class Batch:
    reports: list[Report]
    oldest_seq: int | None = None
    acks: list[Ack] = field(default_factory=list)
    node: str | None = None
    clock_off: str = ""  # how the node's clock is off, its times put on the control plane's (`clock_fixed`)


BIGINT_MAX, INT_MAX, SMALLINT_MAX = 2**63 - 1, 2**31 - 1, 2**15 - 1  # the columns the values go to

# Plausible ranges of the metrics the server reads (stores, sums, shows, exports): (lowest,
# highest, integer only, unit). Generous beyond today's hardware (the largest GPU has 288 GB of
# HBM and draws 1.4 kW; NVML reports temperatures in whole °C and shuts a GPU down near
# 100 °C), tight enough that a broken sensor or a hostile agent cannot show 10^30 MiB or 1e308 %.
# Any other DCGM_FI_* number: finite, 0 to BIGINT_MAX. docs/operator.md lists these.
MAX_GPU_MEMORY_MIB = 4 * 2**20  # 4 TiB per GPU; 64 of them still sum far below a BIGINT
METRIC_RANGES: dict[str, tuple[float, float, bool, str]] = {
    FB_USED: (0, MAX_GPU_MEMORY_MIB, True, "MiB"),
    FB_FREE: (0, MAX_GPU_MEMORY_MIB, True, "MiB"),
    FB_TOTAL: (0, MAX_GPU_MEMORY_MIB, True, "MiB"),
    "DCGM_FI_DEV_FB_RESERVED": (0, MAX_GPU_MEMORY_MIB, True, "MiB"),
    GPU_UTIL: (0, 100, False, "%"),
    "DCGM_FI_DEV_MEM_COPY_UTIL": (0, 100, False, "%"),
    "DCGM_FI_DEV_ENC_UTIL": (0, 100, False, "%"),
    "DCGM_FI_DEV_DEC_UTIL": (0, 100, False, "%"),
    GPU_TEMP: (0, 150, False, "°C"),
    "DCGM_FI_DEV_MEMORY_TEMP": (0, 150, False, "°C"),
    "DCGM_FI_DEV_POWER_USAGE": (0, 5000, False, "W"),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": (0, 5000, False, "W"),
    "DCGM_FI_DEV_SM_CLOCK": (0, 10_000, False, "MHz"),
    "DCGM_FI_DEV_MEM_CLOCK": (0, 20_000, False, "MHz"),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": (0, BIGINT_MAX, True, "errors"),
    ECC_DBE: (0, BIGINT_MAX, True, "errors"),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": (0, BIGINT_MAX, True, "errors"),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": (0, BIGINT_MAX, True, "errors"),
    "DCGM_FI_DEV_XID_ERRORS": (0, INT_MAX, True, ""),
}
_GENERIC_RANGE = (0, BIGINT_MAX, False, "")


def _int(value: Any, path: str, errors: list[FieldError], *, minimum: int = 0, maximum: int = BIGINT_MAX) -> int | None:
    """An integer within the column's range: beyond it is bad input (400), not a database error."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        errors.append(FieldError(path, f"must be an integer from {minimum} to {maximum}"))
        return None
    return value


def _list(value: Any, errors: list[FieldError], parent: str, name: str, limit: int | None = None, what: str = "") -> list:
    """An optional list field (`acks`, a report's `gpus` and `xids`): absent or `null` is an
    empty list, anything else but a list is refused on its path instead of walked. A number or
    `true` was a 500 (`'int' object is not iterable`), a string was read character by
    character and an object key by key (`acks[0]: must be an object`). The path is built only
    for an error: this runs for every report of every heartbeat."""
    if value is None:
        return []
    if type(value) is not list or (limit is not None and len(value) > limit):
        path = f"{parent}.{name}" if parent else name
        errors.append(FieldError(path, f"must be a list of at most {limit} {what}" if limit is not None else "must be a list"))
        return []
    return value


def _time(value: Any, path: str, errors: list[FieldError]) -> datetime | None:
    try:
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, str):
            parsed = datetime.fromisoformat(value)
            # In UTC here, as the database stores it: an offset that carries the time past year
            # 9999 or before year 1 is refused on the field instead of overflowing on write.
            return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except (ValueError, OverflowError, OSError):
        pass
    errors.append(FieldError(path, "must be an ISO 8601 time or seconds since the epoch"))
    return None


def _text(value: Any, path: str, errors: list[FieldError], limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit:
        errors.append(FieldError(path, f"must be a string of at most {limit} characters"))
        return ""
    if problem := control_characters(value, allowed="\n\t"):
        errors.append(FieldError(path, problem))
        return ""
    return value


def _metric_problem(key: str, value: int | float) -> str:
    """What is wrong with a DCGM metric's value ("" when nothing)."""
    low, high, integer, unit = METRIC_RANGES.get(key, _GENERIC_RANGE)
    if type(value) is float and not math.isfinite(value):
        return "must be a finite number"
    if integer and type(value) is not int:
        return f"must be an integer from {low} to {high}{' ' + unit if unit else ''}"
    if not low <= value <= high:
        return f"must be from {low} to {high}{' ' + unit if unit else ''}"
    return ""


@dataclass(frozen=True)
class _Shape:
    """What the shortcut still checks for GPUs with one set of fields and value types (the
    types are part of the cache key: numbers, integers where needed): each value's upper bound
    in the dict's order (every lower bound is 0), and memory used and free at most the total."""

    highs: tuple[float, ...]
    memory_fits: Any  # (gpu) -> bool


def _shape(keys: tuple[str, ...]) -> _Shape:
    highs = tuple(MAX_GPUS - 1 if k == "index" else METRIC_RANGES.get(k, _GENERIC_RANGE)[1] for k in keys)
    parts = [k for k in (FB_USED, FB_FREE) if k in keys] if FB_TOTAL in keys else []
    if len(parts) == 2:
        return _Shape(highs, lambda g: g[FB_USED] <= g[FB_TOTAL] and g[FB_FREE] <= g[FB_TOTAL])
    if parts:
        part = parts[0]
        return _Shape(highs, lambda g: g[part] <= g[FB_TOTAL])
    return _Shape(highs, lambda g: True)


_MAX_SHAPES = 1024
_shapes: dict[tuple, _Shape] = {}  # (field names..., value types...) of GPUs seen valid; bounded


def _gpu(raw: Any, report_path: str, position: int, errors: list[FieldError]) -> dict[str, Any]:
    # The hot loop: every GPU of every report. A GPU whose field names and value types were
    # seen valid before (every GPU of a sane agent after its first report) is checked by a few
    # C-level passes over its values (the minimum, each against its bound, which NaN and
    # infinity fail) and the memory comparison, instead of a Python loop over its fields;
    # anything else takes the field-by-field path below, which names what is wrong.
    if type(raw) is dict:
        values = raw.values()
        shape = _shapes.get(signature := (*raw, *map(type, values)))
        if shape is not None and min(values) >= 0 and all(map(le, values, shape.highs)) and shape.memory_fits(raw):
            return dict(raw)
    path = f"{report_path}.gpus[{position}]"
    if not isinstance(raw, dict):
        errors.append(FieldError(path, "must be an object"))
        return {}
    before = len(errors)
    index = raw.get("index")
    if type(index) is not int or not 0 <= index < MAX_GPUS:  # bool is not int here
        errors.append(FieldError(f"{path}.index", f"must be an integer from 0 to {MAX_GPUS - 1}"))
    gpu: dict[str, Any] = {"index": index}
    numeric = True
    for key, value in raw.items():
        if key.startswith("DCGM_FI_"):
            if type(value) is not int and type(value) is not float:
                errors.append(FieldError(f"{path}.{key}", "must be a number"))
            elif problem := _metric_problem(key, value):
                errors.append(FieldError(f"{path}.{key}", problem))
            else:
                gpu[key] = value
        elif key in GPU_TEXT_FIELDS:
            gpu[key] = _text(value, f"{path}.{key}", errors, 100)
            numeric = False
        elif key != "index":
            errors.append(FieldError(f"{path}.{key}", "unknown field; GPU metrics use DCGM field names (DCGM_FI_*)"))
    total = gpu.get(FB_TOTAL)
    for key in (FB_USED, FB_FREE):  # memory in use (or free) cannot exceed the GPU's memory
        if total is not None and gpu.get(key, 0) > total:
            errors.append(FieldError(f"{path}.{key}", f"must not exceed {FB_TOTAL} ({total} MiB)"))
    if numeric and len(errors) == before and len(_shapes) < _MAX_SHAPES and type(raw) is dict:
        _shapes[signature] = _shape(tuple(raw))  # numbers only: text fields take the long path
    return gpu


def _report(raw: Any, path: str, errors: list[FieldError]) -> Report | None:
    if not isinstance(raw, dict):
        errors.append(FieldError(path, "must be an object"))
        return None
    before = len(errors)
    seq = _int(raw.get("seq"), f"{path}.seq", errors, minimum=1)
    at = _time(raw.get("at"), f"{path}.at", errors)
    gpus = [_gpu(g, path, i, errors) for i, g in enumerate(_list(raw.get("gpus"), errors, path, "gpus", MAX_GPUS, "GPUs"))]
    xids = []
    for i, x in enumerate(_list(raw.get("xids"), errors, path, "xids", MAX_XIDS, "Xid events")):
        xpath = f"{path}.xids[{i}]"
        if not isinstance(x, dict):
            errors.append(FieldError(xpath, "must be an object"))
            continue
        code = _int(x.get("xid"), f"{xpath}.xid", errors, maximum=INT_MAX)
        gpu = None if x.get("gpu") is None else _int(x.get("gpu"), f"{xpath}.gpu", errors, maximum=SMALLINT_MAX)
        when = _time(x.get("at", raw.get("at")), f"{xpath}.at", errors)
        if code is not None and when is not None:
            xids.append(Xid(code, when, gpu))
    driver = _text(raw.get("driverVersion"), f"{path}.driverVersion", errors, 40)
    cuda = _text(raw.get("cudaVersion"), f"{path}.cudaVersion", errors, 20)
    if len(errors) > before or seq is None or at is None:
        return None
    return Report(seq, at, driver, cuda, gpus, xids)


CLOCK_SKEW = timedelta(minutes=10)  # how far a node's clock may be off the control plane's
CLOCK_SET = datetime(2000, 1, 1, tzinfo=UTC)  # earlier: a clock never set (a board without a battery starts at 1970)


def clock_fixed(reports: list[Report | None], received_at: datetime | None, sent_at: datetime | None = None) -> tuple[list[Report | None], str]:
    """The reports with their times on the control plane's clock where the node's is off, and
    how it is off ("" when it is not). Kubernetes' node controller times a node's heartbeats by
    its own clock; here the reports' times are kept (a replayed backlog keeps its spacing), so:

    - the batch's `sentAt` (the node's clock as it sent) more than 10 minutes off `received_at`
      measures the offset, and every time it brings nearer `received_at` is moved by it: a clock
      set back to a build date or to 2000-01-02 dated a fatal Xid outside the repair's 24 hours,
      so it was never repaired (review); reports buffered before the clock went off keep their
      times (the offset would carry them decades away);
    - a time still before 2000 (never set) or more than 10 minutes ahead is taken as received:
      an Xid dated 2999 was "in the last 24 h" on Diagnose for ever, one dated 1970 never
      repaired (hostile-input probe); refusing them cost the node its heartbeat (review).

    `received_at` None: kept as sent."""
    if received_at is None:
        return reports, ""
    off: set[str] = set()
    offset = received_at - sent_at if sent_at is not None else timedelta(0)
    if abs(offset) > CLOCK_SKEW:
        off.add(f"is more than 10 minutes {'behind' if offset > timedelta(0) else 'ahead of'} the control plane's")
    else:
        offset = timedelta(0)
    latest = received_at + CLOCK_SKEW

    def fixed(at: datetime) -> datetime:
        try:
            moved = at + offset
        except OverflowError:
            moved = received_at
        if abs(received_at - moved) < abs(received_at - at):  # a backlog stamped before the clock went off keeps its times
            at = moved
        if CLOCK_SET <= at <= latest:
            return at
        off.add("is not set (before 2000)" if at < CLOCK_SET else "is more than 10 minutes ahead of the control plane's")
        return received_at

    def kept(r: Report) -> bool:  # the usual case: as sent
        return not offset and CLOCK_SET <= r.at <= latest and all(CLOCK_SET <= x.at <= latest for x in r.xids)

    out = [r if r is None or kept(r) else replace(r, at=fixed(r.at), xids=[replace(x, at=fixed(x.at)) for x in r.xids]) for r in reports]
    return out, " and ".join(sorted(off))


def batch_parse(data: Any, *, max_batch: int, received_at: datetime | None = None) -> Batch:
    """Check a batch body and return it shaped; raise ValidationError naming each bad field.
    `received_at`: when the control plane received it, for times a node's clock put off."""
    errors: list[FieldError] = []
    if not isinstance(data, dict):
        raise ValidationError("the body must be a JSON object with a `reports` list", field="")
    raw_reports = data.get("reports")
    if not isinstance(raw_reports, list) or not raw_reports or len(raw_reports) > max_batch:
        raise ValidationError(f"must be a list of 1 to {max_batch} reports", field="reports")
    sent_at = None if data.get("sentAt") is None else _time(data["sentAt"], "sentAt", errors)
    reports, clock_off = clock_fixed([_report(r, f"reports[{i}]", errors) for i, r in enumerate(raw_reports)], received_at, sent_at)
    oldest = data.get("oldestSeq")
    oldest = None if oldest is None else _int(oldest, "oldestSeq", errors, minimum=1)
    acks = []
    for i, a in enumerate(_list(data.get("acks"), errors, "", "acks")):
        if not isinstance(a, dict):
            errors.append(FieldError(f"acks[{i}]", "must be an object"))
            continue
        cid = _int(a.get("id"), f"acks[{i}].id", errors, minimum=1)
        ok = False if a.get("ok") is None else a["ok"]  # did the command succeed: `"false"` was read as true
        if type(ok) is not bool:
            errors.append(FieldError(f"acks[{i}].ok", "must be true or false"))
        message = _text(a.get("message"), f"acks[{i}].message", errors, 500)
        if cid is not None and type(ok) is bool:
            acks.append(Ack(cid, ok, message))
    node = data.get("node")
    if node is not None and not isinstance(node, str):
        errors.append(FieldError("node", "must be a string"))
    lowest = min((r.seq for r in reports if r is not None), default=None)
    if oldest is not None and lowest is not None and oldest > lowest:  # every later report would read as a replay, stored never
        errors.append(FieldError("oldestSeq", f"must not be above the batch's lowest seq ({lowest}): it is the oldest report the agent still holds"))
    if errors:
        raise ValidationError(errors)
    return Batch([r for r in reports if r is not None], oldest, acks, node, clock_off)


def node_gpu_errors(batch: Batch, gpu_count: int) -> list[FieldError]:
    """The GPUs a batch names that its node does not have (`batch_parse` cannot know the node):
    a GPU index is one of the node's, 0 to `gpu_count` - 1, and a report lists each GPU once.
    An Xid on GPU 32767 of an 8-GPU node would start a repair of a GPU that is not there, and a
    GPU listed twice would count twice in the pool's GPU memory."""
    errors: list[FieldError] = []
    bound = f"must be from 0 to {gpu_count - 1}: the node has {gpu_count} GPUs" if gpu_count else "must be absent: the node has no GPUs"
    for i, report in enumerate(batch.reports):
        seen: set[int] = set()
        for j, gpu in enumerate(report.gpus):
            if gpu["index"] >= gpu_count:
                errors.append(FieldError(f"reports[{i}].gpus[{j}].index", bound))
            elif gpu["index"] in seen:
                errors.append(FieldError(f"reports[{i}].gpus[{j}].index", f"GPU {gpu['index']} is listed twice in this report"))
            seen.add(gpu["index"])
        errors += [FieldError(f"reports[{i}].xids[{j}].gpu", bound) for j, x in enumerate(report.xids) if x.gpu_index is not None and x.gpu_index >= gpu_count]
    return errors


def gpu_summary(gpus: list[dict[str, Any]]) -> tuple[int, int, float | None]:
    """(memory used MiB, memory total MiB, mean utilisation %) over a report's GPUs. A GPU's
    total is its `FB_TOTAL`, else used + free; one whose total is not known counts in neither,
    so used never passes total (a GPU sending only `FB_USED` stored 1 MiB used of 0)."""
    used = total = 0
    for g in gpus:
        gpu_used = int(g.get(FB_USED, 0) or 0)
        gpu_total = g.get(FB_TOTAL, gpu_used + g[FB_FREE] if FB_FREE in g else None)
        if gpu_total is not None:
            used, total = used + gpu_used, total + int(gpu_total)
    utils = [float(g[GPU_UTIL]) for g in gpus if GPU_UTIL in g]
    return used, total, (sum(utils) / len(utils) if utils else None)
