"""axe-core in the browser tests (issue #8 acceptance item 2): inject the npm package's
`axe.min.js` into the page, run `axe.run`, keep the violations a user is blocked by.

axe-core comes from npm (`package.json` pins the exact version; `make install-test` runs
`npm ci`), so every run checks with the same rules. Only `critical` and `serious` violations
fail a journey; `moderate` and `minor` ones are reported by axe but do not block.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AXE_JS = ROOT / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING_IMPACTS = ("critical", "serious")

# Runs in the page: every violation with the nodes it was found on, as plain JSON.
RUN_AXE = """async () => {
  const results = await window.axe.run(document, {resultTypes: ["violations"]});
  return results.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help, helpUrl: v.helpUrl,
    nodes: v.nodes.map(n => ({target: n.target.map(String), html: n.html.slice(0, 160)})),
  }));
}"""


def axe_source() -> Path:
    if not AXE_JS.exists():
        raise FileNotFoundError(
            f"{AXE_JS.relative_to(ROOT)} is missing: run `npm ci` at the repository root "
            "(`make install-test` does it)"
        )
    return AXE_JS


def blocking_violations(page) -> list[dict]:
    """The page's critical and serious axe violations (axe is injected once per document)."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        # Evaluated, not added as a <script> tag: the page's Content-Security-Policy refuses inline
        # scripts (and a test must not break it), and evaluation from the test is not a page script.
        page.evaluate(axe_source().read_text(encoding="utf-8"))
    return [v for v in page.evaluate(RUN_AXE) if v["impact"] in BLOCKING_IMPACTS]


def describe(violations: list[dict], url: str) -> str:
    """One line per violation and one per offending element: rule, impact, CSS selector."""
    lines = [f"{len(violations)} critical/serious axe violation(s) on {url}:"]
    for violation in violations:
        lines.append(
            f"- {violation['id']} ({violation['impact']}): {violation['help']} <{violation['helpUrl']}>"
        )
        for node in violation["nodes"][:10]:
            lines.append(f"    at {' '.join(node['target'])}: {node['html']}")
        if len(violation["nodes"]) > 10:
            lines.append(f"    ... and {len(violation['nodes']) - 10} more element(s)")
    return "\n".join(lines)


def assert_accessible(page) -> None:
    violations = blocking_violations(page)
    assert not violations, describe(violations, page.url)
