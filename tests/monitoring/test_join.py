"""Join and identity (seed D1; issue 6 §1): single-use join tokens, per-node credentials, the
node taken from the credential (Kubernetes bootstrap tokens and NodeRestriction)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from monitoring import services, tokens
from monitoring.models import AgentCredential, JoinToken
from pools.controllers.lifecycle import pool_reconcile
from pools.models import Node, PoolEvent
from tests.monitoring.conftest import joined, report

JOIN_TOKENS = "/api/agent/v1/join-tokens/"
JOIN = "/api/agent/v1/join/"
ROTATE = "/api/agent/v1/credential/rotate/"
REPORTS = "/api/agent/v1/reports/"


def test_an_admin_mints_a_join_token_of_which_only_a_hash_is_stored(api, node):
    response = api("admin").post(JOIN_TOKENS, {"node": node.name, "ttlSeconds": 600}, format="json")
    assert response.status_code == 201
    token = response.json()["token"]
    token_id, secret = tokens.join_token_parse(token)
    row = JoinToken.objects.get()
    assert row.token_id == token_id and row.node == node and row.used_at is None
    assert secret not in row.secret_hash and row.secret_hash == tokens.digest(secret)
    assert timedelta(seconds=590) < row.expires_at - timezone.now() <= timedelta(seconds=600)
    assert node.events.filter(reason="JoinTokenCreated").exists()


@pytest.mark.parametrize("role", ["lead", "member", "finance"])
def test_only_platform_admins_may_mint_join_tokens(api, node, role):
    response = api(role).post(JOIN_TOKENS, {"node": node.name}, format="json")
    assert response.status_code == 403
    assert response.json()["errors"][0]["message"] == "only platform admins mint join tokens"
    assert not JoinToken.objects.exists()


def test_anonymous_callers_cannot_mint_join_tokens(api, node):
    assert api(None).post(JOIN_TOKENS, {"node": node.name}, format="json").status_code == 401


def test_a_join_token_for_an_unknown_node_is_404(api, node):
    response = api("admin").post(JOIN_TOKENS, {"node": "nope"}, format="json")
    assert response.status_code == 404 and "errors" in response.json()


def test_a_join_token_ttl_out_of_bounds_names_the_field(api, node):
    response = api("admin").post(JOIN_TOKENS, {"node": node.name, "ttlSeconds": 5}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "ttlSeconds"


def test_the_agent_exchanges_a_join_token_for_a_credential_returned_once(actors, node):
    _, token = services.join_token_create(user=actors["admin"], node=node)
    response = APIClient().post(JOIN, {"token": token, "node": node.name}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["node"] == node.name and body["ackedSeq"] == 0
    credential = body["credential"]
    row = AgentCredential.objects.get(node=node)
    assert row.key_hash == tokens.digest(credential) and credential not in row.key_hash
    assert node.events.filter(reason="AgentJoined").exists()


def test_a_join_token_works_only_once(actors, node):
    _, token = services.join_token_create(user=actors["admin"], node=node)
    assert APIClient().post(JOIN, {"token": token, "node": node.name}, format="json").status_code == 201
    again = APIClient().post(JOIN, {"token": token, "node": node.name}, format="json")
    assert again.status_code == 401
    assert again.json() == {"errors": [{"field": "token", "message": "join token already used"}]}
    assert AgentCredential.objects.filter(node=node).count() == 1


def test_an_expired_join_token_is_refused(actors, node):
    _, token = services.join_token_create(user=actors["admin"], node=node, now=timezone.now() - timedelta(hours=2))
    response = APIClient().post(JOIN, {"token": token, "node": node.name}, format="json")
    assert response.status_code == 401 and response.json()["errors"][0]["message"] == "join token expired"


def test_a_forged_join_token_secret_is_refused(actors, node):
    _, token = services.join_token_create(user=actors["admin"], node=node)
    forged = token.split(".")[0] + ".aaaaaaaaaaaaaaaa"
    assert APIClient().post(JOIN, {"token": forged, "node": node.name}, format="json").status_code == 401
    assert APIClient().post(JOIN, {"token": "garbage", "node": node.name}, format="json").status_code == 401


def test_a_join_token_binds_to_its_node_and_another_name_is_refused_and_logged(actors, node, make_node, caplog):
    other = make_node("train-pool-a-m-1")
    _, token = services.join_token_create(user=actors["admin"], node=node)
    with caplog.at_level(logging.WARNING, logger="ebcloud.monitoring"):
        response = APIClient().post(JOIN, {"token": token, "node": other.name}, format="json")
    assert response.status_code == 403
    assert "train-pool-a-m-1" in caplog.text
    event = node.events.get(reason="AgentNodeMismatch")
    assert event.type == "Warning" and "train-pool-a-m-1" in event.message
    assert not AgentCredential.objects.exists()


def test_a_terminated_node_gets_no_join_token(actors, make_node):
    gone = make_node("gone", phase="Terminated")
    with pytest.raises(Exception, match="Terminated"):
        services.join_token_create(user=actors["admin"], node=gone)


def test_every_agent_endpoint_needs_a_credential(node):
    response = APIClient().post(REPORTS, {"reports": [report(1)]}, format="json")
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Bearer ebca_not-a-credential")
    assert bad.post(REPORTS, {"reports": [report(1)]}, format="json").status_code == 401
    assert bad.post(ROTATE, {}, format="json").status_code == 401


def test_a_user_api_token_is_not_an_agent_credential(api, node):
    assert api("admin").post(REPORTS, {"reports": [report(1)]}, format="json").status_code in (401, 403)


def test_a_report_batch_naming_another_node_is_refused_and_logged(agent, node, make_node, caplog):
    make_node("train-pool-a-m-1")
    with caplog.at_level(logging.WARNING, logger="ebcloud.monitoring"):
        response = agent().post(REPORTS, {"node": "train-pool-a-m-1", "reports": [report(1)]}, format="json")
    assert response.status_code == 403
    assert "credential belongs to node train-pool-a-m-0" in response.json()["errors"][0]["message"]
    assert "named node 'train-pool-a-m-1'" in caplog.text
    assert node.events.filter(reason="AgentNodeMismatch", type="Warning").exists()
    assert not node.reports.exists()


def test_a_report_batch_naming_its_own_node_is_fine(agent, node):
    assert agent().post(REPORTS, {"node": node.name, "reports": [report(1)]}, format="json").status_code == 200


def bearer(credential: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
    return client


def test_rotation_returns_a_new_credential_and_the_old_one_stops_working_once_it_is_used(agent, node):
    client = agent()
    response = client.post(ROTATE, {}, format="json")
    assert response.status_code == 200
    new = response.json()["credential"]
    assert bearer(new).post(REPORTS, {"reports": [report(1)]}, format="json").status_code == 200
    assert client.post(REPORTS, {"reports": [report(2)]}, format="json").status_code == 401
    assert client.post(ROTATE, {}, format="json").status_code == 401
    assert AgentCredential.objects.filter(node=node, revoked_at__isnull=True).count() == 1
    assert node.events.filter(reason="AgentCredentialRotated").exists()


def test_a_rotation_whose_answer_was_lost_is_retried_and_the_agent_reports_meanwhile(agent, node):
    client = agent()
    lost = client.post(ROTATE, {}, format="json").json()["credential"]  # the answer never reaches the agent
    assert client.post(REPORTS, {"reports": [report(1)]}, format="json").status_code == 200
    retry = client.post(ROTATE, {}, format="json")
    assert retry.status_code == 200
    new = retry.json()["credential"]
    assert new != lost and services.credential_authenticate(lost) is None  # the unused one is revoked
    assert bearer(new).post(REPORTS, {"reports": [report(2)]}, format="json").status_code == 200
    assert client.post(REPORTS, {"reports": [report(3)]}, format="json").status_code == 401
    assert list(AgentCredential.objects.filter(node=node).values_list("revoked_reason", flat=True)) == ["", "RotationRetried", "Rotated"]


def test_a_rotated_out_credential_works_for_the_grace_only_and_a_retry_does_not_extend_it(actors, node):
    now = timezone.now()
    old = joined(node, actors["admin"])
    services.credential_rotate(credential=services.credential_authenticate(old, now), now=now)
    later = now + services.ROTATION_GRACE / 2
    services.credential_rotate(credential=services.credential_authenticate(old, later), now=later)
    assert services.credential_authenticate(old, now + services.ROTATION_GRACE - timedelta(seconds=1)) is not None
    assert services.credential_authenticate(old, now + services.ROTATION_GRACE) is None


def test_revoking_a_node_in_a_rotations_grace_revokes_the_rotated_out_credential_too(agent, node):
    client = agent()
    new = client.post(ROTATE, {}, format="json").json()["credential"]
    assert services.credential_revoke_for_node(node) == 1
    assert client.post(REPORTS, {"reports": [report(1)]}, format="json").status_code == 401
    assert bearer(new).post(REPORTS, {"reports": [report(1)]}, format="json").status_code == 401


def test_rotation_naming_another_node_is_refused(agent, make_node):
    make_node("train-pool-a-m-1")
    assert agent().post(ROTATE, {"node": "train-pool-a-m-1"}, format="json").status_code == 403


def test_revoking_a_nodes_credential_locks_its_agent_out(agent, node):
    client = agent()
    assert services.credential_revoke_for_node(node) == 1
    assert services.credential_revoke_for_node(node) == 0  # idempotent
    assert client.post(REPORTS, {"reports": [report(1)]}, format="json").status_code == 401
    assert PoolEvent.objects.filter(node=node, reason="AgentCredentialRevoked").count() == 1


def test_a_terminated_nodes_credential_no_longer_authenticates(agent, node):
    client = agent()
    node.phase = "Terminated"
    node.save(update_fields=["phase"])
    assert client.post(REPORTS, {"reports": [report(1)]}, format="json").status_code == 401


def test_rejoining_replaces_the_previous_credential(actors, node):
    first = joined(node, actors["admin"])
    second = joined(node, actors["admin"])
    assert services.credential_authenticate(first) is None
    assert services.credential_authenticate(second).node == node


def test_join_tokens_and_credentials_are_in_the_admin_site():
    from monitoring.models import AgentCredential as Credential

    assert JoinToken in admin.site._registry and Credential in admin.site._registry


def test_the_admin_revoke_action_revokes_through_the_service(actors, node, rf):
    joined(node, actors["admin"])
    model_admin = admin.site._registry[AgentCredential]
    request = rf.post("/")
    request.user = actors["admin"]
    model_admin.message_user = lambda *a, **k: None
    model_admin.revoke(request, AgentCredential.objects.all())
    assert not AgentCredential.objects.filter(revoked_at__isnull=True).exists()
    assert AgentCredential.objects.get().revoked_reason == "RevokedByAdmin"


def test_the_lifecycle_revokes_the_credential_of_a_node_it_releases(agent, node):
    """A released machine may live on (returned to the cloud, reused): its agent's credential
    is revoked with the release, not merely refused while the node row says Terminated."""
    client = agent()
    Node.objects.filter(pk=node.pk).update(release_reason="ScaledIn", unschedulable=True)  # drained: it runs no pod
    pool_reconcile(pool_id=node.pool_id)
    node.refresh_from_db()
    assert node.phase == "Terminated"
    assert AgentCredential.objects.get(node=node).revoked_reason == "NodeTerminated"
    assert PoolEvent.objects.filter(node=node, reason="AgentCredentialRevoked").count() == 1
    assert client.post(REPORTS, {"reports": [report(1)]}, format="json").status_code == 401


def test_a_credential_in_its_rotation_grace_reads_so_and_the_admin_can_revoke_it(actors, node, rf, client):
    """The node page said "revoked <a time to come> (Rotated)" of a credential that still
    works, and the admin's revoke action skipped it (it acted only on active ones)."""
    old = joined(node, actors["admin"])
    services.credential_rotate(credential=services.credential_authenticate(old))
    client.force_login(actors["admin"])
    page = client.get(reverse("pools:node-detail", args=[node.pool.name, node.name])).content.decode()
    assert "rotated out: works until" in page and "(Rotated)" not in page
    model_admin = admin.site._registry[AgentCredential]
    request = rf.post("/")
    request.user = actors["admin"]
    model_admin.message_user = lambda *a, **k: None
    model_admin.revoke(request, AgentCredential.objects.filter(revoked_reason="Rotated"))
    assert services.credential_authenticate(old) is None
    assert set(AgentCredential.objects.values_list("revoked_reason", flat=True)) == {"RevokedByAdmin"}
