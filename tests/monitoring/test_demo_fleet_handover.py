"""The demo fleet and a person's agent on the same node (docs/guide-admin.md sections 3 and 4
on a fresh `make run`): the person's agent joining revokes the demo's, which stops and is
announced once; the demo takes the node back with a new join token only once the node has been
silent, never while the person's agent reports."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from monitoring import services
from monitoring.agent import Agent, CredentialRefused
from monitoring.agent_buffer import DiskBuffer
from monitoring.agent_sources import SimulatedSource
from monitoring.models import NodeAgentState, NodeReport
from pools.demo.fleet import AgentFleet
from tests.monitoring.test_agent import _wait

live = pytest.mark.django_db(transaction=True)


def _last_report(node):
    return NodeAgentState.objects.get(node=node).last_report_at


@live
def test_the_fleet_stands_aside_for_a_persons_agent_and_takes_the_node_back_once_silent(actors, make_node, live_server,
                                                                                      tmp_path):
    node = make_node("train-pool-a-m-0")
    fleet = AgentFleet(server=live_server.url, root=tmp_path / "fleet", admin=actors["admin"], interval=0.05)
    try:
        assert fleet.sync([node], busy={}, now=node.created_at) == [node.name]
        demo = fleet.agents[node.name]
        assert _wait(lambda: NodeReport.objects.filter(node=node).exists())

        # A person joins an agent of their own as the node: two reports, then it exits (`--count 2`).
        _, token = services.join_token_create(user=actors["admin"], node=node)
        person = Agent(server=live_server.url, source=SimulatedSource(gpus=2, seed=9),
                       buffer=DiskBuffer(tmp_path / "person" / "reports.sqlite3"),
                       credential_file=tmp_path / "person" / "credential.json", node=node.name, join_token=token,
                       interval=0.01, timeout=5)
        person.run(threading.Event(), max_reports=2, exit_when_drained=True)
        assert person.refused is None
        demo.thread.join(timeout=10)
        assert not demo.thread.is_alive() and demo.agent.refused  # refused, stopped, not retrying
        assert fleet.reporting() == set()

        # While the person's reports are fresh the demo stands aside, and says so once.
        heard = _last_report(node)
        for seconds in (1, 30, 59):
            assert fleet.sync([node], busy={}, now=heard + timedelta(seconds=seconds)) == []
        assert len(fleet.notices) == 1 and "stands aside" in fleet.notices[0]
        assert fleet.agents[node.name] is demo

        # A minute of silence: the demo joins again with a new token and reports.
        assert fleet.sync([node], busy={}, now=heard + timedelta(seconds=60)) == [node.name]
        assert "joins again with a new join token" in fleet.notices[1]
        assert fleet.reporting() == {node.name}
        assert _wait(lambda: _last_report(node) > heard)

        # The person's agent, started again with its revoked credential, is refused: no ping-pong.
        person.collect()
        with pytest.raises(CredentialRefused):
            person.flush()
        person.close()
        seen = NodeAgentState.objects.get(node=node).acked_seq
        assert _wait(lambda: NodeAgentState.objects.get(node=node).acked_seq > seen)
        assert not fleet.agents[node.name].agent.refused
    finally:
        fleet.close()
