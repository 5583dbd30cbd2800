"""Names and tokens the CLI cannot send (a hostile-input probe of the demo): a 100,000-character
pool name ended in `error: unexpected InvalidURL: URL too long`, and a saved token with a
newline in `cannot reach the server at ...: Illegal header value b'Token bad\\ntoken'` (the
token printed). Each is now one line saying what is wrong, before any request, exit code 1."""

from __future__ import annotations

import pytest
import yaml

from ebcloud import config as ebcloud_config
from tests.ebcloud.cli_helpers import one_error_line

OFFLINE = {"EBCLOUD_SERVER": "http://x.invalid", "EBCLOUD_TOKEN": "t"}
LONG = "a" * 100_000




@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["node-pool", "get", LONG], f'"{"a" * 40}..." is not a valid pool name (a DNS-1123 label: at most 63'),
        (["node-pool", "describe", "a" * 64], "is not a valid pool name (a DNS-1123 label: at most 63"),
        (["node-pool", "delete", "Train"], '"Train" is not a valid pool name'),
        (["node-pool", "events", "a b"], '"a b" is not a valid pool name'),
        (["node-pool", "scale", "x\x1b]0;t\x07", "--max", "3"], r'"x\x1b]0;t\x07" is not a valid pool name'),
        (["node-pool", "fragmentation", LONG], "is not a valid pool name"),
        (["pod", "get", f"algorithm/{LONG}"], "is not a valid pod name (a DNS-1123 subdomain: at most 253"),
        (["pod", "delete", f"{LONG}/x"], "is not a valid namespace name (a DNS-1123 label: at most 63"),
        (["pdb", "get", "algorithm/a_b"], '"a_b" is not a valid poddisruptionbudget name'),
    ],
)
def test_a_name_outside_its_rule_is_one_line_before_any_request(ebcloud, no_request, args, shown):
    line = one_error_line(ebcloud(*args, env=OFFLINE))
    assert shown in line and len(line) < 300, line[:400]
    assert "unexpected" not in line


@pytest.mark.parametrize("name", ["train-pool-a", "a" * 63, "0"])
def test_a_name_inside_its_rule_is_sent(ebcloud, no_request, name):
    line = one_error_line(ebcloud("node-pool", "get", name, env=OFFLINE))
    assert "a request was made: GET /pools/" in line


def test_a_saved_token_with_a_newline_says_to_log_in_again(ebcloud, no_request, config_file):
    ebcloud_config.save(ebcloud_config.Config(server="http://x.invalid", token="bad\ntoken"))
    assert yaml.safe_load(config_file.read_text())["token"] == "bad\ntoken"
    line = one_error_line(ebcloud("node-pool", "list"))
    assert line == (f"error: the token saved in {config_file} is malformed (it holds a newline at character 4): "
                    "run `ebcloud login` again")  # fmt: skip


def test_a_token_in_the_environment_with_a_control_character_is_named_there(ebcloud, no_request):
    line = one_error_line(ebcloud("node-pool", "list", env={"EBCLOUD_SERVER": "http://x.invalid", "EBCLOUD_TOKEN": "ab\x1bcd"}))
    assert line.startswith("error: the token in EBCLOUD_TOKEN is malformed (it holds '\\x1b' at character 3)")
    assert "abcd" not in line and "ab\x1b" not in line


def test_login_is_not_stopped_by_the_malformed_token_it_replaces(ebcloud, no_request, config_file):
    ebcloud_config.save(ebcloud_config.Config(server="http://x.invalid", token="bad\ntoken"))
    line = one_error_line(ebcloud("login", "-u", "lead", "-p", "pw"))
    assert "a request was made: POST /auth/token/" in line
