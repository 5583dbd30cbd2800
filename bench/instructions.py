"""Instructions per unit of work, counted by callgrind (issue 23 items 1 and 4): a cost that does
not move with the machine's speed. Seconds on the shared 2-vCPU VMs move by a factor of two
between sessions and even between two runs minutes apart; the number of machine instructions
one report, one pool's pass or one metered node-hour takes does not.

How a count is taken: the unit of work runs in a child interpreter under `valgrind
--tool=callgrind`. While the child starts, imports Django and opens its data (prepared before
by a native child), callgrind's instrumentation is off (valgrind then runs it about 10x slower
instead of 50x); the child runs
the workload once uncounted (imports, compiled statements and caches warm, as in a worker that
has been up a while), switches instrumentation on with `callgrind_control -i on`, and runs it
again as one call through a ctypes callback. Callgrind collects only inside ctypes' C function
that calls a Python callable from C (`--toggle-collect=_CallPythonObject`) and dumps the count
when it returns, so the number is that call's own instructions: not the interpreter's start, the
setup, or the warm-up. The same code on the same interpreter build gives the same count on any
machine, however fast or loaded, to within a few percent (PYTHONHASHSEED is fixed in the child;
what moves it is where the cyclic garbage collector happens to run, and random credentials or
UUIDs in some workloads): compare counts to ~10%, guard them with a factor of two. A different
interpreter build (PGO, another CPython version) counts differently, the probe's loop with it.

What it does not count: the other processes. With PostgreSQL the database server's work is
outside (the workloads here use SQLite in process, so the database's work is in the count).

A workload is a factory `module:function` called with keyword arguments in the child; it returns
a `Workload`, whose `run` is called twice (warm-up, counted), and whose `units` says afterwards,
uncounted, how many units the counted run did. Where the module also has `prepare_<function>`,
that is called first with the same arguments in a native child (no valgrind): building a fleet
under valgrind would take longer than counting its pass.

Usage (the counts of bench/workloads.py, the regression guards' units; `--demo`: a first start
of the demo's data, the unit of bench/make_run_*.sh):
    python bench/instructions.py [--pools 2,4] [--reports 20] [--demo]
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOGGLE = "_CallPythonObject"  # ctypes (Modules/_ctypes/callbacks.c): C calling a Python callable


@dataclass
class Workload:
    """What the child runs: `run` twice (warm-up, counted), then `units` once, uncounted;
    `reset`, when given, before each run, uncounted (e.g. empty the read model a relist fills);
    `close`, when given, at the end whatever happened (e.g. stop the API server it started)."""

    name: str
    unit: str
    run: Callable[[], object]
    units: Callable[[], int]
    reset: Callable[[], object] | None = None
    close: Callable[[], object] | None = None
    warm: bool = True  # False: counted cold, with no warm-up run (a unit that is a process's first work)


@dataclass(frozen=True)
class Count:
    """One counted run: its instructions, the units of work it did, its SQL statements."""

    name: str
    unit: str
    units: int
    instructions: int
    statements: int

    @property
    def per_unit(self) -> float:
        return self.instructions / self.units

    def describe(self) -> str:
        return (
            f"{self.name}: {self.per_unit / 1e6:.3f} M instructions per {self.unit} "
            f"({self.instructions / 1e6:.1f} M for {self.units:,} {self.unit}s, {self.statements:,} SQL statements)"
        )


def marginal(small: Count, large: Count) -> float:
    """Instructions per unit of the larger run beyond the smaller: what one more pool (or node)
    costs, without the fixed cost a pass pays whatever the fleet (its few statements)."""
    if large.units <= small.units:
        raise ValueError(f"{large.name} did no more units than {small.name}")
    return (large.instructions - small.instructions) / (large.units - small.units)


def unavailable() -> str | None:
    """Why counts cannot be taken here, or None when they can."""
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install valgrind), so no instructions were counted"
    return None


def prepare_natively(workloads: list[tuple[str, dict]], *, timeout: float = 1800, env: dict[str, str] | None = None) -> None:
    """Run the workloads' `prepare_<function>` steps in a native child (no valgrind)."""
    native = [sys.executable, "-m", "bench.instructions", "--prepare", json.dumps(workloads)]
    child_env = {**os.environ, "PYTHONHASHSEED": "0", **(env or {})}
    prepared = subprocess.run(native, cwd=ROOT, env=child_env, capture_output=True, text=True, timeout=timeout, check=False)
    if prepared.returncode != 0:
        tail = "\n".join((prepared.stdout + prepared.stderr).splitlines()[-30:])
        raise RuntimeError(f"preparing the workloads failed (exit {prepared.returncode}):\n{tail}")


