"""The bad-input corpus through the `ebcloud` CLI (issue #9 item 5; design §4: "exit code non-zero
with one readable line on error").

Every corpus file given to `ebcloud node-pool create|apply -f` and `ebcloud pod create -f`, and
hostile arguments to the other verbs that write (scale, delete, fragmentation --apply, order
approve/reject, cost export -o, login): exit 1 with exactly one `error: ...` line on stderr
naming the field, no traceback, nothing written on the server (`tests.corpus.db_state`) nor
on disk (no config file, no export file). Mistakes click catches before any request (a
negative `--min`, a non-integer ID) are usage errors: exit 2 as click does (design §4), the
last line naming the option.

The CLI runs in-process (click's runner) against the real WSGI application through httpx's
WSGI transport, so each case is an ordinary rolled-back test (a live server costs a database
flush per test, about 2 s on PostgreSQL); one test at the end repeats the corpus over a real
socket with the live server, as tests/ebcloud/test_cli.py does.
"""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime

import httpx
import pytest
import yaml
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections
from rest_framework.authtoken.models import Token

from ebcloud import client as ebcloud_client
from ebcloud import config as ebcloud_config
from ebcloud.output import CONTROL, escape
from pools.core.documents import dump_yaml
from pools.models import GpuNodePool, PoolEvent, PoolOrder
from pools.services import pools as services
from tests.billing.billing_helpers import meter
from tests.billing.billing_helpers import node as billing_node
from tests.billing.billing_helpers import pod as billing_pod
from tests.billing.billing_helpers import pool as billing_pool
from tests.conftest import make_document
from tests.corpus import (
    DOCUMENT_CORPUS,
    DOCUMENT_FIELDS,
    POD_CORPUS,
    POD_FIELDS,
    SCRIPT,
    SQL,
    YAML_CORPUS,
    YAML_MESSAGES,
    db_state,
)
from tests.ebcloud.cli_helpers import live, one_error_line


@pytest.fixture
def served(monkeypatch, config_file, actors):
    """served(role): the CLI's HTTP client talks to the WSGI app in-process as `role`."""
    for signal in (signals.request_started, signals.request_finished):  # keep the test's connection
        signal.disconnect(close_old_connections)
    application = WSGIHandler()
    real = ebcloud_client.httpx.Client
    monkeypatch.setattr(ebcloud_client.httpx, "Client", lambda **kw: real(**{**kw, "transport": httpx.WSGITransport(app=application)}))

    def login(role: str) -> None:
        token, _ = Token.objects.get_or_create(user=actors[role])
        ebcloud_config.save(ebcloud_config.Config(server="http://testserver", token=token.key, username=role))

    yield login
    for signal in (signals.request_started, signals.request_finished):
        signal.connect(close_old_connections)


@pytest.fixture
def pool(actors):
    return services.pool_create(user=actors["lead"], document=make_document("train-pool-a"))


def write(tmp_path, text: str) -> str:
    path = tmp_path / "input.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def refused(result, needle: str) -> str:
    """One `error:` line naming `needle`, not a server failure passed through."""
    line = one_error_line(result)
    assert needle in line and "HTTP 5" not in line and "unexpected" not in line, line
    return line


POOL_FILES = {f"yaml-{case}": (text, YAML_MESSAGES[case]) for case, text in YAML_CORPUS.items()} | {
    f"doc-{case}": (dump_yaml(document), DOCUMENT_FIELDS[case]) for case, document in DOCUMENT_CORPUS.items()
}
POD_FILES = {f"yaml-{case}": (text, YAML_MESSAGES[case]) for case, text in YAML_CORPUS.items()} | {
    f"pod-{case}": (dump_yaml(document), POD_FIELDS[case]) for case, document in POD_CORPUS.items()
}


@pytest.mark.parametrize("verb", ["create", "apply"])
@pytest.mark.parametrize("case", sorted(POOL_FILES))
def test_node_pool_create_and_apply_refuse_each_bad_file_in_one_line(ebcloud, served, pool, tmp_path, case, verb):
    text, needle = POOL_FILES[case]
    served("lead")
    before = db_state()
    refused(ebcloud("node-pool", verb, "-f", write(tmp_path, text)), needle)
    assert db_state() == before


@pytest.mark.parametrize("case", sorted(POD_FILES))
def test_pod_create_refuses_each_bad_file_in_one_line(ebcloud, served, tmp_path, case):
    text, needle = POD_FILES[case]
    served("member")
    before = db_state()
    refused(ebcloud("pod", "create", "-f", write(tmp_path, text)), needle)
    assert db_state() == before


