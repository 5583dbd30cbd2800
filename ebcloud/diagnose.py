"""`ebcloud node-pool diagnose NAME`: the article's self-check table (seed T5) run by the server
against the pool's live state, printed like `kubectl describe` (REST API only, no Django).

    ebcloud node-pool diagnose train-pool-a
    ebcloud node-pool diagnose train-pool-a -o json
    ebcloud node-pool diagnose train-pool-a --exit-code || page-the-on-call

`ebcloud.node_pool` adds `pool_diagnose` to the `node-pool` group.
"""

from __future__ import annotations

import click

from ebcloud import output
from ebcloud.common import api, emit

EXIT_FAILING = 3  # 1 is an error and 2 a usage mistake (click): a failing check is neither
LABELS = {"failing": "FAILING", "warning": "WARNING", "unknown": "UNKNOWN", "ok": "OK"}
HEADERS = ["STATUS", "CHECK", "SYMPTOM"]


def diagnosis_text(diagnosis: dict) -> str:
    """The summary table, then one block per check: what it found and, when not ok, the likely
    cause, the first action and the items found."""
    summary = diagnosis.get("summary") or {}
    checks = diagnosis.get("checks") or []
    counts = ", ".join(f"{summary.get(s, 0)} {s}" for s in ("failing", "warning", "unknown", "ok"))
    lines = [
        f"Pool:     {diagnosis.get('pool', output.NONE)}",
        f"Checked:  {diagnosis.get('checkedAt') or output.NONE}",
        f"Status:   {LABELS.get(summary.get('status'), output.NONE)} ({counts})",
        "",
        *output.table_lines(HEADERS, [[LABELS.get(c.get("status"), c.get("status")), c.get("id"), c.get("title")] for c in checks]),
    ]
    for c in checks:
        lines += ["", f"{c.get('id')}: {c.get('title')} [{LABELS.get(c.get('status'), c.get('status'))}]"]
        lines.append(f"  Found:         {_block(c.get('found'))}")
        if c.get("status") == "ok":
            continue
        lines.append(f"  Likely cause:  {_block(c.get('cause'))}")
        lines.append(f"  First action:  {_block(c.get('action'))}")
        details = c.get("details") or []
        if details:
            lines.append("  Items:")
            lines += [f"    - {' '.join(str(item).split())}" for item in details]
    return "\n".join(lines)


def _block(text: str | None) -> str:
    """A value, its later lines (a hint's YAML) indented under its first: the check stays one block."""
    return ("\n" + " " * 17).join(str(text).splitlines()) if text else output.NONE


@click.command("diagnose")
@click.argument("name")
@click.option("-o", "--output", "fmt", type=click.Choice(["yaml", "json"]), help="yaml or json (the server's document)")
@click.option("--exit-code", "exit_code", is_flag=True, help=f"Exit {EXIT_FAILING} when a check is failing (for scripts and CI)")
def pool_diagnose(name: str, fmt: str | None, exit_code: bool) -> None:
    """Run the self-check table against a pool: scale-up failing, pods long Pending, GPU errors,
    low utilisation, a bill rising from cross-zone traffic or idle nodes, and a scaling spec that
    cannot burst. Each check says what it found, the likely cause and the first action.

    Exit status, like kubectl: 0 when the diagnosis ran, whatever it found; 1 on an error (pool
    not found, server unreachable); 2 on a usage mistake. With --exit-code, 3 when at least one
    check is failing (warnings and unknowns still exit 0).
    """
    with api() as client:
        diagnosis = client.pool_diagnose(name)
    if fmt:
        emit(diagnosis, fmt)
    else:
        output.echo(diagnosis_text(diagnosis))
    if exit_code and any(c.get("status") == "failing" for c in diagnosis.get("checks") or []):
        raise click.exceptions.Exit(EXIT_FAILING)
