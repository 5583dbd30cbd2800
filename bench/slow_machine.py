"""Run a command on this machine slowed down to a given speed-probe time: the slow VM of issue 23,
emulated (`--probe-ms 200` makes the 5 M-add loop of `bench/control_plane.machine_speed` take
about 200 ms on a VM where it takes 115).

A slow shared VM is mostly a VM whose cores are taken from it part of the time (steal time) or
clocked lower; for a request either way each core delivers less work per wall-clock second. This
wrapper takes that share from every core with one *hog* per core: a process pinned to the core
at real-time priority (SCHED_FIFO, so it preempts every ordinary process there, PostgreSQL and
the kernel's softirq work in process context included) that spins for part of every 2 ms and
sleeps for the rest. What the command (and everything else on the machine) gets is
`probe here / probe wanted` of each core, in slices short enough that a request of a few
milliseconds sees a slower core, not pauses. A CPU-share cgroup would not do: its quota is for
all cores together, so one busy thread alone still runs at full speed.

The hogs' duty is calibrated against the probe loop before the command starts and reported
(probe alone, probe with the hogs). The command's own CPU accounting is not slowed: a report that
costs 1.4 ms of CPU here still costs 1.4 ms, but only ~57% of each core is there to give it, so
throughput and latency are the slow VM's while CPU milliseconds stay this machine's.

Needs permission for SCHED_FIFO (root or CAP_SYS_NICE); the kernel's real-time throttling
(sched_rt_runtime_us, 95% by default) is the safety net if a hog misbehaves, and each hog exits
when this process does.

Usage: .venv/bin/python bench/slow_machine.py --probe-ms 200 -- .venv/bin/python bench/agent_ingest.py --nodes 10000
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time

PERIOD_S = 0.0005
PROBE_ADDS = 5_000_000


def probe_ms(times: int = 3) -> float:
    """The speed probe's loop (bench/control_plane.machine_speed): best of `times`, in ms."""
    best = float("inf")
    for _ in range(times):
        started = time.perf_counter()
        total = 0
        for i in range(PROBE_ADDS):
            total += i
        best = min(best, time.perf_counter() - started)
    return best * 1000


def _hog(cpu: int, busy_fraction: multiprocessing.Value, parent: int) -> None:
    """Spin for busy_fraction of every PERIOD_S on `cpu`, at real-time priority, until the
    parent is gone."""
    os.sched_setaffinity(0, {cpu})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    clock, sleep = time.perf_counter, time.sleep
    start = clock()
    while os.getppid() == parent:
        busy_until = start + PERIOD_S * busy_fraction.value
        while clock() < busy_until:
            pass
        start += PERIOD_S
        pause = start - clock()
        if pause > 0:
            sleep(pause)
        else:  # behind (the hog was itself preempted): start a fresh period
            start = clock()


class Hogs:
    """One hog per core, sharing one busy fraction that calibration adjusts."""

    def __init__(self, busy_fraction: float):
        self.busy = multiprocessing.Value("d", busy_fraction, lock=False)
        self.processes = [multiprocessing.Process(target=_hog, args=(cpu, self.busy, os.getpid()), daemon=True)
                          for cpu in sorted(os.sched_getaffinity(0))]

    def __enter__(self) -> Hogs:
        for process in self.processes:
            process.start()
        time.sleep(0.2)
        dead = [p for p in self.processes if not p.is_alive()]
        if dead:
            self.__exit__()
            raise SystemExit("a hog could not start: SCHED_FIFO needs root or CAP_SYS_NICE")
        return self

    def __exit__(self, *exc) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.join(timeout=5)

    def calibrate(self, target_ms: float, rounds: int = 4) -> float:
        """Adjust the busy fraction until the probe takes about target_ms; the probe's time."""
        measured = probe_ms()
        for _ in range(rounds):
            if abs(measured - target_ms) <= 0.03 * target_ms:
                break
            # probe time scales as 1 / (1 - busy): solve for the busy fraction that gives target
            free_now = 1 - self.busy.value
            self.busy.value = min(0.9, max(0.0, 1 - free_now * measured / target_ms))
            measured = probe_ms()
        return measured


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        raise SystemExit("usage: slow_machine.py --probe-ms MS -- COMMAND ...")
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe-ms", type=float, required=True, help="the speed probe's loop time to emulate, in ms")
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    if not command:
        raise SystemExit("slow_machine.py: no command after --")
    alone = probe_ms()
    if args.probe_ms <= alone:
        raise SystemExit(f"slow_machine.py: the probe already takes {alone:.0f} ms here, not less than {args.probe_ms:.0f}")
    with Hogs(busy_fraction=1 - alone / args.probe_ms) as hogs:
        slowed = hogs.calibrate(args.probe_ms)
        print(f"slow machine: probe {alone:.0f} ms alone, {slowed:.0f} ms with the hogs "
              f"({hogs.busy.value:.0%} of each of {len(hogs.processes)} cores taken every {PERIOD_S * 1000:.1f} ms)", flush=True)
        return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