SERVER_REFUSALS = {
    "apply-negative-size": (["node-pool", "apply", "-f", "{negative}"], "spec.nodeCount.min:"),
    "apply-script-label": (["node-pool", "apply", "-f", "{script}"], "metadata.labels"),
    "scale-huge": (["node-pool", "scale", "train-pool-a", "--min", "1000000000000"], "min:"),
    "scale-beyond-int64": (["node-pool", "scale", "train-pool-a", "--max", "9" * 30], "max:"),
    # Names no object can have are refused by the CLI, before any request (ebcloud/client.py).
    "delete-script-name": (["node-pool", "delete", SCRIPT], "is not a valid pool name"),
    "repack-script-name": (["node-pool", "fragmentation", SCRIPT, "--apply"], "is not a valid pool name"),
    "pod-delete-sql-name": (["pod", "delete", f"algorithm/{SQL}"], "is not a valid pod name"),
    "reject-overlong-reason": (["order", "reject", "{order}", "--reason", "x" * 501], "reason:"),
    "reject-nul-reason": (["order", "reject", "{order}", "--reason", "late\x00"], "reason:"),
    "reject-c1-reason": (["order", "reject", "{order}", "--reason", "no\x9b31mcapacity"], "reason:"),
    "approve-beyond-int64": (["order", "approve", "9" * 30], "not found"),
    "cost-script-label": (["cost", "export", "--by-labels", SCRIPT], "by:"),
    "cost-sql-label": (["cost", "export", "--by-labels", "team'; DROP TABLE billing_costrecord; --"], "by:"),
}


