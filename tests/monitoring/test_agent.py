"""The node agent program (seed D1; issue 6 §3): buffered on disk, replayed in order after an
outage, exactly once; exponential backoff with jitter; NVML or a simulated GPU source."""

from __future__ import annotations

import contextlib
import io
import json
import random
import threading
import time
from urllib.parse import urlparse

import httpx
import pytest
from django.db import OperationalError

from monitoring import agent as agent_module
from monitoring import ingest_sql, services
from monitoring.agent import Agent, AgentError, BatchRefused, CredentialRefused, backoff_delay
from monitoring.agent_buffer import DiskBuffer
from monitoring.agent_sources import SimulatedSource, source_open
from monitoring.models import AgentCommand, GpuErrorEvent, NodeAgentState, NodeReport
from tests.monitoring.proxy import Proxy

DEAD = "http://127.0.0.1:9"  # the discard port: nothing listens there


def test_the_buffer_numbers_reports_and_survives_a_restart(tmp_path):
    buffer = DiskBuffer(tmp_path / "b.sqlite3")
    assert [buffer.append({"n": i}) for i in range(3)] == [1, 2, 3]
    buffer.close()
    again = DiskBuffer(tmp_path / "b.sqlite3")
    assert [r["seq"] for r in again.pending(10)] == [1, 2, 3]
    assert again.append({}) == 4
    again.drop_through(2)
    assert again.oldest_seq() == 3 and len(again) == 2


def test_a_full_buffer_drops_its_oldest_reports(tmp_path):
    buffer = DiskBuffer(tmp_path / "b.sqlite3", cap=3)
    for i in range(5):
        buffer.append({"n": i})
    assert [r["seq"] for r in buffer.pending(10)] == [3, 4, 5] and buffer.dropped == 2


def test_numbering_starts_after_what_the_server_already_has(tmp_path):
    buffer = DiskBuffer(tmp_path / "b.sqlite3")
    buffer.start_after(41)
    assert buffer.append({}) == 42
    buffer.start_after(10)  # never backwards
    assert buffer.append({}) == 43


def test_backoff_doubles_up_to_the_cap_with_jitter():
    rng = random.Random(1)
    delays = [backoff_delay(n, base=1, cap=8, rng=rng) for n in range(1, 7)]
    for n, delay in enumerate(delays, start=1):
        step = min(8, 2 ** (n - 1))
        assert step / 2 <= delay <= step
    assert len({round(d, 6) for d in delays}) == len(delays)  # jittered, not a fixed ladder


def test_the_simulated_source_is_deterministic_and_raises_injected_xids():
    a, b = SimulatedSource(seed=7, gpus=2, faults={2: [(1, 79)]}), SimulatedSource(seed=7, gpus=2)
    assert a.sample() == b.sample() and a.xids() == []
    a.sample()
    assert [(x["gpu"], x["xid"]) for x in a.xids()] == [(1, 79)]
    assert a.xids() == []


def test_without_nvml_or_a_gpu_the_agent_falls_back_to_the_simulated_source():
    assert source_open(simulate=True).name == "simulated"
    assert source_open(simulate=False).name in ("simulated", "nvml")  # nvml only on a GPU machine


def _agent(tmp_path, server, *, node=None, token=None, source=None, **kw) -> Agent:
    return Agent(server=server, source=source or SimulatedSource(gpus=2, seed=1), buffer=DiskBuffer(tmp_path / "reports.sqlite3"),
                 credential_file=tmp_path / "credential.json", node=node, join_token=token, interval=0.02,
                 backoff_base=0.05, backoff_cap=0.3, timeout=2, seed=3, **kw)


def _run(agent: Agent, **kw) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), kwargs=kw, daemon=True)
    thread.start()
    return thread, stop


