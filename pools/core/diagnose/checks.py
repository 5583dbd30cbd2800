"""The article's self-check table (seed T5) as live checks over one pool's state. Pure core.

The table (§5.4) maps a symptom to its likely causes and the first thing to do:

    scale-up keeps failing     quota, stock, balance               pool events and pendingReason (T1)
    pods Pending a long time   affinity / taint / request mismatch kubectl describe pod (T2)
    GPU errors mid-training    driver vs CUDA, hardware fault      GPU monitoring log, the Xid (T3)
    GPU utilisation low        IO-bound loading, oversized spec    data-loading share, packing report (T4)
    bill rising                cross-zone traffic, idle nodes      cost detail by labels, traffic bill

`diagnose(snapshot, now)` runs one check per row on a `PoolSnapshot` (plain data loaded by
`pools.selectors.diagnose`) and says, for each, what it found (numbers and names), the likely cause
and the first action, naming the command or page. A last check flags a scaling spec that cannot
burst for the pool's pods (`combine: All` with whole-node pods; docs/benchmarks.md, autoscaler
replay). Standard library and other pure cores only; `now` is an argument.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from pools.core.autoscaling import DEFAULT_TOLERANCE, ScalingSpec, evaluate_metric
from pools.core.diagnose import no_data
from pools.core.diagnose.blockers import (  # noqa: F401 - the blocker kinds are part of this API
    AFFINITY,
    FITS,
    GPU_MODEL,
    INVALID_SPEC,
    TAINT,
    TOO_LARGE,
    blockers_finding,
    blockers_fixes,
    cause_words,
)
from pools.core.diagnose.limits import at_limit_advice
from pools.core.diagnose.snapshot import (  # noqa: F401 - the snapshot types are part of this API
    CostInfo,
    EventInfo,
    FragmentationInfo,
    GpuErrorInfo,
    NodeInfo,
    OrderInfo,
    PendingPod,
    PoolSnapshot,
    RunningPod,
    UtilisationInfo,
    pending_pod_facts,
)
from pools.core.durations import format_duration as go_duration
from pools.core.lifecycle import PROVISIONING_PHASES, order_refused
from pools.core.lifecycle import format_duration as age
from pools.core.repair import CUDA_DRIVER_MISMATCH, classify
from pools.core.scheduling.waiting import USUAL_START
from pools.core.spec import POOL_SCALING_DEFAULTS
from pools.core.stall_messages import quota_team
from pools.core.words import plural

OK, WARNING, FAILING, UNKNOWN = "ok", "warning", "failing", "unknown"
STATUSES = (FAILING, WARNING, UNKNOWN, OK)  # worst first
WINDOW = timedelta(hours=24)  # how far back every check looks
PREVIOUS_DAYS = 7  # the bill of the last 24 h is compared with the daily average of the 7 days before
SLOW = timedelta(minutes=15)  # O4: trigger -> Running takes 5-10 min; over 15 min is a fault
RECENT = timedelta(hours=1)  # a failure seen this recently is still happening
LOW_UTILISATION_PCT = 30.0  # T4
BUSY_ALLOCATION_PCT = 70.0  # GPUs this allocated yet under 30% busy: the jobs wait on data
NETWORK_SHARE = Decimal("0.05")  # O1: network is ~5% of a pool's bill
RISING = Decimal("1.5")  # a cost 1.5x its previous daily average is rising
MAX_DETAILS = 10
COST_EXPORT = "ebcloud cost export --by-labels team,project,gpu-class --detail"


# --------------------------------------------------------------------------------------------
# Checks


@dataclass(frozen=True)
class Check:
    id: str
    title: str  # the symptom, as the article's table names it
    status: str  # ok | warning | failing | unknown (no data)
    found: str  # what the check saw, with numbers and names
    cause: str = ""  # the likely cause
    action: str = ""  # the first action: a command or a page
    requirements: tuple[str, ...] = ()
    details: tuple[str, ...] = ()  # one line per pod, node, event... (at most MAX_DETAILS)


def overall(checks: Sequence[Check]) -> str:
    """The worst status: failing, then warning, then unknown, then ok."""
    present = {c.status for c in checks}
    return next((s for s in STATUSES if s in present), OK)


def _gpus(value: float) -> str:
    return f"{value:g}"


# --- T1: scale-up keeps failing ---------------------------------------------------------------

QUOTA, STOCK, BALANCE, APPROVAL, INIT, NO_FIT = "quota", "stock", "balance", "approval", "init", "no-fit"
SCALE_UP_REASONS = {
    "QuotaExceeded": QUOTA,
    "OutOfStock": STOCK,
    "InsufficientBalance": BALANCE,
    "PaymentDeclined": BALANCE,
    "OrderPending": APPROVAL,
    "OrderRejected": APPROVAL,
    "BaselineNotOrdered": APPROVAL,
    "ImagePullFailed": INIT,
    "DriverInstallFailed": INIT,
    "KubeletInstallFailed": INIT,
    "KubeletJoinTimeout": INIT,
    "ProvisionFailed": INIT,
    "ProvisioningFailed": INIT,
    "SlowCapacity": INIT,
    "ProvisionTimeout": INIT,
    "NotTriggerScaleUp": NO_FIT,
}
BUCKET_ORDER = (QUOTA, STOCK, BALANCE, APPROVAL, INIT, NO_FIT)


def _prefix(text: str) -> str:
    word = ""
    for ch in text.strip():
        if not ch.isalpha():
            break
        word += ch
    return word


def _scale_up_advice(s: PoolSnapshot, bucket: str, orders: list[OrderInfo], team: str | None = None) -> tuple[str, str]:  # team: whose own quota held it
    describe = f"`ebcloud node-pool describe {s.name}` (pendingReason) and `ebcloud node-pool events {s.name}`"
    pending = next((o for o in orders if o.status == "Pending"), None)
    return {
        QUOTA: (f"GPU quota exhausted: quotas are per region and per GPU model ({s.region}, {s.gpu_model}), so another model's room does not help"
                + (f"; team {team} has a quota of its own there, which it reached whatever room the region has left." if team else "."),
                f"Ask a platform admin to raise the {s.region} {s.gpu_model} quota{f' of team {team}' if team else ''} or free GPUs held elsewhere; check {describe}."),
        STOCK: (f"No {s.gpu_model} stock in {s.zone}: popular models run out in busy zones.",
                f"Add a fallback zone with stock (the OutOfStock message lists them) to the pool's spec.zones after {s.zone}, e.g. `zones: [{s.zone}, <zone with stock>]`: nodes are then ordered there while {s.zone} is out of stock; see {describe}."),
        BALANCE: ("The order is unpaid: the account balance is too low or the payment was declined (a monthly scale-up is a new order).",
                  f"Top up the account; the controller retries the payment every pass. Check {describe}."),
        APPROVAL: ("Monthly capacity waits for a platform admin's decision, or the order was rejected.",
                   f"Ask a platform admin to approve order #{pending.id} (`ebcloud order approve {pending.id}`)." if pending
                   else f"Read the rejection reason in {describe}, fix the spec and request the capacity again."),
        INIT: ("Machines were bought but did not become Ready: the image pull or the init script (driver, kubelet) failed or is slow.",
               f"Find the failing step in `ebcloud node-pool events {s.name}` (the node's Warning events), then read that node agent's log; pin a prewarmed, validated spec.systemImage ({s.system_image or 'the default'})."),
        NO_FIT: ("The autoscaler wanted more nodes, but no Pending pod would fit a new node of this pool.",
                 "Fix the pods first: see the check 'Pods Pending for a long time'."),
    }[bucket]  # fmt: skip


MADE_GOOD = ("Pending", "Approved", "Paying", "Paid")  # a later order in these asks for, or holds, what a refusal did not give


def check_scale_up(s: PoolSnapshot, now: datetime) -> Check:
    evidence: list[tuple[str, str, bool]] = []  # (bucket, line, still happening)
    for part in filter(None, (p.strip() for p in s.pending_reason.split(";"))):
        bucket = SCALE_UP_REASONS.get(_prefix(part))
        if bucket:
            evidence.append((bucket, f"pendingReason: {part}", bucket != APPROVAL or "Rejected" in part))
    for e in sorted(s.events, key=lambda e: e.last_seen, reverse=True):
        bucket = SCALE_UP_REASONS.get(e.reason)
        if e.reason == "ProvisionTimeout" and "last error: OutOfStock" in e.message:  # a burst node given up: its last error's cause
            bucket = STOCK
        if bucket and bucket != APPROVAL and e.last_seen >= now - WINDOW:  # orders speak for approvals
            times = f" ×{e.count}" if e.count > 1 else ""
            evidence.append((bucket, f"{e.reason}{times} ({age(now - e.last_seen)} ago): {e.message}", e.last_seen >= now - RECENT))
    orders = list(s.orders)
    for o in orders:  # a withdrawal the lead chose failed nothing; a refusal a later order made good is over
        if order_refused(o.status, o.reason) and not any(later.id > o.id and later.status in MADE_GOOD for later in orders):
            evidence.append((APPROVAL, f"order #{o.id} {o.status}: {o.reason or 'no reason given'}", False))
    if not any(b == APPROVAL for b, _, _ in evidence):
        evidence += [(APPROVAL, f"order #{o.id} awaits approval", False) for o in orders if o.status == "Pending"]
    for n in s.live_nodes():
        if n.phase in PROVISIONING_PHASES and now - n.created_at >= SLOW:
            error = f", last error: {n.last_error}" if n.last_error else ""
            evidence.append((INIT, f"node {n.name} still {n.phase} {age(now - n.created_at)} after it was requested{error}", True))
    title, reqs = "Scale-up keeps failing", ("T1", "T5", "O4")
    if not evidence:
        ready = sum(1 for n in s.live_nodes() if n.phase == "Ready")
        return Check("scale-up", title, OK, f"No quota, stock, payment or provisioning failure in the last 24 h; phase {s.phase}, {ready} of {len(s.live_nodes())} live node(s) Ready.", requirements=reqs)
    buckets = Counter(b for b, _, _ in evidence)
    first = next(b for b in BUCKET_ORDER if b in buckets)
    cause, action = _scale_up_advice(s, first, orders, next((t for b, line, _ in evidence if b == QUOTA and (t := quota_team(line))), None))
    status = FAILING if any(now_ for _, _, now_ in evidence) else WARNING
    lines = [line for _, line, _ in evidence]
    found = f"{plural(len(lines), 'sign')} of a stalled scale-up: " + "; ".join(lines[:3]) + ("; …" if len(lines) > 3 else "")
    return Check("scale-up", title, status, found, cause, action, reqs, tuple(lines[:MAX_DETAILS]))


# --- T2: pods Pending for a long time --------------------------------------------------------

SKEW, ON_THE_WAY, AT_MAX, NO_BURST, WAITING = "scheduler-skew", "nodes-on-the-way", "at-max", "no-burst", "waiting"
UNAVAILABLE = "node-unavailable"  # the room is on nodes the cluster runs no pod on (`NodeInfo.cluster_fault`)
# What the pod cannot change about the pool (model, size) first: no taint or label advice helps those.
PENDING_ORDER = (INVALID_SPEC, TOO_LARGE, GPU_MODEL, TAINT, AFFINITY, UNAVAILABLE, SKEW, ON_THE_WAY, AT_MAX, NO_BURST, WAITING)
STUCK = (INVALID_SPEC, TOO_LARGE, GPU_MODEL, TAINT, AFFINITY)  # waiting does not fix these


def _on_the_way(s: PoolSnapshot) -> tuple[OrderInfo | None, int]:
    """Capacity the pool is already getting: its first order awaiting approval, its nodes starting."""
    starting = sum(1 for n in s.live_nodes() if n.phase in PROVISIONING_PHASES)
    return next((o for o in s.orders if o.status == "Pending"), None), starting


def _pending_category(s: PoolSnapshot, pod: PendingPod) -> str:
    if pod.blocker != FITS:
        return pod.blocker
    if roomy := _roomy(s, pod):
        return SKEW if any(not n.cluster_fault for n in roomy) else UNAVAILABLE
    if any(_on_the_way(s)):
        return ON_THE_WAY
    if len(s.live_nodes()) >= s.max_nodes or s.at_burst_limit():
        return AT_MAX
    if s.scaling is None or not s.burst_enabled:
        return NO_BURST
    return WAITING


def _roomy(s: PoolSnapshot, pod: PendingPod) -> list[NodeInfo]:
    return [n for n in s.live_nodes() if n.phase == "Ready" and n.gpu_count - n.allocated_gpus >= pod.gpus]


def _pending_advice(s: PoolSnapshot, category: str, pod: PendingPod) -> tuple[str, str]:
    """The cause and first action for the pod's category; a pod that fails several checks gets
    every one with its fix (`blockers_finding`), else the scheduler's hint about this pool."""
    cause, action = _category_advice(s, category, pod)
    if len(pod.blockers) >= 2:
        if category in (GPU_MODEL, TOO_LARGE):  # its own advice first (run elsewhere); a toleration only with the rest
            return cause + blockers_finding(pod.blockers), f"{action} To run it on this pool, make every change: {blockers_fixes(pod.blockers)}"
        return cause + blockers_finding(pod.blockers), f"Run {_why(pod)}. Make every change, or the pod stays Pending on the next check: {blockers_fixes(pod.blockers)}"
    # The hint about this pool (each hint names its pool), not the first one, which may be about another:
    # what keeps the pod off it, or, for a full pool, which of waiting, preemption and a repack can make room.
    ours = next((h for h in pod.hints if h.startswith(f"pool {s.name} (")), None)
    return cause, f"{action} The scheduler's hint: {ours}" if ours and category in (*STUCK, AT_MAX) else action


