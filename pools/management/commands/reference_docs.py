"""`manage.py reference_docs [--check]`: regenerate docs/api.md and docs/cli.md (issue 8).

The API reference comes from the OpenAPI schema that drf-spectacular generates in-process (the
same one `/api/schema/` serves); the CLI reference from the `ebcloud` click commands and the
parsers of this project's management commands. The rendering is pools/reference_docs.py.

Both are rendered in a fresh interpreter whose environment sets none of the product's settings,
so the files show the defaults whatever the developer's shell exports (some command defaults
come from settings), and paths under the checkout are written relative to it.

`--check` writes nothing and exits 1 with one line per stale file, so CI (and
tests/test_reference_docs.py) keep the committed references in sync with the code.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management import get_commands, load_command_class
from django.core.management.base import BaseCommand, CommandError

from pools import reference_docs
from pools.management.arguments import directory

REGENERATE = ".venv/bin/python manage.py reference_docs"
PROJECT_APPS = ("pools", "billing", "monitoring")
# What the rendering interpreter inherits: enough to run Python, none of the product's settings.
KEEP_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")


def api_document() -> str:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    return reference_docs.render_api(schema, command=REGENERATE)


def cli_document() -> str:
    from ebcloud.cli import cli

    commands = {
        name: load_command_class(app, name).create_parser("manage.py", name)
        for name, app in sorted(get_commands().items())
        if app in PROJECT_APPS
    }
    base = BaseCommand().create_parser("manage.py", "NAME")
    project = Path(settings.BASE_DIR)
    aliases = {str(project): "<project>"}
    if len(project.parent.parts) > 1:
        aliases[str(project.parent)] = "<project>/.."
    return reference_docs.render_cli(cli, prog="ebcloud", commands=commands, base=base,
                                     command=REGENERATE, aliases=aliases)


def render_here() -> dict[str, str]:
    """File name (under docs/) -> its content, rendered with this process's settings."""
    return {"api.md": api_document(), "cli.md": cli_document()}


def documents() -> dict[str, str]:
    """File name (under docs/) -> the content it should have: `render_here()` run in a fresh
    interpreter with a clean environment (see the module docstring)."""
    project = Path(settings.BASE_DIR)
    env = {key: value for key, value in os.environ.items() if key in KEEP_ENV}
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "docs.json"
        script = (
            "import json, sys, django; django.setup()\n"
            "from pools.management.commands.reference_docs import render_here\n"
            "open(sys.argv[1], 'w', encoding='utf-8').write(json.dumps(render_here()))\n"
        )
        done = subprocess.run([sys.executable, "-c", script, str(out)], cwd=project, env=env, timeout=600)
        if done.returncode != 0 or not out.exists():
            raise CommandError(f"rendering the reference docs failed (exit {done.returncode}); see the error above")
        return json.loads(out.read_text(encoding="utf-8"))


def stale(docs_dir: Path, expected: dict[str, str]) -> list[str]:
    """One readable line per file that is missing or differs from `expected`."""
    lines = []
    for name, content in sorted(expected.items()):
        path = docs_dir / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current is None:
            lines.append(f"{path} is missing")
        elif current != content:
            changed = sum(1 for line in difflib.unified_diff(current.splitlines(), content.splitlines(), lineterm="", n=0)
                          if line[:1] in "+-" and line[:3] not in ("+++", "---"))
            lines.append(f"{path} is out of date ({changed} lines differ)")
    return lines


class Command(BaseCommand):
    help = "Regenerate docs/api.md (from the OpenAPI schema) and docs/cli.md (from the CLI parsers)."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true",
                            help="Write nothing; exit 1 if a committed file differs from what would be generated")
        parser.add_argument("--docs-dir", metavar="DIR", type=directory, default=None,
                            help="Where the files live (default: the project's docs/)")

    def handle(self, *args, check: bool = False, docs_dir: str | Path | None = None, **options):
        target = Path(docs_dir) if docs_dir else Path(settings.BASE_DIR) / "docs"
        expected = documents()
        if check:
            problems = stale(target, expected)
            if problems:
                raise CommandError("; ".join(problems) + f". Run `{REGENERATE}` and commit the result.")
            self.stdout.write(f"{', '.join(sorted(expected))} are up to date.")
            return
        try:
            target.mkdir(parents=True, exist_ok=True)
            for name, content in sorted(expected.items()):
                path = target / name
                if path.exists() and path.read_text(encoding="utf-8") == content:
                    self.stdout.write(f"{path}: unchanged")
                    continue
                path.write_text(content, encoding="utf-8")
                self.stdout.write(f"{path}: written")
        except OSError as exc:  # a read-only or vanished directory: one line, not a traceback
            raise CommandError(f"cannot write the docs in {target}: {exc.strerror or exc}") from exc
