"""`spec.zones`: the pool's zone and its fallback zones, preferred first (seed T1 "add a fallback
zone", D4 "pool bound to a preferred zone"); `spec.region` stays valid as a one-zone list."""

from __future__ import annotations

import pytest

from pools.core.documents import dump_yaml, load_yaml, to_document
from pools.core.spec import Catalog, PoolSpec, parse_document
from tests.conftest import EXAMPLES
from tests.pools.test_spec import errors_of as spec_errors_of

CATALOG = Catalog(
    gpu_models=frozenset({"A100_80G"}),
    node_types={"GPU_8_CARD": 8},
    zones={"cn-east-2a": "cn-east-2", "cn-east-2b": "cn-east-2", "cn-east-2c": "cn-east-2", "cn-north-1a": "cn-north-1"},
)


def article() -> dict:
    return load_yaml((EXAMPLES / "create-train-pool.yaml").read_text())


def with_zones(zones, *, region=None) -> dict:
    document = article()
    document["spec"].pop("region")
    document["spec"]["zones"] = zones
    if region is not None:
        document["spec"]["region"] = region
    return document


def errors_of(document) -> dict[str, str]:
    return spec_errors_of(document, CATALOG)


def test_the_articles_region_is_a_list_of_one_zone():
    spec = parse_document(article(), CATALOG)
    assert (spec.region, spec.zones) == ("cn-east-2a", ("cn-east-2a",))


def test_zones_keep_their_order_and_the_first_is_the_preferred_zone():
    spec = parse_document(with_zones(["cn-east-2b", "cn-east-2a", "cn-east-2c"]), CATALOG)
    assert spec.zones == ("cn-east-2b", "cn-east-2a", "cn-east-2c")
    assert spec.region == "cn-east-2b"


def test_region_may_stay_beside_zones_when_it_is_the_first_of_them():
    spec = parse_document(with_zones(["cn-east-2a", "cn-east-2b"], region="cn-east-2a"), CATALOG)
    assert spec.zones == ("cn-east-2a", "cn-east-2b")


def test_a_spec_built_in_code_with_only_a_region_has_that_one_zone():
    spec = PoolSpec(name="p", node_type="GPU_8_CARD", gpu_model="A100_80G", min_nodes=0, max_nodes=1, region="cn-east-2b")
    assert spec.zones == ("cn-east-2b",)


@pytest.mark.parametrize(
    ("document", "field", "fragment"),
    [
        (with_zones(["cn-east-2a", "mars-1a"]), "spec.zones[1]", "unknown zone 'mars-1a'"),
        (with_zones(["cn-east-2a", "cn-east-2b", "cn-east-2a"]), "spec.zones[2]", "zone 'cn-east-2a' is listed twice"),
        (with_zones(["cn-east-2a", "cn-north-1a"]), "spec.zones[1]", "is in region cn-north-1, not cn-east-2"),
        (with_zones([]), "spec.zones", "non-empty list of zones"),
        (with_zones("cn-east-2a,cn-east-2b"), "spec.zones", "non-empty list of zones"),
        (with_zones(["cn-east-2a", 7]), "spec.zones[1]", "non-empty string"),
        (with_zones(["cn-east-2a", "cn-east-2b"], region="cn-east-2b"), "spec.region", "must be the first of spec.zones (cn-east-2a)"),
    ],
)
def test_bad_zones_are_named_by_their_path(document, field, fragment):
    problems = errors_of(document)
    assert field in problems, problems
    assert fragment in problems[field]


def test_a_pool_without_region_or_zones_is_told_about_both():
    document = article()
    document["spec"].pop("region")
    assert errors_of(document) == {"spec.region": "required field is missing (or give spec.zones, preferred zone first)"}


def test_every_bad_zone_is_reported_at_once():
    problems = errors_of(with_zones(["nowhere-1a", "cn-east-2a", "cn-east-2a", "cn-north-1a"]))
    assert set(problems) == {"spec.zones[0]", "spec.zones[2]", "spec.zones[3]"}


def test_zones_round_trip_through_to_document():
    spec = parse_document(with_zones(["cn-east-2a", "cn-east-2c"]), CATALOG)
    document = to_document(spec)
    assert document["spec"]["zones"] == ["cn-east-2a", "cn-east-2c"] and "region" not in document["spec"]
    assert parse_document(load_yaml(dump_yaml(document)), CATALOG) == spec


def test_a_one_zone_spec_keeps_the_articles_region_field():
    document = to_document(parse_document(article(), CATALOG))
    assert document["spec"]["region"] == "cn-east-2a" and "zones" not in document["spec"]