def _category_advice(s: PoolSnapshot, category: str, pod: PendingPod) -> tuple[str, str]:
    why = _why(pod)
    taints, missing = ", ".join(s.taints) or "none", ", ".join(b.taint for b in pod.blockers if b.kind == TAINT)
    order, starting = _on_the_way(s)
    models = ", ".join(pod.gpu_models) or "other models"
    unavailable = next((f"{n.name}: {n.cluster_fault}" for n in _roomy(s, pod) if n.cluster_fault), "")
    return {
        INVALID_SPEC: (f"The scheduler cannot read {pod.key}: an earlier release stored it with a field the scheduler refuses ({pod.reason}), so no node is tried for it.",
                       f"Delete {pod.key} and create it again from its manifest (`ebcloud pod get {pod.key} -o yaml` shows what was stored)."),
        TOO_LARGE: (f"The request exceeds allocatable: {pod.key} asks for {_gpus(pod.gpus)} GPU(s) and its CPU/memory, a {s.node_type} node has {plural(s.gpus_per_node, 'GPU')} ({pod.reason}).",
                    f"Run {why}; split the job into pods that fit one node, or use a pool of larger nodes."),
        TAINT: (f"Taint not tolerated: the pool's nodes carry {taints} and {pod.key} has no matching toleration" + (f" for {missing}." if missing else "."),
                f"Run {why}, then add the toleration to the pod spec."),
        AFFINITY: (f"Affinity label missing on nodes: {pod.key} tolerates the pool's taint but its nodeSelector/affinity asks for a label the pool's nodes do not carry.",
                   f"Run {why}; add the label under spec.nodeLabels of the pool, or fix the pod's affinity."),
        GPU_MODEL: (f"GPU model not allowed: the pod's ebcloud.io/gpu-models annotation asks for {models}, and this pool's nodes have {s.gpu_model}; no label, taint or size of this pool changes that.",
                    f"Run {why}; if the job can run on {s.gpu_model}, add it to the pod's ebcloud.io/gpu-models annotation, otherwise run the pod on a pool of {models} (the pod page says which, or what to order)."),
        UNAVAILABLE: (f"The pool's free GPUs are on nodes the cluster runs no pod on ({unavailable}), so the scheduler places nothing there and the autoscaler does not count that room.",
                      f"Bring the Node back: restart its kubelet (a deleted Node registers again then) or its GPU device plugin; `ebcloud node-pool events {s.name}` says when it stopped taking pods."),
        SKEW: ("A Ready node of the pool has the GPUs free, yet the pod stays Pending: the scheduler may not see the pool's nodes (a scheduler plugin whose version or configuration lags hides new nodes).",
               f"Run {why}: if it counts fewer nodes than the pool has Ready, check the scheduler plugin's version and configuration."),
        ON_THE_WAY: (("No Ready node has room yet; the pool's capacity is on its way: "
                      + (f"order #{order.id} awaits approval by a platform admin." if order else f"{plural(starting, 'node')} starting.")),
                     (f"Ask a platform admin to approve order #{order.id} (`ebcloud order approve {order.id}`); the pod runs once a node is Ready." if order
                      else f"Wait: a new node is usually Ready within {USUAL_START}; past 15 minutes see the check 'Scale-up keeps failing' and `ebcloud node-pool events {s.name}`.")),
        AT_MAX: at_limit_advice(s, why),
        NO_BURST: ("No capacity, and the pool does not burst (it has no spec.scaling block, or spec.burst.enabled is false): it stays at its monthly baseline.",
                   f"Enable on-demand burst (a spec.scaling block, or spec.burst.enabled: true for the default rules), or raise nodeCount.min; check with `ebcloud node-pool describe {s.name}`."),
        WAITING: ("Waiting for a scale-up that has not come: see the checks 'Scale-up keeps failing' and the scaling spec check below.",
                  f"Read the pool's scaling history and events (`ebcloud node-pool events {s.name}`), then run {why}."),
    }[category]  # fmt: skip


