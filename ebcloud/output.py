"""What the CLI prints: kubectl-style column tables and ages, or the server's objects as YAML/JSON.

Nothing the server sends reaches the terminal raw: a control character (C0, DEL, C1) in any
value would steer it (`\\x1b]0;...\\x07` retitles the window, `\\x1b[2J` clears it), so every
printer goes through `escape`, which writes such a character as `\\x1b`. Tables and `describe`
escape each value (newline and tab fold into a space there); `echo`, the only way the commands
print, escapes what is left except newline and tab, which multi-line text keeps. YAML and JSON
escape in their own syntax (`"\\e"`, `"\\u001b"`), so machine output stays parseable.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import click
import yaml

NONE = "<none>"


# --- control characters ----------------------------------------------------------------------

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1


@functools.cache
def _escapes(keep: str) -> dict[int, str]:
    codes = [*range(0x20), *range(0x7F, 0xA0)]
    return {code: f"\\x{code:02x}" for code in codes if chr(code) not in keep}


def escape(text: str, *, keep: str = "") -> str:
    """`text` with every control character but those in `keep` written as `\\x1b` (the one
    escaping function of every printer)."""
    return text.translate(_escapes(keep))


def echo(text: Any = "", *, err: bool = False) -> None:
    """Print a line of human output: control characters escaped, newline and tab kept."""
    click.echo(escape(str(text), keep="\n\t"), err=err)


# --- time ------------------------------------------------------------------------------------


def parse_time(value: Any) -> datetime | None:
    if not value or not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def human_duration(seconds: float) -> str:
    """kubectl's HumanDuration: `45s`, `5m30s`, `42m`, `3h`, `2d4h`, `30d`, `1y20d`."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return f"{hours // 24 // 365}y{rest}d" if rest else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(value: Any, now: datetime | None = None) -> str:
    moment = parse_time(value)
    if moment is None:
        return NONE
    return human_duration(((now or datetime.now(UTC)) - moment).total_seconds())


# --- machine output --------------------------------------------------------------------------


_JSON_RAW = re.compile("[\x7f-\x9f]")  # json.dumps escapes C0 itself, not DEL and C1


def to_json(data: Any) -> str:
    text = json.dumps(data, indent=2, ensure_ascii=False)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)  # only inside strings


class _Dumper(yaml.SafeDumper):
    """PyYAML escapes control characters in double-quoted scalars only; it would write NEL
    (\\x85) or U+2028 raw in a plain or single-quoted one. Such strings are double-quoted."""


_YAML_QUOTE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = '"' if _YAML_QUOTE.search(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def to_yaml(data: Any) -> str:
    return yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True
    ).rstrip("\n")


def render(data: Any, fmt: str) -> str:
    return to_json(data) if fmt == "json" else to_yaml(data)


# --- tables ----------------------------------------------------------------------------------


def table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, with_header: bool = True
) -> str:
    """Left-aligned columns separated by three spaces, like kubectl's tabwriter."""
    return "\n".join(table_lines(headers, rows, with_header=with_header))


def table_lines(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    with_header: bool = True,
    widths: list[int] | None = None,
) -> list[str]:
    cells = [[_cell(value) for value in row] for row in rows]
    body = ([list(headers)] if with_header else []) + cells
    if widths is None:
        widths = [
            max(len(row[i]) for row in body) if body else len(headers[i])
            for i in range(len(headers))
        ]
    lines = []
    for row in body:
        padded = [value.ljust(widths[i]) for i, value in enumerate(row[:-1])] + [row[-1]]
        lines.append("   ".join(padded).rstrip())
    return lines


def _cell(value: Any) -> str:
    """One table cell: control characters escaped, then runs of whitespace (newline and tab
    among them) folded into one space."""
    if value is None or value == "":
        return NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    return " ".join(escape(str(value), keep="\n\t").split())


# --- pools -----------------------------------------------------------------------------------

POOL_HEADERS = ["NAME", "TEAM", "GPU", "NODES", "MIN", "MAX", "PHASE", "AGE"]
POOL_WIDE_HEADERS = [*POOL_HEADERS, "NODE-TYPE", "ZONES", "LEASE", "PREEMPTIBLE", "REASON"]


