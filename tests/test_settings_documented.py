"""The operator guide's settings reference is complete and honest (issue #8, acceptance item 4:
"an operator guide ... settings reference").

Every environment variable the shipped code reads must be a row of docs/operator.md's
"Settings reference" tables, and every row there must be read by the code, so the reference can
neither miss a new setting nor keep a removed one. The code is scanned with `ast`, not grep, so
reads through the `config.env` helpers, `os.environ`, `os.getenv` and module constants (the CLI's
`config.ENV_SERVER`) are all found, and a read whose name is not a constant fails the test
instead of slipping through.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The shipped code: the control plane, the node agent (monitoring/) and the CLI. Not scanned:
# tests/ and bench/ (the benchmark harness reads BENCH_DATABASE_URL, a developer's knob), and
# config/env.py, whose helpers read the name they are given (their callers are scanned).
SCANNED = ["config", "pools", "billing", "monitoring", "ebcloud", "manage.py"]
HELPER_MODULE = ROOT / "config" / "env.py"
SECTION = "## Settings reference"
NAME = re.compile(r"`([A-Z][A-Z0-9_]*)`")


def source_files() -> list[Path]:
    files = []
    for entry in SCANNED:
        path = ROOT / entry
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return [f for f in files if f != HELPER_MODULE]


def string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "literal"` assignments."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node.value.value
    return out


def env_helpers() -> set[str]:
    """The parsers of config/env.py (env_str, env_int, ...), read from the file itself so that a
    new one (env_float) is scanned without touching this test."""
    tree = ast.parse(HELPER_MODULE.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("env_")}


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (isinstance(node, ast.Name) and node.id == "environ")


def _name_arg(node: ast.Call | ast.Subscript | ast.Compare) -> ast.AST | None:
    if isinstance(node, ast.Subscript):
        return node.slice
    if isinstance(node, ast.Compare):
        return node.left
    return node.args[0] if node.args else None


def env_read_sites(tree: ast.Module, helpers: set[str]) -> list[ast.AST]:
    """The name expressions of every environment read: `env_int("X", ...)`, `os.environ.get(X)`,
    `os.environ[X]` (read), `os.getenv(X)`, `X in os.environ`. `os.environ.setdefault` is a write
    of a default for a library (DJANGO_SETTINGS_MODULE), not a setting, and is not counted."""
    sites = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            reads = (
                name in helpers
                or name == "getenv"
                or (isinstance(func, ast.Attribute) and name in ("get", "pop") and _is_environ(func.value))
            )
            if reads:
                sites.append(_name_arg(node))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            sites.append(_name_arg(node))
        elif isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops) \
                and any(_is_environ(c) for c in node.comparators):
            sites.append(_name_arg(node))
    return sites


def resolve(site: ast.AST | None, local: dict[str, str], everywhere: dict[str, set[str]]) -> str | None:
    """The variable name a read uses, when it is a literal or a module constant; else None."""
    if isinstance(site, ast.Constant) and isinstance(site.value, str):
        return site.value
    key = site.id if isinstance(site, ast.Name) else site.attr if isinstance(site, ast.Attribute) else None
    if key in local:
        return local[key]
    values = everywhere.get(key or "", set())
    return next(iter(values)) if len(values) == 1 else None


def scan(sources: dict[str, str], helpers: set[str] | None = None) -> tuple[set[str], list[str]]:
    """(variables read, `file:line` of reads whose name could not be resolved)."""
    trees = {label: ast.parse(text) for label, text in sources.items()}
    constants = {label: string_constants(tree) for label, tree in trees.items()}
    everywhere: dict[str, set[str]] = {}
    for table in constants.values():
        for key, value in table.items():
            everywhere.setdefault(key, set()).add(value)
    found, unresolved = set(), []
    helpers = env_helpers() if helpers is None else helpers
    for label, tree in trees.items():
        for site in env_read_sites(tree, helpers):
            name = resolve(site, constants[label], everywhere)
            if name is None:
                unresolved.append(f"{label}:{getattr(site, 'lineno', '?')}")
            else:
                found.add(name)
    return found, unresolved


def code_variables() -> tuple[set[str], list[str]]:
    return scan({str(path.relative_to(ROOT)): path.read_text(encoding="utf-8") for path in source_files()})


def table_variables(markdown: str, heading: str) -> list[str]:
    """Backticked names in the first cell of every table row of the section under `heading`."""
    lines = markdown.splitlines()
    start = lines.index(heading)
    names = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|") and not set(line) <= set("|-: "):
            names += NAME.findall(line.split("|")[1])
    return names


def documented() -> list[str]:
    return table_variables((ROOT / "docs" / "operator.md").read_text(encoding="utf-8"), SECTION)


def test_every_environment_variable_the_code_reads_is_in_the_settings_reference():
    """A new setting without a row in docs/operator.md fails here, naming it."""
    read, unresolved = code_variables()
    assert not unresolved, f"environment reads whose variable name is not a constant (make it one): {unresolved}"
    missing = sorted(read - set(documented()))
    assert not missing, f"add these to the Settings reference of docs/operator.md: {missing}"


def test_the_settings_reference_lists_only_variables_the_code_reads_and_each_once():
    """A removed or misspelt setting left in the reference fails here."""
    read, _ = code_variables()
    rows = documented()
    duplicates = sorted({name for name in rows if rows.count(name) > 1})
    assert not duplicates, f"listed more than once in docs/operator.md: {duplicates}"
    unused = sorted(set(rows) - read)
    assert not unused, f"docs/operator.md documents variables no code reads: {unused}"


def test_the_readme_settings_table_is_a_subset_of_the_reference():
    """README keeps a short table; whatever it names must exist in the full reference."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    short = table_variables(readme, "## Settings (environment variables)")
    assert short, "README.md's settings table was not found"
    assert not sorted(set(short) - set(documented()))


def test_the_scanner_sees_every_way_the_code_reads_the_environment():
    """Guards the guard: each read form is found, a setdefault is not, and a computed name is
    reported rather than ignored."""
    found, unresolved = scan({
        "a.py": (
            "import os\nfrom config.env import env_float, env_int\nENV_X = 'CONST_X'\n"
            "A = env_int('HELPER_A', 1, minimum=0) + env_float('HELPER_F', 0.0)\n"
            "B = os.environ.get(ENV_X, '')\n"
            "C = os.environ['SUBSCRIPT_C']\n"
            "D = os.getenv('GETENV_D')\n"
            "E = 'MEMBER_E' in os.environ\n"
            "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings')\n"
            "def f(name):\n    return os.environ.get(name)\n"
        ),
        "b.py": "import os\nfrom pkg import a\nF = os.environ.get(a.ENV_X)\n",
    }, helpers={"env_int", "env_float"})
    assert found == {"HELPER_A", "HELPER_F", "CONST_X", "SUBSCRIPT_C", "GETENV_D", "MEMBER_E"}
    assert unresolved == ["a.py:11"]


def test_the_scan_covers_the_control_plane_the_agent_and_the_cli():
    """The real code yields settings from each part (and the CLI's ENV_* constants resolve)."""
    assert {"env_str", "env_bool", "env_int", "env_list"} <= env_helpers()
    read, _ = code_variables()
    assert {"DATABASE_URL", "SECRET_KEY", "EBCLOUD_AGENT_DIR", "EBCLOUD_WORKLOAD_CUDA",
            "EBCLOUD_SERVER", "EBCLOUD_TOKEN", "EBCLOUD_CONFIG"} <= read