def _why(pod: PendingPod) -> str:
    return f"`ebcloud pod why {pod.key}` (what `kubectl describe pod` shows: the scheduler's message and hints)"


def _kinds(pod: PendingPod, category: str) -> str:
    return " + ".join(dict.fromkeys(cause_words(b.kind) for b in pod.blockers)) if category in STUCK and pod.blockers else cause_words(category)


def check_pending(s: PoolSnapshot, now: datetime) -> Check:
    title, reqs = "Pods Pending for a long time", ("T2", "T5", "O3", "O4")
    pods = sorted(s.pending_pods, key=lambda p: (p.pending_since, p.key))
    if not pods:
        return Check("pods-pending", title, OK, "No Pending pod is aimed at this pool.", requirements=reqs)
    categories = {p.key: _pending_category(s, p) for p in pods}
    long = [p for p in pods if now - p.pending_since >= SLOW]
    stuck = [p for p in pods if categories[p.key] in STUCK]
    counts = Counter(categories.values())
    by_cause = ", ".join(f"{cause_words(c)} ({counts[c]})" for c in PENDING_ORDER if c in counts)
    oldest = pods[0]
    found = (f"{plural(len(pods), 'Pending pod')} aimed at this pool, {len(long)} of them for over {go_duration(int(SLOW.total_seconds()))}; "
             f"oldest {oldest.key} for {age(now - oldest.pending_since)}. By cause: {by_cause}.")  # fmt: skip
    details = tuple(f"{p.key}: Pending {age(now - p.pending_since)}, {_gpus(p.gpus)} GPU(s), {_kinds(p, categories[p.key])} — {p.explanation or p.reason or 'not evaluated yet'}" for p in pods[:MAX_DETAILS])
    if not long and not stuck:
        return Check("pods-pending", title, OK, found + " Under 15 minutes is a normal scale-up (5-10 min).", requirements=reqs, details=details)
    focus = long or stuck
    category = next(c for c in PENDING_ORDER if any(categories[p.key] == c for p in focus))
    pod = next(p for p in focus if categories[p.key] == category)
    cause, action = _pending_advice(s, category, pod)
    return Check("pods-pending", title, FAILING if long else WARNING, found, cause, action, reqs, details)


