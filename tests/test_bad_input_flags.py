"""Boolean and sort query parameters outside what they take (a hostile-input probe of the demo):
`?detail=maybe` was read as false, `?namespace=maybe` as true, `?plan=maybe` as false and
`?sort=---team` as `-team`, each a 200 answering something else than was asked. Each is now a
400 naming the parameter; the spellings the CLI and the docs use keep working, and the costs
page shows the refusal instead of failing."""

from __future__ import annotations

import pytest

from pools.core.errors import ValidationError, query_flag
from tests import bad_input_world
from tests.corpus import api_fields

pytestmark = pytest.mark.django_db

world, api, browser = bad_input_world.world, bad_input_world.api, bad_input_world.browser


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/api/v1/costs/?format=csv&detail=maybe", "detail"),
        ("/api/v1/costs/?format=focus&detail=2", "detail"),
        ("/api/v1/costs/?namespace=maybe", "namespace"),
        ("/api/v1/costs/?sort=---team", "sort"),
        ("/api/v1/costs/?sort=--amount", "sort"),
        ("/api/v1/fragmentation/?plan=maybe", "plan"),
        ("/api/v1/pools/train-pool-a/fragmentation/?plan=TRUE", "plan"),
    ],
)
def test_a_flag_or_sort_it_does_not_take_is_a_400_naming_it(api, world, url, field):
    response = api("admin").get(url)
    assert response.status_code == 400, response.content[:300]
    assert api_fields(response) == [field]


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/costs/?format=csv&detail=1",
        "/api/v1/costs/?format=csv&detail=no",
        "/api/v1/costs/?format=focus&detail=true",
        "/api/v1/costs/?format=csv&detail=",
        "/api/v1/costs/?namespace=0",
        "/api/v1/costs/?namespace=yes",
        "/api/v1/costs/?sort=-team",
        "/api/v1/costs/?sort=team",
        "/api/v1/fragmentation/?plan=1",
        "/api/v1/fragmentation/?plan=false",
        "/api/v1/pools/train-pool-a/fragmentation/?plan=yes",
    ],
)
def test_the_spellings_it_takes_still_answer(api, world, url):
    assert api("admin").get(url).status_code == 200, url


def test_the_costs_page_shows_a_refused_namespace_and_sort(browser, world):
    for url in ("/costs/?namespace=maybe", "/costs/?sort=---team", "/costs/?namespace=0&by=team"):
        response = browser("admin").get(url)
        assert response.status_code == 200, url
    assert b"Group by namespace" in browser("admin").get("/costs/?namespace=maybe").content


@pytest.mark.parametrize(("value", "default", "read"), [(None, True, True), ("", False, False), ("yes", False, True), ("0", True, False)])
def test_query_flag_reads_absent_empty_and_each_spelling(value, default, read):
    params = {} if value is None else {"flag": value}
    assert query_flag(params, "flag", default=default) is read


def test_query_flag_names_the_parameter():
    with pytest.raises(ValidationError) as caught:
        query_flag({"flag": "maybe"}, "flag")
    assert [e.field for e in caught.value.errors] == ["flag"]
