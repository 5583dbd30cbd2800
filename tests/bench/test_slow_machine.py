"""bench/slow_machine.py: the slow VM of issue 23, emulated by real-time hogs on every core.
The probe loop run under it must take about the time asked for, and bad use is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "slow_machine.py"
# A shared VM's own steal time comes and goes within seconds (CI once saw the command's probe take
# 438 ms right after calibration read 310 for 318 asked): one run in ATTEMPTS must land.
ATTEMPTS = 3
PROBE = "import sys; sys.path.insert(0, 'bench'); from slow_machine import probe_ms; print(round(probe_ms()))"


def _can_run_real_time() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (PermissionError, AttributeError, OSError):
        return False
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return True


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not _can_run_real_time(), reason="the hogs need SCHED_FIFO (root or CAP_SYS_NICE)")
def test_the_probe_under_the_hogs_takes_about_the_time_asked_for():
    sys.path.insert(0, str(ROOT / "bench"))
    from slow_machine import probe_ms

    runs = []
    for _ in range(ATTEMPTS):
        target = 1.6 * probe_ms()
        done = _run("--probe-ms", f"{target:.0f}", "--", sys.executable, "-c", PROBE)
        assert done.returncode == 0, done.stderr
        header, inside = done.stdout.splitlines()
        assert header.startswith("slow machine: probe ") and "with the hogs" in header
        runs.append((round(target), done.stdout))
        if 0.75 * target <= int(inside) <= 1.3 * target:
            return
    pytest.fail(f"the probe under the hogs missed the time asked for in each of {ATTEMPTS} runs: {runs}")


def test_bad_use_is_one_line_and_a_non_zero_exit():
    for args, message in ((("--probe-ms", "200"), "usage: slow_machine.py"), (("--probe-ms", "200", "--"), "no command after --"),
                          (("--probe-ms", "1", "--", "true"), "not less than 1")):
        done = _run(*args)
        assert done.returncode != 0 and done.stdout == "" and message in done.stderr.strip().splitlines()[-1], (args, done.stderr)
