"""Bad arguments to the operator's management commands: refused before the command does anything,
with one line (argparse's usage error, exit 2, from the command line), nothing written.

- `--interval` of the loop commands (reconcile, schedule, autoscale, repair, rollup) was a plain
  float: `-1`, `nan` and `inf` ran one complete pass, then crashed in `time.sleep` with a
  traceback; `0` and a billion seconds looped busily or never again. The demo's `--tick nan`
  passed its `<= 0` check (pools/management/arguments.py).
- `meter --hour` metered hours of year 1 and 1999 (writing `billing_meterrun` rows) although the
  costs API takes no day outside 2000-01-01..2999-12-31.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from billing.models import MeterRun
from tests import bad_input_world
from tests.corpus import db_state

pytestmark = pytest.mark.django_db

world = bad_input_world.world

LOOP_COMMANDS = ["reconcile", "schedule", "autoscale", "repair", "rollup"]
BAD_SECONDS = ["-1", "0", "nan", "inf", "86401", "soon"]


@pytest.mark.parametrize("value", BAD_SECONDS)
@pytest.mark.parametrize("command", LOOP_COMMANDS)
def test_a_bad_interval_is_refused_before_any_pass(world, command, value):
    """`--once` too: before the fix the pass ran and the command exited 0 (or, looping, crashed
    after the pass); a test without `--once` would sleep for ever on `0` or `1e9`."""
    before = db_state()
    with pytest.raises(CommandError, match=r"argument --interval: must be a number of seconds above 0 and at most 86400"):
        call_command(command, "--interval", value, "--once")
    assert db_state() == before


@pytest.mark.parametrize("command", LOOP_COMMANDS)
def test_a_good_interval_is_taken(world, command):
    call_command(command, "--interval", "0.5", "--once")


def test_from_the_command_line_a_bad_interval_is_one_usage_line_and_exit_2(tmp_path):
    """An empty database of its own: a command that ran a pass anyway would touch no other."""
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"} | {"DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    result = subprocess.run([sys.executable, str(root / "manage.py"), "reconcile", "--interval", "nan"],
                            cwd=root, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == (
        "manage.py reconcile: error: argument --interval: must be a number of seconds above 0 and at most 86400 (a day), got 'nan'"
    )


@pytest.mark.parametrize("option", ["--tick", "--report-interval", "--fault-every", "--summary-every"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_the_demo_fleet_refuses_a_bad_number_of_seconds(option, value):
    """No platform admin exists here: before the fix `--tick nan` got as far as looking for one."""
    with pytest.raises(CommandError, match=rf"argument {option}: must be a number of seconds above 0"):
        call_command("demo_fleet", option, value)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0"])
def test_the_demo_fleet_refuses_a_speed_that_is_not_a_positive_number(value):
    with pytest.raises(CommandError, match="--speed and --tick must be positive"):
        call_command("demo_fleet", f"--speed={value}")


@pytest.mark.parametrize("hour", ["0001-01-01T00:00", "1999-01-01T00:00", "1999-12-31T23:00:00+00:00", "2000-01-01T05:00+08:00"])
def test_meter_refuses_an_hour_outside_the_years_costs_are_kept(world, hour):
    """The costs API's range (billing/selectors.py FIRST_DAY..LAST_DAY), in UTC: 05:00+08:00 on
    the first day is 21:00 UTC the day before."""
    before = db_state()
    with pytest.raises(CommandError, match=r"^--hour: must be between 2000-01-01 and 2999-12-31"):
        call_command("meter", "--hour", hour)
    assert db_state() == before
    assert not MeterRun.objects.exists()


def test_meter_still_meters_the_first_hour_of_the_range(world):
    call_command("meter", "--hour", "2000-01-01T00:00")
    assert MeterRun.objects.exists()
