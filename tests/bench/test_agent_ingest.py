"""The ingest benchmark's load generator (bench/agent_ingest.py): its cheap bodies must be the
agent's body, so that a cheaper generator does not change what the server is measured on."""

from __future__ import annotations

import json
import random

from bench.agent_ingest import body_maker, report_body
from monitoring.report_parse import batch_parse


def _shape(value):
    """Keys and types, not the random values."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


def test_spliced_bodies_have_the_agents_shape_and_their_own_sequence_number():
    make = body_maker(random.Random(3), variants=4)
    for seq in (1, 2, 5, 1234):
        body, reference = json.loads(make(seq)), json.loads(report_body(seq, random.Random(seq)))
        assert _shape(body) == _shape(reference)
        assert list(body) == list(reference) and list(body["reports"][0]) == list(reference["reports"][0])  # key order
        assert body["oldestSeq"] == body["reports"][0]["seq"] == seq
        batch = batch_parse(body, max_batch=10)  # what the server parses
        assert [r.seq for r in batch.reports] == [seq] and len(batch.reports[0].gpus) == 8
    assert len({json.dumps(json.loads(make(s))["reports"][0]["gpus"]) for s in range(4)}) == 4  # the variants differ
