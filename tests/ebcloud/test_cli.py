"""`ebcloud` CLI end to end: click's CliRunner in-process against a live server (design §4).

The live server runs in a thread of this process, so the transactional test database is shared:
fixtures and ORM calls here are what the CLI sees through the REST API.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys

import pytest
import yaml
from rest_framework.authtoken.models import Token

from ebcloud import config as ebcloud_config
from ebcloud.describe import SPEC_DEFAULTS
from ebcloud.output import human_duration
from pools.forms import SPEC_DEFAULTS as SERVER_DEFAULTS
from pools.models import GpuNodePool, PoolOrder
from pools.services import pools as services
from pools.services.events import event_record
from tests.conftest import EXAMPLES, ROOT, make_document
from tests.ebcloud.cli_helpers import live, one_error_line

TRAIN = str(EXAMPLES / "create-train-pool.yaml")


@pytest.fixture
def train_pool(actors):
    return services.pool_create(user=actors["lead"], document=make_document())


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- login and configuration -------------------------------------------------------------------


@live
def test_login_stores_the_server_and_a_token_readable_only_by_the_owner(
    ebcloud, live_server, actors, config_file
):
    result = ebcloud(
        "login", "--server", live_server.url + "/", "--username", "lead", "--password", "pw-lead"
    )
    assert result.exit_code == 0, result.stderr
    assert f"Logged in to {live_server.url} as lead" in result.stdout
    stored = yaml.safe_load(config_file.read_text())
    assert stored["server"] == live_server.url
    assert stored["token"] == Token.objects.get(user=actors["lead"]).key
    assert stat.S_IMODE(os.stat(config_file).st_mode) == 0o600
    assert ebcloud("node-pool", "list").exit_code == 0


@live
def test_login_prompts_for_missing_credentials_and_hides_the_password(
    ebcloud, live_server, actors, config_file
):
    result = ebcloud("login", "--server", live_server.url, input="admin\npw-admin\n")
    assert result.exit_code == 0, result.stderr
    assert "pw-admin" not in result.output
    assert (
        yaml.safe_load(config_file.read_text())["token"]
        == Token.objects.get(user=actors["admin"]).key
    )


@live
def test_login_with_a_wrong_password_is_one_line_and_stores_nothing(
    ebcloud, live_server, actors, config_file
):
    line = one_error_line(ebcloud("login", "--server", live_server.url, "-u", "lead", "-p", "nope"))
    assert "Unable to log in" in line
    assert not config_file.exists()


def test_commands_before_login_say_how_to_log_in(ebcloud):
    assert (
        one_error_line(ebcloud("node-pool", "list"))
        == "error: not logged in: run ebcloud login --server URL"
    )


def test_an_unreachable_server_is_a_readable_error(ebcloud):
    url = closed_port_url()
    line = one_error_line(
        ebcloud("node-pool", "list", env={"EBCLOUD_SERVER": url, "EBCLOUD_TOKEN": "t"})
    )
    assert line.startswith(f"error: cannot reach the server at {url}: ")
    line = one_error_line(ebcloud("login", "--server", url, "-u", "lead", "-p", "pw-lead"))
    assert line.startswith(f"error: cannot reach the server at {url}: ")


@live
def test_environment_variables_override_the_config_file(ebcloud, live_server, login_as, train_pool):
    token = login_as("lead")
    ebcloud_config.save(ebcloud_config.Config(server=closed_port_url(), token="stale"))
    result = ebcloud(
        "node-pool", "list", env={"EBCLOUD_SERVER": live_server.url, "EBCLOUD_TOKEN": token}
    )
    assert result.exit_code == 0, result.stderr
    assert "train-pool-a" in result.stdout
    line = one_error_line(
        ebcloud(
            "node-pool", "list", env={"EBCLOUD_SERVER": live_server.url, "EBCLOUD_TOKEN": "bad"}
        )
    )
    assert "log in again" in line and f"ebcloud login --server {live_server.url}" in line


@live
def test_a_url_that_is_not_an_ebcloud_server_is_named_not_guessed(ebcloud, live_server, login_as):
    token = login_as("lead")
    env = {"EBCLOUD_SERVER": live_server.url + "/elsewhere", "EBCLOUD_TOKEN": token}
    line = one_error_line(ebcloud("node-pool", "get", "train-pool-a", env=env))
    assert line.startswith(
        f"error: the server at {live_server.url}/elsewhere answered GET /api/v1/pools/train-pool-a/ with HTTP 404"
    )


def test_a_broken_config_file_is_one_line(ebcloud, config_file):
    config_file.parent.mkdir(parents=True)
    config_file.write_text("server: [")
    assert (
        one_error_line(ebcloud("node-pool", "list"))
        == f"error: cannot read the config file {config_file}: not valid YAML"
    )


def test_a_config_file_that_is_not_utf8_says_so(ebcloud, config_file):
    config_file.parent.mkdir(parents=True)
    config_file.write_bytes(b"server: http://caf\xe9:8000\n")
    assert one_error_line(ebcloud("node-pool", "list")) == f"error: cannot read the config file {config_file}: not UTF-8 text (byte 19)"


def test_an_unexpected_failure_is_one_line_not_a_traceback(ebcloud, monkeypatch):
    def boom(self, **filters):
        raise RuntimeError("kaput")

    monkeypatch.setattr("ebcloud.client.Client.pools", boom)
    line = one_error_line(
        ebcloud(
            "node-pool", "list", env={"EBCLOUD_SERVER": "http://x.invalid", "EBCLOUD_TOKEN": "t"}
        )
    )
    assert line.startswith("error: unexpected RuntimeError: kaput")


# --- node pools -----------------------------------------------------------------------------


@live
def test_create_from_the_articles_file_then_list_and_get(ebcloud, login_as):
    login_as("lead")
    result = ebcloud("node-pool", "create", "-f", TRAIN)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(
        "gpunodepool/train-pool-a created (Pending, OrderPending: order #"
    )
    pool = GpuNodePool.objects.get(name="train-pool-a")
    assert pool.team.slug == "algorithm" and pool.orders.filter(status="Pending").exists()

    table = ebcloud("node-pool", "list").stdout.splitlines()
    assert table[0].split() == ["NAME", "TEAM", "GPU", "NODES", "MIN", "MAX", "PHASE", "AGE"]
    assert table[1].split()[:7] == [
        "train-pool-a",
        "algorithm",
        "A100_80G",
        "0/0",
        "2",
        "6",
        "Pending",
    ]
    assert table[1].split()[7].endswith("s")

    as_json = json.loads(ebcloud("node-pool", "list", "-o", "json").stdout)
    assert [p["metadata"]["name"] for p in as_json] == ["train-pool-a"]
    as_yaml = yaml.safe_load(ebcloud("node-pool", "get", "train-pool-a", "-o", "yaml").stdout)
    assert as_yaml["spec"]["nodeTaints"] == [
        {"key": "pool", "value": "train", "effect": "NoSchedule"}
    ]
    assert as_yaml["status"]["phase"] == "Pending"
    one = json.loads(ebcloud("node-pool", "get", "train-pool-a", "-o", "json").stdout)
    assert one["metadata"]["team"] == "algorithm"
    row = ebcloud("node-pool", "get", "train-pool-a").stdout.splitlines()
    assert len(row) == 2 and row[1].split()[:4] == ["train-pool-a", "algorithm", "A100_80G", "0/0"]
    wide = ebcloud("node-pool", "list", "-o", "wide").stdout
    assert "NODE-TYPE" in wide and "GPU_8_CARD" in wide and "OrderPending" in wide


@live
def test_list_filters_reach_the_server(ebcloud, login_as, train_pool):
    login_as("lead")
    assert (
        "train-pool-a"
        in ebcloud("node-pool", "list", "--gpu-model", "A100_80G", "--phase", "Pending").stdout
    )
    empty = ebcloud("node-pool", "list", "--team", "inference")
    assert empty.exit_code == 0 and empty.stdout == "" and "No resources found" in empty.stderr


@live
def test_create_reads_stdin_and_takes_a_team(ebcloud, login_as):
    login_as("lead")
    body = (EXAMPLES / "create-train-pool.yaml").read_text()
    result = ebcloud("node-pool", "create", "-f", "-", "--team", "algorithm", input=body)
    assert result.exit_code == 0, result.stderr
    assert GpuNodePool.objects.filter(name="train-pool-a").exists()


@live
def test_an_invalid_file_is_one_line_with_the_field_path(ebcloud, login_as, tmp_path):
    login_as("lead")
    bad = tmp_path / "bad.yaml"
    document = make_document(nodeCount={"min": 7, "max": 6})
    bad.write_text(yaml.safe_dump(document))
    line = one_error_line(ebcloud("node-pool", "create", "-f", str(bad)))
    assert line == "error: spec.nodeCount.min: must not exceed spec.nodeCount.max (7 > 6)"

    bad.write_text(yaml.safe_dump(make_document("Bad Name", gpuModel="Z9")))
    line = one_error_line(ebcloud("node-pool", "create", "-f", str(bad)))
    assert "metadata.name: " in line and "; spec.gpuModel: " in line
    assert GpuNodePool.objects.count() == 0


@live
def test_a_missing_file_or_unknown_option_is_a_usage_error(ebcloud, login_as):
    login_as("lead")
    assert ebcloud("node-pool", "create", "-f", "/nonexistent.yaml").exit_code == 1  # one error line, as kubectl says it
    assert ebcloud("node-pool", "list", "-o", "xml").exit_code == 2
    assert ebcloud("node-pool", "scale", "train-pool-a").exit_code == 2


@live
def test_another_teams_pool_is_not_found(ebcloud, login_as, train_pool):
    login_as("other_lead")
    for args in (
        ("get", "train-pool-a"),
        ("describe", "train-pool-a"),
        ("events", "train-pool-a"),
        ("delete", "train-pool-a"),
    ):
        assert one_error_line(ebcloud("node-pool", *args)) == 'error: pool "train-pool-a" not found'
    assert train_pool.__class__.objects.filter(pk=train_pool.pk, deleted_at=None).exists()


@live
def test_describe_shows_spec_status_pending_reason_and_events(ebcloud, login_as, train_pool):
    login_as("lead")
    result = ebcloud("node-pool", "describe", "train-pool-a")
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    lines = text.splitlines()
    assert lines[0].split() == ["Name:", "train-pool-a"]
    assert "Team:" in text and "algorithm" in text
    assert "pool-role=training" in text and "team=algorithm" in text
    assert (
        "GPU_8_CARD" in text
        and "A100_80G" in text
        and "min 2, max 6" in text
        and "cn-east-2a" in text
    )
    assert "ubuntu-22.04-cuda-12.2" in text and "gpu-class=a100" in text
    assert "pool=train:NoSchedule" in text
    reason = next(line for line in lines if line.strip().startswith("Pending Reason:"))
    assert "OrderPending: order #" in reason and "awaits approval" in reason
    assert any(line.split()[:2] == ["Phase:", "Pending"] for line in lines)
    assert "0 ready / 0 current" in text and "1 (observed" in text
    events_at = lines.index("Events:")
    assert lines[events_at + 1].split() == ["Type", "Reason", "Age", "From", "Message"]
    reasons = [line.split()[1] for line in lines[events_at + 3 :]]
    assert reasons == ["PoolCreated", "QuotaValidated", "OrderRequested"]


def test_describe_shows_what_the_server_reads_for_a_spec_field_left_out(ebcloud, login_as, actors):
    """A pool made by the web form leaves its defaults out: describe said `Auto Repair: <none>`
    of a pool whose auto-repair runs (found by a QA sweep). The CLI's defaults are the server's."""
    assert SPEC_DEFAULTS == SERVER_DEFAULTS
    document = make_document()
    for key in ("leaseType", "systemImage", "autoRepair"):
        del document["spec"][key]
    services.pool_create(user=actors["lead"], document=document)
    login_as("lead")
    lines = ebcloud("node-pool", "describe", "train-pool-a").stdout.splitlines()
    shown = {line.split(":")[0].strip(): line.split(":", 1)[1].strip() for line in lines if line.startswith("  ") and ":" in line}
    assert (shown["Lease Type"], shown["System Image"], shown["Auto Repair"], shown["Preemptible"]) == ("monthly", "ubuntu-22.04-cuda-12.2", "true", "false")


@live
def test_events_lists_oldest_first_with_counts(ebcloud, login_as, train_pool):
    login_as("lead")
    lines = ebcloud("node-pool", "events", "train-pool-a").stdout.splitlines()
    assert lines[0].split() == ["TYPE", "REASON", "AGE", "COUNT", "MESSAGE"]
    assert [line.split()[1] for line in lines[1:]] == [
        "PoolCreated",
        "QuotaValidated",
        "OrderRequested",
    ]
    assert all(line.split()[3] == "1" for line in lines[1:])


@live
def test_events_watch_prints_only_new_or_updated_events_until_ctrl_c(
    ebcloud, login_as, train_pool, monkeypatch
):
    login_as("lead")
    sleeps = []

    def fake_sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 1:
            event_record(pool=train_pool, reason="NodeReady", message="node n-1 is Ready")
        elif len(sleeps) == 2:
            event_record(
                pool=train_pool, reason="NodeReady", message="node n-1 is Ready"
            )  # count 2
        else:
            raise KeyboardInterrupt

    monkeypatch.setattr("ebcloud.node_pool.time.sleep", fake_sleep)
    result = ebcloud("node-pool", "events", "train-pool-a", "--watch")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["TYPE", "REASON", "AGE", "COUNT", "MESSAGE"]
    assert [line.split()[1] for line in lines[1:]] == [
        "PoolCreated",
        "QuotaValidated",
        "OrderRequested",
        "NodeReady",
        "NodeReady",
    ]
    assert [line.split()[3] for line in lines[-2:]] == ["1", "2"]
    assert sleeps == [2.0, 2.0, 2.0]


@live
def test_scale_changes_min_and_max_and_reports_field_errors(ebcloud, login_as, train_pool):
    login_as("lead")
    result = ebcloud("node-pool", "scale", "train-pool-a", "--max", "4")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("gpunodepool/train-pool-a scaled (min 2, max 4)")
    line = one_error_line(ebcloud("node-pool", "scale", "train-pool-a", "--min", "5"))
    assert line.startswith("error: spec.nodeCount.min: ")
    assert (
        one_error_line(ebcloud("node-pool", "scale", "nope", "--max", "3"))
        == 'error: pool "nope" not found'
    )


@live
def test_apply_creates_then_replaces_and_says_unchanged_when_nothing_changed(
    ebcloud, login_as, tmp_path
):
    login_as("lead")
    assert ebcloud("node-pool", "apply", "-f", TRAIN).stdout.startswith(
        "gpunodepool/train-pool-a created"
    )
    assert ebcloud("node-pool", "apply", "-f", TRAIN).stdout.startswith(
        "gpunodepool/train-pool-a unchanged"
    )
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(make_document(nodeCount={"min": 2, "max": 5})))
    assert ebcloud("node-pool", "apply", "-f", str(changed)).stdout.startswith(
        "gpunodepool/train-pool-a configured"
    )
    assert GpuNodePool.objects.get(name="train-pool-a").max_nodes == 5


@live
def test_delete_removes_a_pool_without_nodes(ebcloud, login_as, train_pool):
    login_as("lead")
    result = ebcloud("node-pool", "delete", "train-pool-a")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "gpunodepool/train-pool-a deleted\n"
    assert (
        one_error_line(ebcloud("node-pool", "get", "train-pool-a"))
        == 'error: pool "train-pool-a" not found'
    )


@live
def test_members_cannot_change_pools(ebcloud, login_as, train_pool):
    login_as("member")
    assert "train-pool-a" in ebcloud("node-pool", "list").stdout
    line = one_error_line(ebcloud("node-pool", "scale", "train-pool-a", "--max", "4"))
    assert "only leads of team algorithm" in line


# --- orders ---------------------------------------------------------------------------------


@live
def test_an_admin_lists_approves_and_rejects_orders(ebcloud, login_as, actors, train_pool):
    other = services.pool_create(
        user=actors["other_lead"], document=make_document("infer", region="cn-north-1a")
    )
    first, second = train_pool.orders.get(), other.orders.get()
    login_as("admin")
    lines = ebcloud("order", "list", "--status", "Pending").stdout.splitlines()
    assert lines[0].split() == ["ID", "POOL", "TEAM", "KIND", "NODES", "AMOUNT", "STATUS", "AGE"]
    assert {line.split()[1] for line in lines[1:]} == {"train-pool-a", "infer"}
    row = next(line.split() for line in lines[1:] if line.split()[1] == "train-pool-a")
    assert (
        row[0] == str(first.pk)
        and row[4] == "2"
        and row[5].replace(".", "").isdigit()
        and row[6] == "CNY"
        and row[7] == "Pending"
    )
    assert [o["id"] for o in json.loads(ebcloud("order", "list", "-o", "json").stdout)] == [
        second.pk,
        first.pk,
    ]
    assert yaml.safe_load(ebcloud("order", "list", "-o", "yaml").stdout)[0]["pool"] == "infer"

    assert ebcloud("order", "approve", str(first.pk)).stdout == f"order/{first.pk} approved\n"
    assert PoolOrder.objects.get(pk=first.pk).status == "Approved"
    line = one_error_line(ebcloud("order", "approve", str(first.pk)))
    assert "already decided" in line

    assert (
        ebcloud("order", "reject", str(second.pk), "--reason", "no budget").stdout
        == f"order/{second.pk} rejected\n"
    )
    assert PoolOrder.objects.get(pk=second.pk).reason == "no budget"
    assert ebcloud("order", "reject", str(second.pk)).exit_code == 2  # --reason is required
    assert one_error_line(ebcloud("order", "approve", "999")) == "error: order 999 not found"
    assert ebcloud("order", "approve", "abc").exit_code == 2
    assert (
        json.loads(ebcloud("order", "get", str(first.pk), "-o", "json").stdout)["decidedBy"]
        == "admin"
    )


@live
def test_order_list_names_a_deleted_pools_order_as_the_cost_reports_do(ebcloud, login_as, actors, train_pool):
    """Not by the name a new pool took after it (QA)."""
    services.pool_delete(user=actors["lead"], pool=train_pool)
    new = services.pool_create(user=actors["lead"], document=make_document())
    login_as("lead")
    rows = {line.split()[0]: line.split()[1] for line in ebcloud("order", "list").stdout.splitlines()[1:]}
    assert rows == {str(new.orders.get().pk): "train-pool-a", str(train_pool.orders.get().pk): f"train-pool-a#{train_pool.pk}"}


@live
def test_a_member_cannot_approve_orders(ebcloud, login_as, train_pool):
    login_as("member")
    order = train_pool.orders.get()
    assert str(order.pk) in ebcloud("order", "list").stdout
    line = one_error_line(ebcloud("order", "approve", str(order.pk)))
    assert "only platform admins" in line
    assert PoolOrder.objects.get(pk=order.pk).status == "Pending"


# --- without a server -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-5, "<invalid>"), (-1, "0s"), (0, "0s"), (59, "59s"), (119, "119s"), (150, "2m30s"), (300, "5m"),
     (600, "10m"), (10799, "179m"), (3 * 3600, "3h"), (3 * 3600 + 60 * 7, "3h7m"), (9 * 3600, "9h"),
     (2 * 86400, "2d"), (2 * 86400 + 3600 * 5, "2d5h"), (30 * 86400, "30d"), (3 * 365 * 86400, "3y")],
)  # fmt: skip
def test_ages_read_like_kubectl(seconds, text):
    assert human_duration(seconds) == text


def test_the_client_package_does_not_import_django():
    code = "import sys, ebcloud.cli, ebcloud.__main__; sys.exit(any(m.split('.')[0] == 'django' for m in sys.modules))"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "DJANGO_SETTINGS_MODULE": ""}
        ).returncode
        == 0
    )


# --- arguments the CLI refuses itself, before any request: one line, exit 1 --------------------

OFFLINE = {"EBCLOUD_SERVER": "http://x.invalid", "EBCLOUD_TOKEN": "t"}




@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["pod", "get", "algorithm/.."], '".." is not a valid pod name'),
        (["pod", "get", "../x"], '".." is not a valid namespace name'),
        (["pod", "why", "algorithm/.."], '".." is not a valid pod name'),
        (["pod", "delete", "algorithm/."], '"." is not a valid pod name'),
        (["pdb", "get", "algorithm/.."], '".." is not a valid poddisruptionbudget name'),
        (["pdb", "delete", "./x"], '"." is not a valid namespace name'),
        (["node-pool", "get", "."], '"." is not a valid pool name'),
        (["node-pool", "describe", ".."], '".." is not a valid pool name'),
        (["node-pool", "delete", ".."], '".." is not a valid pool name'),
        (["node-pool", "scale", ".", "--max", "3"], '"." is not a valid pool name'),
        (["node-pool", "fragmentation", "..", "--apply"], '".." is not a valid pool name'),
        (["node-pool", "get", ""], '"" is not a valid pool name'),
    ],
)
def test_dot_segments_are_not_names_and_send_no_request(ebcloud, no_request, args, shown):
    """The HTTP client resolved them: `pod get algorithm/..` printed the whole pod list."""
    line = one_error_line(ebcloud(*args, env=OFFLINE))
    assert shown in line and "DNS-1123" in line, line


def test_apply_with_a_dot_name_in_the_file_sends_it_to_be_created(ebcloud, no_request, tmp_path):
    """Not a GET of `/pools/./` (the pool list): a name no pool can have is created, and the
    server names what is wrong with the file, as `create` would."""
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(make_document(".")))
    line = one_error_line(ebcloud("node-pool", "apply", "-f", str(path), env=OFFLINE))
    assert "a request was made: POST /pools/" in line


@pytest.mark.parametrize("command", [["node-pool", "create"], ["node-pool", "apply"], ["pod", "create"], ["pdb", "create"]])
def test_a_file_over_the_servers_request_limit_is_refused_after_reading_one_byte_past_it(ebcloud, no_request, tmp_path, command):
    """`-f /dev/zero` was read whole until the OOM killer came."""
    from ebcloud.common import MAX_BODY_BYTES

    big = tmp_path / "big.yaml"
    big.write_bytes(b"a: '" + b"y" * (3 * 1024 * 1024) + b"'\n")
    line = one_error_line(ebcloud(*command, "-f", str(big), env=OFFLINE))
    assert line == f"error: {big} is larger than 2 MiB ({MAX_BODY_BYTES} bytes), the most the server accepts"
    piped = one_error_line(ebcloud(*command, "-f", "-", input=b"#" * (MAX_BODY_BYTES + 1), env=OFFLINE))
    assert piped.startswith("error: stdin is larger than 2 MiB")


def test_the_cli_limit_is_the_servers_request_limit(settings):
    from ebcloud.common import MAX_BODY_BYTES

    assert MAX_BODY_BYTES == settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def test_a_file_at_the_limit_is_sent(ebcloud, monkeypatch, tmp_path):
    from ebcloud.common import MAX_BODY_BYTES

    sent = []
    monkeypatch.setattr("ebcloud.client.Client.pod_create", lambda self, body, team="": sent.append(len(body)) or {})
    path = tmp_path / "pod.yaml"
    path.write_bytes(b"#" * (MAX_BODY_BYTES - 2) + b"\na")
    assert ebcloud("pod", "create", "-f", str(path), env=OFFLINE).exit_code == 0
    assert sent == [MAX_BODY_BYTES]


@pytest.mark.parametrize(
    ("url", "problem"),
    [("http://[::1", "Invalid IPv6 URL"), ("http://host:99999", "Port out of range"), ("http://host:abc", "Port could not be cast")],
)
def test_a_server_url_the_parsers_refuse_is_one_line(ebcloud, no_request, url, problem):
    """`http://[::1` was "unexpected ValueError: Invalid IPv6 URL"."""
    line = one_error_line(ebcloud("login", "--server", url, "-u", "lead", "-p", "x"))
    assert line.startswith(f"error: invalid server URL '{url}': {problem}") and "expected http://HOST[:PORT]" in line
    line = one_error_line(ebcloud("node-pool", "list", env={"EBCLOUD_SERVER": url, "EBCLOUD_TOKEN": "t"}))
    assert line.startswith(f"error: invalid server URL '{url}': {problem}")


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["pod", "get", "algorithm/\udcff"], "'algorithm/\\xff'"),
        (["order", "reject", "1", "--reason", "caf\udcc3"], "'caf\\xc3'"),
        (["node-pool", "list", "--team", "\ud800"], "'\\ud800'"),
    ],
)
def test_an_argument_that_is_not_utf8_is_one_line_naming_it(ebcloud, no_request, args, shown):
    """Bytes that are not UTF-8 reach Python as surrogates: "unexpected UnicodeEncodeError"."""
    line = one_error_line(ebcloud(*args, env=OFFLINE))
    assert line == f"error: the argument {shown} is not valid UTF-8 text"


def test_a_file_name_that_is_not_utf8_is_still_a_file_name(ebcloud, no_request, tmp_path):
    missing = str(tmp_path) + "/\udcff.yaml"
    result = ebcloud("pod", "create", "-f", missing, env=OFFLINE)
    assert result.exit_code == 1 and result.stderr == f"error: cannot read {tmp_path}/\\xff.yaml: No such file or directory\n"


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["order", "approve", "١"], "'ID'"),
        (["order", "get", "1_0"], "'ID'"),
        (["order", "reject", "٣", "--reason", "r"], "'ID'"),
        (["node-pool", "scale", "p", "--max", "٣"], "'--max'"),
        (["node-pool", "scale", "p", "--min", "1_0"], "'--min'"),
        (["node-pool", "fragmentation", "p", "--apply", "--max-nodes", "２"], "'--max-nodes'"),
    ],
)
def test_numbers_in_other_digits_are_usage_errors(ebcloud, no_request, args, option):
    """click read `١` as 1 with int(): `order approve ١` approved order 1."""
    result = ebcloud(*args, env=OFFLINE)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: Invalid value for ") and option in last and "is not a valid integer" in last, last
