"""A pool's `spec.autoRepairPolicy.maxUnhealthy`: how many unhealthy nodes auto repair tolerates
before it pauses (seed P4, T3). Pure core, standard library only.

The field is Cluster API's MachineHealthCheck `maxUnhealthy` (an IntOrString): a number of nodes
(`3`) or a percentage of the pool's nodes (`"40%"`), and no remediation starts while more nodes
than that are unhealthy. As there, a number is taken as written, so `0` pauses auto repair at the
first unhealthy node (one is more than none), and a percentage is scaled to the pool's nodes and
rounded down (40% of 6 nodes tolerates 2). One difference, kept from the fixed 20% rule this
field generalises: a positive percentage tolerates at least one node. MHC's rounding alone gives
0 for 20% of a pool under five nodes, and such a pool could never heal even one broken node;
Karpenter's node repair, which rounds its 20% up, repairs one there too. A pool that wants MHC's
zero asks for it with `0` or `"0%"`.

A pool without the field tolerates `DEFAULT` (20%, as EKS and Karpenter), so leaving it out and
writing `maxUnhealthy: "20%"` mean the same: `pools.core.repair.unhealthy_limit` has no rule of its
own, only this one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MaxUnhealthy = int | str
DEFAULT: MaxUnhealthy = "20%"
MAX_COUNT = 2**31 - 1  # Kubernetes' IntOrString holds an int32
_PERCENT = re.compile(r"([0-9]{1,3})%")  # "40%", as Kubernetes writes a percentage
KIND_ERROR = 'must be a number of nodes (0 or more) or a percentage of the pool\'s nodes from "0%" to "100%", e.g. "40%"'


def max_unhealthy_error(value: Any) -> str | None:
    """Why `value` is not a valid `maxUnhealthy`, or None when it is: an int from 0, or a string
    "N%" with N from 0 to 100 (a bare "3" is refused, as Kubernetes refuses a string that is not
    a percentage)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return KIND_ERROR
    if isinstance(value, int):
        if value < 0:
            return "must be at least 0 (0 pauses auto repair at the first unhealthy node)"
        return f"must be at most {MAX_COUNT}" if value > MAX_COUNT else None
    match = _PERCENT.fullmatch(value)
    if match is None:
        return "must be a percentage from 0% to 100%" if re.fullmatch(r"[0-9]+%", value) else KIND_ERROR
    return "must be a percentage from 0% to 100%" if int(match.group(1)) > 100 else None


def tolerated(total: int, value: MaxUnhealthy = DEFAULT) -> int:
    """How many unhealthy nodes a pool of `total` nodes tolerates before auto repair pauses.
    Integer arithmetic, so 20% of 10 is exactly 2 (a float's 0.2 * 15 is 3.0000000000000004)."""
    if isinstance(value, int):
        return value
    percent = int(value[:-1])
    return max(1, percent * total // 100) if percent else 0


def limit_named(value: MaxUnhealthy, limit: int) -> str:
    """The limit as the pause's message names it: the setting, and what it means in this pool."""
    nodes = f"{limit} {'node' if limit == 1 else 'nodes'}"
    if isinstance(value, str):
        return f"the {value} limit ({nodes} in this pool)"
    return f"the pool's limit of {nodes} (autoRepairPolicy.maxUnhealthy: {value})"


def max_unhealthy_of(spec: Any) -> MaxUnhealthy:
    """The setting of a stored (validated) document's `spec`, read without parsing the document
    against the catalog (the pages' and the demo's reads); `DEFAULT` when it is absent (or not
    valid, which a document the services stored never is)."""
    policy = spec.get("autoRepairPolicy") if isinstance(spec, Mapping) else None
    value = policy.get("maxUnhealthy", DEFAULT) if isinstance(policy, Mapping) else DEFAULT
    return value if max_unhealthy_error(value) is None else DEFAULT
