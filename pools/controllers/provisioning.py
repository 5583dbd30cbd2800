"""Provisioning a pool's nodes, one step per pass (seed G1, O2, O4, T1; design §5): the machine
ordered in the pool's zones in turn (`OrderPlaced`, `ZoneFallback`), then boot, image pull, driver
and kubelet install, registration with its labels and taints (`NodeRegistered`, `NodeLabeled`,
`NodeTainted`, `NodeReady`); a failed step is a Warning event retried with exponential backoff, a
machine failing too often is released and replaced. An on-demand (burst) node not Ready
`EBCLOUD_MAX_NODE_PROVISION_SECONDS` after it was requested is given up (`ProvisionTimeout`) and
its pool's scale-ups back off (`ScaleUpBackoff`), as Cluster Autoscaler's
`--max-node-provision-time` does, so the team's other pools take its pods. The lifecycle
controller's `StepDue` and `SlowCapacity` steps (pools/controllers/lifecycle.py).

Every step follows the system image the node's machine was ordered with (`Node.system_image`,
D4), not the pool's current `spec.systemImage`: an edit of the image applies to machines ordered
after it, as a Karpenter NodeClaim keeps the launch template it was launched with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from monitoring.services import credential_revoke_for_node
from pools.controllers import node_sync, repair_outcome
from pools.controllers.context import ReconcilePass
from pools.core import lifecycle as rules
from pools.core import stall_messages
from pools.core.scale_up import scale_up_backoff
from pools.models import Node, PoolEvent, Zone
from pools.providers.base import (
    FAILED,
    RUNNING,
    ClusterRefused,
    MachineRequest,
    OutOfStock,
    ProviderError,
)
from pools.selectors.scale_up import give_up_at, provision_timeouts_latest
from pools.services.events import WARNING


def nodes_advance(p: ReconcilePass) -> None:
    """The pass's `StepDue` step: each node being provisioned one step further where its step is due."""
    for node in p.live_nodes().filter(release_reason="", phase__in=rules.PROVISIONING_PHASES):
        _advance(p, node)


def _advance(p: ReconcilePass, node: Node) -> None:
    if (deadline := _deadline(node)) is not None and p.now >= deadline:
        _give_up(p, node)
        return
    if node.step_due_at is not None and p.now < node.step_due_at:
        return  # the step is still running, or we are backing off
    if node.phase == Node.Phase.ORDERING and not _place(p, node):
        return
    prewarmed = p.cloud.image_prewarmed(image=_image(p, node))
    while node.step:
        result = p.cloud.provision_step(provider_id=node.provider_id, step=node.step, now=p.now)
        if result.status == RUNNING:
            Node.objects.filter(pk=node.pk).update(step_due_at=_due(node, result.due_at))
            return
        if result.status == FAILED:
            _failed(p, node, reason=result.reason, summary=f"{result.reason}: {result.message}", machine=True)
            return
        if not _step_done(p, node, prewarmed=prewarmed):
            return  # the node waits (backing off) before the step is tried again


def _image(p: ReconcilePass, node: Node) -> str:
    """The system image of the node's machine: the one it was ordered with (a node ordered
    before the image was stored walks on with the pool's)."""
    return node.system_image or p.spec.system_image


