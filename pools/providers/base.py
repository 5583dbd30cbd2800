"""The two interfaces to the outside world (design §1, "Providers").

`CloudProvider` buys, pays for, boots and releases machines; `ClusterBackend` is the Kubernetes
side (register, label, taint, cordon, evict, list pods). The lifecycle controller talks only to
these, so the simulated provider (the embedded default) and a real cloud are interchangeable.

Every call that changes something is idempotent on a key the caller chooses (the node name as
the machine order's client token, the pool order's id as the payment key), so a controller
killed between the call and its own write can simply call again (at-least-once, design §5).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Protocol, runtime_checkable

from billing.pricing import Quote
from pools.core.disruption import DisruptionBudget
from pools.core.node_labels import ClusterNodeState

NodeState = ClusterNodeState  # what `ClusterBackend.nodes_state` returns per node
# On a Node the control plane cordoned (for a drain, or while a GPU fault waits for repair): that
# cordon is its own, to lift if the drain does not happen or the repair ends (`ClusterBackend.cordon`);
# a cordon without it is someone else's. The name dates from when only drains set it.
DRAIN_CORDON_ANNOTATION = "ebcloud.io/cordoned-for-drain"


class ProviderError(Exception):
    """A refusal by the cloud; `reason` is the CamelCase event reason (seed T1)."""

    reason = "ProviderError"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class ClusterRefused(ProviderError):
    """The cluster's API server refused a call (403, 500, ...) or could not be asked (out of
    reach, timed out); the message says which call and what the API server answered. Not the
    machine's fault: the node waits and retries, its machine is kept."""

    reason = "ClusterRefused"


class OutOfStock(ProviderError):
    reason = "OutOfStock"

    def __init__(self, message: str, *, zone: str, alternatives: Mapping[str, int]):
        super().__init__(message)
        self.zone = zone
        self.alternatives = dict(alternatives)


class InsufficientBalance(ProviderError):
    reason = "InsufficientBalance"

    def __init__(self, message: str, *, need: Decimal, balance: Decimal, currency: str):
        super().__init__(message)
        self.need, self.balance, self.currency = need, balance, currency


class PaymentDeclined(ProviderError):
    reason = "PaymentDeclined"


class EvictionRefused(ProviderError):
    """The cluster did not evict a pod, for another reason than a disruption budget's "not now"
    (which `evict_pod` answers False): a refusal of the Eviction API (500 for a pod under more
    than one budget, 403, ...) or an API server out of reach. The pod stays for now; a drain
    reports the message and still honours its deadline."""

    reason = "EvictionRefused"


@dataclass(frozen=True)
class QuotaStatus:
    region: str
    gpu_model: str
    limit_gpus: int
    in_use_gpus: int


@dataclass(frozen=True)
class Machine:
    provider_id: str
    zone: str
    created: bool  # False when the client token had already ordered it


@dataclass(frozen=True)
class Payment:
    order_id: int
    amount: Decimal
    currency: str
    balance_after: Decimal
    paid_at: datetime
    created: bool  # False when the order had been paid before


RUNNING, DONE, FAILED = "running", "done", "failed"


@dataclass(frozen=True)
class StepResult:
    status: str  # running | done | failed
    due_at: datetime | None = None  # running: when to look again
    reason: str = ""  # failed: CamelCase reason
    message: str = ""


@dataclass(frozen=True)
class ReclaimNotice:
    provider_id: str
    reclaim_at: datetime


@dataclass(frozen=True)
class PodInfo:
    namespace: str
    name: str
    priority: int = 0
    phase: str = "Running"
    checkpointable: bool = False
    # Deleted already (Kubernetes' `deletionTimestamp`), its grace period running: a drain waits
    # for it to go and does not evict it again (a second eviction would only delete it again).
    terminating: bool = False


@dataclass(frozen=True)
class ResourceUsage:
    """What a set of machines used in one hour besides their own price (C1, D4): storage held
    (system and data disks) and traffic that crossed zones."""

    storage_gb: Decimal
    cross_zone_gb: Decimal


@dataclass(frozen=True)
class TrafficPrice:
    """What one GB crossing zones costs (C1, D4: a node in a fallback zone reads its data from
    the preferred zone across them)."""

    per_gb: Decimal
    currency: str


