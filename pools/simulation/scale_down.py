"""Scale-down in the offline replay, by Cluster Autoscaler's rules: burst nodes still
provisioning go first (newest first), then empty Ready burst nodes, then Ready burst nodes whose
pods all fit elsewhere (moved, monthly nodes tried first: they are already paid); and the
unneeded-node rule, which removes a burst node that held no pod for the whole scale-down
stabilization window, within the scale-down policies. Mixed into the replay
(:class:`pools.simulation.replay._Replay`), whose state it works on."""

from __future__ import annotations

import math
from datetime import datetime

from pools.core.autoscaling import unneeded_removals
from pools.core.scaling_history import ScalingHistory
from pools.core.scheduling.nodes import Pod, best_fit_gpus, filter_node


class ScaleDown:
    """The replay's scale-down steps (``sched``, ``burst``, ``empty_since``, ``running``,
    ``lifetimes`` and ``pool`` are the replay's)."""

    def _move_pods_off(
        self, name: str, keep: set[str]
    ) -> list[tuple[Pod, str, tuple[int, ...]]] | None:
        """Moves that empty burst node ``name`` onto other Ready nodes, or None."""
        node = self.sched.node(name)
        targets = [
            n.clone() for n in self.sched.nodes if n.ready and n.name != name and n.name not in keep
        ]  # monthly (m-*) sort before burst (od-*): paid capacity is tried first
        by_name = {n.name: n for n in targets}
        moves = []
        pods = sorted(
            (b.pod for b in node.bound.values()),
            key=lambda p: (-p.gpu_request_milli, -p.cpu_milli, p.name),
        )
        for pod in pods:
            target = next((n for n in targets if filter_node(pod, n) is None), None)
            if target is None:
                return None
            gpus = best_fit_gpus(pod, target.gpu_free) or ()
            by_name[target.name].bind(pod, gpus)
            moves.append((pod, target.name, gpus))
        return moves

    def _remove_burst(self, count: int, now: int) -> tuple[int, int]:
        """Remove up to ``count`` burst nodes; returns (removed, pods moved)."""
        removed, moved = [], 0
        provisioning = sorted(
            (n for n, (_, ready_at) in self.burst.items() if ready_at > now),
            key=lambda n: (-self.burst[n][0], n),
        )
        ready = sorted(
            (n for n, (_, ready_at) in self.burst.items() if ready_at <= now),
            key=lambda n: (
                len(self.sched.node(n).bound),
                self.sched.node(n).gpu_used_milli,
                n,
            ),
        )
        for name in provisioning + ready:
            if len(removed) >= count:
                break
            node = self.sched.node(name)
            if node.bound:
                moves = self._move_pods_off(name, set(removed))
                if moves is None:
                    continue
                for pod, target, gpus in moves:
                    item, _, end = self.running[pod.name]
                    self.sched.unbind(pod.name, name)
                    self.sched.bind(pod, target, gpus)
                    self.empty_since.pop(target, None)
                    self.running[pod.name] = (item, target, end)
                    moved += 1
            removed.append(name)
        for name in removed:
            self._release(name, now)
        return len(removed), moved

    def _release(self, name: str, now: int) -> None:
        """The burst node leaves: its lifetime is billed, it takes no more pods."""
        requested, _ = self.burst.pop(name)
        self.empty_since.pop(name, None)
        self.lifetimes.append(now - requested)
        node = self.sched.node(name)
        node.ready, node.unschedulable = False, True
        self.sched.touch(name)

    def _unneeded_window(self) -> int:
        return self.pool.spec.scale_down.stabilization_window_seconds

    def _unneeded_due(self, now: int) -> bool:
        if not self.pool.remove_unneeded:
            return False
        window = self._unneeded_window()
        return any(since + window <= now for since in self.empty_since.values())

    def next_unneeded_deadline(self, now: int) -> float:
        if not self.pool.remove_unneeded or not self.empty_since:
            return math.inf
        window = self._unneeded_window()
        later = [since + window for since in self.empty_since.values() if since + window > now]
        return min(later, default=math.inf)

    def _remove_unneeded(
        self, current: int, history: ScalingHistory, change: int, moment: datetime, now: int
    ) -> int:
        window = self._unneeded_window()
        due = sorted(
            (since, name) for name, since in self.empty_since.items() if since + window <= now
        )
        if not due:
            return 0
        pending_history = history.record(at=moment, change=change) if change else history
        allowed = unneeded_removals(
            due=len(due), current=current, baseline=self.pool.monthly_nodes,
            rules=self.pool.spec.scale_down, history=pending_history, now=moment,
        )  # fmt: skip
        removed = 0
        for _, name in due[:allowed]:
            self._release(name, now)
            removed += 1
        return removed
