"""Reproduce the FGD paper's trace experiment with our scheduling core (seed O3, C3, P3).

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent", USENIX ATC 2023, measure *unallocated GPU %* while the Alibaba
cluster-trace-gpu-v2023 ("openb") workload fills 1213 GPU nodes. This script follows
../shared/data/README.md and the paper's artifact (hkust-adsl/kubernetes-scheduler-simulator):

1. Pods are the trace's pod list, sorted by name then shuffled with the seed. The workload is
   then tuned to 1.3x the GPU capacity: pods sampled uniformly with replacement from the
   original list are appended until the next one would push the total GPU request past
   1.3x capacity (or random pods are dropped while it is above, for lists that start above).
   Like the artifact, the stop test adds the sample's per-GPU milli (``gpu_milli``) while the
   running total adds its full request (``gpu_count * gpu_milli``). Pods never leave.
2. Pods are scheduled online, in that order, by :class:`pools.core.scheduling.cluster.ClusterScheduler`
   with the named policy (the same filter and score functions as the live scheduler); a pod
   that fits nowhere is dropped.
3. After every pod the arrived GPU request and the allocated GPU are recorded as % of
   capacity (a share counts its milli, a whole GPU 1000). The value "at 100% arrived" is the
   mean allocation over the records whose arrived % rounds to 100, as the artifact's analysis
   does; unallocated % = 100 - that. The median over the seeds is reported.

The seeded shuffle uses Python's ``random``, not the artifact's Go RNG, so individual seeds
differ from the paper's; the medians over ten seeds are what is compared.

Usage: python bench/scheduler_trace.py --variant default --policies bestfit,fgd --seeds 42-51
       python bench/scheduler_trace.py --pods my_pods.csv --nodes my_nodes.csv --policies fgd-cpu
       (each run also counts instructions per pod placed under callgrind: --no-instructions skips it)
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # allow `python bench/scheduler_trace.py` from the project root
    sys.path.insert(0, str(ROOT))

from bench.pod_mirror import speed_probe  # noqa: E402
from pools.core.scheduling.cluster import ClusterScheduler  # noqa: E402
from pools.core.scheduling.fragmentation import workload_from_pods  # noqa: E402
from pools.core.scheduling.nodes import NodeState, Pod  # noqa: E402
from pools.core.scheduling.repack import (  # noqa: E402
    make_room_plan,  # noqa: E402
    repack_plan,  # noqa: E402
)
from pools.core.scheduling.repack_shares import repack_shares  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "alibaba-gpu-v2023"
NODE_FILE = "openb_node_list_gpu_node.csv"
TUNE_RATIO = 1.3
VARIANTS = ("default", "gpushare100", "multigpu50", "cpu200")
# Published medians (unallocated GPU % at 100% / 130% arrived), computed from the artifact's
# cached results, as listed in ../shared/data/README.md. None = not published there.
PUBLISHED = {
    "default": {
        "random": (13.75, 12.62),
        "dotprod": (9.45, 9.20),
        "gpuclustering": (8.42, 8.21),
        "gpupacking": (8.20, 7.94),
        "bestfit": (7.09, 6.89),
        "fgd": (4.77, 4.60),
    },
    "gpushare100": {"bestfit": (15.38, None), "fgd": (13.36, None)},
    "multigpu50": {"bestfit": (4.38, None), "fgd": (2.91, None)},
    "cpu200": {"bestfit": (7.85, None), "fgd": (5.18, None)},
}


def load_nodes(path: Path) -> list[NodeState]:
    """Nodes of an openb node list (``sn,cpu_milli,memory_mib,gpu,model``); ``path`` is the
    file or, for the shared trace, its folder."""
    if path.is_dir():
        path = path / NODE_FILE
    with open(path, newline="") as f:
        return [
            NodeState(
                name=row["sn"],
                cpu_milli=int(row["cpu_milli"]),
                memory_mib=int(row["memory_mib"]),
                gpu_count=int(row["gpu"]),
                gpu_model=row["model"],
                pool=row["model"],
            )
            for row in csv.DictReader(f)
        ]


def pod_file(data: Path, variant: str) -> Path:
    return data / f"openb_pod_list_{variant}.csv"


def load_pods(path: Path, variant: str | None = None) -> list[Pod]:
    """Pods of an openb pod list (``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec]``):
    ``path`` is the file, or the shared trace's folder with a ``variant``."""
    if variant is not None:
        path = pod_file(path, variant)
    pods = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            gpus = int(row["num_gpu"])
            pods.append(
                Pod(
                    name=row["name"],
                    cpu_milli=int(row["cpu_milli"]),
                    memory_mib=int(row["memory_mib"]),
                    gpu_count=gpus,
                    gpu_milli=min(int(row["gpu_milli"]), 1000) if gpus else 0,
                    gpu_models=tuple(m for m in (row.get("gpu_spec") or "").split("|") if m),
                )
            )
    return sorted(pods, key=lambda p: p.name)


