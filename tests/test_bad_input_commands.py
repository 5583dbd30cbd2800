"""Bad arguments to the operator's management commands: refused before the command does anything,
with one line (argparse's usage error, exit 2, from the command line), nothing written.

- `--interval` of the loop commands (reconcile, schedule, autoscale, repair, rollup) was a plain
  float: `-1`, `nan` and `inf` ran one complete pass, then crashed in `time.sleep` with a
  traceback; `0` and a billion seconds looped busily or never again. The demo's `--tick nan`
  passed its `<= 0` check (pools/management/arguments.py).
- `meter --hour` metered hours of year 1 and 1999 (writing `billing_meterrun` rows) although the
  costs API takes no day outside 2000-01-01..2999-12-31; `--hour ""` metered every pending hour.
- The demo's other numbers were plain floats and ints: `demo_fleet --seconds nan` (or `inf`) ran
  for ever and `-1` ran a pass; `--fault-after nan|inf|-1` silently meant no fault; `--speed nan`
  was a CommandError after start-up and `1e308` planned no pod; `--max-run -5` crashed on the
  first pod with a traceback. `demo --port 99999` crashed in `bind()`; `--grace nan` and
  `--ready-timeout nan` passed their checks (the server started, then "did not answer within
  nan s"); `--host 999.999.999.999` said the port was in use.
- `--now` of autoscale, reconcile and schedule in year 1 or 9999 ran a pass that wrote state and
  logged OverflowError tracebacks (exit 0); `--now ""` meant the clock.
- `mirror_pods --seconds nan` mirrored nothing and exited 0; `reference_docs --docs-dir FILE`
  was a FileExistsError traceback and `--docs-dir ""` wrote the project's own docs/.
"""

from __future__ import annotations

import io
import os
import re
import socket
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