# --- T3: GPU errors mid-training ---------------------------------------------------------------


def check_gpu_errors(s: PoolSnapshot, now: datetime) -> Check:
    title, reqs = "GPU errors mid-training", ("T3", "T5")
    live = s.live_nodes()
    errors = sorted((e for e in s.gpu_errors if e.last_seen >= now - WINDOW), key=lambda e: (-e.count, e.node, e.xid))
    hardware = [e for e in errors if e.kind != "application"]
    mismatches = [(n.name, c) for n in live for c in n.conditions if c.get("type") == CUDA_DRIVER_MISMATCH and c.get("status") in ("True", "Unknown")]
    broken = [n for n in live if n.phase in ("Repairing", "Unknown")]
    details = [f"Xid {e.xid} ×{e.count} on {e.node} ({e.kind}: {classify(e.xid).description}), last {age(now - e.last_seen)} ago" for e in errors]
    details += [f"{name}: {c.get('type')}={c.get('status')} {c.get('reason', '')}: {c.get('message', '')}" for name, c in mismatches]
    details += [f"{n.name} is {n.phase}" for n in broken]
    if not details:
        reporting = sum(1 for n in live if n.reported)
        if not reporting:
            return Check("gpu-errors", title, UNKNOWN, f"No node agent of this pool has reported ({len(live)} live node(s)), so Xid errors and driver versions are not known.",
                         *no_data.no_agent_report(s, now), reqs)  # fmt: skip
        return Check("gpu-errors", title, OK, f"No Xid error in the last 24 h; driver and CUDA match on the {plural(reporting, 'reporting node')}; no node Repairing or Unknown.", requirements=reqs)
    total = sum(e.count for e in errors)
    parts = [f"{plural(total, 'Xid error')} in the last 24 h on {plural(len({e.node for e in errors}), 'node')}" if errors else ""]
    parts += [plural(len(mismatches), "driver/CUDA mismatch") if mismatches else "", f"{plural(len(broken), 'node')} Repairing or Unknown" if broken else ""]
    found = ", ".join(p for p in parts if p) + ": " + "; ".join(details[:3])
    real = [(name, c) for name, c in mismatches if c.get("status") == "True"]
    events = f"`ebcloud node-pool events {s.name}` (reasons XidError, CudaDriverMismatch)"
    if real:
        name, c = real[0]
        cause = f"Driver vs CUDA version mismatch on {name}: {c.get('message', '')}. Crashes come and go (a job dies every ten-odd minutes) although the GPU is fine."
        action = f"Confirm in {events}; pin spec.systemImage (now {s.system_image or 'the default'}) to a validated image whose driver runs the containers' CUDA, or build the containers for the node's CUDA, then let the nodes be rebuilt."
    elif hardware or broken:
        worst = hardware[0] if hardware else None
        cause = (f"GPU hardware fault: Xid {worst.xid} ({classify(worst.xid).mnemonic}) on {worst.node}, a {worst.kind} error." if worst
                 else f"{broken[0].name} is {broken[0].phase}: it failed its health checks or stopped reporting.")  # fmt: skip
        ladder = ("autoRepair is on: it resets the GPU, then reboots, then replaces the node, evicting its pods — keep jobs checkpointable."
                  if s.auto_repair else "autoRepair is off: cordon the node and repair it by hand, or set spec.autoRepair: true.")  # fmt: skip
        action = f"Confirm the Xid in the node's GPU monitoring log, {events}; {ladder}"
    elif errors:
        first = errors[0]
        cause = f"Xid {first.xid} ({classify(first.xid).mnemonic}) is raised by the application (e.g. an illegal memory access), not by the hardware."
        action = f"Restart or fix the job that raised it (NVIDIA's catalog: RESTART_APP); the node is left alone. See {events}."
    else:
        name, c = mismatches[0]
        cause = f"{name}: {c.get('message', '')}: the driver table does not say whether this driver runs that CUDA, so crashes may come from the versions."
        action = f"Check the containers' CUDA against the node's driver in {events}; pin spec.systemImage (now {s.system_image or 'the default'}) to a validated image."
    status = FAILING if real or hardware or broken else WARNING
    return Check("gpu-errors", title, status, found, cause, action, reqs, tuple(details[:MAX_DETAILS]))