def arrival_order(pods: list[Pod], capacity_milli: int, rng: random.Random) -> list[Pod]:
    """Shuffle, then tune the GPU request to 1.3x capacity exactly as the artifact does."""
    order = list(pods)
    rng.shuffle(order)
    target = TUNE_RATIO * capacity_milli
    total = sum(p.gpu_request_milli for p in order)
    if total > target:
        while total > target:
            total -= order.pop(rng.randrange(len(order))).gpu_request_milli
        return order
    for i in range(10**7):
        pod = pods[rng.randrange(len(pods))]
        if total + pod.gpu_milli > target:
            break
        total += pod.gpu_request_milli
        order.append(dataclasses.replace(pod, name=f"{pod.name}-tuned-{i}"))
    return order


@dataclass
class RunResult:
    policy: str
    seed: int
    unallocated_100: float
    unallocated_130: float
    failed_pods: int
    seconds: float
    cpu_seconds: float = 0.0  # this process's CPU time: what a shared, loaded machine does not inflate
    step_floor: float | None = None  # with at_full="floor": the best any repack could reach there


WINDOW_HALF_PCT = 0.5  # "at 100%" = the records whose arrived % rounds to 100, as the artifact


def _at(records: list[tuple[float, float]], arrived_pct: int) -> float:
    window = [alloc for arr, alloc in records if round(arr) == arrived_pct]
    if not window:
        window = [alloc for arr, alloc in records if abs(arr - arrived_pct) <= 1]
    return 100.0 - statistics.fmean(window) if window else float("nan")


def step_threshold(capacity_milli: int) -> float:
    """Arrived GPU milli at which an ``at_full`` step acts: the lower edge of the 100% window,
    so that a ``+step`` row averages over exactly the records a plain row does, all of them
    taken after the step."""
    return capacity_milli * (100.0 - WINDOW_HALF_PCT) / 100.0


def rename_nodes(nodes: list[NodeState], rng: random.Random) -> None:
    """The artifact prefixes every node name with its place in a random permutation
    (``0042-openb-node-0001``), so "ties go to the smallest name" means a random but fixed
    node order per seed instead of the trace's order, where names follow the GPU model."""
    ranks = list(range(len(nodes)))
    rng.shuffle(ranks)
    for rank, node in zip(ranks, sorted(nodes, key=lambda n: n.name), strict=True):
        node.name = f"{rank:04d}-{node.name}"