@pytest.mark.parametrize(("args", "error"), [
    (["reconcile", "--interval", "nan"], "argument --interval: must be a number of seconds above 0 and at most 86400 (a day), got 'nan'"),
    (["demo_fleet", "--seconds", "nan"], "argument --seconds: must be a number of seconds from 0 to 86400 (a day), got 'nan'"),
    (["demo", "--port", "99999"], "argument --port: must be a port number from 1 to 65535, got '99999'"),
    (["autoscale", "--once", "--now", "9999-12-31T23:59:59-14:00"],
     "argument --now: must be between 2000-01-01 and 2999-12-31 (UTC), got '9999-12-31T23:59:59-14:00'"),
], ids=["reconcile-interval", "demo-fleet-seconds", "demo-port", "autoscale-now"])  # fmt: skip
def test_from_the_command_line_a_bad_value_is_one_usage_line_and_exit_2(tmp_path, args, error):
    """An empty database of its own: a command that ran a pass anyway would touch no other."""
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"} | {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "EBCLOUD_VAR_DIR": str(tmp_path / "var")}
    result = subprocess.run([sys.executable, str(root / "manage.py"), *args],
                            cwd=root, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == f"manage.py {args[0]}: error: {error}"


@pytest.mark.parametrize("option", ["--tick", "--report-interval", "--fault-every", "--summary-every"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_the_demo_fleet_refuses_a_bad_number_of_seconds(option, value):
    """No platform admin exists here: before the fix `--tick nan` got as far as looking for one."""
    with pytest.raises(CommandError, match=rf"argument {option}: must be a number of seconds above 0"):
        call_command("demo_fleet", option, value)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "0.5", "86401", "1e308", "fast"])
def test_the_demo_fleet_refuses_a_speed_outside_real_time_to_a_day_a_second(value):
    with pytest.raises(CommandError, match=rf"^Error: argument --speed: must be a number from 1 \(real time\) to 86400 .*got '{value}'$"):
        call_command("demo_fleet", f"--speed={value}")


@pytest.mark.parametrize("option", ["--seconds", "--fault-after"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "86401", "soon"])
def test_the_demo_fleet_refuses_a_bad_duration_where_0_means_none(world, option, value):
    """No platform admin exists here: before the fix each got as far as looking for one."""
    before = db_state()
    with pytest.raises(CommandError, match=rf"^Error: argument {option}: must be a number of seconds from 0 to 86400 \(a day\), got '{value}'$"):
        call_command("demo_fleet", option, value)
    assert db_state() == before


@pytest.mark.parametrize("value", ["-5", "0", "1.5", "1e3", "86401", "9" * 30, "\u0661"])
def test_the_demo_fleet_refuses_a_longest_pod_run_that_is_not_1_to_86400_seconds(value):
    with pytest.raises(CommandError, match=r"^Error: argument --max-run: must be a whole number from 1 to 86400, got "):
        call_command("demo_fleet", "--max-run", value)


@pytest.fixture
def busy_port():
    """A port something listens on: a `demo` whose bad value got past its checks stops there,
    before it prepares the database or starts a process."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield str(listener.getsockname()[1])


@pytest.mark.parametrize(("option", "value", "error"), [
    ("--port", "99999", "--port: must be a port number from 1 to 65535"),
    ("--port", "-1", "--port: must be a port number from 1 to 65535"),
    ("--grace", "nan", "--grace: must be a number of seconds from 0 to 86400"),
    ("--grace", "inf", "--grace: must be a number of seconds from 0 to 86400"),
    ("--ready-timeout", "nan", "--ready-timeout: must be a number of seconds above 0 and at most 86400"),
    ("--ready-timeout", "1e300", "--ready-timeout: must be a number of seconds above 0 and at most 86400"),
])  # fmt: skip
def test_the_demo_refuses_a_bad_port_or_number_of_seconds_before_it_starts(busy_port, option, value, error):
    """(`--port 0` was taken too, and the demo started; it is left out here, where a regression
    would start a web server.)"""
    args = ["--port", busy_port, option, value] if option != "--port" else [option, value]
    with pytest.raises(CommandError, match=rf"^Error: argument {error}"):
        call_command("demo", *args)


@pytest.mark.parametrize("host", ["999.999.999.999", "192.0.2.1"])
def test_the_demo_says_a_host_is_no_address_of_this_machine_not_that_the_port_is_busy(host):
    """192.0.2.1 is TEST-NET-1 (RFC 5737): no machine's own address."""
    with pytest.raises(CommandError, match=rf"^--host '{host}' is not an address of this machine"):
        call_command("demo", "--host", host)


NOW_COMMANDS = ["autoscale", "reconcile", "schedule"]
BAD_NOWS = {
    "year-1-east": "0001-01-01T00:00:00+14:00",
    "year-9999-west": "9999-12-31T23:59:59-14:00",
    "before-2000": "1999-12-31T23:59:59Z",
    "after-2999": "3000-01-01T00:00:00Z",
    "empty": "",
    "words": "yesterday",
}


@pytest.mark.parametrize("case", sorted(BAD_NOWS))
@pytest.mark.parametrize("command", NOW_COMMANDS)
def test_a_bad_now_is_refused_before_any_pass(world, command, case):
    before = db_state()
    with pytest.raises(CommandError, match=r"^Error: argument --now: (must be between 2000-01-01 and 2999-12-31|must be an ISO 8601 moment)"):
        call_command(command, "--once", "--now", BAD_NOWS[case])
    assert db_state() == before


@pytest.mark.parametrize("command", ["autoscale", "schedule"])
def test_a_now_without_a_time_zone_is_still_refused_where_it_was(world, command):
    with pytest.raises(CommandError, match=r"^Error: argument --now: needs a time zone"):
        call_command(command, "--once", "--now", "2026-12-01T08:00:00")


@pytest.mark.parametrize(("command", "now"), [
    ("autoscale", "2000-01-01T00:00:00Z"), ("schedule", "2999-12-31T23:59:59+00:00"), ("reconcile", "2026-12-01T08:00:00"),
])  # fmt: skip
def test_a_now_in_the_years_costs_are_kept_is_taken(world, command, now):
    """reconcile reads a moment without a time zone as UTC, as before."""
    call_command(command, "--once", "--now", now, stdout=io.StringIO())


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "86401"])
def test_mirror_pods_refuses_a_bad_number_of_seconds(value):
    """Before the fix the check for a real cluster came first; on one, nan mirrored nothing."""
    with pytest.raises(CommandError, match=r"^Error: argument --seconds: must be a number of seconds from 0 to 86400"):
        call_command("mirror_pods", "--seconds", value)