def pool_zones(spec: dict) -> list[str]:
    """The pool's zones, preferred first: `spec.zones`, or the article's one-zone `spec.region`."""
    zones = spec.get("zones")
    if isinstance(zones, list) and zones:
        return [str(zone) for zone in zones]
    return [str(spec["region"])] if spec.get("region") else []


def pool_nodes(pool: dict) -> str:
    nodes = (pool.get("status") or {}).get("nodes")
    if not isinstance(nodes, dict):
        return "-"
    return f"{nodes.get('ready', 0)}/{nodes.get('current', 0)}"


def pool_row(pool: dict, *, wide: bool = False, now: datetime | None = None) -> list[Any]:
    metadata, spec, status = (
        pool.get("metadata") or {},
        pool.get("spec") or {},
        pool.get("status") or {},
    )
    count = spec.get("nodeCount") or {}
    row = [
        metadata.get("name"),
        metadata.get("team"),
        spec.get("gpuModel"),
        pool_nodes(pool),
        count.get("min"),
        count.get("max"),
        status.get("phase"),
        age(metadata.get("creationTimestamp"), now),
    ]
    if wide:
        row += [
            spec.get("nodeType"),
            ",".join(pool_zones(spec)) or None,
            spec.get("leaseType"),
            spec.get("preemptible"),
            status.get("pendingReason"),
        ]
    return row


def pool_table(pools: list[dict], *, wide: bool = False, now: datetime | None = None) -> str:
    return table(
        POOL_WIDE_HEADERS if wide else POOL_HEADERS,
        [pool_row(p, wide=wide, now=now) for p in pools],
    )


# --- orders ----------------------------------------------------------------------------------

ORDER_HEADERS = ["ID", "POOL", "TEAM", "KIND", "NODES", "AMOUNT", "STATUS", "AGE"]
ORDER_WIDE_HEADERS = [
    *ORDER_HEADERS,
    "GPU",
    "ZONE",
    "LEASE",
    "REQUESTED-BY",
    "DECIDED-BY",
    "PAID",
    "REASON",
]


def order_row(order: dict, *, wide: bool = False, now: datetime | None = None) -> list[Any]:
    amount = order.get("amount")
    row = [
        order.get("id"),
        order.get("pool"),
        order.get("team"),
        order.get("kind"),
        order.get("nodeCount"),
        f"{amount} {order.get('currency') or ''}".strip() if amount is not None else None,
        order.get("status"),
        age(order.get("createdAt"), now),
    ]
    if wide:
        lease = (
            f"{order.get('leaseType')} ({order.get('leaseMonths')}mo)"
            if order.get("leaseType")
            else None
        )
        row += [
            order.get("gpuModel"),
            order.get("zone"),
            lease,
            order.get("requestedBy"),
            order.get("decidedBy"),
            (order.get("paidAt") or "")[:16].replace("T", " ") or None,
            order.get("reason"),
        ]
    return row


def order_table(orders: list[dict], *, wide: bool = False, now: datetime | None = None) -> str:
    return table(
        ORDER_WIDE_HEADERS if wide else ORDER_HEADERS,
        [order_row(o, wide=wide, now=now) for o in orders],
    )


# --- events ----------------------------------------------------------------------------------

EVENT_HEADERS = ["TYPE", "REASON", "AGE", "COUNT", "MESSAGE"]


def chronological(events: list[dict]) -> list[dict]:
    """The API lists newest first; tables read top to bottom, oldest first, like kubectl."""
    return sorted(
        events,
        key=lambda e: (
            parse_time(e.get("lastTimestamp")) or datetime.min.replace(tzinfo=UTC),
            e.get("id") or 0,
        ),
    )


def event_row(event: dict, now: datetime | None = None) -> list[Any]:
    return [
        event.get("type"),
        event.get("reason"),
        age(event.get("lastTimestamp"), now),
        event.get("count"),
        event.get("message"),
    ]


def event_table(events: list[dict], now: datetime | None = None) -> str:
    return table(EVENT_HEADERS, [event_row(e, now) for e in chronological(events)])