def _wait(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_an_unreachable_server_is_an_agent_error_and_reports_stay_buffered(tmp_path):
    agent = _agent(tmp_path, DEAD, node="n", token="abcdef.0123456789abcdef")
    agent.collect()
    with pytest.raises(AgentError):
        agent.flush()
    assert len(agent.buffer) == 1
    agent.close()


live = pytest.mark.django_db(transaction=True)


@pytest.fixture
def proxy(live_server):
    url = urlparse(live_server.url)
    p = Proxy(url.hostname, url.port)
    yield p
    p.stop()


@live
def test_reports_made_while_the_server_is_down_all_arrive_exactly_once(actors, make_node, proxy, tmp_path):
    node = make_node("train-pool-a-m-0")
    _, token = services.join_token_create(user=actors["admin"], node=node)
    proxy.start()
    agent = _agent(tmp_path, proxy.url, node=node.name, token=token)
    agent.join()  # joined while the server was up
    proxy.stop()
    n = 25
    thread, stop = _run(agent, max_reports=n, exit_when_drained=True)
    assert _wait(lambda: agent.produced >= 10)
    assert agent.failures > 0 and NodeReport.objects.count() == 0
    proxy.start()  # the control plane is back
    thread.join(timeout=60)
    stop.set()
    assert not thread.is_alive()
    assert list(NodeReport.objects.filter(node=node).values_list("seq", flat=True)) == list(range(1, n + 1))
    assert len(agent.buffer) == 0
    agent.close()


@live
def test_an_agent_restarted_mid_outage_still_delivers_from_its_disk_buffer(actors, make_node, proxy, tmp_path):
    node = make_node("train-pool-a-m-0")
    _, token = services.join_token_create(user=actors["admin"], node=node)
    proxy.start()
    first = _agent(tmp_path, proxy.url, node=node.name, token=token)
    for _ in range(2):  # two reports delivered while the server is up
        first.collect()
        first.flush()
    proxy.stop()
    thread, stop = _run(first, max_reports=5)  # three more made during the outage
    assert _wait(lambda: first.produced >= 5 and first.failures > 0)
    stop.set()
    thread.join(timeout=10)
    first.close()  # the agent process dies with reports in its buffer
    second = _agent(tmp_path, proxy.url)  # restarts from its credential file and buffer
    assert second.node == node.name and [r["seq"] for r in second.buffer.pending(10)] == [3, 4, 5]
    thread, stop = _run(second, max_reports=7, exit_when_drained=True)
    assert _wait(lambda: second.produced >= 3)
    proxy.start()
    thread.join(timeout=60)
    stop.set()
    assert list(NodeReport.objects.filter(node=node).values_list("seq", flat=True)) == list(range(1, 13))
    second.close()


@live
def test_the_agent_reports_xids_and_runs_and_acknowledges_commands(actors, make_node, live_server, tmp_path):
    node = make_node("train-pool-a-m-0")
    _, token = services.join_token_create(user=actors["admin"], node=node)
    source = SimulatedSource(gpus=2, seed=1, faults={1: [(1, 48)]})
    agent = _agent(tmp_path, live_server.url, node=node.name, token=token, source=source)
    agent.collect()
    agent.flush()
    assert GpuErrorEvent.objects.get(node=node).xid == 48
    command = services.agent_command_enqueue(node=node, action="reset_gpu", gpu_index=1, reason="Xid 48")
    agent.collect()
    agent.flush()  # the command comes back in the response and runs
    assert source.executed == [{"id": command.pk, "action": "reset_gpu", "gpu": 1, "reason": "Xid 48"}]
    agent.collect()
    agent.flush()  # the acknowledgement goes out with the next batch
    command.refresh_from_db()
    assert command.status == AgentCommand.Status.SUCCEEDED
    agent.collect()
    agent.flush()
    assert len(source.executed) == 1
    agent.close()


@live
def test_the_module_runs_from_the_command_line(actors, make_node, live_server, tmp_path, monkeypatch):
    node = make_node("train-pool-a-m-0")
    _, token = services.join_token_create(user=actors["admin"], node=node)
    monkeypatch.setattr(agent_module.signal, "signal", lambda *a: None)
    code = agent_module.main(["--server", live_server.url, "--join-token", token, "--node", node.name, "--buffer-dir",
                              str(tmp_path), "--interval", "0.01", "--count", "3", "--simulate", "--fault", "79@2:0"])
    assert code == 0
    assert NodeReport.objects.filter(node=node).count() == 3
    assert GpuErrorEvent.objects.get(node=node).xid == 79
    saved = json.loads((tmp_path / "credential.json").read_text())
    assert saved["node"] == node.name and saved["credential"].startswith("ebca_")
    assert (tmp_path / "credential.json").stat().st_mode & 0o077 == 0


@live
def test_the_simulated_agent_of_a_two_gpu_node_reports_two_gpus_and_is_stored(actors, make_node, live_server, tmp_path, monkeypatch):
    """Without `--gpus` it simulated 8, and the control plane refused every report of a 2-GPU
    node (its indices 2 to 7): none stored, no heartbeat (found by review). It takes the node's
    count from the join answer, and keeps it across a restart."""
    node = make_node("infer-pool-m-0", gpu_count=2)
    _, token = services.join_token_create(user=actors["admin"], node=node)
    monkeypatch.setattr(agent_module.signal, "signal", lambda *a: None)
    args = ["--server", live_server.url, "--buffer-dir", str(tmp_path), "--interval", "0.01", "--count", "2", "--simulate"]
    assert agent_module.main([*args, "--join-token", token, "--node", node.name]) == 0
    assert json.loads((tmp_path / "credential.json").read_text())["gpuCount"] == 2
    assert agent_module.main([*args, "--credential-file", str(tmp_path / "credential.json")]) == 0
    reports = list(NodeReport.objects.filter(node=node).order_by("seq"))
    assert len(reports) == 4 and all([g["index"] for g in r.gpus] == [0, 1] for r in reports)


@live
def test_an_agent_whose_credential_file_predates_the_gpu_count_learns_it_by_one_rotation(actors, make_node, live_server, tmp_path, monkeypatch):
    """A credential file saved before joins answered `gpuCount` left the simulated agent of a
    2-GPU node at 8 GPUs, every report refused for good (found by review): it rotates its
    credential once, whose answer carries the count, and saves it."""
    node = make_node("infer-pool-m-0", gpu_count=2)
    _, token = services.join_token_create(user=actors["admin"], node=node)
    monkeypatch.setattr(agent_module.signal, "signal", lambda *a: None)
    args = ["--server", live_server.url, "--buffer-dir", str(tmp_path), "--interval", "0.01", "--count", "1", "--simulate"]
    assert agent_module.main([*args, "--join-token", token, "--node", node.name]) == 0
    saved = json.loads((tmp_path / "credential.json").read_text())
    (tmp_path / "credential.json").write_text(json.dumps({key: saved[key] for key in ("server", "node", "credential")}))
    assert agent_module.main([*args, "--count", "2", "--credential-file", str(tmp_path / "credential.json")]) == 0
    rotated = json.loads((tmp_path / "credential.json").read_text())
    assert rotated["gpuCount"] == 2 and rotated["credential"] != saved["credential"]
    reports = list(NodeReport.objects.filter(node=node).order_by("seq"))
    assert len(reports) == 3 and all([g["index"] for g in r.gpus] == [0, 1] for r in reports)


@live
def test_the_agent_rotates_its_credential_and_keeps_reporting_with_the_new_one(actors, make_node, live_server, tmp_path):
    node = make_node("train-pool-a-m-0")
    _, token = services.join_token_create(user=actors["admin"], node=node)
    agent = _agent(tmp_path, live_server.url, node=node.name, token=token)
    agent.collect()
    agent.flush()
    old = agent.credential
    agent.rotate()
    assert agent.credential != old and json.loads((tmp_path / "credential.json").read_text())["credential"] == agent.credential
    assert services.credential_authenticate(old) is not None  # until the new one is used
    agent.collect()
    agent.flush()
    assert NodeReport.objects.filter(node=node).count() == 2
    assert services.credential_authenticate(old) is None
    agent.close()


@live
def test_an_agent_whose_credential_was_revoked_stops_with_one_line_and_exit_3(actors, make_node, live_server, tmp_path,
                                                                               monkeypatch, caplog):
    """Another agent joining as the node revokes this one's credential (the admin guide's
    section 3 on a node the demo already runs an agent for). A 401 cannot heal by retrying:
    the agent stops, says why once, and the command exits non-zero, never a silent stall."""
    node = make_node("train-pool-a-m-0")
    _, token = services.join_token_create(user=actors["admin"], node=node)
    first = _agent(tmp_path / "first", live_server.url, node=node.name, token=token)
    thread, stop = _run(first)
    assert _wait(lambda: NodeReport.objects.filter(node=node).exists())
    _, token = services.join_token_create(user=actors["admin"], node=node)
    second = _agent(tmp_path / "second", live_server.url, node=node.name, token=token)
    second.collect()
    second.flush()  # joins: the first agent's credential is revoked
    thread.join(timeout=10)
    assert not thread.is_alive() and not stop.is_set()  # it stopped by itself
    assert first.refused.startswith("/reports/: HTTP 401: invalid or revoked agent credential")
    said = [r.getMessage() for r in caplog.records if r.name == "ebcloud.agent" and "refused" in r.getMessage()]
    assert len(said) == 1 and "start it with a new join token" in said[0]
    assert not [r for r in caplog.records if r.name == "ebcloud.agent" and "retrying" in r.getMessage()]
    with pytest.raises(CredentialRefused):
        first.flush()
    first.close()
    second.close()
    # From the command line: exit 3 with the credential file of the revoked agent, and with a spent token.
    monkeypatch.setattr(agent_module.signal, "signal", lambda *a: None)
    args = ["--server", live_server.url, "--interval", "0.01", "--count", "2", "--simulate"]
    first_dir = tmp_path / "first"
    assert agent_module.main([*args, "--buffer-dir", str(first_dir), "--credential-file", str(first_dir / "credential.json")]) == 3
    assert agent_module.main([*args, "--buffer-dir", str(tmp_path / "third"), "--join-token", token, "--node", node.name]) == 3


# --- hostile input: a refused batch goes to the dead-letter file, later ones flow ---------------


class BrokenSensor(SimulatedSource):
    """Simulated GPUs whose memory sensor of GPU 1 reads -5000 MiB at the given samples."""

    def __init__(self, broken_at: set[int], **kwargs):
        super().__init__(**kwargs)
        self.broken_at = broken_at

    def sample(self) -> list[dict]:
        gpus = super().sample()
        if self.samples in self.broken_at:
            gpus[1]["DCGM_FI_DEV_FB_USED"] = -5000
        return gpus


def _in_process_agent(node, admin, tmp_path, wsgi, source) -> Agent:
    _, token = services.join_token_create(user=admin, node=node)
    agent = _agent(tmp_path, "http://testserver", node=node.name, token=token, source=source)
    agent.http.close()
    agent.http = wsgi  # the real control plane, in this process and this test's transaction
    return agent


def test_reports_refused_as_bad_go_to_the_dead_letter_file_and_later_ones_flow(actors, make_node, tmp_path, wsgi):
    node = make_node("train-pool-a-m-0")
    agent = _in_process_agent(node, actors["admin"], tmp_path, wsgi, BrokenSensor({2, 4}, gpus=2, seed=1))
    for _ in range(5):
        agent.collect()
    assert agent.flush() == 5  # not stalled: every later report arrived, in one flush
    assert list(NodeReport.objects.filter(node=node).values_list("seq", flat=True)) == [1, 3, 5]
    assert len(agent.buffer) == 0 and agent.dead_lettered == 2
    dead = [json.loads(line) for line in (tmp_path / "reports.dead-letter.jsonl").read_text().splitlines()]
    assert [d["report"]["seq"] for d in dead] == [2, 4] and {d["status"] for d in dead} == {400}
    assert dead[0]["reason"].startswith("reports[1].gpus[1].DCGM_FI_DEV_FB_USED: must be from 0 to")
    event = node.events.get(reason="ReportRejected")
    assert event.type == "Warning" and event.count == 1
    agent.source.broken_at = {6}
    agent.collect()  # the sensor breaks again: the same Warning event, counted
    agent.collect()
    assert agent.flush() == 7 and agent.dead_lettered == 3
    event.refresh_from_db()
    assert event.count == 2
    assert NodeAgentState.objects.get(node=node).acked_seq == 7
    agent.close()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert agent_module.main(["--server", "http://testserver", "--once", "--simulate", "--buffer-dir", str(tmp_path)]) == 0
    shown = json.loads(out.getvalue())
    assert shown["deadLettered"] == 3 and shown["deadLetterFile"] == str(tmp_path / "reports.dead-letter.jsonl")


def test_a_batch_the_server_failed_to_store_is_resent_and_stored(actors, make_node, tmp_path, wsgi, monkeypatch):
    """5xx is retried, never dead-lettered; the report that got the 500 is not acknowledged
    by a later answer, so the agent keeps and resends it (tests/monitoring/test_reports.py
    has the server's side)."""
    node = make_node("train-pool-a-m-0")
    agent = _in_process_agent(node, actors["admin"], tmp_path, wsgi, SimulatedSource(gpus=2, seed=1))
    agent.collect()
    agent.flush()
    real, failures = ingest_sql.reports_write, []

    def fails_once(**kwargs):
        if not failures:
            failures.append(kwargs["reports"])
            raise OperationalError("could not write: the disk is full")
        return real(**kwargs)

    monkeypatch.setattr(ingest_sql, "reports_write", fails_once)
    agent.collect()
    with pytest.raises(AgentError, match="HTTP 500"):
        agent.flush()
    assert [r.seq for r in failures[0]] == [2] and [r["seq"] for r in agent.buffer.pending(10)] == [2]
    agent.collect()
    assert agent.flush() == 3 and agent.dead_lettered == 0
    assert list(NodeReport.objects.filter(node=node).values_list("seq", flat=True)) == [1, 2, 3]
    agent.close()


@pytest.mark.parametrize("status", [403, 404, 409, 429, 500, 503])
def test_answers_about_the_agent_or_the_server_are_retried_not_dead_lettered(tmp_path, status):
    def answer(request):
        return httpx.Response(status, json={"errors": [{"field": "", "message": "not now"}]})

    agent = _agent(tmp_path, "http://cp")
    agent.credential, agent.node = "ebca_x", "n"
    agent.http = httpx.Client(transport=httpx.MockTransport(answer))
    agent.collect()
    with pytest.raises(AgentError) as caught:
        agent.flush()
    assert not isinstance(caught.value, BatchRefused)
    assert len(agent.buffer) == 1 and agent.buffer.dead_letter_count() == 0


@pytest.mark.parametrize("answer", [b"<html>proxy error</html>", b"[1, 2]", b'{"stored": 1}'])
def test_a_2xx_that_is_not_the_apis_answer_is_retried(tmp_path, answer):
    agent = _agent(tmp_path, "http://cp")
    agent.credential, agent.node = "ebca_x", "n"
    agent.http = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, content=answer)))
    agent.collect()
    with pytest.raises(AgentError):
        agent.flush()
    assert len(agent.buffer) == 1