# --- T4: low GPU utilisation -------------------------------------------------------------------


def check_utilisation(s: PoolSnapshot, now: datetime) -> Check:
    title, reqs = "GPU utilisation low for a long time", ("T4", "T5", "C3")
    u = s.utilisation
    if u is None or not u.samples or u.mean_util_pct is None:
        return Check("low-utilisation", title, UNKNOWN, "No GPU utilisation sample in the last 24 h.", *no_data.no_utilisation(s, now), reqs)
    covered = u.first_minute is not None and u.first_minute <= now - WINDOW + timedelta(minutes=2)
    span = "24 h" if covered else f"{age(now - u.first_minute)}" if u.first_minute else "the window"
    alloc = f", {u.allocated_pct:.0f}% of GPUs allocated" if u.allocated_pct is not None else ""
    found = f"Mean GPU utilisation {u.mean_util_pct:.1f}% over {span} ({plural(u.samples, 'sample')}, highest {u.max_util_pct:.0f}%){alloc}; threshold {LOW_UTILISATION_PCT:.0f}%."
    if u.mean_util_pct >= LOW_UTILISATION_PCT:
        return Check("low-utilisation", title, OK, found, requirements=reqs)
    if (early := no_data.too_early_to_judge(u.first_minute, now)) is not None:
        return Check("low-utilisation", title, UNKNOWN, found, *early, reqs)
    report = f"`ebcloud node-pool fragmentation {s.name} --plan` (the pool's Fragmentation page)"
    packing = f" — {plural(f.underused_nodes, 'node')} under 50% allocated, repacking frees {f.freeable_nodes}" if (f := s.fragmentation) else ""
    if u.allocated_pct is not None and u.allocated_pct >= BUSY_ALLOCATION_PCT:
        cause = f"IO-bound data loading: {u.allocated_pct:.0f}% of the GPUs are held by pods but busy only {u.mean_util_pct:.0f}% of the time, so the jobs wait on data."
        action = "Look at the data-loading share in the training logs: above a third of step time, fix the data pipeline and prefetching (warm the dataset on local NVMe)."
    else:
        held = f"only {u.allocated_pct:.0f}% of the GPUs are allocated" if u.allocated_pct is not None else "GPUs sit idle"
        cause = f"Oversized GPU spec or scattered small jobs: {held}; small jobs hold big cards, or the data loading keeps them waiting."
        action = f"Generate the packing report: {report}{packing}; then pack small jobs and shrink nodeCount. If pods are busy, check the data-loading share in the training logs."
    status = FAILING if covered and u.max_util_pct is not None and u.max_util_pct < LOW_UTILISATION_PCT else WARNING
    return Check("low-utilisation", title, status, found, cause, action, reqs)


