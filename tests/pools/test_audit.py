"""The audit log (issue #9 acceptance item 4): price changes, repairs, credential mints and role
changes each write exactly one entry saying who, what, before and after; no secret is stored;
the `/audit/` page is for platform admins, and for finance the entries about money (its guide
points there); its query count does not grow with a page.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from billing.models import NodePrice, PriceBookEntry
from monitoring import services as monitoring_services
from monitoring.models import AgentCommand
from pools import roles
from pools.controllers.repair import pool_repair
from pools.models import AuditEntry, Membership
from tests.pools.pod_helpers import T0, pool_with_nodes
from tests.pools.repair_helpers import ack, xid


@pytest.fixture
def since(actors):
    """Entries written after the fixtures (which add users, memberships and groups): newest id."""
    return AuditEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0


def new_entries(since: int, action: str = ""):
    return list(AuditEntry.objects.filter(id__gt=since, action__startswith=action).order_by("id"))


def only(since: int, action: str) -> AuditEntry:
    entries = new_entries(since, action)
    assert [e.action for e in entries] == [action], [(e.action, e.before, e.after) for e in entries]
    return entries[0]


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- prices: changed in the admin site --------------------------------------------------------


def test_a_price_book_entry_created_changed_and_deleted_in_the_admin_is_audited(actors, since):
    admin = logged_in(actors["admin"])
    form = {"kind": "storage_gb_month", "amount": "0.40", "currency": "CNY", "effective_from_0": "2027-01-01", "effective_from_1": "00:00:00"}
    assert admin.post(reverse("admin:billing_pricebookentry_add"), form).status_code == 302
    entry = PriceBookEntry.objects.get(kind="storage_gb_month", amount=Decimal("0.40"))
    created = only(since, "price.create")
    assert (created.actor, created.object_type, created.object_id) == (actors["admin"], "billing.PriceBookEntry", str(entry.pk))
    assert created.before is None and created.after["amount"] == "0.400000" and created.after["kind"] == "storage_gb_month"

    since = created.id
    change = reverse("admin:billing_pricebookentry_change", args=[entry.pk])
    assert admin.post(change, {**form, "amount": "0.45"}).status_code == 302
    updated = only(since, "price.update")
    assert (updated.before["amount"], updated.after["amount"], updated.actor) == ("0.400000", "0.450000", actors["admin"])

    since = updated.id
    assert admin.post(change, {**form, "amount": "0.450"}).status_code == 302  # the same price, written differently
    assert new_entries(since) == []

    assert admin.post(reverse("admin:billing_pricebookentry_delete", args=[entry.pk]), {"post": "yes"}).status_code == 302
    deleted = only(since, "price.delete")
    assert (deleted.object_id, deleted.before["amount"], deleted.after) == (str(entry.pk), "0.450000", None)
    assert not PriceBookEntry.objects.filter(pk=entry.pk).exists()


def test_node_prices_deleted_in_bulk_get_one_entry_each(actors, since):
    prices = list(NodePrice.objects.order_by("pk")[:2])
    response = logged_in(actors["admin"]).post(
        reverse("admin:billing_nodeprice_changelist"),
        {"action": "delete_selected", "_selected_action": [p.pk for p in prices], "post": "yes"},
    )
    assert response.status_code == 302
    entries = new_entries(since)
    assert sorted((e.action, e.object_id) for e in entries) == sorted(("price.delete", str(p.pk)) for p in prices)
    assert {e.before["monthly_price"] for e in entries} == {str(p.monthly_price) for p in prices}
    assert all(e.actor == actors["admin"] for e in entries)


# --- repairs: the system acts --------------------------------------------------------------


def test_a_repair_started_and_succeeded_is_audited_with_the_node_state(actors, since):
    pool = pool_with_nodes(actors["lead"], nodes=5)
    since = AuditEntry.objects.latest("id").id  # after the pool's own entry
    node = pool.nodes.order_by("name").first()
    xid(node, 48, at=T0, gpu=3)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11)) == 1
    started = only(since, "repair.started")
    assert (started.actor, started.object_type, started.object_id) == (None, "pools.Node", str(node.pk))
    assert started.before == {"phase": "Ready", "unschedulable": False, "release_reason": ""}
    assert started.after == {"phase": "Repairing", "unschedulable": True, "release_reason": "", "repair": "reset_gpu", "gpu": 3, "reason": started.after["reason"]}

    ack(AgentCommand.objects.get(node=node))
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=12))
    succeeded = only(started.id, "repair.succeeded")
    assert (succeeded.before["phase"], succeeded.after["phase"], succeeded.after["unschedulable"]) == ("Repairing", "Ready", False)


def test_a_failed_repair_is_audited(actors):
    pool = pool_with_nodes(actors["lead"], nodes=5)
    node = pool.nodes.order_by("name").first()
    xid(node, 48, at=T0)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))
    since = AuditEntry.objects.latest("id").id
    ack(AgentCommand.objects.get(node=node), ok=False)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=12))
    failed = only(since, "repair.failed")
    assert (failed.actor, failed.before["phase"], failed.after["phase"], failed.after["repair"]) == (None, "Repairing", "Cordoned", "reset_gpu")


def test_a_replacement_is_audited_once(actors):
    pool = pool_with_nodes(actors["lead"], nodes=5)
    since = AuditEntry.objects.latest("id").id
    node = pool.nodes.order_by("name").first()
    xid(node, 79, at=T0)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(seconds=30)) == 1
    started = only(since, "repair.started")
    assert (started.after["repair"], started.after["release_reason"], started.before["phase"]) == ("replace", "Repair", "Ready")


# --- agent credentials: minted, issued, rotated, revoked; never their secrets ----------------


def test_credential_lifecycle_is_audited_without_secrets(actors, since):
    pool = pool_with_nodes(actors["lead"], nodes=1)
    node = pool.nodes.get()
    since = AuditEntry.objects.latest("id").id
    secrets = []

    row, token = monitoring_services.join_token_create(user=actors["admin"], node=node)
    secrets.append(token.split(".")[1])
    minted = only(since, "credential.join-token")
    assert (minted.actor, minted.object_type, minted.after["tokenId"], minted.after["node"]) == (actors["admin"], "monitoring.JoinToken", row.token_id, node.name)

    credential, secret, _ = monitoring_services.agent_join(token=token, node_name=node.name)
    secrets.append(secret)
    issued = only(minted.id, "credential.issue")
    assert (issued.actor, issued.before["credentials"], issued.after["credentials"]) == (None, [], [credential.key_prefix])

    _, token = monitoring_services.join_token_create(user=actors["admin"], node=node)
    secrets.append(token.split(".")[1])
    rejoined_since = AuditEntry.objects.latest("id").id
    again, secret, _ = monitoring_services.agent_join(token=token, node_name=node.name)
    secrets.append(secret)
    reissued = only(rejoined_since, "credential.issue")
    assert (reissued.before["credentials"], reissued.after["credentials"]) == ([credential.key_prefix], [again.key_prefix])

    rotated, secret = monitoring_services.credential_rotate(credential=again, node_name=node.name)
    secrets.append(secret)
    rotation = only(reissued.id, "credential.rotate")
    assert (rotation.object_id, rotation.before["credentials"], rotation.after["credentials"]) == (str(rotated.pk), [again.key_prefix], [rotated.key_prefix])

    assert monitoring_services.credential_revoke_for_node(node, reason="RevokedByAdmin", actor=actors["admin"]) == 1
    revoked = only(rotation.id, "credential.revoke")
    assert (revoked.actor, revoked.before["activeCredentials"], revoked.after) == (actors["admin"], 1, {"node": node.name, "activeCredentials": 0, "reason": "RevokedByAdmin"})
    assert monitoring_services.credential_revoke_for_node(node, actor=actors["admin"]) == 0
    assert new_entries(revoked.id) == []  # nothing left to revoke: nothing changed

    stored = json.dumps([[e.before, e.after] for e in new_entries(since)])
    assert not [s for s in secrets if s in stored]
    assert not any(c.key_hash in stored for c in node.agent_credentials.all())


# --- roles: memberships and the global groups, wherever they change --------------------------


def test_membership_changes_in_the_admin_name_the_admin(actors, teams, since):
    """The team page's membership rows: the role change is recorded once, with the admin as actor."""
    team = teams["algorithm"]
    rows = list(Membership.objects.filter(team=team).order_by("pk"))
    form = {"name": team.name, "slug": team.slug, "created_at_0": "2026-01-01", "created_at_1": "00:00:00", "memberships-TOTAL_FORMS": str(len(rows)), "memberships-INITIAL_FORMS": str(len(rows)),
            "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "1000"}  # fmt: skip
    for index, row in enumerate(rows):
        role = Membership.Role.LEAD if row.user == actors["member"] else row.role
        form |= {f"memberships-{index}-id": str(row.pk), f"memberships-{index}-team": str(team.pk),
                 f"memberships-{index}-user": str(row.user_id), f"memberships-{index}-role": role}  # fmt: skip
    response = logged_in(actors["admin"]).post(reverse("admin:pools_team_change", args=[team.pk]), form)
    assert response.status_code == 302, re.findall(r"errorlist.{0,300}", response.content.decode(), re.S)
    entry = only(since, "role.membership.update")
    assert entry.actor == actors["admin"]
    assert (entry.before, entry.after) == (
        {"user": "member", "team": "algorithm", "role": "member"},
        {"user": "member", "team": "algorithm", "role": "lead"},
    )


def test_memberships_created_and_deleted_are_audited(actors, teams, since):
    membership = Membership.objects.create(user=actors["finance"], team=teams["inference"], role=Membership.Role.MEMBER)
    created = only(since, "role.membership.create")
    assert (created.actor, created.before, created.after) == (None, None, {"user": "finance", "team": "inference", "role": "member"})
    membership.save()  # saved unchanged: nothing to record
    membership.delete()
    deleted = only(created.id, "role.membership.delete")
    assert (deleted.before, deleted.after) == ({"user": "finance", "team": "inference", "role": "member"}, None)


def test_a_deleted_user_takes_their_memberships_with_an_entry_each(actors, since):
    actors["member"].delete()
    entry = only(since, "role.membership.delete")
    assert entry.before == {"user": "member", "team": "algorithm", "role": "member"}


def test_role_groups_from_either_side_of_the_relation(actors, since):
    lead, finance_group = actors["lead"], Group.objects.get(name=roles.FINANCE)
    admin_group = Group.objects.get(name=roles.PLATFORM_ADMIN)
    lead.groups.add(finance_group)
    added = only(since, "role.group.add")
    assert (added.object_type, added.object_id, added.before, added.after) == ("auth.User", str(lead.pk), {"user": "lead", "groups": []}, {"user": "lead", "groups": ["finance"]})

    admin_group.user_set.add(lead)  # the reverse side
    reverse_added = only(added.id, "role.group.add")
    assert reverse_added.after["groups"] == ["finance", "platform-admin"]

    lead.groups.add(finance_group)  # already in: nothing changes
    lead.groups.add(Group.objects.create(name="readers"))  # not a role group
    assert new_entries(reverse_added.id) == []

    admin_group.user_set.remove(lead)
    removed = only(reverse_added.id, "role.group.remove")
    assert (removed.before["groups"], removed.after["groups"]) == (["finance", "platform-admin"], ["finance"])

    finance_group.user_set.clear()  # the finance actor and the lead leave it
    cleared = new_entries(removed.id)
    assert sorted((e.action, e.before["user"]) for e in cleared) == [("role.group.remove", "finance"), ("role.group.remove", "lead")]


def test_a_superuser_adding_a_role_group_in_the_user_admin_is_the_actor(actors, since):
    root = get_user_model().objects.create_superuser("root", password="pw-root")
    superuser = only(since, "role.superuser")
    assert (superuser.before["superuser"], superuser.after["superuser"]) == (False, True)
    user = actors["finance"]
    groups = Group.objects.filter(name__in=(roles.FINANCE, roles.PLATFORM_ADMIN))
    form = {"username": user.username, "first_name": "", "last_name": "", "email": "", "is_active": "on",
            "groups": [g.pk for g in groups], "user_permissions": [],
            "last_login_0": "", "last_login_1": "", "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00"}  # fmt: skip
    response = logged_in(root).post(reverse("admin:auth_user_change", args=[user.pk]), form)
    assert response.status_code == 302, response.content[:3000]
    entry = only(superuser.id, "role.group.add")
    assert (entry.actor, entry.before["groups"], entry.after["groups"]) == (root, ["finance"], ["finance", "platform-admin"])


def test_logging_in_is_not_a_role_change(client, actors, since):
    assert client.post("/login/", {"username": "lead", "password": "pw-lead"}).status_code == 302
    assert new_entries(since) == []


# --- the page ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["lead", "member"])
def test_the_audit_page_is_a_404_for_everyone_but_platform_admins_and_finance(actors, role):
    assert logged_in(actors[role]).get(reverse("audit")).status_code == 404
    assert reverse("audit") not in logged_in(actors[role]).get(reverse("pools:list")).content.decode()


def test_the_audit_page_shows_who_what_when_before_and_after_newest_first(actors):
    client = logged_in(actors["admin"])
    monitoring_node_pool = pool_with_nodes(actors["lead"], nodes=1)
    monitoring_services.join_token_create(user=actors["admin"], node=monitoring_node_pool.nodes.get())
    assert 'href="/audit/"' in client.get(reverse("pools:list")).content.decode()  # the admin's nav link
    page = client.get(reverse("audit")).content.decode()
    newest, pool_created = page.index("credential.join-token"), page.index("pool.create")
    assert newest < pool_created
    assert "<td>admin</td>" in page and "monitoring.JoinToken #" in page and "&quot;tokenId&quot;: " in page
    assert "<td>system</td>" in page  # the fixtures' role entries have no actor

    only_pools = client.get(reverse("audit"), {"action": "pool"}).content.decode()
    assert "pool.create" in only_pools and "credential." not in only_pools
    by_admin = client.get(reverse("audit"), {"actor": "admin"}).content.decode()
    assert "credential.join-token" in by_admin and "pool.create" not in by_admin
    by_system = client.get(reverse("audit"), {"actor": "system"}).content.decode()
    assert "role.group.add" in by_system and "pool.create" not in by_system


def test_finance_reads_the_entries_about_money_and_no_others(actors):
    """The finance guide sends finance to the audit log for budget changes, and finance reconciles
    prices, the account and orders: it got a 404 (QA). Roles, credentials, repairs, quotas and
    pools' specs stay the platform admins'."""
    actions = ("budget.pool.set", "budget.team.delete", "price.update", "account.adjust", "order.paid",
               "role.group.add", "credential.issue", "repair.started", "quota.update", "pool.create", "budgetary.x")  # fmt: skip
    AuditEntry.objects.bulk_create(AuditEntry(actor=actors["admin"], action=a, object_type="x.Y", object_id="1") for a in actions)
    client = logged_in(actors["finance"])
    assert 'href="/audit/"' in client.get(reverse("pools:list")).content.decode()  # finance's nav link
    response = client.get(reverse("audit"))
    assert response.status_code == 200
    shown = {entry.action for entry, _, _ in response.context["rows"]}
    assert shown == {"budget.pool.set", "budget.team.delete", "price.update", "account.adjust", "order.paid"}
    assert "The changes about money" in response.content.decode()
    assert {e.action for e, _, _ in client.get(reverse("audit"), {"action": "role"}).context["rows"]} == set()
    assert {e.action for e, _, _ in client.get(reverse("audit"), {"action": "budget"}).context["rows"]} == {"budget.pool.set", "budget.team.delete"}
    # Whatever the case typed, on either database (PostgreSQL's LIKE minds it, SQLite's not).
    assert {e.action for e, _, _ in client.get(reverse("audit"), {"action": "BUDGET.Pool"}).context["rows"]} == {"budget.pool.set"}
    assert 'placeholder="e.g. budget, order.approve"' in response.content.decode()  # not a role.* finance never reads
    admin = {e.action for e, _, _ in logged_in(actors["admin"]).get(reverse("audit")).context["rows"]}
    assert set(actions) <= admin


def test_the_audit_page_paginates_with_a_bounded_number_of_queries(actors, django_assert_max_num_queries):
    users = list(get_user_model().objects.all())
    AuditEntry.objects.bulk_create(
        AuditEntry(actor=users[i % len(users)], action=f"price.update.{i:03d}", object_type="billing.NodePrice", object_id=str(i), before={"i": i}, after={"i": i + 1})
        for i in range(130)
    )
    client = logged_in(actors["admin"])
    client.get(reverse("audit"))  # warm the session
    # session, user, role groups, count, one page of entries with their actors: 5, whatever the page holds
    with django_assert_max_num_queries(6):
        first = client.get(reverse("audit"), {"action": "price"}).content.decode()
    with django_assert_max_num_queries(6):
        last = client.get(reverse("audit"), {"action": "price", "page": "3"}).content.decode()
    assert "Page 1 of 3" in first and "price.update.129" in first and "price.update.080" in first and "price.update.079" not in first
    assert "Page 3 of 3" in last and "price.update.029" in last and "price.update.030" not in last
    assert "action=price&amp;page=2" in first
