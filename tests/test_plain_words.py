"""No internal references reach users (issue 21 acceptance item 9): every page each role can
reach by following links from the start page, the API's documentation (its schema), and the
CLI's help and outputs are scanned for the words of the design papers (seed ids such as D4 or
"T1, T5", design sections "§5.4", "the article", issue numbers, "seed"). Those belong in
docstrings and tests, never in what a user reads.

The world is small but has something on every page: two teams' pools with nodes, pods and three
metered hours (tests/billing/billing_helpers.scenario), a pool whose order awaits approval, a
Pending pod the scheduler explained, events.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from pathlib import Path
from urllib.parse import urldefrag, urlsplit

import pytest
from django.test import Client
from django.urls import Resolver404, resolve

from pools.controllers.scheduler import scheduler_pass
from pools.services import pools as pool_services
from tests.billing.billing_helpers import scenario
from tests.conftest import make_document
from tests.ebcloud.cli_helpers import live
from tests.pools.pod_helpers import T0, submit

SEED_ID = r"[PGDOCT][1-6]"
INTERNAL = (
    re.compile(r"\bthe article\b|\barticle's\b", re.IGNORECASE),
    re.compile(r"§\s?\d"),
    re.compile(r"\bissues?\s?#?\d+", re.IGNORECASE),
    re.compile(r"\bseed\b", re.IGNORECASE),
    re.compile(rf"\((?:{SEED_ID})(?:\s*[,;/]\s*(?:and\s+)?{SEED_ID})*\)"),  # "(D4)", "(C3, P3)"
    re.compile(rf"\b{SEED_ID}(?:,\s*{SEED_ID})+\b"),  # "T1, T5, O4"
    re.compile(rf"[,:;]\s*{SEED_ID}\)|\({SEED_ID}:"),  # "(5-10 min, O4)", "(T2: ...)"
    re.compile(r"^\s*- (?:[PGDOC][1-6]|T[1-35-6])$|\[\"(?:[PGDOC][1-6]|T[1-35-6])\"", re.MULTILINE),  # a YAML or JSON list of them (T4 is a GPU)
)
ROLES = ("lead", "member", "other_lead", "finance", "admin")
START = "/"
# Not ours to word (Django's admin) or not a page (logging out); the API's documentation is
# scanned through its schema below.
SKIP_PREFIXES = ("/logout/", "/admin/", "/api/", "/static/", "/metrics")
SAME_VIEW_LIMIT = 3  # pages of one view with the same query keys (sort orders, pages of a list)
HREF = re.compile(r'href="([^"#]*)')


def internal_references(text: str) -> list[str]:
    """Each internal reference in `text`, with a little of its context."""
    found = []
    for pattern in INTERNAL:
        for match in pattern.finditer(text):
            found.append(text[max(0, match.start() - 60):match.end() + 40].replace("\n", " "))
    return found


def test_the_scanner_finds_what_it_must_and_leaves_gpu_models_alone():
    for text in ("the article's estimate", "cross-zone traffic (D4)", "see §5.4", "T1, T5, O4", "(C3, P3)", "issue 12", "the seed",
                 "a normal scale-up (5-10 min, O4)", "(T2: a scheduler plugin)", "requirements:\n  - T1\n  - O4\n", '"requirements": ["T1", "O4"]'):  # fmt: skip
        assert internal_references(text), text
    for text in ("an NVIDIA T4 node", "batch-spot-t4", "P4 and T4 GPUs", "A100_80G", "T4_16G (16 GB)", "gpuModels:\n- T4\n", '["T4"]'):
        assert not internal_references(text), text


# What users read besides the pages: the README, the guides and references, and the example
# files they open and upload. (docs/benchmarks.md is the record of the measurements, for the
# people who build the product.) "seed" alone is a word there (`manage.py seed_demo`, a random
# seed): only "seed O3" counts.
ROOT = Path(__file__).resolve().parent.parent
USER_DOCUMENTS = sorted(
    str(path.relative_to(ROOT)) for path in (ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("*.yaml"))
    if path.name != "benchmarks.md"
)
DOCUMENT_INTERNAL = (*(p for p in INTERNAL if p.pattern != r"\bseed\b"), re.compile(rf"\bseed\s+{SEED_ID}"))


@pytest.mark.parametrize("path", USER_DOCUMENTS)
def test_no_user_document_or_example_shows_an_internal_reference(path):
    text = (ROOT / path).read_text()
    hits = [text[max(0, m.start() - 60):m.end() + 40].replace("\n", " ") for pattern in DOCUMENT_INTERNAL for m in pattern.finditer(text)]
    assert not hits, hits


def _view_key(url: str) -> tuple[str, tuple[str, ...]] | None:
    parts = urlsplit(url)
    if parts.netloc and parts.netloc != "testserver" or not parts.path.startswith("/") or parts.path.startswith(SKIP_PREFIXES):
        return None
    try:
        match = resolve(parts.path)
    except Resolver404:
        return None
    keys = tuple(sorted(q.split("=")[0] for q in parts.query.split("&") if q))
    return match.view_name, keys


def crawl(client: Client) -> dict[str, str]:
    """url -> body of every page reached from START by GET links, a few of each view."""
    seen: dict[str, str] = {}
    per_view: Counter = Counter()
    queue = deque([START])
    while queue:
        url = urldefrag(queue.popleft())[0].replace("&amp;", "&")
        key = _view_key(url)
        if url in seen or key is None or per_view[key] >= SAME_VIEW_LIMIT:
            continue
        per_view[key] += 1
        response = client.get(url, follow=True)
        body = b"".join(response.streaming_content).decode() if response.streaming else response.content.decode()
        seen[url] = body
        if "html" in response.get("Content-Type", ""):
            queue.extend(HREF.findall(body))
    return seen


def _world(actors, teams):
    scenario(actors, teams, hours=3)
    pool_services.pool_create(user=actors["lead"], document=make_document("awaiting-approval"))
    submit(actors["member"], "lost", gpus=8, pool_affinity="nowhere")
    scheduler_pass(now=T0)


@live
def test_no_page_any_role_reaches_shows_an_internal_reference(actors, teams):
    _world(actors, teams)
    findings = {}
    reached = set()
    for role in ROLES:
        client = Client()
        client.force_login(actors[role])
        for url, body in crawl(client).items():
            reached.add(resolve(urlsplit(url).path).view_name)
            if hits := internal_references(body):
                findings[f"{role} {url}"] = hits
        schema = client.get("/api/schema/").content.decode()
        if hits := internal_references(schema):
            findings[f"{role} /api/schema/"] = hits
    # The crawl reached every kind of page (a broken link would leave some unscanned).
    assert {"pools:list", "pools:detail", "pools:diagnose", "pools:fragmentation", "pools:node-detail", "pods:detail",
            "orders", "billing:costs", "monitoring-overview", "fragmentation", "audit"} <= reached, sorted(reached)  # fmt: skip
    assert not findings, "\n".join(f"{where}: {hit}" for where, hits in findings.items() for hit in hits)


CLI_RUNS = (
    ("node-pool", "list"), ("node-pool", "describe", "train-pool-a"), ("node-pool", "events", "train-pool-a"),
    ("node-pool", "diagnose", "train-pool-a"), ("node-pool", "diagnose", "awaiting-approval"), ("node-pool", "diagnose", "train-pool-a", "-o", "yaml"),
    ("node-pool", "fragmentation", "train-pool-a"),
    ("node-pool", "get", "train-pool-a"), ("pod", "list"), ("pod", "why", "lost"), ("order", "list"),
    ("cost", "export", "--by-labels", "team,project,gpu-class", "--from", "2026-12-01", "--to", "2026-12-02"),
)  # fmt: skip


def _help_pages(ebcloud) -> list[tuple[str, ...]]:
    """Every command's --help: the groups' and each verb's."""
    runs = [("--help",)]
    groups = re.findall(r"^  ([a-z-]+)\s", ebcloud("--help").stdout.split("Commands:")[1], flags=re.MULTILINE)
    for group in groups:
        runs.append((group, "--help"))
        text = ebcloud(group, "--help").stdout
        if "Commands:" in text:
            runs += [(group, verb, "--help") for verb in re.findall(r"^  ([a-z-]+)\s", text.split("Commands:")[1], flags=re.MULTILINE)]
    return runs


@live
@pytest.mark.parametrize("role", ["lead", "admin"])
def test_no_cli_output_shows_an_internal_reference(ebcloud, login_as, actors, teams, role):
    _world(actors, teams)
    login_as(role)
    findings = {}
    for args in (*_help_pages(ebcloud), *CLI_RUNS):
        result = ebcloud(*args)
        if hits := internal_references(result.stdout + result.stderr):
            findings[" ".join(args)] = hits
    assert not findings, "\n".join(f"ebcloud {where}: {hit}" for where, hits in findings.items() for hit in hits)