def _place(p: ReconcilePass, node: Node) -> bool:
    """Order the node's machine in the pool's zones in turn, preferred first (`spec.zones`,
    seed T1): OutOfStock in one zone orders in the next; OutOfStock in all of them is one
    failure naming every zone tried. One client token (the node's name) for every zone, so a
    machine ordered by a pass killed before its write is found again, not bought twice.

    The image ordered is stored on the node before the order (a pass killed after ordering
    orders the same image again, the machine the token finds) and forgotten when the cloud
    refuses the order (nothing was bought: the next try orders the pool's image then)."""
    image = _image(p, node)
    if node.system_image != image:
        Node.objects.filter(pk=node.pk).update(system_image=image)
        node.system_image = image
    request = MachineRequest(
        client_token=node.name,
        zone=node.zone.name,
        gpu_model=p.spec.gpu_model,
        node_type=p.spec.node_type,
        billing=node.billing,
        image=image,
    )
    tried: list[str] = []
    alternatives: dict[str, int] = {}
    for zone in p.spec.zones:
        try:
            machine = p.cloud.place_order(request=replace(request, zone=zone), now=p.now)
            break
        except OutOfStock as exc:
            tried.append(exc.zone)
            alternatives = exc.alternatives
        except ProviderError as exc:
            _order_refused(node)
            _failed(p, node, reason=exc.reason, summary=f"{exc.reason}: {exc.message}", machine=False)
            return False
    else:
        _order_refused(node)
        _failed(p, node, reason="OutOfStock", summary=stall_messages.out_of_stock_reason(tried=tried, alternatives=alternatives), machine=False)
        return False
    if machine.zone != node.zone.name:
        _zone_fallback(p, node, machine.zone)
    first = rules.steps_for(prewarmed=p.cloud.image_prewarmed(image=image))[0]
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(
            provider_id=machine.provider_id, machine_at=p.now, phase=Node.Phase.PROVISIONING, step=first, step_due_at=None, attempts=0, last_error=""
        )  # fmt: skip
        p.event(
            "OrderPlaced",
            f"Machine ordered for node {node.name}: {p.spec.node_type} {p.spec.gpu_model} ({node.billing}) with system image {image}"
            f" in {machine.zone}, cloud id {machine.provider_id}",
            node=node,
        )
    node.provider_id, node.machine_at, node.phase, node.step = machine.provider_id, p.now, Node.Phase.PROVISIONING, first
    node.step_due_at, node.attempts, node.last_error = None, 0, ""
    return True


def _order_refused(node: Node) -> None:
    Node.objects.filter(pk=node.pk).update(system_image="")
    node.system_image = ""


def _zone_fallback(p: ReconcilePass, node: Node, zone: str) -> None:
    """The node's machine is in a fallback zone: the node says so (its zone label follows), and
    an event names both zones and the price of the traffic now crossing them (D4, C1)."""
    zones = p.spec.zones
    skipped = list(zones[: zones.index(zone)]) if zone in zones else [node.zone.name]
    price = p.cloud.cross_zone_price(at=p.now)
    message = stall_messages.zone_fallback_message(
        node=node.name, ordered_in=zone, out_of_stock=skipped, preferred=zones[0],
        price_per_gb=price.per_gb if price else None, currency=price.currency if price else "",
    )  # fmt: skip
    with transaction.atomic():
        node.zone = Zone.objects.get(name=zone)
        Node.objects.filter(pk=node.pk).update(zone=node.zone)
        p.event("ZoneFallback", message, node=node, type=WARNING)


def _step_done(p: ReconcilePass, node: Node, *, prewarmed: bool) -> bool:
    """Record the machine's finished step and move to the next; False when the node could not
    move on (the cluster has not registered it yet) and waits."""
    step, image = node.step, _image(p, node)
    if step == rules.KUBELET_JOIN:
        return _register(p, node, prewarmed=prewarmed)
    events = []
    if step == rules.BOOT:
        events.append(("NodeInitializing", f"Machine {node.provider_id} booted; initialising system image {image}"))
    elif step == rules.IMAGE_PULL:
        events.append(("ImagePulled", f"System image {image} pulled"))
        if prewarmed:
            events.append(("DriverInstalled", f"NVIDIA driver and CUDA are preinstalled in the prewarmed image {image}: install skipped"))
    elif step == rules.DRIVER_INSTALL:
        events.append(("DriverInstalled", f"NVIDIA driver and CUDA installed on {node.name}"))
    elif step == rules.KUBELET_INSTALL:
        events.append(("KubeletInstalled", f"kubelet and the container runtime installed on {node.name}"))
    following = rules.next_step(step, prewarmed=prewarmed)
    phase = rules.STEP_PHASE[following]
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(step=following, phase=phase, step_due_at=None, attempts=0, last_error="")
        for reason, message in events:
            p.event(reason, message, node=node)
    node.step, node.phase, node.attempts, node.last_error = following, phase, 0, ""
    return True