def test_a_refusal_naming_no_report_dead_letters_the_whole_batch(tmp_path):
    answers = [httpx.Response(400, json={"errors": [{"field": "", "message": "the body must be a JSON object"}]}),
               httpx.Response(200, json={"ackedSeq": 3, "commands": []})]
    agent = _agent(tmp_path, "http://cp")
    agent.credential, agent.node = "ebca_x", "n"
    agent.http = httpx.Client(transport=httpx.MockTransport(lambda request: answers.pop(0)))
    agent.collect()
    agent.collect()
    assert agent.flush() == 0 and len(agent.buffer) == 0 and agent.buffer.dead_letter_count() == 2


def test_an_acknowledgement_whose_message_is_refused_is_sent_again_without_it(tmp_path):
    """The command ran: forgetting its acknowledgement would run it again."""
    bodies = []

    def answer(request):
        bodies.append(json.loads(request.content))
        if len(bodies) == 1:
            return httpx.Response(400, json={"errors": [{"field": "acks[0].message", "message": "too long"}]})
        return httpx.Response(200, json={"ackedSeq": 1, "commands": []})

    agent = _agent(tmp_path, "http://cp")
    agent.credential, agent.node = "ebca_x", "n"
    agent.http = httpx.Client(transport=httpx.MockTransport(answer))
    agent.buffer.ack_add(7, True, "output")
    agent.collect()
    assert agent.flush() == 1
    assert [b["acks"] for b in bodies] == [[{"id": 7, "ok": True, "message": "output"}], [{"id": 7, "ok": True, "message": ""}]]
    assert agent.buffer.dead_letter_count() == 0 and agent.buffer.acks() == []


def test_command_output_is_made_acceptable_before_it_is_acknowledged(tmp_path):
    class Noisy(SimulatedSource):
        def execute(self, command):
            return True, "\x1b[31mreset\x1b[0m done\n" + "x" * 600

    agent = _agent(tmp_path, "http://cp", source=Noisy(gpus=1))
    agent._run_command({"id": 5, "action": "reset_gpu", "gpu": 0})
    [ack] = agent.buffer.acks()
    assert ack["message"].startswith("\\x1b[31mreset\\x1b[0m done\n") and len(ack["message"]) == 500