def run_once(
    nodes, pods, workload, policy: str, seed: int, *, rename: bool = True, at_full: str = ""
) -> RunResult:
    """One online replay of one seed with one policy on fresh copies of ``nodes``.

    ``at_full`` acts once, when the arrived request first enters the 100% window (99.5% of
    capacity, :func:`step_threshold`):
    ``"repack"`` applies a node-freeing repack plan (no disruption budget) and offers the pods
    that failed so far again, in arrival order; ``"shares"`` applies the repack plan's other
    part, :func:`pools.core.scheduling.repack_shares.repack_shares` (the GPU shares packed into
    the fewest GPUs, with the failed pods as the ones waiting, so failed shares may be packed in
    and bound with them), and offers the rest again, largest first (whole GPUs came free);
    ``"room"`` applies
    :func:`pools.core.scheduling.repack.make_room_plan` to those pods (moving a few running pods
    so they fit); ``"floor"`` moves nothing and records in ``step_floor`` the 100% value
    (the window's average) that no repack at that point can go below, whatever it moves and
    wherever the later arrivals go (:func:`repack_floor`). The replay then continues; every
    record of the 100% window is taken after that step, and a plain run averages over the same
    window.
    """
    start, cpu_start = time.perf_counter(), time.process_time()
    fresh = [n.clone() for n in nodes]
    capacity = sum(n.gpu_count for n in fresh) * 1000
    rng = random.Random(seed)
    order = arrival_order(pods, capacity, rng)
    if rename:
        rename_nodes(fresh, rng)
    scheduler = ClusterScheduler(fresh, policy, workload=workload, seed=seed)
    arrived = allocated = 0
    threshold = step_threshold(capacity)
    records, failures, step_floor = [], [], None
    floor_state = None  # at_full="floor": (the nodes and the failed pods at the step, the pods since)
    for pod in order:
        arrived += pod.gpu_request_milli
        if scheduler.place(pod, explain_failure=False).node is None:
            failures.append(pod)
        else:
            allocated += pod.gpu_request_milli
        if floor_state is not None and round(100.0 * arrived / capacity) == 100:
            floor_state[2].append((100.0 * arrived / capacity, pod))
        if at_full == "floor" and arrived >= threshold:
            floor_state, at_full = ([n.clone() for n in scheduler.nodes], list(failures), [(100.0 * arrived / capacity, None)]), ""
        if at_full and arrived >= threshold:
            placed = apply_at_full(at_full, scheduler, workload, failures)
            allocated += sum(p.gpu_request_milli for p in placed)
            failures = [p for p in failures if p not in placed]
            at_full = ""
        records.append((100.0 * arrived / capacity, 100.0 * allocated / capacity))
    if floor_state is not None:
        step_floor = repack_floor(*floor_state)
    return RunResult(
        policy,
        seed,
        _at(records, 100),
        _at(records, 130),
        len(failures),
        time.perf_counter() - start,
        time.process_time() - cpu_start,
        step_floor,
    )


def placements(*, policy: str, pods: int, variant: str = "default", seed: int = 42, data: str = str(DEFAULT_DATA)):
    """bench/instructions.py's workload: the first `pods` pods of `seed`'s arrival order placed
    online on the trace's 1,213 nodes (fresh copies each run) with `policy`: instructions per
    pod placed, the unit this bench's seconds per seed are made of."""
    from bench.instructions import Workload

    nodes, all_pods = load_nodes(Path(data) / NODE_FILE), load_pods(pod_file(Path(data), variant))
    workload = workload_from_pods(all_pods)
    capacity = sum(n.gpu_count for n in nodes) * 1000
    schedulers = []
    for _ in range(2):  # the warm-up's and the counted run's, each on fresh nodes
        fresh, rng = [n.clone() for n in nodes], random.Random(seed)
        order = arrival_order(all_pods, capacity, rng)[:pods]
        rename_nodes(fresh, rng)
        schedulers.append((ClusterScheduler(fresh, policy, workload=workload, seed=seed), order))
    runs = iter(schedulers)

    def run() -> None:
        scheduler, order = next(runs)
        for pod in order:
            scheduler.place(pod, explain_failure=False)

    return Workload(f"{policy}, {pods} pods on {len(nodes):,} nodes", "pod placed", run, lambda: pods)


def instruction_lines(policies: list[str], *, variant: str, data: Path, pods: int = 100) -> list[str]:
    """Instructions per pod placed for each policy (callgrind), or why they were not counted."""
    from bench.instructions import count, unavailable

    if unavailable():
        return [f"instructions: {unavailable()}"]
    specs = [("bench.scheduler_trace:placements", {"policy": p, "pods": pods, "variant": variant, "data": str(data)}) for p in policies]
    return [
        f"instructions per pod placed (callgrind, the first {pods} pods of seed 42, the same on any machine):",
        *(f"  {c.name}: {c.per_unit / 1e6:.2f} M" for c in count(specs)),
    ]


FLOOR_CHECKPOINTS = 4  # configuration LPs per window besides the step's own