def event_age(event: dict, now: datetime | None = None) -> str:
    """kubectl describe's Age column: `5m`, or `2m (x3 over 10m)` for a repeated event."""
    count = event.get("count") or 1
    if count > 1:
        return f"{age(event.get('lastTimestamp'), now)} (x{count} over {age(event.get('firstTimestamp'), now)})"
    return age(event.get("firstTimestamp") or event.get("lastTimestamp"), now)


def event_source(event: dict) -> str:
    if event.get("actor"):
        return str(event["actor"])
    if event.get("node"):
        return f"node/{event['node']}"
    return "control-plane"


# --- pods ------------------------------------------------------------------------------------

POD_HEADERS = ["NAMESPACE", "NAME", "PRIORITY", "GPUS", "STATUS", "NODE", "AGE"]
POD_WIDE_HEADERS = [*POD_HEADERS, "TEAM", "POOL", "REASON", "MESSAGE"]


def pod_gpus(pod: dict) -> str:
    """`4`, or `0.25` for a share of one GPU (the ebcloud.io/gpu-milli resource, in thousandths)."""
    spec = pod.get("spec") or {}
    asked = {"nvidia.com/gpu": 0, "ebcloud.io/gpu-milli": 0}
    for container in spec.get("containers") or []:
        resources = (container or {}).get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for key in asked:
            try:  # a limit alone sets the request (Kubernetes)
                asked[key] += int(requests.get(key, limits.get(key, 0)))
            except (TypeError, ValueError):
                pass
    whole, milli = asked["nvidia.com/gpu"], asked["ebcloud.io/gpu-milli"]
    return f"{milli / 1000:g}" if milli and not whole else str(whole)


def pod_row(pod: dict, *, wide: bool = False, now: datetime | None = None) -> list[Any]:
    metadata, spec, status = (
        pod.get("metadata") or {},
        pod.get("spec") or {},
        pod.get("status") or {},
    )
    row = [
        metadata.get("namespace"),
        metadata.get("name"),
        spec.get("priority", 0),
        pod_gpus(pod),
        status.get("phase"),
        status.get("nodeName"),
        age(metadata.get("creationTimestamp"), now),
    ]
    if wide:
        row += [
            metadata.get("team"),
            status.get("pool"),
            status.get("reason"),
            status.get("message"),
        ]
    return row


def pod_table(pods: list[dict], *, wide: bool = False, now: datetime | None = None) -> str:
    return table(
        POD_WIDE_HEADERS if wide else POD_HEADERS, [pod_row(p, wide=wide, now=now) for p in pods]
    )


BUDGET_HEADERS = ["NAMESPACE", "NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED", "AGE"]


def budget_table(budgets: list[dict], *, wide: bool = False, now: datetime | None = None) -> str:
    """`kubectl get pdb`'s columns; wide adds the team and why (the DisruptionAllowed message)."""
    rows = []
    for budget in budgets:
        metadata, spec = budget.get("metadata") or {}, budget.get("spec") or {}
        status = budget.get("status") or {}
        row = [metadata.get("namespace"), metadata.get("name"), spec.get("minAvailable", "N/A"),
               spec.get("maxUnavailable", "N/A"), status.get("disruptionsAllowed"),
               age(metadata.get("creationTimestamp"), now)]  # fmt: skip
        if wide:
            conditions = status.get("conditions") or [{}]
            row += [metadata.get("team"), conditions[0].get("message")]
        rows.append(row)
    return table([*BUDGET_HEADERS, "TEAM", "MESSAGE"] if wide else BUDGET_HEADERS, rows)


# A page of the web console a hint links to, as the server writes it (relative to itself).
_CONSOLE_PATH = re.compile(r"(?<![\w/:.])(/(?:pools|orders|costs)/\S*)")


