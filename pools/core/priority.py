"""PriorityClass and pod priority as Kubernetes has them (scheduling.k8s.io/v1). Pure: no Django.

- A PriorityClass maps a name (a DNS-1123 subdomain) to a 32-bit `value`, a `preemptionPolicy`
  (`PreemptLowerPriority`, or `Never`: the pod waits for room and preempts nobody) and at most
  one `globalDefault`. Values above 1,000,000,000 are reserved for the system: user classes may
  not go there, and names starting with `system-` are reserved for the two system classes
  (`system-cluster-critical`, `system-node-critical`), which exist in every cluster. Here they
  are built in (`SYSTEM_CLASSES`), as kube-apiserver creates them itself at start-up: nobody
  stores, edits or deletes them.
- A pod names its class with `spec.priorityClassName`; kube-apiserver's Priority admission
  plugin then writes the class's value into `spec.priority` and its policy into
  `spec.preemptionPolicy` (`admit_priority`). Without a name the globalDefault class applies,
  else priority 0 and PreemptLowerPriority. A name that no class has is refused; so is a
  `spec.priority` or `spec.preemptionPolicy` the user wrote unless it equals what the class
  gives. Messages are kube-apiserver's own words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pools.core.errors import FieldError, ValidationError
from pools.core.fields import DNS1123_SUBDOMAIN, Checker

API_VERSION = "scheduling.k8s.io/v1"
KIND = "PriorityClass"
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPT_NEVER = "Never"
PREEMPTION_POLICIES = (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER)
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_CRITICAL_PRIORITY = 2 * HIGHEST_USER_DEFINABLE_PRIORITY
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
SYSTEM_PREFIX = "system-"
DEFAULT_PRIORITY = 0  # when no class is the globalDefault


@dataclass(frozen=True)
class PriorityClass:
    name: str
    value: int
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    global_default: bool = False
    description: str = ""


SYSTEM_CLASSES = {
    c.name: c
    for c in (
        PriorityClass("system-node-critical", SYSTEM_CRITICAL_PRIORITY + 1000,
                      description="Used for system critical pods that must not be moved from their current node."),
        PriorityClass("system-cluster-critical", SYSTEM_CRITICAL_PRIORITY,
                      description="Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."),
    )
}  # fmt: skip


def class_errors(*, name: Any, value: Any, preemption_policy: Any = PREEMPT_LOWER_PRIORITY, global_default: Any = False) -> list[FieldError]:
    """What kube-apiserver's validation refuses in a user's PriorityClass, with field paths."""
    errors = []
    if not (isinstance(name, str) and 0 < len(name) <= 253 and DNS1123_SUBDOMAIN.match(name)):
        errors.append(FieldError("metadata.name", f"invalid name {name!r}: a DNS-1123 subdomain of at most 253 characters (lower case letters, digits, '-' and '.')"))
    elif name.startswith(SYSTEM_PREFIX):
        errors.append(FieldError("metadata.name", f"priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only"))
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(FieldError("value", "must be an integer"))
    elif value < INT32_MIN:
        errors.append(FieldError("value", f"must be at least {INT32_MIN}"))
    elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
        errors.append(FieldError("value", f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"))
    if preemption_policy not in PREEMPTION_POLICIES:
        errors.append(FieldError("preemptionPolicy", f"Unsupported value: {preemption_policy!r}: supported values: {', '.join(PREEMPTION_POLICIES)}"))
    if not isinstance(global_default, bool):
        errors.append(FieldError("globalDefault", "must be true or false"))
    return errors


def parse_priority_class(document: Any) -> PriorityClass:
    """A `kind: PriorityClass` document (examples/priorityclasses.yaml) as a user class."""
    check = Checker()
    top = check.mapping(document, "", ("apiVersion", "kind", "metadata", "value", "preemptionPolicy", "globalDefault", "description"),
                        ("apiVersion", "kind", "metadata", "value"))  # fmt: skip
    if "apiVersion" in top and top["apiVersion"] != API_VERSION:
        check.error("apiVersion", f"must be {API_VERSION}")
    if "kind" in top and top["kind"] != KIND:
        check.error("kind", f"must be {KIND}")
    metadata = check.mapping(top.get("metadata", {}), "metadata", ("name", "labels", "annotations"), ("name",))
    description = top.get("description", "")
    if not isinstance(description, str):
        check.error("description", "must be a string")
    fields = {
        "name": metadata.get("name"),
        "value": top.get("value"),
        "preemption_policy": top.get("preemptionPolicy", PREEMPT_LOWER_PRIORITY),
        "global_default": top.get("globalDefault", False),
    }
    check.errors.extend(class_errors(**fields))
    if check.errors:
        raise ValidationError(check.errors)
    return PriorityClass(description=description, **fields)


@dataclass(frozen=True)
class Admitted:
    """What the Priority admission plugin writes into a pod's spec."""

    priority: int
    preemption_policy: str
    class_name: str  # "" when no class applied


def default_class(classes: Mapping[str, PriorityClass]) -> PriorityClass | None:
    """The globalDefault class; should several be (a race), the lowest value, as Kubernetes picks."""
    defaults = [c for c in classes.values() if c.global_default]
    return min(defaults, key=lambda c: (c.value, c.name)) if defaults else None


def admit_priority(
    *, class_name: str, priority: int | None, preemption_policy: str | None, classes: Mapping[str, PriorityClass]
) -> Admitted:
    """kube-apiserver's Priority admission plugin on pod creation. `classes` are the user's
    classes by name (the system classes are added here); `priority` and `preemption_policy` are
    what the pod's spec says itself (None when absent). Raise ValidationError, field path and
    Kubernetes' words, for an unknown class or a priority or policy that differs from it."""
    known = {**classes, **SYSTEM_CLASSES}
    if class_name:
        found = known.get(class_name)
        if found is None:
            raise ValidationError(f"no PriorityClass with name {class_name} was found", field="spec.priorityClassName")
    else:
        found = default_class(classes)
    admitted = (
        Admitted(found.value, found.preemption_policy, found.name) if found
        else Admitted(DEFAULT_PRIORITY, PREEMPT_LOWER_PRIORITY, "")
    )  # fmt: skip
    if priority is not None and priority != admitted.priority:
        raise ValidationError(
            f"the integer value of priority ({priority}) must not be provided in pod spec; priority admission "
            f"controller computed {admitted.priority} from the given PriorityClass name",
            field="spec.priority",
        )
    if preemption_policy is not None and preemption_policy != admitted.preemption_policy:
        raise ValidationError(
            f"the string value of PreemptionPolicy ({preemption_policy}) must not be provided in pod spec; priority "
            f"admission controller computed {admitted.preemption_policy} from the given PriorityClass name",
            field="spec.preemptionPolicy",
        )
    return admitted


def admitted_spec(spec: Mapping[str, Any], admitted: Admitted) -> dict[str, Any]:
    """The pod's spec as kube-apiserver stores it after admission: `priority` and
    `preemptionPolicy` filled in, `priorityClassName` the class that applied (the default's
    name when none was given)."""
    result = {**spec, "priority": admitted.priority, "preemptionPolicy": admitted.preemption_policy}
    if admitted.class_name:
        result["priorityClassName"] = admitted.class_name
    return result