@pytest.mark.parametrize("case", sorted(SERVER_REFUSALS))
def test_bad_arguments_the_server_refuses_are_one_line(ebcloud, served, pool, tmp_path, case):
    args, needle = SERVER_REFUSALS[case]
    served("admin")
    files = {
        "{negative}": write(tmp_path, dump_yaml(make_document("train-pool-a", nodeCount={"min": -1, "max": 2}))),
        "{script}": str(tmp_path / "script.yaml"),
        "{order}": str(pool.orders.get().pk),
    }
    (tmp_path / "script.yaml").write_text(dump_yaml(DOCUMENT_CORPUS["script-label"] | {"metadata": {"name": "train-pool-a", "labels": {"x": SCRIPT}}}))
    before = db_state()
    refused(ebcloud(*[files.get(a, a) for a in args]), needle)
    assert db_state() == before


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["node-pool", "scale", "train-pool-a", "--min", "-1"], "'--min'"),
        (["node-pool", "scale", "train-pool-a", "--max", "0"], "'--max'"),
        (["node-pool", "scale", "train-pool-a", "--min", "1.5"], "'--min'"),
        (["node-pool", "scale", "train-pool-a", "--max", "lots"], "'--max'"),
        (["node-pool", "fragmentation", "train-pool-a", "--apply", "--max-nodes", "0"], "'--max-nodes'"),
        (["node-pool", "fragmentation", "train-pool-a", "--apply", "--max-nodes", "1000000000000"], "'--max-nodes'"),
        (["order", "approve", SCRIPT], "'ID'"),
        (["order", "reject", "1"], "'--reason'"),
        (["cost", "export", "--from", "2026-13-45"], "'--from'"),
        (["pod", "delete", "pöd-without-namespace"], "NAMESPACE/NAME"),
        (["node-pool", "events", "train-pool-a", "--watch", "--interval", "nan"], "'--interval'"),
        (["node-pool", "events", "train-pool-a", "--watch", "--interval", "inf"], "'--interval'"),
        (["node-pool", "events", "train-pool-a", "--watch", "--interval", "1e10"], "'--interval'"),
    ],
    ids=["scale-negative", "scale-zero-max", "scale-float", "scale-string", "repack-zero", "repack-huge",
         "approve-script-id", "reject-without-reason", "cost-impossible-date", "pod-delete-no-namespace",
         "watch-interval-nan", "watch-interval-inf", "watch-interval-past-sleep"],  # fmt: skip
)
def test_bad_arguments_are_usage_errors_before_any_request(ebcloud, args, option):
    """Click checks types and ranges before the CLI talks to a server (none is configured here):
    exit 2 as click does (design §4), the last line naming the option, no traceback. The watch's
    `--interval` (hidden) took nan, inf and 1e10: the first poll ran, then `time.sleep` failed
    ("unexpected ValueError" / "OverflowError")."""
    result = ebcloud(*args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == ""
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: ") and option in last, result.stderr


@pytest.mark.parametrize("verb", [("node-pool", "create"), ("node-pool", "apply"), ("pod", "create")])
def test_a_file_that_cannot_be_read_is_one_error_line(ebcloud, tmp_path, verb):
    """A missing file printed click's usage block (admin QA); kubectl says one line and exits 1."""
    result = ebcloud(*verb, "-f", str(tmp_path / "missing.yaml"))
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"error: cannot read {tmp_path / 'missing.yaml'}: No such file or directory\n"
    assert ebcloud(*verb, "-f", str(tmp_path)).stderr == f"error: cannot read {tmp_path}: Is a directory\n"


@live
def test_over_a_real_socket_the_corpus_is_refused_the_same_way(ebcloud, login_as, pool, tmp_path):
    """The live server, as in tests/ebcloud/test_cli.py: the same lines, nothing written."""
    login_as("lead")
    before = db_state()
    for case in ("yaml-billion-laughs", "yaml-oversized", "doc-negative-size", "doc-script-label"):
        text, needle = POOL_FILES[case]
        refused(ebcloud("node-pool", "create", "-f", write(tmp_path, text)), needle)
    assert db_state() == before


def test_a_refused_cost_export_leaves_the_output_file_alone(ebcloud, served, tmp_path):
    """`-o FILE` is written only once the server answers with rows: a refusal neither creates
    the file nor truncates one that is already there."""
    served("finance")
    fresh, kept = tmp_path / "fresh.csv", tmp_path / "kept.csv"
    kept.write_text("last month's export\n")
    for path in (fresh, kept):
        refused(ebcloud("cost", "export", "--by-labels", SCRIPT, "-o", str(path)), "by:")
    assert not fresh.exists() and kept.read_text() == "last month's export\n"


def test_cost_export_from_a_future_day_says_so_not_that_to_is_before_from(ebcloud, served, time_machine):
    """`--from` alone after today: the line names --from's day as in the future, not a --to
    the user never gave (QA)."""
    time_machine.move_to(datetime(2026, 12, 9, 12, 0, tzinfo=UTC), tick=False)
    served("finance")
    result = ebcloud("cost", "export", "--from", "2027-01-01")
    assert result.exit_code == 1
    assert refused(result, "from:") == "error: from: 2027-01-01 is after today (2026-12-09, UTC): give a day up to today, or a to as well"


@pytest.mark.parametrize("username", [SCRIPT, "a\x00b", "u" * 3000], ids=["script", "nul", "overlong"])
def test_a_refused_login_stores_no_token(ebcloud, served, config_file, username):
    result = ebcloud("login", "--server", "http://testserver", "--username", username, "--password", "x")
    refused(result, "")
    assert not config_file.exists()


# --- what the server sends is printed, never obeyed: control characters escaped ------------------

PWNED = "\x1b]0;PWNED\x07"  # an OSC that retitles the terminal window, ended by a bell
SHOWN = "\\x1b]0;PWNED\\x07"  # what the CLI prints instead, character for character


def no_raw_controls(text: str) -> None:
    """Nothing but newline and tab (and the line ends) of C0, DEL and C1 in the output."""
    raw = CONTROL.findall(text.replace("\n", "").replace("\t", ""))
    assert raw == [], raw


@pytest.fixture
def legacy_rejection(actors, pool):
    """An order an admin rejected, before free text refused control characters, with a reason
    that retitles the terminal: the order row, its Warning event and the pool's pending reason
    hold it (the API refuses it now: REASONS in tests/corpus.py)."""
    order = pool.orders.get()
    services.order_reject(user=actors["admin"], order=order, reason="placeholder")
    PoolOrder.objects.filter(pk=order.pk).update(reason=PWNED + " and \x9b31m C1 too")
    PoolEvent.objects.filter(pool=pool, reason="OrderRejected").update(message=f"Order #{order.pk} rejected by admin: {PWNED}")
    GpuNodePool.objects.filter(pk=pool.pk).update(pending_reason=f"OrderRejected: {PWNED}")
    return order


def test_order_list_wide_shows_an_admins_escape_sequence_literally(ebcloud, served, legacy_rejection):
    served("admin")
    result = ebcloud("order", "list", "-o", "wide")
    assert result.exit_code == 0, result.stderr
    no_raw_controls(result.stdout)
    assert SHOWN + " and \\x9b31m C1 too" in result.stdout


def test_node_pool_events_and_describe_show_the_escape_sequence_literally(ebcloud, served, legacy_rejection):
    served("lead")
    for args in (["node-pool", "events", "train-pool-a"], ["node-pool", "describe", "train-pool-a"],
                 ["node-pool", "get", "train-pool-a", "-o", "wide"]):
        result = ebcloud(*args)
        assert result.exit_code == 0, (args, result.stderr)
        no_raw_controls(result.stdout)
        assert SHOWN in result.stdout, (args, result.stdout)


def test_yaml_and_json_escape_control_characters_in_their_own_syntax(ebcloud, served, legacy_rejection):
    served("admin")
    as_yaml = ebcloud("order", "list", "-o", "yaml").stdout
    as_json = ebcloud("order", "list", "-o", "json").stdout
    for text in (as_yaml, as_json):
        no_raw_controls(text)
    reason = PWNED + " and \x9b31m C1 too"
    assert yaml.safe_load(as_yaml)[0]["reason"] == reason and json.loads(as_json)[0]["reason"] == reason


def test_a_reject_reason_with_control_characters_is_refused_and_the_error_line_stays_one_line(ebcloud, served, pool):
    served("admin")
    before = db_state()
    line = refused(ebcloud("order", "reject", str(pool.orders.get().pk), "--reason", PWNED), "reason:")
    assert "control characters" in line and "\\x1b" in line
    assert db_state() == before


@pytest.mark.parametrize("text", [PWNED, "a\x9bb", "\x1b[2J", "a\x85b", "a\x7fb", "bell\x07", "a\x00b"])
def test_the_one_escaping_function_leaves_no_control_character(text):
    for shown in (escape(text), " ".join(escape(text, keep="\n\t").split())):
        no_raw_controls(shown)
    assert escape("line\n\ttab", keep="\n\t") == "line\n\ttab" and escape("line\n") == "line\\x0a"


def test_cost_export_writes_formula_labels_neutralised(ebcloud, served, actors, teams, tmp_path):
    """Pods in the read model whose labels are formulas, metered, exported by the CLI."""
    a = billing_pool(actors["lead"])
    n = billing_node(a, "n-0")
    for i, text in enumerate(['=HYPERLINK("http://x","y")', "+1", "@SUM(A1)", "-cmd"]):
        billing_pod(teams["algorithm"], n, f"p-{i}", labels={"project": text})
    meter()
    served("finance")
    out = tmp_path / "costs.csv"
    args = ["cost", "export", "--by-labels", "team,project", "--from", "2026-12-01", "--to", "2026-12-31"]
    assert ebcloud(*args, "-o", str(out)).exit_code == 0
    focus = ebcloud(*args, "--format", "focus")
    assert focus.exit_code == 0
    for text in (out.read_text(), focus.stdout):
        cells = [cell for row in csv.reader(io.StringIO(text)) for cell in row]
        assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r") and not re.fullmatch(r"-?\d+(\.\d+)?", c)]
    projects = {row["project"] for row in csv.DictReader(io.StringIO(out.read_text()))}
    assert {"'=HYPERLINK(\"http://x\",\"y\")", "'+1", "'@SUM(A1)", "'-cmd"} <= projects


def test_a_local_file_too_deep_or_with_an_impossible_date_has_no_readable_name():
    """`apply` reads the name locally to choose create or replace; a hostile file must not crash
    the CLI there (the server then answers with its one readable error)."""
    from ebcloud.node_pool import _document_name

    assert _document_name(b"[" * 20000) == ""
    assert _document_name(b"metadata: {name: train-pool-a}\ncreated: 2026-02-30\n") == ""
    assert _document_name(b"metadata: {name: train-pool-a}\n") == "train-pool-a"


def test_pod_list_with_an_unknown_phase_is_one_line_naming_phase(ebcloud, served):
    """The API answered 200 [] ("No resources found."), as if no pod were in that phase."""
    served("member")
    line = refused(ebcloud("pod", "list", "--phase", "foo"), "phase: must be one of")
    assert "Pending" in line and "Running" in line


@pytest.mark.parametrize("verb", ["create", "apply"])
@pytest.mark.parametrize(("text", "path"), [
    (dump_yaml(make_document("dupy-a")).replace("  nodeType: GPU_8_CARD\n", "  nodeType: GPU_8_CARD\n  nodeType: GPU_4_CARD\n"), "spec.nodeType"),
    (json.dumps(make_document("dupj-a")).replace('"name": "dupj-a"', '"name": "dupj-a", "name": "dupj-b"'), "metadata.name"),
], ids=["yaml-node-type", "json-name"])  # fmt: skip
def test_a_file_with_a_key_given_twice_is_one_line_naming_its_path(ebcloud, served, tmp_path, verb, text, path):
    """The last one won: GPU_4_CARD nodes, or pool dupj-b, created from a file that also said otherwise."""
    served("lead")
    before = db_state()
    line = refused(ebcloud("node-pool", verb, "-f", write(tmp_path, text)), f"{path}: duplicate key")
    assert "at line" in line
    assert db_state() == before
