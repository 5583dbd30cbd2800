"""Shape and check an agent's report batch (pure; no Django). Hand-written rather than a DRF
serializer because it runs for every heartbeat of every node: at 10,000 nodes that is hundreds
of batches a second, and this costs microseconds.

Vocabulary: per-GPU metrics use DCGM field names (`DCGM_FI_DEV_FB_USED`, MiB); any numeric
`DCGM_FI_*` field is kept, so the agent can report more than the server reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pools.core.errors import FieldError, ValidationError

FB_USED = "DCGM_FI_DEV_FB_USED"
FB_TOTAL = "DCGM_FI_DEV_FB_TOTAL"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
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


BIGINT_MAX, INT_MAX, SMALLINT_MAX = 2**63 - 1, 2**31 - 1, 2**15 - 1  # the columns the values go to


def _int(value: Any, path: str, errors: list[FieldError], *, minimum: int = 0, maximum: int = BIGINT_MAX) -> int | None:
    """An integer within the column's range: beyond it is bad input (400), not a database error."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        errors.append(FieldError(path, f"must be an integer from {minimum} to {maximum}"))
        return None
    return value


def _time(value: Any, path: str, errors: list[FieldError]) -> datetime | None:
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, str):
            parsed = datetime.fromisoformat(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
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
    return value


_NUMBER_TYPES = frozenset({int, float})  # not bool: type(True) is bool
_MAX_KNOWN_KEYS = 4096
_known_keys = {"index"}  # "index" and the DCGM field names seen valid; bounded (any DCGM_FI_* is allowed)


def _gpu(raw: Any, report_path: str, position: int, errors: list[FieldError]) -> dict[str, Any]:
    # The hot loop: every GPU of every report. A GPU whose fields are all known and all
    # numbers (every one from a sane agent) is checked with two set operations instead of
    # a Python loop over its fields; anything else takes the field-by-field path below.
    if type(raw) is dict and type(index := raw.get("index")) is int and index >= 0 \
            and _known_keys.issuperset(raw) and _NUMBER_TYPES.issuperset(map(type, raw.values())):
        return dict(raw)
    path = f"{report_path}.gpus[{position}]"
    if not isinstance(raw, dict):
        errors.append(FieldError(path, "must be an object"))
        return {}
    index = raw.get("index")
    if type(index) is not int or index < 0:  # bool is not int here
        errors.append(FieldError(f"{path}.index", "must be an integer >= 0"))
    gpu: dict[str, Any] = {"index": index}
    for key, value in raw.items():
        if key.startswith("DCGM_FI_"):
            if type(value) is int or type(value) is float:
                gpu[key] = value
                if len(_known_keys) < _MAX_KNOWN_KEYS:
                    _known_keys.add(key)
            else:
                errors.append(FieldError(f"{path}.{key}", "must be a number"))
        elif key in GPU_TEXT_FIELDS:
            gpu[key] = _text(value, f"{path}.{key}", errors, 100)
        elif key != "index":
            errors.append(FieldError(f"{path}.{key}", "unknown field; GPU metrics use DCGM field names (DCGM_FI_*)"))
    return gpu


def _report(raw: Any, path: str, errors: list[FieldError]) -> Report | None:
    if not isinstance(raw, dict):
        errors.append(FieldError(path, "must be an object"))
        return None
    before = len(errors)
    seq = _int(raw.get("seq"), f"{path}.seq", errors, minimum=1)
    at = _time(raw.get("at"), f"{path}.at", errors)
    gpus_raw = raw.get("gpus", [])
    if not isinstance(gpus_raw, list) or len(gpus_raw) > MAX_GPUS:
        errors.append(FieldError(f"{path}.gpus", f"must be a list of at most {MAX_GPUS} GPUs"))
        gpus_raw = []
    gpus = [_gpu(g, path, i, errors) for i, g in enumerate(gpus_raw)]
    xids_raw = raw.get("xids", [])
    if not isinstance(xids_raw, list) or len(xids_raw) > MAX_XIDS:
        errors.append(FieldError(f"{path}.xids", f"must be a list of at most {MAX_XIDS} Xid events"))
        xids_raw = []
    xids = []
    for i, x in enumerate(xids_raw):
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


def batch_parse(data: Any, *, max_batch: int) -> Batch:
    """Check a batch body and return it shaped; raise ValidationError naming each bad field."""
    errors: list[FieldError] = []
    if not isinstance(data, dict):
        raise ValidationError("the body must be a JSON object with a `reports` list", field="")
    raw_reports = data.get("reports")
    if not isinstance(raw_reports, list) or not raw_reports or len(raw_reports) > max_batch:
        raise ValidationError(f"must be a list of 1 to {max_batch} reports", field="reports")
    reports = [_report(r, f"reports[{i}]", errors) for i, r in enumerate(raw_reports)]
    oldest = data.get("oldestSeq")
    oldest = None if oldest is None else _int(oldest, "oldestSeq", errors, minimum=1)
    acks = []
    for i, a in enumerate(data.get("acks") or []):
        if not isinstance(a, dict):
            errors.append(FieldError(f"acks[{i}]", "must be an object"))
            continue
        cid = _int(a.get("id"), f"acks[{i}].id", errors, minimum=1)
        if cid is not None:
            acks.append(Ack(cid, bool(a.get("ok")), _text(a.get("message"), f"acks[{i}].message", errors, 500)))
    node = data.get("node")
    if node is not None and not isinstance(node, str):
        errors.append(FieldError("node", "must be a string"))
    if errors:
        raise ValidationError(errors)
    return Batch([r for r in reports if r is not None], oldest, acks, node)


def gpu_summary(gpus: list[dict[str, Any]]) -> tuple[int, int, float | None]:
    """(memory used MiB, memory total MiB, mean utilisation %) over a report's GPUs."""
    used = sum(int(g.get(FB_USED, 0) or 0) for g in gpus)
    total = sum(int(g.get(FB_TOTAL, 0) or 0) for g in gpus)
    utils = [float(g[GPU_UTIL]) for g in gpus if GPU_UTIL in g]
    return used, total, (sum(utils) / len(utils) if utils else None)
