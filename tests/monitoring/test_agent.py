"""The node agent program (seed D1; issue 6 §3): buffered on disk, replayed in order after an
outage, exactly once; exponential backoff with jitter; NVML or a simulated GPU source."""

from __future__ import annotations

import json
import random
import threading
import time
from urllib.parse import urlparse

import pytest

from monitoring import agent as agent_module
from monitoring import services
from monitoring.agent import Agent, AgentError, backoff_delay
from monitoring.agent_buffer import DiskBuffer
from monitoring.agent_sources import SimulatedSource, source_open
from monitoring.models import AgentCommand, GpuErrorEvent, NodeReport
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
def test_the_agent_rotates_its_credential_and_keeps_reporting_with_the_new_one(actors, make_node, live_server, tmp_path):
    node = make_node("train-pool-a-m-0")
    _, token = services.join_token_create(user=actors["admin"], node=node)
    agent = _agent(tmp_path, live_server.url, node=node.name, token=token)
    agent.collect()
    agent.flush()
    old = agent.credential
    agent.rotate()
    assert agent.credential != old and json.loads((tmp_path / "credential.json").read_text())["credential"] == agent.credential
    assert services.credential_authenticate(old) is None
    agent.collect()
    agent.flush()
    assert NodeReport.objects.filter(node=node).count() == 2
    agent.close()