def repack_floor(nodes: list[NodeState], failed: list[Pod], window: list[tuple[float, Pod | None]]) -> float:
    """The 100% value (unallocated GPU %, the mean over the window's records) that no repack at
    the step can go below: every pod running on ``nodes`` at the step stays placed (anywhere it
    may run), any of the ``failed`` ones and of the later arrivals may be added, wherever they
    fit. ``window`` lists each record from the step on as (arrived %, the pod that arrived
    then; None for the step's own record).

    A record's allocation is at most its arrived % and at most what the configuration LP of
    bench/offline_floor.py (:func:`~bench.offline_floor.pattern_floor`) lets fit of the pods
    known by then; since more pods can only raise that, each record takes the LP of the next
    of a few evenly spaced checkpoints (the last record is one), which keeps it a bound."""
    from bench.offline_floor import pattern_floor

    running = [b.pod for n in nodes for b in n.bound.values()]
    later = [pod for _, pod in window if pod is not None]
    last = len(window) - 1
    checkpoints = sorted({0, *(round(i * last / FLOOR_CHECKPOINTS) for i in range(1, FLOOR_CHECKPOINTS + 1))})
    fits = {i: 100.0 - pattern_floor(nodes, failed + later[:i], required=running) for i in checkpoints}
    allocated = [min(pct, fits[min(c for c in checkpoints if c >= i)]) for i, (pct, _) in enumerate(window)]
    return 100.0 - statistics.fmean(allocated)


def apply_at_full(mode: str, scheduler: ClusterScheduler, workload, failed: list[Pod]) -> set[Pod]:
    """Plan on copies, replay the moves on the live scheduler, return the pods now placed."""
    if mode == "repack":
        plan = repack_plan(
            scheduler.nodes, workload=workload, max_drained_nodes=len(scheduler.nodes), pack_shares=False
        )
        moves, placements = plan.moves, {}
    elif mode == "shares":  # the failed pods wait: the shares among them join the packing
        bound = {name for name, *_ in repack_shares(scheduler, waiting=failed).placed}
        moves, placements = [], {}
    elif mode == "room":
        room = make_room_plan(failed, scheduler.nodes, workload=workload)
        moves, placements = room.moves, room.placements
    else:
        raise ValueError(f"unknown step {mode!r}")
    for move in moves:
        binding = scheduler.unbind(move.pod, move.from_node)
        scheduler.bind(binding.pod, move.to_node, move.gpu_indices)
    placed = set()
    if mode == "shares":  # the GPUs it freed go to the pods that need whole GPUs first
        placed = {pod for pod in failed if pod.name in bound}
        failed = sorted(set(failed) - placed, key=lambda p: (-p.gpu_request_milli, -p.cpu_milli, p.name))
    for pod in failed:
        if pod.name in placements:
            scheduler.bind(pod, *placements[pod.name])
            placed.add(pod)
        elif mode in ("repack", "shares") and scheduler.place(pod, explain_failure=False).node is not None:
            placed.add(pod)
    return placed


FLOORS = ("aggregate", "cuts", "patterns")  # bench/offline_floor.py's bounds, loosest first


def floor_once(nodes, pods, seed: int, *, bound: str = "cuts") -> tuple[float, float]:
    """The offline floor (bench/offline_floor.py) of one seed's workload at 100% and 130%
    arrived: the same shuffled, tuned arrivals as `run_once`, all known in advance. ``bound``:
    ``aggregate`` is the plain aggregate LP, ``cuts`` adds the per-GPU u_ε rows, ``patterns``
    is the configuration LP (column generation over per-GPU share patterns), the tightest."""
    from bench.offline_floor import offline_floor, pattern_floor

    if bound not in FLOORS:
        raise ValueError(f"unknown floor {bound!r}")
    capacity = sum(n.gpu_count for n in nodes) * 1000
    order = arrival_order(pods, capacity, random.Random(seed))
    arrived, full = 0, len(order)
    for index, pod in enumerate(order):
        arrived += pod.gpu_request_milli
        if arrived >= capacity:
            full = index + 1
            break
    if bound == "patterns":
        return pattern_floor(nodes, order[:full]), pattern_floor(nodes, order)
    gpu_cuts = bound == "cuts"
    return offline_floor(nodes, order[:full], gpu_cuts=gpu_cuts), offline_floor(nodes, order, gpu_cuts=gpu_cuts)


