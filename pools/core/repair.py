"""NVIDIA Xid classification and the GPU node repair ladder (seed T3, P4). Pure core.

A monthly GPU machine that breaks must heal itself instead of waiting on a ticket (P4). The node
agent reports the driver's Xid errors; this module decides what they mean and what to do next.
The repair service loads the history, calls these functions and writes the result plus an event.
No Django, standard library only, and `now` is always an argument.

Sources: NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)
gives each Xid a mnemonic, a description and a "Resolution Bucket (Immediate Action)". For the
RESET_GPU bucket it says: reset the GPU; if the error persists, reboot the node; if it persists
after the reboot, replace the hardware. That is the ladder here. EKS node auto repair waits 10
minutes on `AcceleratedHardwareReady` and stops when more than 20% of a group is unhealthy; ACK
repairs one node per pool at a time (`repair_allowed`). The CUDA release notes and the CUDA
Compatibility guide give the driver table (`cuda_driver_condition`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from pools.core.max_unhealthy import (
    DEFAULT,
    MaxUnhealthy,
    limit_named,
    max_unhealthy_error,
    tolerated,
)

Action = Literal["none", "reset_gpu", "reboot", "replace"]
Kind = Literal["application", "reset", "fatal", "unknown"]

NONE: Action = "none"
RESET_GPU: Action = "reset_gpu"
REBOOT: Action = "reboot"
REPLACE: Action = "replace"
LADDER: tuple[Action, ...] = (RESET_GPU, REBOOT, REPLACE)
"""Rungs in order of cost: seconds for a GPU reset, minutes (and evicted pods) for a reboot,
a new machine for a replacement."""

# The rows come from NVIDIA's Xid catalog: code, our class, the catalog's immediate-action bucket,
# mnemonic, description.
# - RESTART_APP / IGNORE rows are "application": the catalog blames the job (13: "general user
#   application faults", out-of-bounds access; 31: an illegal address; 43: "the GPU remains in a
#   healthy state"; 94: "contained to one application"). Touching the node would punish every
#   other tenant for one buggy job, so these give an event and nothing else.
# - RESET_GPU rows, and the 48 and NVLink workflows that the catalog also clears with a reset or
#   a reboot, are "reset": the GPU itself is in a bad state, so the ladder starts at a reset.
# - RESTART_BM (79): the driver cannot reach the GPU over PCI Express. A reset cannot reach it
#   either, and EKS, GKE and ACK all replace or hardware-repair the node for it.
_CATALOG_TABLE = """
13  application RESTART_APP         ROBUST_CHANNEL_GR_EXCEPTION Graphics Engine Exception
31  application RESTART_APP         ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT GPU memory page fault
43  application IGNORE              ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR GPU stopped processing
94  application RESTART_APP         ROBUST_CHANNEL_CONTAINED_ERROR Contained memory error
46  reset       RESET_GPU           ROBUST_CHANNEL_GPU_TIMEOUT_ERROR GPU stopped processing
48  reset       WORKFLOW_XID_48     ROBUST_CHANNEL_GPU_ECC_DBE DBE (Double Bit Error) ECC Error
62  reset       RESET_GPU           PMU_HALT_ERROR Internal micro-controller halt
64  reset       RESET_GPU           INFOROM_DRAM_RETIREMENT_FAILURE GPU memory remapping failure
74  reset       WORKFLOW_NVLINK_ERR NVLINK_ERROR NVLink Error
95  reset       RESET_GPU           ROBUST_CHANNEL_UNCONTAINED_ERROR Uncontained memory error
109 reset       RESET_GPU           ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR Context switch timeout error
119 reset       RESET_GPU           GSP_RPC_TIMEOUT GSP RPC timeout
120 reset       RESET_GPU           GSP_ERROR GSP error
140 reset       RESET_GPU           UNRECOVERABLE_ECC_ERROR_ESCAPE ECC unrecovered error
79  fatal       RESTART_BM          ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS GPU has fallen off the bus
"""
_CATALOG: dict[int, list[str]] = {
    int(row[0]): row[1:]
    for row in (line.split(maxsplit=4) for line in _CATALOG_TABLE.split("\n"))
    if row
}


@dataclass(frozen=True)
class XidClass:
    """What one Xid means. `action` is the first rung we take and `alert` means a person
    should look (the fault is fatal, or the Xid is unknown and no rule covers it)."""

    xid: int
    kind: Kind
    mnemonic: str
    description: str
    nvidia_action: str
    action: Action
    alert: bool


def classify(xid: int) -> XidClass:
    """Classify an Xid with the catalog table above.

    Unknown Xids get a cautious default: an event and an alert, but no node action. Repairing
    a node for a code nobody has mapped could take capacity away for an informational message
    (the catalog marks many codes IGNORE). Doing nothing silently could hide a new failure.
    So a person is told and decides.
    """
    if isinstance(xid, bool) or not isinstance(xid, int) or xid < 0:
        raise ValueError(f"Xid must be a non-negative integer, got {xid!r}")
    kind, bucket, mnemonic, description = _CATALOG.get(
        xid, ("unknown", "UNKNOWN", "UNKNOWN", f"Xid {xid} is not in the repair table")
    )
    action: Action = {"reset": RESET_GPU, "fatal": REPLACE}.get(kind, NONE)
    return XidClass(xid, kind, mnemonic, description, bucket, action, kind in ("fatal", "unknown"))


ACTIONABLE_XIDS: tuple[int, ...] = tuple(sorted(x for x in _CATALOG if classify(x).action != NONE))
"""The Xids whose first rung is a repair: only a node with one of them can be unhealthy to the
pool gate, so a read that asks which pools might be paused looks for these alone."""


@dataclass(frozen=True)
class XidEvent:
    """One Xid reported by the node agent. `gpu_index` is None when the agent could not tell."""

    xid: int
    at: datetime
    gpu_index: int | None = None


@dataclass(frozen=True)
class RepairAttempt:
    """A repair that was run on the node. `succeeded` is None while it is still running."""

    action: Action
    at: datetime
    succeeded: bool | None
    gpu_index: int | None = None

    def __post_init__(self) -> None:
        if self.action not in LADDER:
            raise ValueError(f"a repair attempt is one of {', '.join(LADDER)}, not {self.action!r}")


@dataclass(frozen=True)
class RepairPolicy:
    """How long the ladder remembers, and how often a rung is retried before climbing.

    With the defaults, a fault seen three times within 24 hours, each time after the previous
    repair, gets a reset, then a reboot, then a replacement. That is the "3 strikes in 24 h"
    rule: a GPU that needs repair that often is bad hardware. Raise `tries_per_action` to retry
    each rung more than once before climbing.
    """

    window: timedelta = timedelta(hours=24)
    tries_per_action: int = 1

    def __post_init__(self) -> None:
        if self.window <= timedelta(0):
            raise ValueError("window must be positive")
        if self.tries_per_action < 1:
            raise ValueError("tries_per_action must be at least 1")


@dataclass(frozen=True)
class RepairDecision:
    action: Action
    reason: str
    gpu_index: int | None = None
    message: str = ""
    xid: int | None = None


def _relevant(attempt: RepairAttempt, fault: XidEvent) -> bool:
    """A GPU reset touches one GPU. A reboot or a replacement touches the whole node."""
    gpus = (attempt.gpu_index, fault.gpu_index)
    return attempt.action != RESET_GPU or None in gpus or gpus[0] == gpus[1]


def _covers(attempt: RepairAttempt, fault: XidEvent) -> bool:
    return (
        attempt.succeeded is True
        and attempt.at >= fault.at
        and _relevant(attempt, fault)
        and LADDER.index(attempt.action) >= LADDER.index(classify(fault.xid).action)
    )


def _where(fault: XidEvent) -> str:
    gpu = "an unknown GPU" if fault.gpu_index is None else f"GPU {fault.gpu_index}"
    return f"Xid {fault.xid} ({classify(fault.xid).description}) on {gpu}"


def _span(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60}h" if minutes % 60 == 0 else f"{minutes}m"


def _rung(fault: XidEvent, attempts: Sequence[RepairAttempt], policy: RepairPolicy):
    """Return (rung, reason, attempt that set it) for one open fault."""
    rung, reason, cause = 0, "ResetClassXid", None
    if classify(fault.xid).kind == "fatal":
        rung, reason = LADDER.index(REPLACE), "FatalXid"
    tries: Counter[str] = Counter()
    for attempt in attempts:
        if not _relevant(attempt, fault):
            continue
        if attempt.succeeded is False:
            candidate, why = LADDER.index(attempt.action) + 1, "RepairFailed"
        elif attempt.at < fault.at:  # it worked, then the fault came back
            tries[attempt.action] += 1
            climb = tries[attempt.action] >= policy.tries_per_action
            candidate, why = LADDER.index(attempt.action) + int(climb), "FaultRecurred"
        else:
            continue
        if candidate >= rung:  # ties go to the latest attempt, which the message names
            rung, reason, cause = candidate, why, attempt
    return min(rung, LADDER.index(REPLACE)), reason, cause


def next_action(
    history: Iterable[XidEvent | RepairAttempt],
    now: datetime,
    policy: RepairPolicy | None = None,
) -> RepairDecision:
    """Choose the next repair for one node from its Xid events and past repair attempts.

    The ladder follows NVIDIA's RESET_GPU bucket: reset the GPU; if the fault comes back
    within the window after a rung worked, or the rung itself failed, climb to the next rung.
    Xid 79 goes straight to replacement. Within a window the ladder never comes down: a reboot
    that held once means the next recurrence is at least a reboot. Only time brings it down:
    anything older than `policy.window` is forgotten, so a GPU that was healthy for a day
    starts again at a cheap reset. A successful replacement is a new machine and a new ladder.

    Several Xids before one repair count as one incident, because the driver often logs
    a burst. Rungs are counted in repairs, not in Xids, so a burst cannot skip rungs.
    The ladder is per node. A GPU reset only counts against faults on the same GPU; a reboot
    or a replacement counts against every GPU. If several faults are open, the highest rung
    wins.
    """
    policy = policy or RepairPolicy()
    items = sorted((i for i in history if now - policy.window < i.at <= now), key=lambda i: i.at)
    done = [
        i.at for i in items if isinstance(i, RepairAttempt) and i.action == REPLACE and i.succeeded
    ]
    items = [i for i in items if not done or i.at > done[-1]]  # a new machine, a new ladder
    attempts = [i for i in items if isinstance(i, RepairAttempt)]
    faults = [i for i in items if isinstance(i, XidEvent)]

    running = [a for a in attempts if a.succeeded is None]
    if running:
        a = running[-1]
        message = f"{a.action} started at {a.at.isoformat()} is still running"
        return RepairDecision(NONE, "RepairInProgress", a.gpu_index, message)
    open_faults = [
        f
        for f in faults
        if classify(f.xid).action != NONE and not any(_covers(a, f) for a in attempts)
    ]
    if not open_faults:
        if faults and classify(faults[-1].xid).action == NONE:
            last = faults[-1]
            reason, what = (
                ("ApplicationXid", "the application must restart; the node is left alone")
                if classify(last.xid).kind == "application"
                else ("UnknownXid", "no rule covers it; a person should look")
            )
            return RepairDecision(NONE, reason, last.gpu_index, f"{_where(last)}: {what}", last.xid)
        message = f"no unrepaired GPU fault in the last {_span(policy.window)}"
        return RepairDecision(NONE, "NoOpenFault", message=message)

    scored = [(_rung(f, attempts, policy), f) for f in open_faults]
    (rung, reason, cause), fault = max(reversed(scored), key=lambda s: s[0][0])  # latest wins ties
    action, where = LADDER[rung], _where(fault)
    messages = {
        "FatalXid": f"{where}: the GPU cannot be reached over PCI Express; the node must be replaced",
        "ResetClassXid": f"{where}: NVIDIA's catalog says {classify(fault.xid).nvidia_action}; "
        f"{action}",
    }
    if cause is not None:
        when = f"{cause.action} at {cause.at.isoformat()}"
        messages["RepairFailed"] = f"{when} failed and {where} is still open: {action}"
        messages["FaultRecurred"] = (
            f"{where} came back within {_span(policy.window)} of {when}: {action}"
        )
    return RepairDecision(action, reason, fault.gpu_index, messages[reason], fault.xid)


NODE_UNAVAILABLE = "NodeUnavailable"  # the reason of `unavailable_repair`'s decisions
NODE_UNAVAILABLE_FOR = timedelta(minutes=30)
"""How long the cluster may run no pod on a node before it is replaced (`unavailable_repair`)."""


def unavailable_repair(fault: str, since: datetime | None, now: datetime, after: timedelta = NODE_UNAVAILABLE_FOR,
                       held_at: datetime | None = None) -> RepairDecision | None:  # fmt: skip
    """The repair of a node the cluster has run no pod on since `since` (`fault` says why: its
    Node deleted, not Ready, or offering none of its GPUs), once that has lasted `after`; None
    before, or without a fault.

    EKS node auto repair replaces a node whose Ready condition is not True for 30 minutes, and
    Karpenter's node repair tolerates a NotReady node as long before it replaces it: a kubelet
    restart, a reboot or a short partition heal well within that, while a node that stays out
    of the cluster for half an hour holds a paid slot that no pod can use. A reboot is not tried
    first: the kubelet that would bring the Node back is what stopped, and the agent that would
    run the reboot often stopped with it. Before `after` the node is not unhealthy to the repair
    gate (it is not cordoned either: the cluster already places nothing there), so a kubelet
    restart costs no event; the pool's pause still holds when many nodes drop out together (a
    network partition is not bad hardware). The message does not change while the fault lasts,
    so an event that repeats it (a pause, a repair left to a person) is written once. `held_at`:
    the last pass that held it in a zone-wide outage (`zones_held`), from which `after` counts."""
    if not fault or since is None or now - max(since, held_at or since) < after:
        return None
    message = f"the cluster has run no pod on the node since {since:%Y-%m-%d %H:%M} UTC, over {_span(after)}: {fault}; the node must be replaced"
    return RepairDecision(REPLACE, NODE_UNAVAILABLE, message=message)


UNHEALTHY_ZONE_SHARE = 0.55  # kube-controller-manager's --unhealthy-zone-threshold
LARGE_ZONE_NODES = 50  # its --large-cluster-size-threshold


def zones_held(out_of_use: Mapping[str, tuple[int, int]]) -> frozenset[str]:
    """The zones (name -> nodes out of the cluster's use, nodes) whose nodes are not replaced
    for it now, as Kubernetes' node lifecycle controller holds its evictions: every zone with
    no node in use (full disruption everywhere: the API server or its network, not the
    machines) holds them all; otherwise a zone in partial disruption (more than 2 and at least
    55% of its nodes out) holds when it has at most 50 nodes (a larger one evicts slowly, as a
    pool's one repair at a time already does). A held fault's 30 minutes count from the last
    pass that held it, as the controller resets every node's timestamps when a full disruption
    ends. A zone with no node in use beside zones with some is in full disruption alone, which
    evicts at the usual rate."""
    zones = {zone: counts for zone, counts in out_of_use.items() if counts[1]}
    if zones and all(out == total for out, total in zones.values()):
        return frozenset(zones)
    return frozenset(zone for zone, (out, total) in zones.items()  # a zone wholly out beside others in use is its own loss
                     if 2 < out < total and out >= UNHEALTHY_ZONE_SHARE * total and total <= LARGE_ZONE_NODES)  # fmt: skip


# --- pool-level gates --------------------------------------------------------------------


@dataclass(frozen=True)
class NodeHealth:
    """One node of a pool as the gate sees it. `fatal` marks a fault that must not wait
    (Xid 79, `is_fatal`); `repairing` marks a repair in progress on this node."""

    name: str
    healthy: bool = True
    unhealthy_since: datetime | None = None
    fatal: bool = False
    repairing: bool = False


@dataclass(frozen=True)
class RepairGate:
    allowed: bool
    reason: str
    message: str
    event_type: Literal["Normal", "Warning"] = "Normal"
    retry_at: datetime | None = None


def is_fatal(xid: int) -> bool:
    """Whether this Xid says the GPU is gone (the catalog's RESTART_BM bucket: Xid 79)."""
    return classify(xid).kind == "fatal"


def unhealthy_limit(total: int, *, max_unhealthy: MaxUnhealthy | None = None) -> int:
    """How many unhealthy nodes a pool of `total` nodes tolerates before auto repair pauses:
    what the pool's `autoRepairPolicy.maxUnhealthy` (`max_unhealthy`) says, or its default, 20%
    (None, a pool without the field). One rule, `pools.core.max_unhealthy.tolerated`: a second
    copy of the 20% here (a float fraction) could drift from the field's.

    Rounded down, as Cluster API's MachineHealthCheck scales `maxUnhealthy: 20%`, so "more than
    20% of the pool" means what the documentation says (2 of 6 nodes, 33%, pause). But MHC's
    rounding alone gives 0 for a pool under five nodes, and such a pool could never heal even
    one broken node; Karpenter's node repair, which rounds 20% up, still repairs one node there.
    So a percentage always tolerates one unhealthy node: a pool of 1 to 9 nodes repairs one
    broken node, and a two-node pool with both nodes faulty pauses (100% unhealthy: the cause is
    more likely shared than two machines breaking at once)."""
    return tolerated(total, DEFAULT if max_unhealthy is None else max_unhealthy)


def cordon_while_paused(health: NodeHealth) -> bool:
    """Whether a faulty node of a paused pool is cordoned all the same (no new pods; nothing is
    evicted, nothing is repaired).

    The pause is Cluster API's MachineHealthCheck short-circuit: when that many nodes fail at
    once, the signal itself is in doubt (a driver, an image, the network, a misreporting agent),
    and acting on every node would turn a partial fault into an outage. For the reset class
    (Xid 48 DBE, 46, 62, 74, ...) that holds: a pool-wide burst is the signature of a shared
    cause, the GPUs often still run work, and cordoning each reporting node would stop new pods
    on the whole pool on a doubtful signal; the pause's Warning asks a person instead. A node
    already cordoned while its fault waited stays cordoned: the pause starts nothing, and lifts
    nothing either.

    A fatal fault (Xid 79, the GPU fell off the bus) is different: whatever the cause, the
    driver cannot reach that GPU, so no new pod can use it, and a node left schedulable only
    takes pods that fail there (the issue's bert-train-0 beside a dead GPU, kept Ready for 17
    minutes). Cordoning it takes no usable capacity and evicts nothing, which is what
    node-problem-detector with a remediator does while a MachineHealthCheck is short-circuited.
    Its running pods stay until a person, or the repair once the pause lifts, moves them: an
    eviction is the disruption the pause holds back."""
    return not health.healthy and health.fatal and not health.repairing


def fault_persisted(
    health: NodeHealth, now: datetime, persist_for: timedelta = timedelta(minutes=10)
) -> bool:
    """True when the node has been unhealthy for `persist_for` (EKS waits 10 minutes on
    `AcceleratedHardwareReady`). Many faults clear on their own, and a repair costs the tenants
    their pods. A fatal fault (Xid 79) does not wait: that GPU will not come back."""
    if health.healthy:
        return False
    if health.fatal:
        return True
    return health.unhealthy_since is not None and now - health.unhealthy_since >= persist_for


def repair_allowed(
    pool_nodes_health: Sequence[NodeHealth],
    in_progress: Collection[str] | None = None,
    *,
    node: str | None = None,
    now: datetime | None = None,
    persist_for: timedelta = timedelta(minutes=10),
    max_unhealthy: MaxUnhealthy | None = None,
) -> RepairGate:
    """May a repair start in this pool (and, given `node` and `now`, on that node) now?

    - Serial: one repair per pool at a time, as ACK does. A repair drains a node, and several
      at once could take too much of a small pool. `in_progress` names the nodes under repair;
      by default it is read from `NodeHealth.repairing`.
    - Paused, with a Warning, when more than `max_unhealthy` of the pool is unhealthy (by
      default 20%, as EKS and Karpenter; `unhealthy_limit` says how a small pool rounds). When
      that many nodes fail together the cause is usually a driver, an image or the network, and
      replacing nodes only loses capacity. A percentage always tolerates one unhealthy node, so a
      two-node pool can still heal one node. What a paused pool still does to a fatal fault: `cordon_while_paused`.
      `max_unhealthy`, the pool's `autoRepairPolicy.maxUnhealthy`, replaces the default (a
      count, `0` pausing at the first unhealthy node, or a percentage: pools/core/max_unhealthy.py).
    - The node's fault must have lasted `persist_for`, unless it is fatal (`fault_persisted`).
    """
    if max_unhealthy is not None and (problem := max_unhealthy_error(max_unhealthy)):
        raise ValueError(f"max_unhealthy {max_unhealthy!r} {problem}")
    nodes = {n.name: n for n in pool_nodes_health}
    in_progress = [in_progress] if isinstance(in_progress, str) else in_progress
    busy = set(in_progress) if in_progress is not None else {n for n in nodes if nodes[n].repairing}
    if node in busy:
        return RepairGate(False, "RepairInProgress", f"node {node} is already being repaired")
    if busy:
        others = ", ".join(sorted(busy))
        message = f"the pool repairs one node at a time; {others} is being repaired"
        return RepairGate(False, "RepairInProgress", message)
    total, unhealthy = len(nodes), sum(1 for n in nodes.values() if not n.healthy)
    limit = unhealthy_limit(total, max_unhealthy=max_unhealthy)
    if unhealthy > limit:
        named = limit_named(DEFAULT if max_unhealthy is None else max_unhealthy, limit)
        why = ("auto repair is paused while any node is unhealthy (a limit of 0 leaves each repair to a person)" if limit == 0 else
               "auto repair is paused until fewer are; a fault this wide is more likely a driver, image or network problem than bad hardware")  # fmt: skip
        message = f"{unhealthy} of {total} nodes ({unhealthy / total:.0%}) are unhealthy, above {named}: {why}"
        return RepairGate(False, "RepairPaused", message, "Warning")
    if node is None:
        return RepairGate(True, "RepairAllowed", "a repair may start in this pool")
    if now is None or node not in nodes:
        raise ValueError(f"checking node {node!r} needs `now` and a node of this pool")
    health = nodes[node]
    if health.healthy:
        return RepairGate(False, "NodeHealthy", f"node {node} is healthy")
    if not fault_persisted(health, now, persist_for):
        retry_at = (health.unhealthy_since or now) + persist_for
        message = (
            f"node {node} must stay unhealthy for {_span(persist_for)} before a repair; "
            f"next check at {retry_at:%Y-%m-%d %H:%M:%S} UTC"
        )
        return RepairGate(False, "WaitingForFaultToPersist", message, retry_at=retry_at)
    return RepairGate(True, "RepairAllowed", f"node {node} may be repaired")


# --- driver / CUDA compatibility ---------------------------------------------------------


@dataclass(frozen=True)
class NodeCondition:
    """Shaped like Kubernetes' NodeCondition: type, status 'True'|'False'|'Unknown', reason,
    message."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str


CUDA_DRIVER_MISMATCH = "CudaDriverMismatch"

# Minimum Linux x86_64 driver per CUDA toolkit GA release, from "CUDA Toolkit and Corresponding
# Driver Versions" in the CUDA toolkit release notes.
_CUDA_TABLE = """
11.0 450.51.05  11.1 455.23     11.2 460.27.03  11.3 465.19.01  11.4 470.42.01  11.5 495.29.05
11.6 510.39.01  11.7 515.43.04  11.8 520.61.05  12.0 525.60.13  12.1 530.30.02  12.2 535.54.03
12.3 545.23.06  12.4 550.54.14  12.5 555.42.02  12.6 560.28.03  12.8 570.26     12.9 575.51.03
13.0 580.65.06
"""
_CELLS = _CUDA_TABLE.split()
CUDA_MIN_DRIVER: dict[tuple[int, int], str] = {
    tuple(map(int, cuda.split("."))): driver
    for cuda, driver in zip(_CELLS[::2], _CELLS[1::2], strict=True)
}
# Oldest driver for minor-version compatibility within a CUDA major (CUDA Compatibility guide).
# 13.x is set to the 13.0 GA driver until a lower floor is confirmed.
CUDA_MINOR_COMPAT_FLOOR: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def _version(text: str, what: str) -> tuple[int, ...]:
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)*)\s*", text or "")  # ASCII: `\d` took "٥٣٥" for 535
    if match is None:
        raise ValueError(f"{what} {text!r} is not a dotted version such as 535.104.05")
    parts = tuple(int(p) for p in match.group(1).split("."))
    return parts + (0,) * (3 - len(parts))


def cuda_driver_condition(driver_version: str, workload_cuda: str) -> NodeCondition | None:
    """Return a `CudaDriverMismatch` condition when the node's driver is too old for the
    workload's CUDA, or None when it is new enough.

    T3 lists a driver/CUDA mismatch as a cause of crashes that come and go, so this is checked
    before anyone blames the hardware. Drivers are backward compatible: a driver at or above
    a toolkit's minimum runs that toolkit and every older one.

    Minor-version compatibility (CUDA 11 and later): an application built with CUDA 12.x also
    starts on any driver from the 12.x floor (>= 525.60.13). Features that need a newer driver
    then fail at run time, and PTX from the newer toolkit cannot be JIT-compiled. That is the
    intermittent failure T3 describes, so it is still reported (status True), with reason
    `DriverBelowToolkitMinimum`. Below the major's floor CUDA does not start at all:
    `DriverTooOldForCudaMajor`. Forward compatibility (the cuda-compat package on data-centre
    GPUs) is not assumed. A CUDA release missing from the table is fine if the driver meets the
    minimum of a later release in the table; otherwise the status is 'Unknown'.
    """
    driver = _version(driver_version, "driver version")
    cuda = _version(workload_cuda, "CUDA version")[:2]
    label, have = f"{cuda[0]}.{cuda[1]}", driver_version.strip()
    floor = CUDA_MINOR_COMPAT_FLOOR.get(cuda[0])
    below_floor = floor is not None and driver < _version(floor, "floor")
    need = CUDA_MIN_DRIVER.get(cuda)
    if need is None:
        later = sorted(v for v in CUDA_MIN_DRIVER if v > cuda)
        if later and driver >= _version(CUDA_MIN_DRIVER[later[0]], "driver"):
            return None
        if not below_floor:
            why = f"CUDA {label} is not in the driver table; cannot tell if driver {have} runs it"
            return NodeCondition(CUDA_DRIVER_MISMATCH, "Unknown", "UnknownCudaVersion", why)
        need = floor
    elif driver >= _version(need, "driver"):
        return None
    reason = "DriverTooOldForCudaMajor" if below_floor else "DriverBelowToolkitMinimum"
    why = f"workload CUDA {label} needs driver >= {need}, node has {have}"
    return NodeCondition(CUDA_DRIVER_MISMATCH, "True", reason, why)