def test_reference_docs_refuses_a_file_or_an_empty_value_as_its_directory(settings, tmp_path):
    """`--docs-dir ""` wrote the project's own docs/ (the default): here the project is
    `tmp_path`, so that a regression writes nothing of the real tree."""
    settings.BASE_DIR = str(tmp_path)
    afile = tmp_path / "notes.txt"
    afile.write_text("mine\n")
    for value, error in ((str(afile), "which is a file"), ("", "must be a directory, got ''")):
        with pytest.raises(CommandError, match=rf"^Error: argument --docs-dir: .*{error}"):
            call_command("reference_docs", "--docs-dir", value)
    assert afile.read_text() == "mine\n"


def test_reference_docs_that_cannot_write_is_one_line(tmp_path):
    """A directory where api.md should be: an IsADirectoryError traceback before, one line now."""
    (tmp_path / "api.md").mkdir()
    with pytest.raises(CommandError, match=r"^cannot write the docs in .*: Is a directory"):
        call_command("reference_docs", "--docs-dir", str(tmp_path))
    assert not (tmp_path / "cli.md").exists()


def test_meter_refuses_an_empty_hour(world):
    """An unset variable in a script (`--hour "$HOUR"`) metered every pending hour."""
    before = db_state()
    with pytest.raises(CommandError, match=r"^Error: argument --hour: must be an ISO 8601 moment such as 2026-12-01T08:00:00Z, got ''$"):
        call_command("meter", "--hour", "")
    assert db_state() == before
    assert not MeterRun.objects.exists()


@pytest.mark.parametrize("hour", ["0001-01-01T00:00", "1999-01-01T00:00", "1999-12-31T23:00:00+00:00", "2000-01-01T05:00+08:00"])
def test_meter_refuses_an_hour_outside_the_years_costs_are_kept(world, hour):
    """The costs API's range (billing/selectors.py FIRST_DAY..LAST_DAY), in UTC: 05:00+08:00 on
    the first day is 21:00 UTC the day before."""
    before = db_state()
    with pytest.raises(CommandError, match=rf"^Error: argument --hour: must be between 2000-01-01 and 2999-12-31 \(UTC\), got '{re.escape(hour)}'$"):
        call_command("meter", "--hour", hour)
    assert db_state() == before
    assert not MeterRun.objects.exists()


@pytest.mark.parametrize(
    "hour, says",
    [
        ("2026-12-01T03:30", "2026-12-01T03:30:00+00:00 is not the start of an hour"),
        ("2026-12-01T05:00+05:30", "2026-12-01T05:00:00+05:30 is not the start of an hour"),  # 23:30 UTC
        ("tomorrow", "must be an ISO 8601 moment such as 2026-12-01T08:00:00Z, got 'tomorrow'"),
    ],
)
def test_meter_refuses_an_hour_as_the_other_commands_refuse_a_moment(world, hour, says):
    """`--hour` is `moment_utc` (arguments.py: the rule `reconcile --now` follows) plus the start
    of an hour: argparse's one line, before anything is metered, and by `call_command(hour=...)`
    too, which skips the parser's type."""
    before = db_state()
    with pytest.raises(CommandError, match=f"^Error: argument --hour: {re.escape(says)}$"):
        call_command("meter", "--hour", hour)
    with pytest.raises(CommandError, match=f"^Error: argument --hour: {re.escape(says)}$"):
        call_command("meter", hour=hour)
    assert db_state() == before
    assert not MeterRun.objects.exists()


def test_meter_still_meters_the_first_hour_of_the_range(world):
    call_command("meter", "--hour", "2000-01-01T00:00")
    assert MeterRun.objects.exists()
