"""`spec.zones` through every front door: the pool form (a fallback-zones field, errors beside
it), the pool page, the API (400 with the field path, nothing written), updates (fallback zones
may change, the preferred zone may not) and the CLI's describe and wide list (seed T1, O2)."""

from __future__ import annotations

import pytest

from ebcloud.describe import describe_pool
from ebcloud.output import pool_table
from pools.api.serializers import pool_representation
from pools.core.errors import ValidationError
from pools.models import GpuNodePool, PoolEvent
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.pool_helpers import db_state
from tests.pools.test_views import FORM


def zoned_document(zones):
    document = make_document()
    document["spec"].pop("region")
    document["spec"]["zones"] = zones
    return document


def fields(response) -> dict[str, str]:
    return {e["field"]: e["message"] for e in response.json()["errors"]}


def test_the_form_writes_fallback_zones_after_the_preferred_zone(browser):
    response = browser("lead").post("/pools/new/", {**FORM, "fallback_zones": " cn-east-2b "})
    assert response.status_code == 302
    spec = GpuNodePool.objects.get(name="form-pool").document["spec"]
    assert spec["zones"] == ["cn-east-2a", "cn-east-2b"] and "region" not in spec
    page = browser("lead").get("/pools/form-pool/").content.decode()
    assert "cn-east-2a (cn-east-2), then cn-east-2b when it is out of stock" in page


def test_the_form_without_fallback_zones_keeps_the_articles_region(browser):
    assert browser("lead").post("/pools/new/", FORM).status_code == 302
    spec = GpuNodePool.objects.get(name="form-pool").document["spec"]
    assert spec["region"] == "cn-east-2a" and "zones" not in spec
    assert "cn-east-2a (cn-east-2), no fallback zone" in browser("lead").get("/pools/form-pool/").content.decode()


def test_a_bad_fallback_zone_is_shown_beside_the_field_and_nothing_is_written(browser):
    before = db_state()
    response = browser("lead").post("/pools/new/", {**FORM, "fallback_zones": "cn-east-2b, cn-north-1a, cn-east-2b"})
    assert response.status_code == 400
    errors = response.context["form"].errors["fallback_zones"]
    assert any("is in region cn-north-1, not cn-east-2" in e for e in errors)
    assert any("zone 'cn-east-2b' is listed twice" in e for e in errors)
    assert 'id="id_fallback_zones"' in response.content.decode() and "same region only" in response.content.decode()
    assert db_state() == before


def test_the_edit_form_shows_the_fallback_zones_and_can_add_one(browser, actors, train_document):
    services.pool_create(user=actors["lead"], document=train_document)
    client = browser("lead")
    assert client.get("/pools/train-pool-a/edit/").context["form"].initial["fallback_zones"] == ""
    edited = {**FORM, "name": "train-pool-a", "fallback_zones": "cn-east-2b", "label_key": ["pool-role", "team"], "label_value": ["training", "algorithm"]}
    assert client.post("/pools/train-pool-a/edit/", edited).status_code == 302
    pool = GpuNodePool.objects.get(name="train-pool-a")
    assert pool.document["spec"]["zones"] == ["cn-east-2a", "cn-east-2b"] and pool.fallback_zones == ("cn-east-2b",)
    assert "zones cn-east-2a → cn-east-2a, cn-east-2b" in PoolEvent.objects.filter(reason="SpecUpdated").latest("id").message
    assert client.get("/pools/train-pool-a/edit/").context["form"].initial["fallback_zones"] == "cn-east-2b"


def test_the_preferred_zone_is_immutable_under_its_own_path(actors, train_document):
    pool = services.pool_create(user=actors["lead"], document=zoned_document(["cn-east-2a", "cn-east-2b"]))
    with pytest.raises(ValidationError) as caught:
        services.pool_patch(user=actors["lead"], pool=pool, patch={"spec": {"zones": ["cn-east-2b", "cn-east-2a"]}})
    assert [e.field for e in caught.value.errors] == ["spec.zones[0]"]
    assert "immutable (is 'cn-east-2a')" in caught.value.errors[0].message
    services.pool_patch(user=actors["lead"], pool=pool, patch={"spec": {"zones": ["cn-east-2a"]}})
    assert GpuNodePool.objects.get(pk=pool.pk).fallback_zones == ()


def test_the_api_takes_zones_and_refuses_bad_ones_with_their_path(api):
    created = api("lead").post("/api/v1/pools/", zoned_document(["cn-east-2a", "cn-east-2b"]), format="json")
    assert created.status_code == 201 and created.json()["spec"]["zones"] == ["cn-east-2a", "cn-east-2b"]
    before = db_state()
    refused = api("lead").post("/api/v1/pools/", zoned_document(["cn-east-2a", "nowhere-9z"]) | {"metadata": {"name": "p2"}}, format="json")
    assert refused.status_code == 400
    assert fields(refused)["spec.zones[1]"].startswith("unknown zone 'nowhere-9z'")
    assert db_state() == before


def test_the_cli_describes_and_lists_every_zone_in_order(actors):
    pool = services.pool_create(user=actors["lead"], document=zoned_document(["cn-east-2a", "cn-east-2b"]))
    shown = pool_representation(pool)
    text = describe_pool(shown, [])
    assert "Zones:" in text and "cn-east-2a (preferred), then cn-east-2b when out of stock" in text
    wide = pool_table([shown], wide=True).splitlines()
    assert "ZONES" in wide[0].split() and "cn-east-2a,cn-east-2b" in wide[1].split()
    one_zone = pool_representation(services.pool_create(user=actors["lead"], document=make_document("p2", nodeCount={"min": 0, "max": 2})))
    assert any(line.split() == ["Region:", "cn-east-2a"] for line in describe_pool(one_zone, []).splitlines())