# --- bill rising: cross-zone traffic, idle nodes not scaled in ---------------------------------


def _bill_line(c: CostInfo) -> str:
    previous = sum(c.previous_daily.values(), Decimal(0))
    against = f", against {previous:.2f} a day over the previous {plural(c.previous_days, 'day')}" if c.previous_days else ", no earlier day to compare"
    return f"Last 24 h billed {c.recent_total:.2f} {c.currency}{against}"


def check_cross_zone(s: PoolSnapshot, now: datetime) -> Check:
    title, reqs = "Bill rising: cross-zone traffic", ("T5", "D4", "C1", "O1")
    c = s.costs
    if c is None or not c.recent_total:
        return Check("bill-cross-zone", title, UNKNOWN, "No metered cost for this pool in the last 24 h.", *no_data.no_metered_cost(s, now), reqs)
    network = c.recent.get("network", Decimal(0))
    before = c.previous_daily.get("network", Decimal(0))
    share = network / c.recent_total
    rising = network > 0 and c.previous_days > 0 and network >= before * RISING
    gb = f", {c.cross_zone_gb:.0f} GB crossed zones" if c.cross_zone_gb is not None else ""
    found = (f"{_bill_line(c)}. Cross-zone network {network:.2f} {c.currency} = {100 * network / c.recent_total:.1f}% of it (typically about 5%){gb}; "
             f"previous daily average {before:.2f}.")  # fmt: skip
    if share <= NETWORK_SHARE and not rising:
        return Check("bill-cross-zone", title, OK, found, requirements=reqs)
    cause = f"Cross-zone traffic: the pool's nodes in {s.zone} read data or write checkpoints in another zone, and traffic between zones is billed per GB."
    action = (f"Export the cost detail by labels (`{COST_EXPORT}`, or the Costs page filtered to pool {s.name}) and check it against the traffic bill; "
              f"then keep the data in {s.zone} (object store in the same zone, a local NVMe warm cache) or move the pool next to its data.")  # fmt: skip
    status = FAILING if share > NETWORK_SHARE and rising else WARNING
    return Check("bill-cross-zone", title, status, found, cause, action, reqs)