def parse_seeds(text: str) -> list[int]:
    seeds = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds.extend(range(int(low), int(high or low) + 1))
    return seeds


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="default", choices=VARIANTS)
    parser.add_argument("--policies", default="random,bestfit,fgd")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--keep-names",
        action="store_true",
        help="break ties by the trace's node names instead of the artifact's permuted names",
    )
    parser.add_argument(
        "--at-full",
        default="",
        help="comma list of steps to also run at 100%% arrived: repack, shares, room (<policy>+<step>); "
        "floor prints, instead of a replay, the unallocated %% no repack there could go below (needs scipy)",
    )
    parser.add_argument(
        "--pods",
        type=Path,
        help="an openb-format pod list to replay instead of the shared trace's --variant "
        "(name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec])",
    )
    parser.add_argument(
        "--nodes",
        type=Path,
        help="an openb-format node list instead of the shared trace's (sn,cpu_milli,memory_mib,gpu,model)",
    )
    parser.add_argument("--floor", action="store_true", help="also print the offline floors (LP bounds, loosest first; needs scipy)")
    parser.add_argument("--instructions", action=argparse.BooleanOptionalAction, default=True,
                        help="also count instructions per pod placed with callgrind (bench/instructions.py)")
    args = parser.parse_args(argv)
    node_path = args.nodes or args.data / NODE_FILE
    pod_path = args.pods or pod_file(args.data, args.variant)
    for path in (node_path, pod_path):
        if not path.is_file():
            print(f"data not found: {path}", file=sys.stderr)
            return 2
    try:
        nodes, pods = load_nodes(node_path), load_pods(pod_path)
    except (KeyError, ValueError) as error:
        print(f"not an openb-format list ({node_path}, {pod_path}): {error!r}", file=sys.stderr)
        return 2
    workload = workload_from_pods(pods)
    seeds = parse_seeds(args.seeds)
    trace_name = args.variant if args.pods is None else pod_path.name
    print(
        f"# {trace_name}: {len(nodes)} nodes, {sum(n.gpu_count for n in nodes)} GPUs, "
        f"{len(pods)} pods, seeds {args.seeds}"
    )
    print(
        "| policy | ours @100% | published @100% | ours @130% | published @130% "
        "| failed pods | s/seed |"
    )
    print("|---|---|---|---|---|---|---|")
    same_trace = args.pods is None and args.nodes is None
    published = PUBLISHED.get(args.variant, {}) if same_trace else {}
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    steps = [""] + [step.strip() for step in args.at_full.split(",") if step.strip()]
    runs = [(p, step) for step in steps for p in policies]
    for policy, step in runs:
        results = [
            run_once(nodes, pods, workload, policy, seed, rename=not args.keep_names, at_full=step)
            for seed in seeds
        ]
        pub = published.get(policy, (None, None)) if not step else (None, None)
        label = f"{policy}+{step}" if step else policy
        if step == "floor":
            print(
                f"| {policy}: floor of any repack at 100% | {statistics.median(r.step_floor for r in results):.2f} "
                f"| - | - | - | - | {statistics.fmean(r.seconds for r in results):.2f} |",
                flush=True,
            )
            continue
        print(
            f"| {label} | {statistics.median(r.unallocated_100 for r in results):.2f} "
            f"| {fmt(pub[0])} | {statistics.median(r.unallocated_130 for r in results):.2f} "
            f"| {fmt(pub[1])} | {statistics.median(r.failed_pods for r in results):.0f} "
            f"| {statistics.fmean(r.seconds for r in results):.2f} |",
            flush=True,
        )
    if args.floor:
        labels = {"aggregate": "LP", "cuts": "LP + per-GPU packing cuts", "patterns": "configuration LP, per-GPU share patterns"}
        for bound in FLOORS:
            label = labels[bound]
            started = time.perf_counter()
            floors = [floor_once(nodes, pods, seed, bound=bound) for seed in seeds]
            print(
                f"| offline floor ({label}, all pods known) | {statistics.median(f[0] for f in floors):.2f} | - "
                f"| {statistics.median(f[1] for f in floors):.2f} | - | - "
                f"| {(time.perf_counter() - started) / len(seeds):.2f} |",
                flush=True,
            )
    print(f"speed probe: 5 M additions in {speed_probe():.0f} ms")
    if args.instructions and same_trace:
        print("\n".join(instruction_lines(policies, variant=args.variant, data=args.data)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
