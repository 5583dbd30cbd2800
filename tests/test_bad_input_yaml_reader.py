"""A character YAML's reader refuses (BEL, ESC, ...) was answered `malformed YAML: malformed
YAML` (a hostile-input probe of the demo): PyYAML's ReaderError has no problem and no mark,
only a reason and a position, which the message now gives as a line and column, the same from
the API, the import page (the CLI's `-f` sends the file to the API) and either parser."""

from __future__ import annotations

import pytest

from pools.core import yaml_loading
from pools.core.documents import load_yaml
from pools.core.errors import ValidationError
from tests import bad_input_world
from tests.corpus import db_state

pytestmark = pytest.mark.django_db

world, api, browser = bad_input_world.world, bad_input_world.api, bad_input_world.browser

BEL = 'a: "\x07"\n'
SAYS = "malformed YAML at line 1, column 5: unacceptable character #x0007: "


def test_the_api_says_which_character_and_where(api, world):
    client = api("lead")
    before = db_state()
    response = client.post("/api/v1/pools/", BEL.encode(), content_type="application/yaml")
    assert response.status_code == 400, response.content[:300]
    [error] = response.json()["errors"]
    assert error["message"].startswith(SAYS) and error["message"].endswith("are not allowed"), error
    assert db_state() == before


def test_the_import_page_says_it_too(browser, world):
    page = browser("lead").post("/pools/import/", {"document": BEL})
    assert page.status_code == 400
    assert SAYS in page.content.decode()


@pytest.mark.parametrize("pure_python", [False, True])
@pytest.mark.parametrize(
    ("text", "where"),
    [
        (BEL, "line 1, column 5"),
        ("apiVersion: v1\nb: c\x1b\n", "line 2, column 5"),
        ("a: \u4e2d\u6587\r\n  b: \x07", "line 2, column 6"),  # a CJK line before: characters, not bytes
        ("a: x\u2028\x01", "line 2, column 1"),
        ("\ufeffa: \x07", "line 1, column 4"),  # a byte order mark (Notepad's UTF-8) is no column
        (b"\xef\xbb\xbfa: \x07", "line 1, column 4"),
    ],
)
def test_both_parsers_give_the_line_and_column(monkeypatch, text, where, pure_python):
    if pure_python:
        monkeypatch.setattr(yaml_loading, "_Parser", yaml_loading._PurePythonParser)
    with pytest.raises(ValidationError) as refused:
        load_yaml(text)
    assert str(refused.value).startswith(f"malformed YAML at {where}: unacceptable character #x00"), str(refused.value)