def _register(p: ReconcilePass, node: Node, *, prewarmed: bool) -> bool:
    labels, taints = node_sync.wanted_labels(p, node), node_sync.wanted_taints(p)
    try:
        p.cluster.register_node(name=node.name, now=p.now, gpus=node.gpu_count)
        p.cluster.node_apply(name=node.name, labels=labels, taints=taints, applied_taints=node.taints or ())
    except ClusterRefused as exc:  # the API server's fault, not the machine's: retried, the machine kept
        _failed(p, node, reason=exc.reason, summary=f"{exc.reason}: {exc.message}", machine=False)
        return False
    except ProviderError as exc:  # a real cluster: the kubelet has not registered the Node yet
        _failed(p, node, reason=exc.reason, summary=exc.message, machine=True)
        return False
    took = p.now - node.created_at
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(
            phase=Node.Phase.READY, step="", step_due_at=None, attempts=0, last_error="", labels=labels, taints=taints, ready_at=p.now
        )
        p.event("NodeRegistered", f"Node {node.name} joined the cluster", node=node)
        p.event("NodeLabeled", f"Labels applied to {node.name}: " + ", ".join(f"{k}={v}" for k, v in labels.items()), node=node)
        if taints:
            shown = ", ".join(f"{t['key']}={t['value']}:{t['effect']}" for t in taints)
            p.event("NodeTainted", f"Taints applied to {node.name}: {shown} (only pods that tolerate them are scheduled here; expected, not a fault)", node=node)
        p.event("NodeReady", f"Node {node.name} is Ready, {rules.format_duration(took)} after it was requested", node=node)
        repair_outcome.replacement_ready(p, node)
        if took > rules.SLOW_CAPACITY and not PoolEvent.objects.filter(node=node, reason="SlowCapacity").exists():
            cause = rules.slow_capacity_cause(last_error="", prewarmed=prewarmed, image=_image(p, node))
            p.event("SlowCapacity", f"Node {node.name} took {rules.format_duration(took)} to become Ready (over 15m0s); likely cause: {cause}", node=node, type=WARNING)
    node.phase = Node.Phase.READY
    node.step = ""
    return True


def slow_capacity_check(p: ReconcilePass) -> None:
    """A node not Ready 15 minutes after it was requested raises one Warning with the likely cause (O4)."""
    late = p.live_nodes().filter(release_reason="", phase__in=rules.PROVISIONING_PHASES, created_at__lt=p.now - rules.SLOW_CAPACITY)
    for node in late.exclude(events__reason="SlowCapacity"):
        image = _image(p, node)
        cause = rules.slow_capacity_cause(last_error=node.last_error, prewarmed=p.cloud.image_prewarmed(image=image), image=image)
        took = rules.format_duration(p.now - node.created_at)
        p.event("SlowCapacity", f"Node {node.name} is not Ready {took} after it was requested (over 15m0s); likely cause: {cause}", node=node, type=WARNING)


def _failed(p: ReconcilePass, node: Node, *, reason: str, summary: str, machine: bool) -> None:
    """A Warning event, then retry with backoff; a machine failing too often is replaced."""
    attempts = node.attempts + 1
    p.stall(summary)
    if machine and attempts >= settings.EBCLOUD_PROVISION_MAX_ATTEMPTS:
        p.cloud.release(provider_id=node.provider_id, now=p.now)
        with transaction.atomic():
            Node.objects.filter(pk=node.pk).update(
                phase=Node.Phase.TERMINATED, release_reason=rules.PROVISIONING_FAILED, terminated_at=p.now,
                last_error=summary, attempts=attempts, step="", step_due_at=None,
            )  # fmt: skip
            p.event(
                "ProvisioningFailed",
                f"{summary}; gave up on machine {node.provider_id} of node {node.name} after {attempts} attempts: releasing it, a new node replaces it",
                node=node,
                type=WARNING,
            )
            credential_revoke_for_node(node, reason="NodeTerminated", now=p.now)  # if its agent had joined
            repair_outcome.replacement_failed(p, node, summary)
        return
    delay = rules.backoff(attempts, base_seconds=settings.EBCLOUD_BACKOFF_BASE_SECONDS, cap_seconds=settings.EBCLOUD_BACKOFF_CAP_SECONDS)
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(attempts=attempts, last_error=summary[:500], step_due_at=_due(node, p.now + delay))
        p.event(reason, f"Node {node.name}: {summary}; retrying in {rules.format_duration(delay)}", node=node, type=WARNING)


def _deadline(node: Node) -> datetime | None:
    return give_up_at(billing=node.billing, created_at=node.created_at)


def _due(node: Node, at: datetime) -> datetime:
    """When the controller looks at the node again: `at`, or its deadline if sooner, so that a
    backoff of up to 10 minutes does not keep a burst node upcoming past it."""
    deadline = _deadline(node)
    return at if deadline is None else min(at, deadline)