def count(
    workloads: list[tuple[str, dict]], *, timeout: float = 1800, env: dict[str, str] | None = None, prepared: bool = False
) -> list[Count]:
    """Count each workload (`"module:function"`, keyword arguments) in one child under callgrind,
    in order, after preparing them natively (unless `prepared`). Raises RuntimeError with the
    child's last lines when it fails."""
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    if not prepared:
        prepare_natively(workloads, timeout=timeout, env=env)
    with tempfile.TemporaryDirectory(prefix="ebcloud-callgrind-") as work:
        out, results = Path(work) / "callgrind.out", Path(work) / "results.json"
        command = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
            f"--toggle-collect={TOGGLE}", f"--zero-before={TOGGLE}", f"--dump-after={TOGGLE}",
            f"--callgrind-out-file={out}", sys.executable, "-m", "bench.instructions", "--child", str(results), json.dumps(workloads),
        ]  # fmt: skip
        child_env = {**os.environ, "PYTHONHASHSEED": "0", **(env or {})}
        done = subprocess.run(command, cwd=ROOT, env=child_env, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0 or not results.exists():
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
            raise RuntimeError(f"the counting child failed (exit {done.returncode}):\n{tail}")
        ran = json.loads(results.read_text())
        totals = [_total(Path(f"{out}.{i}")) for i in range(1, len(ran) + 1)]
    return [Count(r["name"], r["unit"], r["units"], total, r["statements"]) for r, total in zip(ran, totals, strict=True)]


def additions(*, n: int) -> Workload:
    """The speed probe's loop (`total += i`, `n` times): its instructions per addition turn the
    probe's milliseconds into this machine's instructions per second, and so a target in
    seconds on a VM of a given probe speed into instructions."""

    def run() -> None:
        total = 0
        for i in range(n):
            total += i

    return Workload(f"{n:,} additions", "addition", run, lambda: n)


def _total(part: Path) -> int:
    match = re.search(r"^totals:\s*(\d+)", part.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no totals in {part.name}")
    return int(match.group(1))


# ---------------------------------------------------------------------------------------------
# The child


def _instrument(state: str) -> None:
    done = subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], capture_output=True, text=True, check=False)
    if done.returncode != 0 or "Error" in done.stdout + done.stderr:
        raise RuntimeError(f"callgrind_control -i {state} failed: {(done.stdout + done.stderr).strip()}")


def _statements_counter():
    """A statement counter for the counted run when Django is set up, else a no-op context."""
    from contextlib import nullcontext

    try:
        from django.apps import apps

        if not apps.ready:
            return nullcontext(), lambda: 0
        from django.db import connection
    except ImportError:
        return nullcontext(), lambda: 0
    seen = [0]

    def wrapper(execute, sql, params, many, context):
        seen[0] += 1
        return execute(sql, params, many, context)

    return connection.execute_wrapper(wrapper), lambda: seen[0]


def _resolve(target: str, prefix: str = ""):
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), prefix + function, None)


def prepare(workloads: list[tuple[str, dict]]) -> None:
    for target, kwargs in workloads:
        step = _resolve(target, "prepare_")
        if step is not None:
            step(**kwargs)


def _counted_run(workload: Workload, call) -> dict:
    reset = workload.reset or (lambda: None)
    if workload.warm:
        reset()
        workload.run()  # warm-up, not counted
    reset()
    failures: list[BaseException] = []

    def counted() -> None:
        try:
            workload.run()
        except BaseException as exc:  # noqa: BLE001 - a ctypes callback swallows exceptions: carry it out
            failures.append(exc)

    wrapper, statements = _statements_counter()
    with wrapper:
        _instrument("on")
        call(counted)()
        _instrument("off")
    if failures:
        raise failures[0]
    return {"name": workload.name, "unit": workload.unit, "units": workload.units(), "statements": statements()}


def child(results: Path, workloads: list[tuple[str, dict]]) -> None:
    call = ctypes.CFUNCTYPE(None)
    ran = []
    for target, kwargs in workloads:
        workload: Workload = _resolve(target)(**kwargs)
        try:
            ran.append(_counted_run(workload, call))
        finally:
            if workload.close is not None:
                workload.close()
    results.write_text(json.dumps(ran))


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=2, metavar=("RESULTS", "WORKLOADS"), help=argparse.SUPPRESS)
    parser.add_argument("--prepare", metavar="WORKLOADS", help=argparse.SUPPRESS)
    parser.add_argument("--pools", default="2,4", help="Two fleet sizes for the per-pool and per-node-hour counts")
    parser.add_argument("--reports", type=int, default=20, help="Reports in the counted ingest run")
    parser.add_argument("--demo", action="store_true", help="Count only a first start of the demo's data instead (bench/make_run_*.sh; ~5 minutes)")
    args = parser.parse_args(argv)
    if args.prepare:
        prepare(json.loads(args.prepare))
        return 0
    if args.child:
        child(Path(args.child[0]), json.loads(args.child[1]))
        return 0
    sys.path.insert(0, str(ROOT))
    from bench import workloads

    small, large = (int(p) for p in args.pools.split(","))
    started = time.perf_counter()
    lines = workloads.demo_lines() if args.demo else workloads.report_lines(small=small, large=large, reports=args.reports)
    for line in lines:
        print(line)
    print(f"(counted in {time.perf_counter() - started:.0f} s under callgrind)")
    return 0


if __name__ == "__main__":
    if "" not in sys.path and str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.exit(main())