def check_idle_nodes(s: PoolSnapshot, now: datetime) -> Check:
    title, reqs = "Bill rising: idle nodes not scaled in", ("T5", "T6", "D3", "G4")
    scaling = s.scaling or POOL_SCALING_DEFAULTS
    window = timedelta(seconds=scaling.scale_down.stabilization_window_seconds)
    live = s.live_nodes()
    idle = [n for n in live if n.phase == "Ready" and (since := n.idle_since()) is not None and since <= now - window]
    idle.sort(key=lambda n: (n.billing != "on_demand", n.idle_since(), n.name))
    excess = idle[: max(0, len(live) - s.min_nodes)]
    costs = f" {_bill_line(s.costs)}, of which idle GPU cost {s.costs.recent_idle:.2f} {s.costs.currency}." if s.costs and s.costs.recent_total else ""
    shown = go_duration(int(window.total_seconds()))
    if not excess:
        held = f"{plural(len(idle), 'node')} idle over {shown}, but the pool is at nodeCount.min ({s.min_nodes}): the paid baseline." if idle else f"No node idle longer than the {shown} scale-down window."
        return Check("bill-idle-nodes", title, OK, held + costs, requirements=reqs)
    details = tuple(f"{n.name} ({n.billing}) idle for {age(now - n.idle_since())}" for n in excess[:MAX_DETAILS])
    found = f"{plural(len(excess), 'node')} above nodeCount.min ({s.min_nodes}) idle longer than the {shown} scale-down window: " + ", ".join(details[:3]) + "." + costs
    burst = [n for n in excess if n.billing == "on_demand"]
    export = f"Export the cost detail by labels (`{COST_EXPORT}`) to confirm the idle node-hours; then"
    if burst:
        if s.scaling is None or not s.burst_enabled:
            why = "burst is off (no spec.scaling block, or spec.burst.enabled: false), so nothing removes burst nodes"
        elif s.scaling.scale_down.select_policy == "Disabled":
            why = "spec.scaling.scaleDown.selectPolicy is Disabled"
        else:
            blocked = [e for e in s.events if e.reason == "ScaleDownBlocked" and e.last_seen >= now - WINDOW]
            why = f"scale-down was blocked: {blocked[0].message}" if blocked else "the autoscaler has not removed them: it is not running, or its pass fails for this pool"
        cause = f"On-demand nodes billed by the hour are not scaled in: {why}."
        action = f"{export} read the pool's scaling history (the pool page) and make sure the autoscaler runs (`manage.py autoscale --once` shows its decision)."
        status = FAILING
    else:
        cause = "Monthly nodes above nodeCount.min have no work: they are paid until their lease ends, and the autoscaler only removes burst nodes."
        action = f"{export} lower nodeCount.min (`ebcloud node-pool scale {s.name} --min N`) and let those leases end without renewal (spec.autoRenew: false)."
        status = WARNING
    return Check("bill-idle-nodes", title, status, found, cause, action, reqs, details)


# --- the scaling spec: a queue threshold that whole-node pods never reach ----------------------


def queue_threshold(spec: ScalingSpec, current: int) -> int | None:
    """The smallest queued_pods value for which the queue metric asks for more nodes (None:
    no `Pods` metric with a Value target). Runs the autoscaler core's own arithmetic."""
    metric = next((m for m in spec.metrics if m.type == "Pods" and m.effective_target_type == "Value"), None)
    if metric is None:
        return None
    up = spec.scale_up.tolerance if spec.scale_up.tolerance is not None else DEFAULT_TOLERANCE
    down = spec.scale_down.tolerance if spec.scale_down.tolerance is not None else DEFAULT_TOLERANCE
    for queue in range(math.ceil(metric.target * (1 + up)) + 2):
        rec = evaluate_metric(metric, float(queue), current=max(1, current), tolerances=(down, up)).recommendation
        if rec is not None and rec > max(1, current):
            return queue
    return None