def _give_up(p: ReconcilePass, node: Node) -> None:
    """An on-demand node not Ready by its deadline: released and Terminated, not replaced
    (`provisioning_end`), and its pool's scale-ups backed off (`scale_up_backoff`), so that the
    autoscaler buys for its pods in the team's other pools that fit them."""
    took = rules.format_duration(p.now - node.created_at)
    limit = rules.format_duration(timedelta(seconds=settings.EBCLOUD_MAX_NODE_PROVISION_SECONDS))

    def say(billed: str) -> None:
        p.event(
            rules.PROVISION_TIMEOUT,
            f"Gave up on-demand node {node.name}: not Ready {took} after it was requested (the limit is {limit}, "
            f"EBCLOUD_MAX_NODE_PROVISION_SECONDS); last error: {node.last_error or 'none'}; {billed}",
            node=node,
            type=WARNING,
        )
        until, duration = scale_up_backoff(provision_timeouts_latest([p.pool.pk]).get(p.pool.pk, ()))
        p.event(
            "ScaleUpBackoff",
            f"Scale-up of {p.pool.name} backed off for {rules.format_duration(duration)}, until {until:%Y-%m-%d %H:%M} UTC: "
            f"on-demand node {node.name} was not Ready within {limit}; the team's other pools that fit its Pending pods scale up meanwhile",
            type=WARNING,
        )

    provisioning_end(p, node, release_reason=rules.PROVISION_TIMEOUT, say=say)


def burst_cancel(p: ReconcilePass, why: str) -> list[str]:
    """A pool that no longer bursts cancels its on-demand nodes not Ready yet, at once, as
    Cluster Autoscaler's lowered target size deletes a node group's unregistered nodes: each
    released and Terminated, not replaced (`provisioning_end`), one event saying why. Nothing
    failed: no `ScaleUpBackoff`. The scale-down's rules never take a node not Ready (a Pending
    pod may wait for it): without this it would be pursued, given a machine and billed until
    it became Ready and idle. Returns the names of the nodes cancelled."""
    cancelled = []
    for node in p.live_nodes().filter(release_reason="", billing=Node.Billing.ON_DEMAND, phase__in=rules.PROVISIONING_PHASES):

        def say(billed: str, node: Node = node) -> None:
            p.event("ScaledDown", f"Autoscaler cancels burst node {node.name}, still {node.phase}: {why}; {billed}", node=node)

        if provisioning_end(p, node, release_reason=rules.SCALED_IN, say=say):
            cancelled.append(node.name)
    return cancelled


def provisioning_end(p: ReconcilePass, node: Node, *, release_reason: str, say: Callable[[str], None]) -> bool:
    """End a node still being provisioned (given up at its deadline, `_give_up`, or cancelled
    when its pool stops bursting, `burst_cancel`): its machine released, the node Terminated and
    not replaced; `say` writes the events (given what the node is billed) in the transaction
    that ends it. False when another pass ended it first. A machine the cloud delivered is
    billed until now, as any on-demand node; a node whose machine never came is billed nothing
    (metering bills an on-demand node from `machine_at`, when its machine was delivered, to
    `terminated_at`): it ends when it was requested. A machine a pass killed before writing
    `provider_id` ordered (`_place`) is found by the node's client token and released too."""
    provider_id = node.provider_id
    if not provider_id and (found := p.cloud.machine_by_token(client_token=node.name)) is not None:
        provider_id = found.provider_id
    if provider_id:
        p.cloud.release(provider_id=provider_id, now=p.now)
    if node.provider_id:
        billed = f"machine {provider_id} released, billed until now"
    elif provider_id:
        billed = f"machine {provider_id}, ordered by a pass interrupted before recording it, released: nothing is billed for it"
    else:
        billed = "no machine was delivered: nothing is billed for it"
    with transaction.atomic():
        done = Node.objects.filter(pk=node.pk, release_reason="").exclude(phase=Node.Phase.TERMINATED).update(
            phase=Node.Phase.TERMINATED, release_reason=release_reason, terminated_at=p.now if node.provider_id else node.created_at,
            step="", step_due_at=None, unschedulable=True,
        )  # fmt: skip
        if not done:
            return False
        say(billed)
        credential_revoke_for_node(node, reason="NodeTerminated", now=p.now)  # if its agent had joined
    return True
