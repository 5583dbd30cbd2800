"""schemathesis over the agent API (issue 6 §1-2): whatever an agent (or an attacker holding a
credential) sends, the server answers with a documented status and never 5xx; and hypothesis
over the numbers of a report body (the schema says only "object"), which must be a 400 or be
stored within range."""

from __future__ import annotations

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, status_code_conformance

from config.wsgi import application
from monitoring.models import NodeAgentState, NodeReport
from monitoring.report_parse import batch_parse
from tests.monitoring.conftest import joined

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance]
schema = schemathesis.openapi.from_wsgi("/api/schema/", application).include(path_regex="^/api/agent/v1/")


@pytest.fixture
def credential(node, actors):
    return joined(node, actors["admin"])


@pytest.fixture(autouse=True)
def keep_the_test_connection():
    """schemathesis calls the WSGI app directly; like Django's test client, keep the end of a
    request from closing the test's database connection (it would on PostgreSQL)."""
    for signal in (signals.request_started, signals.request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (signals.request_started, signals.request_finished):
        signal.connect(close_old_connections)


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_agent_api_never_fails_and_answers_as_documented(case, credential):
    response = case.call(headers={"Authorization": f"Bearer {credential}"})
    assert response.status_code < 500, f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"
    case.validate_response(response, checks=CHECKS)


# Numbers as an agent (or an attacker holding a credential) might write them in JSON: any
# integer, any finite float, and literals that overflow to infinity when parsed (1e309).
NUMBER_TEXT = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["1e309", "-1e309", "1e308", "10e400", "0", "-0.0", "100", "81920", "81921", "9223372036854775808"]),
)
METRICS = ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_GPU_UTIL",
           "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_NEW_FIELD"]
GPU_TEXT = st.dictionaries(st.sampled_from(METRICS), NUMBER_TEXT, max_size=len(METRICS)).map(
    lambda fields: "{" + ", ".join([f'"{k}": {v}' for k, v in fields.items()] + ['"index": 0']) + "}")


def stored_values_are_in_range(node) -> None:
    """What was stored is what the parser accepts; the node's summary fits its columns."""
    for gpus in NodeReport.objects.filter(node=node).values_list("gpus", flat=True):
        for gpu in gpus:
            batch_parse({"reports": [{"seq": 1, "at": 1764547200, "gpus": [gpu]}]}, max_batch=1)
    state = NodeAgentState.objects.get(node=node)
    assert 0 <= state.fb_used_mib <= state.fb_total_mib and (state.gpu_util_avg is None or 0 <= state.gpu_util_avg <= 100)


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(gpus=st.lists(GPU_TEXT, min_size=1, max_size=3), seq=NUMBER_TEXT, at=NUMBER_TEXT)
def test_hostile_numbers_in_reports_are_a_400_or_stored_in_range_never_a_500(node, credential, gpus, seq, at):
    """Issue "no 500 and no stalled agent on hostile input", item 2: the same numbers were 500s
    (IntegrityError, OverflowError, infinity) or stored out of range."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
    body = f'{{"reports": [{{"seq": {seq}, "at": {at}, "gpus": [{", ".join(gpus)}]}}]}}'
    response = client.generic("POST", "/api/agent/v1/reports/", body, content_type="application/json")
    assert response.status_code in (200, 400), (body, response.status_code, response.content[:300])
    if response.status_code == 400:
        assert all(e["field"] and e["message"] for e in response.json()["errors"]), response.json()
    stored_values_are_in_range(node)