def check_whole_node_burst(s: PoolSnapshot, now: datetime) -> Check:
    """Whole-node pods queue one per node, so a queue threshold above one pod leaves them
    waiting: under the article's `combine: All` (GPU memory AND a queue of more than 10), or
    under a queue metric that decides alone (no GPU memory metric that could act by itself)."""
    title, reqs = "Burst never triggers for whole-node pods", ("D3", "O4", "G4")
    spec, room = s.scaling, s.burst_room()
    if spec is None or not s.burst_enabled or room == 0:
        return Check("scaling-whole-node", title, OK, "Not applicable: the pool does not burst (burst disabled, or no room above the baseline).", requirements=reqs)
    baseline = len([n for n in s.live_nodes() if n.billing != "on_demand"]) or s.min_nodes
    threshold = queue_threshold(spec, baseline)
    memory = next((m for m in spec.metrics if m.type == "Resource"), None)
    if threshold is None or threshold <= 1:
        return Check("scaling-whole-node", title, OK, "One queued pod can trigger a burst (or no queued_pods target gates it).", requirements=reqs)
    if spec.combine == "Any" and memory is not None:
        return Check("scaling-whole-node", title, OK, f"spec.scaling.default.combine is Any: hot GPU memory bursts without waiting for a queue of {threshold}.", requirements=reqs)
    whole = [p for p in s.pending_pods if p.gpus >= s.gpus_per_node]
    running = [n for n in s.live_nodes() if n.largest_pod_gpus >= s.gpus_per_node]
    if not whole and not running:
        return Check("scaling-whole-node", title, OK, f"Bursts need {threshold} or more queued pods, but no pod of this pool asks for a whole {s.gpus_per_node}-GPU node, so small pods reach that queue.", requirements=reqs)
    waiting = [p for p in whole if p.blocker == FITS]
    seen = f"{plural(len(running), 'node')} {'runs' if len(running) == 1 else 'run'} one, {len(waiting)} Pending now"
    tail = (f"up to {threshold - 1} of them can wait — more than the {plural(room, 'burst node')} this pool may add — and the pool never bursts for them."
            if threshold - 1 >= room else f"up to {threshold - 1} of them wait without a single burst node.")  # fmt: skip
    whole_pods = f"Pods here ask for whole {s.gpus_per_node}-GPU nodes ({seen}), one node each: {tail}"
    if memory is not None:  # combine: All
        up = spec.scale_up.tolerance if spec.scale_up.tolerance is not None else DEFAULT_TOLERANCE
        found = (f"spec.scaling.default.combine is All: a scale-up needs every metric to ask for more at once, and queued_pods asks only when {threshold} or more pods are queued "
                 f"and the average GPU memory is above {memory.target * (1 + up):.1f}%. {whole_pods}")  # fmt: skip
        cause = "A rule such as GPU memory > 85% AND more than 10 queued pods counts pods, not GPUs: whole-node jobs never make a queue of 10."
        action = ("Set spec.scaling.default.combine: Any (HPA's rule: the highest recommendation wins). In our 30-day replay of a training fleet with that rule this "
                  "took the peak job's p95 wait from 58 h to 5 min (docs/benchmarks.md, autoscaler replay).")  # fmt: skip
    else:
        found = f"The queue alone decides bursts, and queued_pods asks for a node only when {threshold} or more pods are queued. {whole_pods}"
        cause = "A queue target counts pods, not GPUs: each whole-node job waiting is a node's worth of work."
        action = ("Add the gpu-memory metric with spec.scaling.default.combine: Any (hot nodes then burst without a queue), and set the queued_pods "
                  "target to 1, the smallest (it is compared with the whole queue, HPA's Value arithmetic: 2 queued pods ask for a node).")  # fmt: skip
    return Check("scaling-whole-node", title, FAILING if waiting else WARNING, found, cause, action, reqs, tuple(p.key for p in waiting[:MAX_DETAILS]))


# --- O3: only checkpointable work should be preemptible -------------------------------------------


def check_preemptible_work(s: PoolSnapshot, now: datetime) -> Check:
    """A pod that cannot resume from a checkpoint loses all its work when it is preempted (by a
    pod of a higher PriorityClass whose preemptionPolicy is PreemptLowerPriority) or when a
    preemptible pool's node is reclaimed; such pods are worth a warning and the fix."""
    title, reqs = "Work that cannot resume may be preempted", ("O3", "D2")
    classes = sorted(s.preempting_classes, key=lambda c: (c[1], c[0]))
    exposed: list[tuple[RunningPod, str]] = []
    for pod in s.running_pods:
        if pod.checkpointable:
            continue
        above = next(((name, value) for name, value in classes if value > pod.priority), None)
        if s.preemptible:
            exposed.append((pod, "the pool's nodes may be reclaimed"))
        elif above is not None:
            exposed.append((pod, f"pods of PriorityClass {above[0]} (value {above[1]}) may preempt it"))
    if not exposed:
        return Check("preemption-checkpointable", title, OK, "Every pod that may be preempted here can resume from a checkpoint.", requirements=reqs)
    details = tuple(f"{pod.key} (priority {pod.priority}): {why}" for pod, why in exposed[:MAX_DETAILS])
    found = f"{plural(len(exposed), 'pod')} without checkpoints may be preempted: " + "; ".join(details[:3]) + "."
    cause = "A preempted pod that does not save checkpoints starts again from the beginning: its GPU hours so far are lost."
    if s.preemptible:
        action = ("Run work that cannot resume on a pool that is not preemptible; keep this pool for jobs that save checkpoints "
                  "(annotate them ebcloud.io/checkpointable: \"true\").")  # fmt: skip
    else:
        action = ("Make the job save checkpoints and annotate it ebcloud.io/checkpointable: \"true\", or give it a PriorityClass "
                  f"of value {classes[-1][1]} or more (spec.priorityClassName) so that no class may preempt it.")  # fmt: skip
    return Check("preemption-checkpointable", title, WARNING, found, cause, action, reqs, details)


CHECKS: tuple[Callable[[PoolSnapshot, datetime], Check], ...] = (
    check_scale_up, check_pending, check_gpu_errors, check_utilisation, check_cross_zone, check_idle_nodes, check_whole_node_burst, check_preemptible_work,
)  # fmt: skip


def diagnose(snapshot: PoolSnapshot, now: datetime) -> list[Check]:
    """Every self-check of the article's table (T5) plus the scaling-spec check, in table order."""
    if now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    return [check(snapshot, now) for check in CHECKS]
