"""Team isolation someone switched off on the real API server is switched on again (design §1:
the product keeps the ValidatingAdmissionPolicy in sync): server-side apply keeps the fields
another manager owns, so the sync compares the whole spec and puts ours back, with a WARNING
saying what had been changed."""

from __future__ import annotations

import logging

import pytest
from kubernetes import client

from pools.controllers.cluster_sync import admission_policy_sync
from pools.core.isolation import POLICY_NAME, refusal
from pools.services import pools as services
from tests.conftest import make_document
from tests.k8s.helpers import wait_for
from tests.k8s.test_team_isolation_on_kubernetes import admitted, pod, policies, team_namespace  # noqa: F401

pytestmark = pytest.mark.django_db
BOTH = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]


@pytest.fixture
def enforced(actors, core, policies, team_namespace):  # noqa: F811
    """The policy in force: a pod of team inference pinned to algorithm's pool is refused."""
    services.pool_create(user=actors["lead"], document=make_document("train-pool-a", nodeCount={"min": 0, "max": 4}))
    inference = team_namespace("inference")
    assert admission_policy_sync(policies) == BOTH
    pinned = pod("sneaky", selector={"ebcloud.io/pool": "train-pool-a"})
    assert refusal("inference") in wait_for(lambda: admitted(core, inference, pinned), what="the policy in force")
    return inference, pinned


def test_a_binding_someone_narrowed_to_no_namespace_is_put_back_with_a_warning(core, kube, policies, enforced, caplog):  # noqa: F811
    inference, pinned = enforced
    api = client.AdmissionregistrationV1Api(kube)
    api.patch_validating_admission_policy_binding(POLICY_NAME, {"spec": {"matchResources": {"namespaceSelector": {"matchLabels": {"isolation": "off"}}}}})
    wait_for(lambda: admitted(core, inference, pinned) is None, what="the narrowed binding to take effect")

    with caplog.at_level(logging.WARNING, logger="ebcloud.scheduler"):
        assert admission_policy_sync(policies) == ["ValidatingAdmissionPolicyBinding"]
    assert api.read_validating_admission_policy_binding(POLICY_NAME).spec.match_resources is None
    assert refusal("inference") in wait_for(lambda: admitted(core, inference, pinned), what="isolation back in force")
    warning = next(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "someone changed the ValidatingAdmissionPolicyBinding ebcloud-pool-teams" in warning
    assert 'spec.matchResources was added: {"matchPolicy": "Equivalent", "namespaceSelector": {"matchLabels": {"isolation": "off"}}' in warning
    assert admission_policy_sync(policies) == []  # put back once, then in step: nothing written


def test_a_match_condition_someone_added_to_the_policy_is_removed_not_applied_over_every_pass(core, kube, policies, enforced, caplog):  # noqa: F811
    inference, pinned = enforced
    api = client.AdmissionregistrationV1Api(kube)
    api.patch_validating_admission_policy(POLICY_NAME, [{"op": "add", "path": "/spec/matchConditions/-", "value": {"name": "off", "expression": "false"}}])
    wait_for(lambda: admitted(core, inference, pinned) is None, what="the added condition to take effect")

    with caplog.at_level(logging.WARNING, logger="ebcloud.scheduler"):
        assert admission_policy_sync(policies) == ["ValidatingAdmissionPolicy"]
    assert [c.name for c in api.read_validating_admission_policy(POLICY_NAME).spec.match_conditions] == ["constraints-set"]
    assert refusal("inference") in wait_for(lambda: admitted(core, inference, pinned), what="isolation back in force")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and 'spec.matchConditions[off] was added: {"expression": "false", "name": "off"}' in warnings[0]
    assert admission_policy_sync(policies) == []


def test_a_changed_failure_policy_and_validation_action_are_put_back(kube, policies, enforced):  # noqa: F811
    api = client.AdmissionregistrationV1Api(kube)
    api.patch_validating_admission_policy(POLICY_NAME, {"spec": {"failurePolicy": "Ignore"}})
    api.patch_validating_admission_policy_binding(POLICY_NAME, {"spec": {"validationActions": ["Audit"]}})

    assert admission_policy_sync(policies) == BOTH
    assert policies.restored == {
        "ValidatingAdmissionPolicy": ['spec.failurePolicy is "Ignore"'],
        "ValidatingAdmissionPolicyBinding": ['spec.validationActions[0] is "Audit"'],
    }
    assert api.read_validating_admission_policy(POLICY_NAME).spec.failure_policy == "Fail"
    assert api.read_validating_admission_policy_binding(POLICY_NAME).spec.validation_actions == ["Deny"]
