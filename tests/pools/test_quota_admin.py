"""Quotas in the admin: every change is in the audit log with the row before and after (as
prices are); a region that no zone is in, a limit below zero or written in another script's
digits is refused beside its field and nothing is saved.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from pools.models import AuditEntry, GpuModel, Quota

pytestmark = pytest.mark.django_db


@pytest.fixture
def a100(catalog) -> GpuModel:
    return GpuModel.objects.get(name="A100_80G")


def quota_entries() -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action__startswith="quota.").order_by("id"))


def test_a_quota_created_changed_and_deleted_in_the_admin_is_audited(admin_client, actors, teams, a100):
    form = {"region": "cn-north-1", "gpu_model": a100.pk, "team": teams["algorithm"].pk, "limit_gpus": "16"}
    assert admin_client.post(reverse("admin:pools_quota_add"), form).status_code == 302
    quota = Quota.objects.get(region="cn-north-1", gpu_model=a100, team=teams["algorithm"])
    [created] = quota_entries()
    assert (created.action, created.actor, created.object_type, created.object_id) == ("quota.create", actors["admin"], "pools.Quota", str(quota.pk))
    assert created.before is None and created.after == {"region": "cn-north-1", "gpu_model_id": a100.pk, "team_id": teams["algorithm"].pk, "limit_gpus": 16}

    change = reverse("admin:pools_quota_change", args=[quota.pk])
    assert admin_client.post(change, {**form, "limit_gpus": "24"}).status_code == 302
    updated = quota_entries()[-1]
    assert (updated.action, updated.before["limit_gpus"], updated.after["limit_gpus"]) == ("quota.update", 16, 24)

    assert admin_client.post(change, {**form, "limit_gpus": "24"}).status_code == 302  # saved unchanged
    assert len(quota_entries()) == 2

    assert admin_client.post(reverse("admin:pools_quota_delete", args=[quota.pk]), {"post": "yes"}).status_code == 302
    deleted = quota_entries()[-1]
    assert (deleted.action, deleted.before["limit_gpus"], deleted.after) == ("quota.delete", 24, None)
    assert not Quota.objects.filter(pk=quota.pk).exists()


def test_quotas_deleted_in_bulk_get_one_entry_each(admin_client, a100):
    quotas = list(Quota.objects.filter(gpu_model=a100).order_by("pk"))
    response = admin_client.post(
        reverse("admin:pools_quota_changelist"),
        {"action": "delete_selected", "_selected_action": [q.pk for q in quotas], "post": "yes"},
    )
    assert response.status_code == 302
    assert sorted((e.action, e.object_id) for e in quota_entries()) == sorted(("quota.delete", str(q.pk)) for q in quotas)


@pytest.mark.parametrize(
    ("region", "says"),
    [("cn-east-2a", "name of a zone of cn-east-2"), ("eu-west-9", "Regions: cn-east-2, cn-north-1")],
)
def test_a_quota_for_a_region_no_zone_is_in_is_refused(admin_client, a100, region, says):
    quotas = Quota.objects.count()
    response = admin_client.post(reverse("admin:pools_quota_add"), {"region": region, "gpu_model": a100.pk, "team": "", "limit_gpus": "100"})
    assert response.status_code == 200
    assert says in " ".join(response.context["adminform"].form.errors["region"])
    assert Quota.objects.count() == quotas and quota_entries() == []


def test_the_region_is_picked_from_the_zones_regions(admin_client):
    page = admin_client.get(reverse("admin:pools_quota_add")).content.decode()
    field = page[page.index('name="region"'):]
    field = field[:field.index("</select>")]
    assert '<option value="cn-east-2">cn-east-2</option>' in field and '<option value="cn-north-1">cn-north-1</option>' in field
    assert "cn-east-2a" not in field  # a zone is no region


@pytest.mark.parametrize("value", ["-1", "١٢", "1_2", "NaN", "99999999999"])
def test_a_limit_that_is_no_plain_whole_number_is_refused(admin_client, a100, value):
    quota = Quota.objects.get(region="cn-east-2", gpu_model=a100, team__isnull=True)
    response = admin_client.post(reverse("admin:pools_quota_change", args=[quota.pk]), {"region": "cn-east-2", "gpu_model": a100.pk, "team": "", "limit_gpus": value})
    assert response.status_code == 200
    assert "limit_gpus" in response.context["adminform"].form.errors
    assert Quota.objects.get(pk=quota.pk).limit_gpus == 48 and quota_entries() == []


def test_a_second_quota_of_one_scope_is_refused_in_words_not_by_constraint_name(admin_client, teams, a100):
    """`Constraint "quota_unique_global" is violated.` told an admin nothing (found by a QA sweep)."""
    Quota.objects.get_or_create(region="cn-north-1", gpu_model=a100, team=None, defaults={"limit_gpus": 8})
    Quota.objects.create(region="cn-north-1", gpu_model=a100, team=teams["algorithm"], limit_gpus=8)
    for team, said in (("", "A quota for all teams already exists"), (teams["algorithm"].pk, "This team already has a quota")):
        form = {"region": "cn-north-1", "gpu_model": a100.pk, "team": team, "limit_gpus": "16"}
        again = admin_client.post(reverse("admin:pools_quota_add"), form).content.decode()
        assert f"{said} for this region and GPU model: change that one." in again and "quota_unique" not in again
