"""The API and CLI references in docs/ are generated and kept in sync by this test (issue #8,
acceptance item 4: "the API and CLI references kept in sync by a test").

docs/api.md is rendered from the OpenAPI schema and docs/cli.md from the `ebcloud` click commands
and the project's management commands (`manage.py reference_docs`). A new endpoint, flag or help
text without regenerated docs fails here, with the command that fixes it.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import click
import pytest
from django.core.management import call_command, get_commands
from django.core.management.base import CommandError
from drf_spectacular.generators import SchemaGenerator

from ebcloud.cli import cli
from pools import reference_docs
from pools.management.commands import reference_docs as command_module
from pools.management.commands.reference_docs import PROJECT_APPS, REGENERATE, documents

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return documents()


def test_the_committed_references_equal_what_the_code_generates(generated):
    """The sync check itself: the committed files are byte for byte the rendering."""
    for name, expected in sorted(generated.items()):
        path = DOCS / name
        committed = path.read_text(encoding="utf-8") if path.exists() else ""
        if committed != expected:
            diff = list(difflib.unified_diff(committed.splitlines(), expected.splitlines(),
                                             f"committed docs/{name}", f"generated docs/{name}", lineterm="", n=1))
            pytest.fail(f"docs/{name} is out of date: run `{REGENERATE}` and commit the result.\n"
                        + "\n".join(diff[:60]), pytrace=False)


def test_check_exits_non_zero_with_one_readable_line_when_a_file_is_stale(tmp_path, generated, capsys, monkeypatch):
    """`--check` writes nothing, names each stale or missing file and says how to fix it."""
    monkeypatch.setattr(command_module, "documents", lambda: generated)  # rendered once, above
    (tmp_path / "api.md").write_text(generated["api.md"].replace("## Schemas", "## Schemata"), encoding="utf-8")
    with pytest.raises(CommandError) as raised:
        call_command("reference_docs", "--check", docs_dir=str(tmp_path))
    message = str(raised.value)
    assert "\n" not in message
    assert f"{tmp_path / 'api.md'} is out of date (2 lines differ)" in message
    assert f"{tmp_path / 'cli.md'} is missing" in message
    assert REGENERATE in message
    assert not (tmp_path / "cli.md").exists()

    call_command("reference_docs", docs_dir=str(tmp_path))
    assert (tmp_path / "api.md").read_text(encoding="utf-8") == generated["api.md"]
    call_command("reference_docs", "--check", docs_dir=str(tmp_path))
    assert "api.md, cli.md are up to date." in capsys.readouterr().out


def test_the_api_reference_lists_every_operation_and_schema():
    """Every path x method of the schema has its section, and every component its table."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    text = reference_docs.render_api(schema, command=REGENERATE)
    for path, item in schema["paths"].items():
        for method in reference_docs.METHODS:
            if method in item:
                assert f"### `{method.upper()} {path}`" in text
    for name in schema["components"]["schemas"]:
        assert f"### {name}\n" in text


def _commands(group: click.Group, ctx: click.Context):
    for name in group.list_commands(ctx):
        sub = group.get_command(ctx, name)
        sub_ctx = click.Context(sub, info_name=name, parent=ctx)
        yield sub, sub_ctx
        if isinstance(sub, click.Group):
            yield from _commands(sub, sub_ctx)


def test_the_cli_reference_lists_every_command_and_flag(generated):
    """Every `ebcloud` command and visible flag, and every project management command, appear."""
    text = generated["cli.md"]
    root = click.Context(cli, info_name="ebcloud")
    for command, ctx in _commands(cli, root):
        heading = f"# `{ctx.command_path}`\n"
        assert heading in text
        section = text.split(heading, 1)[1].split('<a id="', 1)[0]
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert f"`{max(param.opts, key=len)}`" in section, (ctx.command_path, param.opts)
    for name, app in get_commands().items():
        if app in PROJECT_APPS:
            assert f"### `manage.py {name}`\n" in text


def test_the_rendering_does_not_depend_on_input_order_or_the_terminal(monkeypatch):
    """Deterministic output: the same schema with its paths and components in another order,
    under another terminal width, renders the same bytes."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    shuffled = {**schema, "paths": dict(reversed(list(schema["paths"].items()))),
                "components": {k: dict(reversed(list(v.items()))) for k, v in schema["components"].items()}}
    before = reference_docs.render_api(schema, command=REGENERATE)
    monkeypatch.setenv("COLUMNS", "40")
    assert reference_docs.render_api(shuffled, command=REGENERATE) == before


def test_path_defaults_under_the_checkout_are_written_relative_to_it():
    """A default such as `/srv/app/../shared/data` must not put the checkout's location in docs."""
    aliases = {"/srv/app": "<project>", "/srv": "<project>/.."}
    assert reference_docs.aliased("/srv/app/var/agent", aliases) == "<project>/var/agent"
    assert reference_docs.aliased("/srv/shared/data", aliases) == "<project>/../shared/data"
    assert reference_docs.aliased("/srvx/data", aliases) == "/srvx/data"
    assert reference_docs.aliased(30.0, aliases) == 30.0


@pytest.mark.django_db
def test_the_operator_guide_lists_every_schedule_the_migrations_create():
    """docs/operator.md's worker section names each recurring django-q2 schedule and its task, so
    an operator reading it knows everything the workers run (issue #8 item 4: the worker guide)."""
    from django_q.models import Schedule

    guide = (DOCS / "operator.md").read_text(encoding="utf-8")
    rows = [line for line in guide.splitlines() if line.startswith("| `")]
    schedules = list(Schedule.objects.exclude(repeats=0).values_list("name", "func"))
    assert schedules
    for name, func in schedules:
        assert any(f"`{name}`" in row and f"`{func}`" in row for row in rows), (name, func)