def pod_why(pod: dict, *, server: str = "") -> str:
    """`ebcloud pod why`: the phase, the kube-scheduler message and each hint, a page a hint
    links to made a whole URL on `server` (a terminal cannot follow `/pools/new/?team=...`)."""
    metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
    ref = f"{metadata.get('namespace')}/{metadata.get('name')}"
    phase = status.get("phase")
    lines = [
        f"pod/{ref} is {phase}"
        + (
            f" on node {status['nodeName']} (pool {status.get('pool')})"
            if status.get("nodeName") and phase == "Running"
            else ""
        )
    ]
    if status.get("reason") and phase != "Running":
        lines.append(f"Reason:  {status['reason']}")
    if status.get("message"):
        lines.append(f"Message: {status['message']}")
    hints = status.get("hints") or []
    if hints:
        lines.append("Hints:")
        for hint in hints:
            hint = _CONSOLE_PATH.sub(lambda found: server + found.group(1), str(hint)) if server else str(hint)
            first, *rest = hint.splitlines()
            lines.append(f"  - {first}")
            lines += [f"    {line}" for line in rest]
    return "\n".join(lines)


# --- fragmentation ---------------------------------------------------------------------------

FRAGMENTATION_HEADERS = [
    "NODE",
    "POOL",
    "GPUS",
    "ALLOCATED",
    "FREE-GPUS",
    "FRAGMENTED-GPUS",
    "UNDERUSED",
]


def fragmentation_text(report: dict) -> str:
    underused = set(report.get("underusedNodes") or [])
    rows = [
        [
            n.get("name"),
            n.get("pool"),
            n.get("gpuCount"),
            f"{n.get('allocatedPct')}%",
            f"{n.get('freeGpus'):g}",
            f"{n.get('fragmentationGpus'):g}",
            "yes" if n.get("name") in underused else "no",
        ]
        for n in report.get("nodes") or []
    ]
    lines = [table(FRAGMENTATION_HEADERS, rows)] if rows else ["No nodes."]
    lines.append("")
    lines.append(
        f"GPUs: {report.get('allocatedGpus'):g}/{report.get('totalGpus'):g} allocated, "
        f"{report.get('unallocatedPct')}% unallocated, {report.get('fragmentationGpus'):g} fragmented; "
        f"nodes allocated < 50%: {', '.join(report.get('underusedNodes') or []) or 'none'}"
    )
    histogram = report.get("freeFragmentHistogram") or {}
    lines.append("Free milli per GPU: " + ", ".join(f"{k}: {v}" for k, v in histogram.items()))
    plan = report.get("plan")
    if plan is not None:
        lines.append("")
        moves = plan.get("moves") or []
        if moves:
            lines.append(
                table(
                    ["POD", "FROM", "TO", "GPUS"],
                    [
                        [
                            m.get("pod"),
                            m.get("from"),
                            m.get("to"),
                            ",".join(map(str, m.get("gpuIndices") or [])) or None,
                        ]
                        for m in moves
                    ],
                )
            )
        else:
            lines.append("Repack plan: no moves free a running node.")
        freed = plan.get("freedNodes") or []
        lines.append(
            f"Freed nodes: {', '.join(freed) or 'none'}; GPU-hours saved per week: {plan.get('gpuHoursSavedPerWeek')}"
        )
        empty = plan.get("emptyNodes") or []
        lines.append(f"Nodes already running no pods: {', '.join(empty) or 'none'}")
        if skipped := plan.get("skipped") or {}:
            lines.append(f"Running nodes that stay ({len(skipped)}): {'; '.join(f'{node}: {why}' for node, why in skipped.items())}")
        freed_gpus, room = plan.get("shareGpusFreed") or 0, plan.get("sharePlacements") or []
        if freed_gpus or room:
            gains = [f"frees {freed_gpus} whole GPU(s)"] if freed_gpus else []
            if room:
                gains.append(f"starts {len(room)} waiting pod(s): {', '.join(p['pod'] for p in room)}")
            lines.append(
                f"Packing GPU shares: moving {len(plan.get('shareMoves') or [])} pod(s) {' and '.join(gains)} "
                "(apply with --apply --shares)"
            )
        else:
            lines.append("Packing GPU shares: no moves free a whole GPU or start a waiting pod.")
    if report.get("applied"):
        lines.append(
            f"Applied: moved {len(report['applied'])} pod(s): {', '.join(report['applied'])}"
        )
    if report.get("started"):
        lines.append(f"Started: {len(report['started'])} waiting pod(s): {', '.join(report['started'])}")
    return "\n".join(lines)
