"""A full pool at the node limit the autoscaler stops at (pools/controllers/autoscaler.py), as the
self-check on Pending pods (`pools.core.diagnose.checks`) words it: which limit, nodeCount.max or
spec.burst.maxNodes above the monthly nodes, and the one change that brings a node past it. It
says what the pod's own hints say (pools/controllers/pending_hints.py, `growth_hint`): a lead who
reads both is never told two different things. Pure: no Django.
"""

from __future__ import annotations

from pools.core.diagnose.snapshot import PoolSnapshot
from pools.core.words import plural


def at_limit_advice(s: PoolSnapshot, why: str) -> tuple[str, str]:
    """A full pool at the limit the autoscaler stops at: what brings a node past it (a pool that
    does not burst gets nodes only from nodeCount.min). What makes room on its nodes is the
    scheduler's hint, quoted after this (`checks._pending_advice`)."""
    if s.at_burst_limit():
        return (f"No capacity: the pool is at its burst limit (spec.burst.maxNodes: {s.burst_max_nodes} above its {plural(s.baseline(), 'monthly node')}) and its nodes are full.",
                f"Run {why}; raise spec.burst.maxNodes (`ebcloud node-pool apply -f` with the pool's YAML) or nodeCount.min (`ebcloud node-pool scale {s.name} --min N`).")  # fmt: skip
    cause = f"No capacity: the pool is at nodeCount.max ({s.max_nodes}) and its nodes are full."
    if s.scaling is None or not s.burst_enabled:
        return (cause[:-1] + "; it does not burst (no spec.scaling block, or spec.burst.enabled is false), so raising nodeCount.max alone adds no node.",
                f"Run {why}; raise nodeCount.min with it (`ebcloud node-pool scale {s.name} --min N --max N`), or raise nodeCount.max and enable on-demand burst.")  # fmt: skip
    return cause, f"Run {why}; raise nodeCount.max (`ebcloud node-pool scale {s.name} --max N`): the autoscaler then adds a burst node when the pool's scaling policy asks."
