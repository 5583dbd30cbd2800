"""YAML that reads a field name or a pool's name as something other than text (`~:`, `1:`,
`name: 12345`, `name: 2001-12-14`), and a 10,000-character group key, were answered with a
path of `spec.None`, "required" for a name that is there, and the key echoed whole (a
hostile-input probe of the demo). Each is named by what YAML read (`yes` is the boolean true,
`0x10` the number 16: echoing the value as if written sent the author after text not in the
file; review), and nothing changes."""

from __future__ import annotations

import pytest

from tests import bad_input_world
from tests.corpus import db_state

pytestmark = pytest.mark.django_db

world, api = bad_input_world.world, bad_input_world.api

POOL = """apiVersion: ebcloud.io/v1
kind: GpuNodePool
metadata:
  name: {name}
spec:
  nodeType: GPU_8_CARD
  gpuModel: A100_80G
  region: cn-north-1a
  nodeCount: {{min: 1, max: 2}}
  {extra}
"""


@pytest.mark.parametrize(
    ("name", "extra", "field", "says"),
    [
        ("keys", "~: 1", "spec", "a field name must be a string: a key here is read as null (quote it)"),
        ("keys", "1: x", "spec", "a field name must be a string: a key here is read as the number 1 (quote it)"),
        ("12345", "", "metadata.name", "must be a string: it is read as the number 12345 (quote it)"),
        ("yes", "", "metadata.name", "must be a string: it is read as the boolean true (quote it)"),
        ("keys", "0x10: x", "spec", "a field name must be a string: a key here is read as the number 16 (quote it)"),
        ("2001-12-14", "", "metadata.name", "must be a string: it is read as the date 2001-12-14 (quote it)"),
    ],
)
def test_a_name_yaml_reads_as_no_text_is_named_as_written(api, world, name, extra, field, says):
    client = api("lead")
    before = db_state()
    response = client.post("/api/v1/pools/", POOL.format(name=name, extra=extra).encode(), content_type="application/yaml")
    assert response.status_code == 400
    assert {"field": field, "message": says} in response.json()["errors"], response.json()
    assert db_state() == before


def test_a_long_group_key_is_cut_short_in_its_error(api, world):
    response = api("finance").get("/api/v1/costs/", {"by": "x" * 10_000 + "/"})
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["field"] == "by" and len(error["message"]) < 100 and error["message"].endswith("…' is not a label key")
