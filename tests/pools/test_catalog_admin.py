"""The catalog in the admin: zone, region, GPU model and node type names become Kubernetes label
values on nodes, so a name the cluster would refuse (a leading '-', digits of another script) is
refused beside its field, as is a GPU model of 0 GiB or a node type of 0 GPUs; nothing is saved,
and the demo names still save."""

from __future__ import annotations

import pytest
from django.urls import reverse

from pools.models import GpuModel, NodeType, Zone

pytestmark = pytest.mark.django_db


def refused(response, field: str) -> str:
    """The form came back (200, no redirect) with an error beside `field`; its text."""
    assert response.status_code == 200, response.status_code
    errors = response.context["adminform"].form.errors
    assert field in errors, errors
    return " ".join(errors[field])


def zone_form(**over) -> dict:
    return {"name": "cn-test-9a", "region": "cn-test-9", **over}


def gpu_model_form(**over) -> dict:
    return {"name": "T4_16G", "memory_gib": "16", **over}


def node_type_form(**over) -> dict:
    return {"name": "GPU_3_CARD", "gpu_count": "3", "cpu_milli": "48000", "memory_mib": "196608", **over}


FORMS = {"zone": (Zone, zone_form), "gpumodel": (GpuModel, gpu_model_form), "nodetype": (NodeType, node_type_form)}


@pytest.mark.parametrize(
    ("model", "field", "value", "says"),
    [
        ("zone", "name", "-1", "label value"),
        ("zone", "name", "１２", "label value"),  # full-width digits
        ("zone", "name", "cn east", "label value"),
        ("zone", "name", "cn-east-", "label value"),
        ("zone", "region", "１２", "label value"),
        ("zone", "region", "_cn", "label value"),
        ("gpumodel", "name", "１２", "label value"),
        ("gpumodel", "name", "A100/80G", "label value"),
        ("gpumodel", "memory_gib", "0", "greater than or equal to 1"),
        ("nodetype", "name", "-8", "label value"),
        ("nodetype", "gpu_count", "0", "greater than or equal to 1"),
    ],
)
def test_a_catalog_entry_the_cluster_could_not_label_is_refused_beside_its_field(admin_client, model, field, value, says):
    model_class, form = FORMS[model]
    before = model_class.objects.count()
    response = admin_client.post(reverse(f"admin:pools_{model}_add"), form(**{field: value}))
    assert says in refused(response, field)
    assert model_class.objects.count() == before


@pytest.mark.parametrize(
    ("model", "data"),
    [
        ("zone", zone_form(name="cn-east-9a", region="cn-east-2")),
        ("zone", zone_form(name="Z.1_a", region="r")),
        ("gpumodel", gpu_model_form(name="A100_80G.v2", memory_gib="80")),
        ("nodetype", node_type_form(name="GPU_1_CARD.x", gpu_count="1")),
    ],
)
def test_a_valid_catalog_entry_still_saves(admin_client, model, data):
    model_class, _ = FORMS[model]
    response = admin_client.post(reverse(f"admin:pools_{model}_add"), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert model_class.objects.filter(name=data["name"]).exists()


def test_the_demo_names_pass_the_label_value_check(admin_client):
    """Editing the demo rows saves them unchanged: A100_80G, GPU_8_CARD, cn-east-2a in cn-east-2."""
    for model, row, data in [
        ("gpumodel", GpuModel.objects.get(name="A100_80G"), lambda r: {"name": r.name, "memory_gib": r.memory_gib}),
        ("nodetype", NodeType.objects.get(name="GPU_8_CARD"), lambda r: {
            "name": r.name, "gpu_count": r.gpu_count, "cpu_milli": r.cpu_milli, "memory_mib": r.memory_mib}),
        ("zone", Zone.objects.get(name="cn-east-2a"), lambda r: {"name": r.name, "region": r.region}),
    ]:  # fmt: skip
        response = admin_client.post(reverse(f"admin:pools_{model}_change", args=[row.pk]), data(row))
        assert response.status_code == 302, response.context["adminform"].form.errors
    assert Zone.objects.get(name="cn-east-2a").region == "cn-east-2"


def test_a_refused_change_is_headed_with_the_row_as_saved(admin_client):
    """Django names the change page after the instance the refused form already changed."""
    zone = Zone.objects.get(name="cn-east-2a")
    response = admin_client.post(reverse("admin:pools_zone_change", args=[zone.pk]), {"name": "-1", "region": zone.region})
    refused(response, "name")
    assert response.context["subtitle"] == "cn-east-2a" and response.context["original"].name == "cn-east-2a"
    assert "<h2>-1</h2>" not in response.content.decode()
    assert Zone.objects.get(pk=zone.pk).name == "cn-east-2a"