@dataclass(frozen=True)
class MachineRequest:
    # The node's name: ordering twice returns the same machine, in whatever zone it was ordered
    # (the controller tries a pool's zones in turn with one token, so a pass killed after
    # ordering in a fallback zone finds that machine again instead of ordering a second).
    client_token: str
    zone: str
    gpu_model: str
    node_type: str
    billing: str
    image: str
    extra: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class CloudProvider(Protocol):
    def quote(self, *, node_type: str, gpu_model: str, lease_type: str, nodes: int, at: datetime, preemptible: bool = False) -> Quote:
        """The price of `nodes` nodes on a lease term; preemptible ones at the term's preemptible price."""

    def quota(self, *, region: str, gpu_model: str) -> QuotaStatus: ...

    def stock(self, *, region: str, gpu_model: str, node_type: str) -> dict[str, int]:
        """Nodes of that shape each zone of the region can still deliver."""
        ...

    def image_prewarmed(self, *, image: str) -> bool:
        """True for a system image with driver and CUDA baked in (D4: no driver install step)."""
        ...

    def place_order(self, *, request: MachineRequest, now: datetime) -> Machine:
        """Order one machine; raises OutOfStock. A client token already ordered returns its
        machine (`created=False`, `zone` where it is), whatever zone the request names."""
        ...

    def machine_by_token(self, *, client_token: str) -> Machine | None:
        """The machine an order with this client token bought, read only (None: none was
        bought), as EC2's DescribeInstances filtered by client-token: a controller giving up a
        node whose pass was killed after ordering, before it recorded the machine, finds the
        machine to release without ordering one (`created` is False)."""
        ...

    def cross_zone_price(self, *, at: datetime) -> TrafficPrice | None:
        """The price of traffic between zones of a region in force at `at`; None if unpriced."""
        ...

    def pay(self, *, order_id: int, amount: Decimal, currency: str, now: datetime) -> Payment:
        """Pay a pool order from the account; raises InsufficientBalance or PaymentDeclined.

        Idempotent on `order_id`: paying an order again returns its payment (`created` False)
        and debits nothing. A `ProviderError` is a refusal: nothing was debited. Any other
        failure (a timeout, a dropped connection) leaves the outcome unknown: the caller asks
        again with the same id. The debit is the cloud's own: called outside the caller's
        database transaction, it stands whatever the caller does next."""
        ...

    def provision_step(self, *, provider_id: str, step: str, now: datetime) -> StepResult:
        """Start or check one provisioning step of a machine."""
        ...

    def release(self, *, provider_id: str, now: datetime) -> None: ...

    def reclaim_notices(self, *, now: datetime) -> Sequence[ReclaimNotice]: ...

    def resource_usage(self, *, provider_ids: Sequence[str], hour: datetime) -> ResourceUsage:
        """Storage and cross-zone traffic of these machines during the hour starting at `hour`.
        A provider may also offer `resource_usage_many(*, machines: Mapping[key, Sequence[str]],
        hour) -> dict[key, ResourceUsage]` (one read for a whole fleet); metering uses it when
        present (optional, so it is not part of this protocol)."""
        ...


@runtime_checkable
class ClusterBackend(Protocol):
    def register_node(self, *, name: str, now: datetime, gpus: int = 0) -> None:
        """The node has joined the cluster and takes pods: Ready, offering GPUs if it has
        `gpus` (a GPU node's device plugin starts after its kubelet); else `ProviderError`, and
        the node stays provisioning (counted as upcoming, as Cluster Autoscaler counts a node
        whose GPUs are not allocatable yet)."""
        ...

    def node_apply(self, *, name: str, labels: Mapping[str, str], taints: Sequence[Mapping[str, str]], applied_taints: Sequence[Mapping[str, str]] = ()) -> None:
        """Make the node carry the pool's labels and taints: the whole wanted set each time (what
        was ours and is no longer wanted goes; what others set stays). `applied_taints`: those
        the Node row says we applied last, ours as well as those the cluster records as ours,
        so that a record someone removed or garbled leaves none of ours behind."""

    def nodes_state(self, *, names: Sequence[str]) -> dict[str, ClusterNodeState]:
        """Labels, taints and `spec.unschedulable` of these nodes as the cluster has them now, in
        one read (one API call, one query) for all of them; a node the cluster does not have is
        left out. The lifecycle pass reads it once to find nodes whose labels, taints or cordon
        drifted from what we applied."""
        ...

    def cordon(self, *, name: str, mark: bool = False) -> bool:
        """Set `spec.unschedulable`; False when the cluster has no such Node (deleted by someone
        or by the cloud's node controller): nothing to cordon. Raises `ProviderError` when the
        cluster cannot be changed now.

        `mark` (a drain's or a repair's cordon) records the cordon as the control plane's own on
        the Node (`DRAIN_CORDON_ANNOTATION`), and only where the Node was schedulable: a cordon
        someone set before (`kubectl cordon`) stays theirs, and `uncordon(mark=True)` never lifts
        it, as Cluster Autoscaler marks its nodes with a taint of its own and never touches
        anyone's `spec.unschedulable`. A cordon without `mark` takes the cordon as nobody
        else's: it drops the mark. A cordon set by someone after lifting ours (the mark stays on
        a real Node) is theirs too: the cluster records who set `spec.unschedulable` last."""
        ...

    def uncordon(self, *, name: str, mark: bool = False) -> bool:
        """Lift `spec.unschedulable` and the mark. With `mark` (a drain that did not happen, a
        repair over or rejected), only a cordon the mark says is the control plane's is lifted,
        and False says a cordon someone else set stays (a Node the cluster no longer has keeps
        none); without it, False says the Node is gone."""

    def evict_pod(self, *, namespace: str, name: str, reason: str) -> bool:
        """True when evicted (or gone already); False when a disruption budget refused now;
        `EvictionRefused` when the cluster refused otherwise or could not be reached."""
        ...

    def disruption_budgets(self, *, pods: Mapping[str, Mapping[str, str]]) -> list[DisruptionBudget]:
        """The disruption budgets over these Running pods ("namespace/name" -> labels): which
        of them each guards and how many it lets be evicted now, asked without evicting, so
        that a repack plans no more moves than the budgets allow."""
        ...

    def budget_documents(self, *, namespaces: Collection[str] | None) -> list[dict]:
        """The PodDisruptionBudgets in these namespaces (None: all) as policy/v1 documents with
        their status, for the API and the pages to show."""
        ...

    def list_pods(self, *, node_name: str) -> list[PodInfo]:
        """The pods a drain must move off the node (`ProviderError` when they cannot be listed now)."""
        ...

    # A backend whose `nodes_state` can report a node without the GPU-share resource in its
    # capacity (`gpu_shares_advertised=False`: a real cluster) also has
    # `advertise_gpu_shares(*, name) -> None`, which puts it there; the simulated cluster keeps
    # no capacity of its own and is never asked (so it is not part of this protocol).

    def remove_node(self, *, name: str, now: datetime | None = None) -> None:
        """Delete the Node; `now`: the caller's clock, for a cluster that stamps the time its
        pods lose the node (the simulated one keeps it for metering)."""
        ...
