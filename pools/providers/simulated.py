"""The simulated cloud: the embedded default, behaving like a real cloud (issue 3 §1); its
cluster is pools/providers/simulated_cluster.py.

State lives in the database (pools/models/cloud.py): finite stock per zone and GPU model, the
account balance (billing.Account) that payments debit, machines that walk provisioning steps
taking configurable time, failures injectable per step (by setting, as a rate, or per test),
and reclaim notices for preemptible machines (D2). Settings (config/settings.py):

- `EBCLOUD_SIM_STEP_SECONDS`: duration of each step; the defaults make a node Ready in about
  4 minutes (3 with a prewarmed image); `EBCLOUD_SIM_FAST=true` makes every step 2 seconds.
- `EBCLOUD_SIM_PREWARMED_IMAGES`: images with driver and CUDA baked in; no driver step (D4).
- `EBCLOUD_SIM_FAILURE_RATES`: step -> probability of failing (`order`: out of stock, `pay`:
  declined, or a provisioning step), drawn by machine, step and attempt (`order` and `pay`: by
  order and moment): a rerun sees the same outcome.
- `EBCLOUD_SIM_STOCK_GPUS` and `EBCLOUD_SIM_STOCK`: stock; `EBCLOUD_SIM_ACCOUNT`: who pays.
- `latency_inject` (tests): the cloud answers a step late (a payment: debited at once, answered
  late); `failure_inject(step="pay_lost")`: a payment debited whose answer never comes back.
- `EBCLOUD_SIM_RECLAIM_RATE_PER_HOUR`: chance per hour that a running preemptible machine gets
  a reclaim notice (`EBCLOUD_SIM_RECLAIM_NOTICE_SECONDS` ahead); `reclaim_inject` does it now.
- `EBCLOUD_SIM_XID_RATE`: chance per GPU-hour that a machine's GPU raises an Xid (default 0),
  drawn from `SIM_XID_MIX` by a hash of `EBCLOUD_SIM_XID_SEED`, node, GPU and hour; the agent
  fetches its machine's faults (`gpu_faults_take`) and reports them; `inject_gpu_fault` now.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q

from billing.models import Account, PriceBookEntry
from billing.node_prices import price_entry_in_force
from billing.pricing import Quote, quote_for
from pools.core.errors import ConflictError, ValidationError
from pools.core.lifecycle import (
    BOOT,
    DRIVER_INSTALL,
    FAILURE_REASON,
    IMAGE_PULL,
    KUBELET_INSTALL,
    KUBELET_JOIN,
    ORDER,
    PAY,
)
from pools.models import GpuModel, Node, NodeType, Quota, Zone
from pools.models.cloud import (
    SimFailure,
    SimGpuFault,
    SimMachine,
    SimPayment,
    SimStock,
)
from pools.models.pods import Pod
from pools.providers.base import (
    DONE,
    FAILED,
    RUNNING,
    InsufficientBalance,
    Machine,
    MachineRequest,
    OutOfStock,
    Payment,
    PaymentDeclined,
    QuotaStatus,
    ReclaimNotice,
    ResourceUsage,
    StepResult,
    TrafficPrice,
)
from pools.selectors.pools import quota_usage

EVICT = "evict"  # an injected failure of this step is a disruption budget refusing an eviction
PAY_LOST = "pay_lost"  # an injected failure of this step: the payment is debited, its answer times out
DEFAULT_STEP_SECONDS = {BOOT: 60, IMAGE_PULL: 45, DRIVER_INSTALL: 90, KUBELET_INSTALL: 30, KUBELET_JOIN: 20}
FAILURE_DETAILS = {
    BOOT: "machine {id} did not boot",
    IMAGE_PULL: "{image}",
    DRIVER_INSTALL: "NVIDIA driver install on {image} exited with status 1",
    KUBELET_INSTALL: "kubelet install script exited with status 1",
    KUBELET_JOIN: "kubelet on {id} did not join the cluster within 5m0s",
}
# Xids the rate draws from, application faults and the repair ladder's rungs alike
# (pools/core/repair.py: 13/31/43/94 leave the node alone, 48/74/119 start at a GPU reset, 79 replaces).
SIM_XID_MIX = (13, 13, 31, 43, 94, 48, 74, 119, 79)
_LATENCY: dict[str, float] = {}  # step -> seconds the answer takes (`latency_inject`)


def step_seconds() -> dict[str, int]:
    return {**DEFAULT_STEP_SECONDS, **settings.EBCLOUD_SIM_STEP_SECONDS}


def prewarmed_images() -> frozenset[str]:
    return frozenset(settings.EBCLOUD_SIM_PREWARMED_IMAGES)


def is_prewarmed(image: str) -> bool:
    """D4: a custom image with CUDA/cuDNN preinstalled skips the driver install step."""
    return image in prewarmed_images()


class SimulatedCloud:
    """`CloudProvider` over the database."""

    def __init__(self):
        self._catalogue: dict[tuple[type, str], object] = {}

    def _named(self, model: type, name: str):
        """A zone, GPU model or node type by name, read once per provider instance (the
        controllers take one per pass): every order of a pass names the same few, and the
        catalogue does not change under a pass. A name that does not exist raises, uncached."""
        key = (model, name)
        row = self._catalogue.get(key)
        if row is None:
            row = self._catalogue[key] = model.objects.get(name=name)
        return row

    # -- catalogue, quota, stock ---------------------------------------------------------------

    def quote(self, *, node_type: str, gpu_model: str, lease_type: str, nodes: int, at: datetime, preemptible: bool = False) -> Quote:
        return quote_for(
            node_type_id=self._named(NodeType, node_type).pk, gpu_model_id=self._named(GpuModel, gpu_model).pk,
            lease_type=lease_type, nodes=nodes, at=at, preemptible=preemptible,
        )  # fmt: skip

    def quota(self, *, region: str, gpu_model: str) -> QuotaStatus:
        model = self._named(GpuModel, gpu_model)
        row = Quota.objects.filter(region=region, gpu_model=model, team__isnull=True).first()
        return QuotaStatus(
            region=region,
            gpu_model=gpu_model,
            limit_gpus=row.limit_gpus if row else 0,
            in_use_gpus=quota_usage(region=region, gpu_model_id=model.pk),
        )

    def stock(self, *, region: str, gpu_model: str, node_type: str) -> dict[str, int]:
        gpus = self._named(NodeType, node_type).gpu_count
        model = self._named(GpuModel, gpu_model)
        return {zone.name: _stock_row(zone, model).available_gpus // gpus for zone in Zone.objects.filter(region=region)}

    def image_prewarmed(self, *, image: str) -> bool:
        return is_prewarmed(image)

    # -- ordering and paying -------------------------------------------------------------------

    def place_order(self, *, request: MachineRequest, now: datetime) -> Machine:
        existing = SimMachine.objects.filter(client_token=request.client_token).first()
        if existing is not None:
            return Machine(provider_id=existing.provider_id, zone=existing.zone.name, created=False)
        zone = self._named(Zone, request.zone)
        model = self._named(GpuModel, request.gpu_model)
        node_type = self._named(NodeType, request.node_type)
        forced = _take_failure(ORDER, zone=zone.name, image=request.image, token=request.client_token)
        forced = forced or (SimFailure(step=ORDER) if _rate_hit(ORDER, f"{request.client_token}:{now.isoformat()}") else None)
        try:
            with transaction.atomic():
                locked = SimStock.objects.select_for_update()
                stock = locked.filter(zone=zone, gpu_model=model).first() or locked.get(pk=_stock_row(zone, model).pk)
                if forced is not None or stock.available_gpus < node_type.gpu_count:
                    raise OutOfStock(
                        f"no {request.node_type} {request.gpu_model} left in {zone.name}",
                        zone=zone.name,
                        alternatives=self.stock(region=zone.region, gpu_model=model.name, node_type=node_type.name),
                    )
                SimStock.objects.filter(pk=stock.pk).update(available_gpus=F("available_gpus") - node_type.gpu_count)
                machine = SimMachine.objects.create(
                    provider_id=f"sim-{zone.name}-{uuid.uuid4().hex[:12]}",
                    client_token=request.client_token,
                    zone=zone,
                    gpu_model=model,
                    node_type=node_type,
                    gpus=node_type.gpu_count,
                    billing=request.billing,
                    image=request.image,
                    created_at=now,
                )
        except IntegrityError:  # a concurrent caller ordered with the same client token
            machine = SimMachine.objects.select_related("zone").get(client_token=request.client_token)
            return Machine(provider_id=machine.provider_id, zone=machine.zone.name, created=False)
        return Machine(provider_id=machine.provider_id, zone=zone.name, created=True)

    def machine_by_token(self, *, client_token: str) -> Machine | None:
        machine = SimMachine.objects.filter(client_token=client_token).select_related("zone").first()
        return None if machine is None else Machine(provider_id=machine.provider_id, zone=machine.zone.name, created=False)

    def cross_zone_price(self, *, at: datetime) -> TrafficPrice | None:
        """The price book's cross-zone network price, the one metering bills cross-zone GBs at."""
        entry = price_entry_in_force(kind=PriceBookEntry.Kind.NETWORK_CROSS_ZONE_GB, at=at)
        return TrafficPrice(per_gb=entry.amount, currency=entry.currency) if entry is not None else None

    def pay(self, *, order_id: int, amount: Decimal, currency: str, now: datetime) -> Payment:
        existing = SimPayment.objects.filter(order_id=order_id).first()
        if existing is not None:
            return _payment(existing, created=False)
        if amount < 0:  # a payment never credits the account (an order from a bad price row)
            raise PaymentDeclined(f"the order is for {amount} {currency}, below zero: a payment never credits the account")
        forced = _take_failure(PAY, token=str(order_id))
        forced = forced or (SimFailure(step=PAY) if _rate_hit(PAY, f"{order_id}:{now.isoformat()}") else None)
        if forced is not None:
            raise PaymentDeclined(forced.message or "the bank declined the payment")
        account_name = settings.EBCLOUD_SIM_ACCOUNT
        try:
            with transaction.atomic():
                Account.objects.get_or_create(name=account_name, defaults={"balance": Decimal("0"), "currency": currency})
                account = Account.objects.select_for_update().get(name=account_name)
                again = SimPayment.objects.filter(order_id=order_id).first()  # paid while we waited for the lock
                if again is not None:
                    return _payment(again, created=False)
                if account.currency != currency:
                    raise PaymentDeclined(f"account {account.name} holds {account.currency}, the order is in {currency}")
                if account.balance < amount:
                    raise InsufficientBalance(
                        f"need {amount} {currency}, balance {account.balance} {currency}",
                        need=amount,
                        balance=account.balance,
                        currency=currency,
                    )
                account.balance -= amount
                account.save(update_fields=["balance"])
                payment = SimPayment.objects.create(
                    order_id=order_id, account=account, amount=amount, currency=currency, balance_after=account.balance, paid_at=now
                )
        except IntegrityError:
            return _payment(SimPayment.objects.get(order_id=order_id), created=False)
        if _LATENCY.get(PAY):  # debited; the answer is slow to come back
            time.sleep(_LATENCY[PAY])
        if _take_failure(PAY_LOST, token=str(order_id)):
            raise TimeoutError(f"the payment of order #{order_id} was sent, but no answer came back in time")
        return _payment(payment, created=True)

    # -- machines ------------------------------------------------------------------------------

    def provision_step(self, *, provider_id: str, step: str, now: datetime) -> StepResult:
        with transaction.atomic():
            machine = SimMachine.objects.select_for_update().get(provider_id=provider_id)
            if machine.status == SimMachine.Status.RELEASED:
                return StepResult(status=FAILED, reason="MachineReleased", message=f"machine {provider_id} was released")
            if machine.step != step or machine.step_due_at is None:
                seconds = 0 if step == DRIVER_INSTALL and is_prewarmed(machine.image) else step_seconds().get(step, 30)
                machine.step, machine.step_done = step, False
                machine.step_due_at = now + timedelta(seconds=seconds)
                machine.save(update_fields=["step", "step_done", "step_due_at"])
                if seconds > 0:
                    return StepResult(status=RUNNING, due_at=machine.step_due_at)
            if machine.step_done:
                return StepResult(status=DONE)
            if now < machine.step_due_at:
                return StepResult(status=RUNNING, due_at=machine.step_due_at)
            machine.step_attempt += 1
            failure = _take_failure(step, zone=machine.zone.name, image=machine.image, token=machine.client_token)
            if failure is None and _rate_fails(machine, step):
                failure = SimFailure(step=step)
            if failure is not None:
                machine.step_due_at = None  # the next call starts the step again
                machine.save(update_fields=["step_attempt", "step_due_at"])
                detail = failure.message or FAILURE_DETAILS.get(step, "{id}: step failed").format(id=provider_id, image=machine.image)
                return StepResult(status=FAILED, reason=FAILURE_REASON.get(step, "StepFailed"), message=detail)
            machine.step_done = True
            if step == KUBELET_JOIN:
                machine.status = SimMachine.Status.RUNNING
                if settings.EBCLOUD_CLUSTER_BACKEND == "kubernetes":
                    _kubelet_join(machine, now)
            machine.save(update_fields=["step_attempt", "step_done", "status"])
            return StepResult(status=DONE)

    def resource_usage(self, *, provider_ids: Sequence[str], hour: datetime) -> ResourceUsage:
        """A disk of EBCLOUD_SIM_DISK_GB per machine alive during the hour, and
        EBCLOUD_SIM_CROSS_ZONE_GB_PER_HOUR of cross-zone traffic per machine of a zone listed
        there (a pool whose data lives in another zone, D4; none by default)."""
        end = hour + timedelta(hours=1)
        alive = SimMachine.objects.filter(provider_id__in=list(provider_ids), created_at__lt=end).exclude(released_at__lte=hour)
        disk = Decimal(str(settings.EBCLOUD_SIM_DISK_GB))
        traffic = settings.EBCLOUD_SIM_CROSS_ZONE_GB_PER_HOUR
        storage = cross = Decimal(0)
        for zone in alive.values_list("zone__name", flat=True):
            storage += disk
            cross += Decimal(str(traffic.get(zone, 0)))
        return ResourceUsage(storage_gb=storage, cross_zone_gb=cross)

    def resource_usage_many(self, *, machines: Mapping, hour: datetime) -> dict:
        """`resource_usage` for many groups of machines (key -> provider ids) in one query, so
        metering a fleet costs no query per pool (issue 9). Optional: metering falls back to
        one `resource_usage` call per pool for providers without it."""
        group = {provider_id: key for key, ids in machines.items() for provider_id in ids}
        end = hour + timedelta(hours=1)
        alive = SimMachine.objects.filter(provider_id__any_of=list(group), created_at__lt=end).exclude(released_at__lte=hour)
        disk = Decimal(str(settings.EBCLOUD_SIM_DISK_GB))
        traffic = {zone: Decimal(str(gb)) for zone, gb in settings.EBCLOUD_SIM_CROSS_ZONE_GB_PER_HOUR.items()}
        alive_in = Counter((group[provider_id], zone) for provider_id, zone in alive.values_list("provider_id", "zone__name"))  # machines per key and zone
        totals = {key: [Decimal(0), Decimal(0)] for key in machines}
        for (key, zone), count in alive_in.items():
            totals[key][0] += disk * count
            totals[key][1] += traffic.get(zone, Decimal(0)) * count
        return {key: ResourceUsage(storage_gb=storage, cross_zone_gb=cross) for key, (storage, cross) in totals.items()}

    def release(self, *, provider_id: str, now: datetime) -> None:
        with transaction.atomic():
            machine = SimMachine.objects.select_for_update().filter(provider_id=provider_id).first()
            if machine is None or machine.status == SimMachine.Status.RELEASED:
                return
            SimMachine.objects.filter(pk=machine.pk).update(status=SimMachine.Status.RELEASED, released_at=now)
            stock = _stock_row(machine.zone, machine.gpu_model)
            SimStock.objects.filter(pk=stock.pk).update(available_gpus=F("available_gpus") + machine.gpus)

    def reclaim_notices(self, *, now: datetime) -> Sequence[ReclaimNotice]:
        rate = float(settings.EBCLOUD_SIM_RECLAIM_RATE_PER_HOUR)
        if rate > 0:  # each running preemptible machine is reclaimed with this chance per hour
            hour = int(now.timestamp() // 3600)
            notice = timedelta(seconds=settings.EBCLOUD_SIM_RECLAIM_NOTICE_SECONDS)
            running = SimMachine.objects.filter(billing="preemptible", reclaim_at__isnull=True, status=SimMachine.Status.RUNNING)
            for machine in running:
                digest = hashlib.sha256(f"reclaim:{machine.provider_id}:{hour}".encode()).digest()
                if int.from_bytes(digest[:8], "big") / 2**64 < rate:
                    SimMachine.objects.filter(pk=machine.pk, reclaim_at__isnull=True).update(reclaim_at=now + notice)
        machines = SimMachine.objects.filter(reclaim_at__isnull=False).exclude(status=SimMachine.Status.RELEASED)
        return [ReclaimNotice(provider_id=m.provider_id, reclaim_at=m.reclaim_at) for m in machines]

    # -- GPU faults (simulated hardware only: a real cloud's GPUs raise their own) ---------------

    def inject_gpu_fault(self, *, node: Node, gpu: int, xid: int, now: datetime) -> SimGpuFault:
        """GPU `gpu` of the machine behind `node` raises Xid `xid` now; the node's agent reports
        it after its next fetch (admin action, `manage.py inject_fault`, tests, the demo)."""
        machine = SimMachine.objects.filter(provider_id=node.provider_id).first() if node.provider_id else None
        if machine is None or machine.status != SimMachine.Status.RUNNING:
            raise ConflictError(f"node {node.name} has no running machine in the simulated cloud (node phase {node.phase})")
        if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < machine.gpus:
            raise ValidationError(f"must be a GPU index from 0 to {machine.gpus - 1}", field="gpu")
        if isinstance(xid, bool) or not isinstance(xid, int) or not 1 <= xid <= 65535:
            raise ValidationError("must be an Xid number such as 48 or 79", field="xid")
        return SimGpuFault.objects.create(machine=machine, gpu_index=gpu, xid=xid, created_at=now)

    def gpu_faults_take(self, *, provider_id: str, now: datetime) -> list[SimGpuFault]:
        """The machine's faults raised by `now` and not yet fetched, oldest first; each is handed
        out once (a conditional UPDATE on `delivered_at`), even to concurrent fetches. Faults
        drawn by `EBCLOUD_SIM_XID_RATE` for this and the previous hour are created first."""
        machine = SimMachine.objects.filter(provider_id=provider_id, status=SimMachine.Status.RUNNING).first() if provider_id else None
        if machine is None:
            return []
        _xid_rate_draw(machine, now)
        due = SimGpuFault.objects.filter(machine=machine, delivered_at__isnull=True, created_at__lte=now).order_by("created_at", "pk")
        return [f for f in due if SimGpuFault.objects.filter(pk=f.pk, delivered_at__isnull=True).update(delivered_at=now)]


def _kubelet_join(machine: SimMachine, now: datetime) -> None:
    """The machine's kubelet registers its Node in the real cluster (the fake kubelet plays it)."""
    from pools.providers.fake_kubelet import FakeKubelet  # the Kubernetes client, only in that mode

    node_type = machine.node_type
    FakeKubelet().join(
        name=machine.client_token, cpu_milli=node_type.cpu_milli, memory_mib=node_type.memory_mib, gpus=machine.gpus,
        labels={"topology.kubernetes.io/zone": machine.zone.name}, now=now,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Test and demo handles: what an operator of a real cloud cannot do, a test can.


def stock_set(*, zone: str, gpu_model: str, gpus: int) -> None:
    row = _stock_row(Zone.objects.get(name=zone), GpuModel.objects.get(name=gpu_model))
    SimStock.objects.filter(pk=row.pk).update(available_gpus=gpus)


def failure_inject(*, step: str, times: int | None = 1, zone: str = "", image: str = "", token_prefix: str = "", message: str = "") -> SimFailure:
    """Make the next `times` matching steps fail (`times=None`: until removed). Steps: `order`
    (out of stock), `pay` (declined), `pay_lost` (debited, but the caller times out waiting for
    the answer; `token_prefix`: the order id), `boot`, `image_pull`, `driver_install`, `kubelet_install`,
    `kubelet_join` (timeout), `evict` (a disruption budget; `token_prefix` "namespace/name")."""
    return SimFailure.objects.create(step=step, remaining=times, zone=zone, image=image, token_prefix=token_prefix, message=message)


def latency_inject(*, step: str, seconds: float) -> None:
    """Make the cloud slow to answer a step (this process; `seconds=0` ends it). `pay`: the
    debit is committed at once, the answer comes `seconds` later, as from a real cloud over a
    slow network."""
    if seconds > 0:
        _LATENCY[step] = seconds
    else:
        _LATENCY.pop(step, None)


def reclaim_inject(*, provider_id: str, now: datetime, notice: timedelta | None = None) -> datetime:
    """The cloud reclaims a preemptible machine after `notice` (D2). Guaranteed machines are
    never reclaimed during their lease: asking for one raises ValueError."""
    machine = SimMachine.objects.get(provider_id=provider_id)
    if machine.billing != "preemptible":
        raise ValueError(f"{provider_id} is a guaranteed ({machine.billing}) machine: never reclaimed during its lease")
    notice = notice if notice is not None else timedelta(seconds=settings.EBCLOUD_SIM_RECLAIM_NOTICE_SECONDS)
    reclaim_at = now + notice
    SimMachine.objects.filter(pk=machine.pk, reclaim_at__isnull=True).update(reclaim_at=reclaim_at)
    return SimMachine.objects.get(pk=machine.pk).reclaim_at


def pod_run(*, node_name: str, name: str, namespace: str = "default", priority: int = 0, checkpointable: bool = False, eviction_blocked: bool = False, now: datetime | None = None) -> Pod:
    """A Running pod on a node (of the node's pool's team); `eviction_blocked`: a disruption
    budget refuses its eviction until removed."""
    node = Node.objects.select_related("pool").get(name=node_name)
    pod = Pod.objects.create(
        namespace=namespace, name=name, team_id=node.pool.team_id, priority=priority, checkpointable=checkpointable,
        phase=Pod.Phase.RUNNING, node=node, started_at=now, gpu_count=1, gpu_milli=1000,
    )  # fmt: skip
    if eviction_blocked:
        failure_inject(step=EVICT, times=None, token_prefix=f"{namespace}/{name}", message="disruption budget")
    return pod


# ---------------------------------------------------------------------------------------------


def _stock_row(zone: Zone, model: GpuModel) -> SimStock:
    overrides = settings.EBCLOUD_SIM_STOCK
    initial = overrides.get(f"{zone.name}/{model.name}", settings.EBCLOUD_SIM_STOCK_GPUS)
    row, _ = SimStock.objects.get_or_create(zone=zone, gpu_model=model, defaults={"available_gpus": initial})
    return row


def _take_failure(step: str, *, zone: str = "", image: str = "", token: str = "") -> SimFailure | None:
    """Consume one matching injected failure (a conditional UPDATE, so each fires once)."""
    return failure_consume(failures_armed(step, zone=zone, image=image), token)


def failures_armed(step: str, *, zone: str = "", image: str = "") -> list[SimFailure]:
    """The injected failures of a step still able to fire there, oldest first (the simulated
    cluster's evictions read the `evict` step's)."""
    return list(
        SimFailure.objects.filter(step=step)
        .filter(Q(zone="") | Q(zone=zone))
        .filter(Q(image="") | Q(image=image))
        .filter(Q(remaining__isnull=True) | Q(remaining__gt=0))
        .order_by("id")
    )


def failure_matches(failure: SimFailure, token: str) -> bool:
    """Whether ``failure`` fires on the step of ``token`` (no prefix: on every one)."""
    return not failure.token_prefix or token.startswith(failure.token_prefix)


def failure_consume(candidates: list[SimFailure], token: str) -> SimFailure | None:
    """The first of `candidates` matching `token`, consumed: a counted one by a conditional
    UPDATE (so it fires once whatever other workers do), and in `candidates` too, so the same
    list serves the next token."""
    for failure in candidates:
        if not failure_matches(failure, token):
            continue
        if failure.remaining is None:
            return failure
        if failure.remaining > 0 and SimFailure.objects.filter(pk=failure.pk, remaining__gt=0).update(remaining=F("remaining") - 1):
            failure.remaining -= 1
            return failure
    return None


def _xid_rate_draw(machine: SimMachine, now: datetime) -> None:
    """`EBCLOUD_SIM_XID_RATE`: each GPU-hour of a running machine raises an Xid with this chance,
    at a moment within the hour, both drawn from a hash of the seed, node, GPU and hour (the
    same run sees the same faults). The unique `key` stores each drawn fault once."""
    rate = float(settings.EBCLOUD_SIM_XID_RATE)
    if rate <= 0:
        return
    seed = settings.EBCLOUD_SIM_XID_SEED
    hour = int(now.timestamp() // 3600)
    rows = []
    for h in (hour - 1, hour):
        start = datetime.fromtimestamp(h * 3600, tz=now.tzinfo)
        for gpu in range(machine.gpus):
            key = f"xid:{seed}:{machine.client_token}:{gpu}:{h}"
            digest = hashlib.sha256(key.encode()).digest()
            at = start + timedelta(seconds=3600 * int.from_bytes(digest[8:12], "big") / 2**32)
            if int.from_bytes(digest[:8], "big") / 2**64 < rate and machine.created_at <= at <= now:
                rows.append(SimGpuFault(machine=machine, gpu_index=gpu, xid=SIM_XID_MIX[digest[12] % len(SIM_XID_MIX)], key=key, created_at=at))
    if rows:
        SimGpuFault.objects.bulk_create(rows, ignore_conflicts=True)


def _rate_fails(machine: SimMachine, step: str) -> bool:
    return _rate_hit(step, f"{machine.provider_id}:{machine.step_attempt}")


def _rate_hit(step: str, key: str) -> bool:
    """`EBCLOUD_SIM_FAILURE_RATES[step]`: a deterministic draw per key (same key, same answer)."""
    rate = float(settings.EBCLOUD_SIM_FAILURE_RATES.get(step, 0))
    if rate <= 0:
        return False
    digest = hashlib.sha256(f"{step}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def _payment(row: SimPayment, *, created: bool) -> Payment:
    return Payment(
        order_id=row.order_id, amount=row.amount, currency=row.currency, balance_after=row.balance_after, paid_at=row.paid_at, created=created
    )
