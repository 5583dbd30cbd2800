"""The bad-input corpus (issue #9 item 5) and the checks every write-path test makes with it.

Malformed YAML, entity expansion ("billion laughs"), documents over the size limit, unicode and
overlong names, negative, huge, non-integer and beyond-int64 numbers, `<script>` in labels,
SQL-like and NUL-carrying strings. `tests/pools/test_security.py` sends the documents to the pool
API and the import page; `tests/test_bad_input*.py` to every other write path.

The checks: `db_state()` (every row of every product table, so "nothing written" means
nothing), `escaped()` (the payload never appears raw in HTML) and `api_fields()` (the API's
`{"errors": [{"field", "message"}]}` with a message for each).
"""

from __future__ import annotations

import sys

from django.apps import apps
from django.db import transaction
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from pools import roles
from pools.demo.seed import load_catalog
from pools.models import Membership, Team
from tests.conftest import _user, make_document

SCRIPT = "<script>alert(1)</script>"
SQL = "x'; DROP TABLE pools_gpunodepool; --"
OVERLONG = "p" * 300
BEYOND_INT64 = "9" * 30
SNAPSHOT_APPS = ("pools", "billing", "monitoring", "auth", "authtoken", "django_q")


def db_state() -> dict[str, list]:
    """Every row of every product table, users, tokens and queued tasks (not sessions, not
    django-axes' failed-login records, which a refused login writes by design)."""
    return {
        model._meta.label: list(model.objects.order_by("pk").values_list())
        for label in SNAPSHOT_APPS
        for model in apps.get_app_config(label).get_models()
        if model._meta.label != "auth.Permission"
    }


def escaped(response) -> bool:
    """The payload is never in the page raw (autoescaping shows it as &lt;script&gt;)."""
    return SCRIPT.encode() not in response.content


def api_fields(response) -> list[str]:
    """The fields of an API error answer; each error must carry a message."""
    errors = response.json()["errors"]
    assert errors and all(e["message"] for e in errors), errors
    return [e["field"] for e in errors]


def once_per_module(django_db_blocker, build):
    """Build a module's data once, inside a transaction that every test's own transaction (a
    savepoint, pytest-django's `db`) nests in, and roll it back after the module's last test.
    The tests then cost a savepoint each instead of re-creating users, catalog and pools."""
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            data = build()
        except BaseException:
            outer.__exit__(*sys.exc_info())
            raise
    try:
        yield data
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


def people() -> dict:
    """The catalog and tests/conftest.py's actors (same names, roles and passwords)."""
    load_catalog()
    algorithm = Team.objects.create(name="Algorithm", slug="algorithm")
    inference = Team.objects.create(name="Inference", slug="inference")
    return {
        "lead": _user("lead", team=algorithm, role=Membership.Role.LEAD),
        "other_lead": _user("other-lead", team=inference, role=Membership.Role.LEAD),
        "member": _user("member", team=algorithm, role=Membership.Role.MEMBER),
        "finance": _user("finance", group=roles.FINANCE),
        "admin": _user("admin", group=roles.PLATFORM_ADMIN),
    }


def token_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def _bomb() -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for index in range(1, 9):
        prev, cur = chr(96 + index), chr(97 + index)
        text += f"{cur}: &{cur} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
    return text


# --- documents (pool and pod YAML/JSON) -------------------------------------------------------

YAML_CORPUS = {
    "malformed": "apiVersion: ebcloud.io/v1\nkind: [GpuNodePool\n",
    "billion-laughs": _bomb(),
    "oversized": "apiVersion: ebcloud.io/v1\nx: '" + "y" * 100_000 + "'\n",
    "python-tag": "!!python/object/apply:os.system ['echo pwned']\n",
    "not-a-mapping": "- a\n- b\n",
    "empty": "",
}
# What the answer says for each (the CLI refuses an empty file itself, before any request).
YAML_MESSAGES = {
    "malformed": "malformed YAML at line",
    "billion-laughs": "YAML aliases are not accepted",
    "oversized": "larger than",
    "python-tag": "could not determine a constructor",
    "not-a-mapping": "must be a mapping",
    "empty": "is empty",
}
DOCUMENT_CORPUS = {
    "unicode-name": make_document("pöol-ä"),
    "overlong-name": make_document(OVERLONG),
    "negative-size": make_document("neg", nodeCount={"min": -3, "max": 2}),
    "huge-size": make_document("huge", nodeCount={"min": 10**12, "max": 10**13}),
    "script-label": {**make_document("xss"), "metadata": {"name": "xss", "labels": {"team": SCRIPT}}},
    "sql-ish-zone": make_document("sql", region="cn-east-2a'; DROP TABLE pools_gpunodepool; --"),
    "float-count": make_document("flt", nodeCount={"min": 1.5, "max": 2}),
    "null-spec": {"apiVersion": "ebcloud.io/v1", "kind": "GpuNodePool", "metadata": {"name": "x"}, "spec": None},
    "huge-budget": make_document("rich", budget={"monthly": "1e40"}),
    "budget-in-a-currency-not-charged": make_document("usd", budget={"monthly": "100", "currency": "USD"}),
}
# The field path each document is refused for.
DOCUMENT_FIELDS = {
    "unicode-name": "metadata.name",
    "overlong-name": "metadata.name",
    "negative-size": "spec.nodeCount.min",
    "huge-size": "spec.nodeCount",
    "script-label": "metadata.labels",
    "sql-ish-zone": "spec.region",
    "float-count": "spec.nodeCount.min",
    "null-spec": "spec",
    "huge-budget": "spec.budget.monthly",
    "budget-in-a-currency-not-charged": "spec.budget.currency",
}


def pod_document(name: str = "bad-pod", *, namespace: str = "algorithm", gpus=1, cpu="4", memory="32Gi", **extra) -> dict:
    """A small valid Pod document (seed O3) to spoil one field at a time."""
    metadata = {"name": name, "namespace": namespace, **extra.pop("metadata", {})}
    resources = {"requests": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}}
    spec = {"containers": [{"name": "main", "image": "registry.local/train:1", "resources": resources}]}
    spec.update(extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


REQUESTS = "spec.containers[0].resources.requests"
LIMITS = "spec.containers[0].resources.limits"


def _pod_requests(requests: dict, limits: dict | None = None) -> dict:
    """A pod whose one container asks for exactly these requests and limits (Kubernetes rules)."""
    document = pod_document()
    document["spec"]["containers"][0]["resources"] = {"requests": requests, **({"limits": limits} if limits is not None else {})}
    return document
# case -> (document, the field path it is refused for)
POD_CASES = {
    "unicode-name": (pod_document("pöd-ä"), "metadata.name"),
    "overlong-name": (pod_document(OVERLONG), "metadata.name"),
    "sql-namespace": (pod_document(namespace=SQL), "metadata.namespace"),
    "script-label": (pod_document(metadata={"labels": {"app": SCRIPT}}), "metadata.labels"),
    "negative-gpus": (pod_document(gpus=-2), REQUESTS),
    "huge-gpus": (pod_document(gpus=10**12), REQUESTS),
    "float-gpus": (pod_document(gpus=1.5), REQUESTS),
    "string-gpus": (pod_document(gpus="lots"), REQUESTS),
    "negative-cpu": (pod_document(cpu="-4"), REQUESTS),
    "bad-memory": (pod_document(memory="lots"), REQUESTS),
    "huge-priority": (pod_document(priority=10**20), "spec.priority"),
    "string-priority": (pod_document(priority="high"), "spec.priority"),
    "own-priority": (pod_document(priority=100), "spec.priority"),  # only a PriorityClass gives one
    "unknown-priority-class": (pod_document(priorityClassName="no-such-class"), "spec.priorityClassName"),
    "bad-priority-class-name": (pod_document(priorityClassName="High Priority"), "spec.priorityClassName"),
    "bad-preemption-policy": (pod_document(preemptionPolicy="Sometimes"), "spec.preemptionPolicy"),
    "bad-gpu-milli": (pod_document(metadata={"annotations": {"ebcloud.io/gpu-milli": "-5"}}), "metadata.annotations"),
    "bad-duration": (pod_document(metadata={"annotations": {"ebcloud.io/duration": "forever"}}), "metadata.annotations"),
    "containers-not-a-list": (pod_document(containers={"name": "main"}), "spec.containers"),
    "escape-annotation": (pod_document(metadata={"annotations": {"note": "\x1b]0;PWNED\x07"}}), "metadata.annotations.note"),
    "c1-annotation": (pod_document(metadata={"annotations": {"note": "a\x9bb"}}), "metadata.annotations.note"),
    "escape-image": (pod_document(containers=[{"name": "main", "image": "\x1b[2J"}]), "spec.containers[0].image"),
    "gpu-request-without-limit": (_pod_requests({"nvidia.com/gpu": 1}), f"{LIMITS}.nvidia.com/gpu"),
    "gpu-request-not-its-limit": (_pod_requests({"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 8}), f"{REQUESTS}.nvidia.com/gpu"),
    "cpu-request-above-limit": (_pod_requests({"cpu": "8"}, {"cpu": "4"}), f"{REQUESTS}.cpu"),
    "negative-gpu-limit": (_pod_requests({}, {"nvidia.com/gpu": -1}), f"{LIMITS}.nvidia.com/gpu"),
    "huge-gpu-limit": (_pod_requests({}, {"nvidia.com/gpu": 10**30}), f"{LIMITS}.nvidia.com/gpu"),
    "float-gpu-limit": (_pod_requests({}, {"nvidia.com/gpu": 0.5}), f"{LIMITS}.nvidia.com/gpu"),
    "null-spec": ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": None}, "spec"),
    "cpu-beyond-int32-milli": (pod_document(cpu="2200000"), REQUESTS),
    "cpu-2-to-the-70": (pod_document(cpu=str(2**70)), REQUESTS),
    "memory-beyond-int32-mib": (pod_document(memory="9999999999Ti"), REQUESTS),
    "duration-beyond-ten-years": (pod_document(metadata={"annotations": {"ebcloud.io/duration": "99999999999999h"}}), "metadata.annotations"),
    "toleration-effect-object": (pod_document(tolerations=[{"key": "a", "operator": "Exists", "effect": {}}]), "spec.tolerations[0].effect"),
    "toleration-nul-key": (pod_document(tolerations=[{"key": "a\x00", "operator": "Exists"}]), "spec.tolerations[0].key"),
    "toleration-nul-seconds": (pod_document(tolerations=[{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "a\x00"}]), "spec.tolerations[0].tolerationSeconds"),
    "preferred-nul": (pod_document(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": "a\x00b"}]}}),
                      "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference"),
    "name-with-trailing-newline": (pod_document("probe\n"), "metadata.name"),
}
POD_CORPUS = {case: document for case, (document, _) in POD_CASES.items()}
POD_FIELDS = {case: field for case, (_, field) in POD_CASES.items()}

# --- the pool form (web), merge patches and scale requests (API) ------------------------------

FORM = {
    "team": "algorithm", "name": "form-pool", "gpu_model": "A100_80G", "node_type": "GPU_8_CARD",
    "region": "cn-east-2a", "min_nodes": "0", "max_nodes": "2", "lease_type": "monthly",
    "system_image": "ubuntu-22.04-cuda-12.2", "auto_repair": "on", "scheduling_policy": "binpack",
    "label_key": ["team"], "label_value": ["algorithm"],
}  # fmt: skip
# case -> (fields changed, where the error shows: a form field, or a row section of the htmx rows)
FORM_CORPUS = {
    "unicode-name": ({"name": "pöol-ä"}, "name"),
    "overlong-name": ({"name": OVERLONG}, "name"),
    "sql-name": ({"name": SQL}, "name"),
    "script-name": ({"name": SCRIPT}, "name"),
    "nul-name": ({"name": "a\x00b"}, "name"),
    "negative-min": ({"min_nodes": "-3"}, "min_nodes"),
    "huge-sizes": ({"min_nodes": "1000000000000", "max_nodes": "10000000000000"}, "max_nodes"),
    "beyond-int64-max": ({"max_nodes": BEYOND_INT64}, "max_nodes"),
    "float-min": ({"min_nodes": "1.5"}, "min_nodes"),
    "string-max": ({"max_nodes": "lots"}, "max_nodes"),
    "script-label-value": ({"label_value": [SCRIPT]}, "label"),
    "script-label-key": ({"label_key": [SCRIPT]}, "label"),
    "unicode-label-key": ({"label_key": ["tëam"]}, "label"),
    "overlong-label-value": ({"label_value": ["v" * 300]}, "label"),
    "sql-node-label": ({"nodelabel_key": ["gpu-class"], "nodelabel_value": [SQL]}, "nodelabel"),
    "script-taint-effect": ({"taint_key": ["pool"], "taint_value": ["train"], "taint_effect": [SCRIPT]}, "taint"),
    "sql-zone": ({"region": "cn-east-2a'; DROP TABLE pools_zone; --"}, "region"),
    "script-gpu-model": ({"gpu_model": SCRIPT}, "gpu_model"),
    "script-image": ({"system_image": SCRIPT}, "system_image"),
    "negative-budget": ({"budget_monthly": "-5"}, "budget_monthly"),
    "huge-budget": ({"budget_monthly": "1e40"}, "budget_monthly"),
    "string-budget": ({"budget_monthly": "lots"}, "budget_monthly"),
    "negative-burst": ({"burst_enabled": "on", "burst_max_nodes": "-1"}, "burst_max_nodes"),
    "huge-burst": ({"burst_enabled": "on", "burst_max_nodes": "1000000000000"}, "burst_max_nodes"),
    "script-team": ({"team": SCRIPT}, "team"),
    # a scaling policy's value is an int32 in HPA (2**70 was stored)
    "huge-scale-up-value": ({"scaling_custom": "on", "scale_up_type": "Pods", "scale_up_value": str(2**70), "scale_up_period": "60"}, "scale_up_value"),
    "beyond-int32-scale-down-value": ({"scaling_custom": "on", "scale_down_type": "Percent", "scale_down_value": str(2**31), "scale_down_period": "60"}, "scale_down_value"),
    # other scripts' digits and underscores are numbers to Python, not to the API or the CLI
    "arabic-indic-min": ({"min_nodes": "٣"}, "min_nodes"),
    "fullwidth-max": ({"max_nodes": "５"}, "max_nodes"),
    "underscore-max": ({"max_nodes": "1_0"}, "max_nodes"),
    "devanagari-budget": ({"budget_monthly": "५००"}, "budget_monthly"),
    "arabic-indic-burst": ({"burst_enabled": "on", "burst_max_nodes": "٢"}, "burst_max_nodes"),
    "arabic-indic-target": ({"scaling_custom": "on", "memory_target": "٨٥", "queue_target": "10"}, "memory_target"),
    "fullwidth-tolerance": ({"scaling_custom": "on", "memory_target": "85", "scale_up_tolerance": "０.５"}, "scale_up_tolerance"),
}
PATCHES = {
    "negative-min": ({"spec": {"nodeCount": {"min": -1}}}, "spec.nodeCount.min"),
    "huge-max": ({"spec": {"nodeCount": {"max": 10**15}}}, "spec.nodeCount"),
    "float-min": ({"spec": {"nodeCount": {"min": 0.5}}}, "spec.nodeCount.min"),
    "string-max": ({"spec": {"nodeCount": {"max": "lots"}}}, "spec.nodeCount.max"),
    "script-label": ({"metadata": {"labels": {"team": SCRIPT}}}, "metadata.labels"),
    "sql-taint": ({"spec": {"nodeTaints": [{"key": "pool", "value": SQL, "effect": "NoSchedule"}]}}, "spec.nodeTaints"),
    "negative-budget": ({"spec": {"budget": {"monthly": "-5"}}}, "spec.budget.monthly"),
    "huge-budget": ({"spec": {"budget": {"monthly": "1e40"}}}, "spec.budget.monthly"),
    "budget-in-a-currency-not-charged": ({"spec": {"budget": {"monthly": "100", "currency": "USD"}}}, "spec.budget.currency"),
    "kubelets-label": ({"spec": {"nodeLabels": {"kubernetes.io/hostname": "x"}}}, "spec.nodeLabels.kubernetes.io/hostname"),
    "control-planes-label": ({"metadata": {"labels": {"ebcloud.io/team": "inference"}}}, "metadata.labels.ebcloud.io/team"),
    "huge-policy-value": ({"spec": {"scaling": {"scaleUp": {"policies": [{"type": "Pods", "value": 2**70, "periodSeconds": 60}]}}}},
                          "spec.scaling.scaleUp.policies[0].value"),
    "renamed": ({"metadata": {"name": "other"}}, "metadata.name"),
    "not-a-mapping": ([1, 2], ""),
    "scalar": ("lots", ""),
}
SCALES = {
    "negative-min": ({"min": -1}, "min"),
    "huge-min": ({"min": 10**12}, "spec.nodeCount.min"),  # past the site's most nodes a pool may have, which the spec says
    "beyond-int64": ({"max": 10**30}, "spec.nodeCount.max"),
    "float-max": ({"max": 1.5}, "max"),
    "string-min": ({"min": "lots"}, "min"),
    "script-min": ({"min": SCRIPT}, "min"),
    "zero-max": ({"max": 0}, "max"),
    "min-over-max": ({"min": 5, "max": 3}, "spec.nodeCount"),
    # what `spec.nodeCount` refuses ("must be an integer"), DRF's IntegerField coerced
    "digit-string-min": ({"min": "1"}, "min"),
    "whole-float-min": ({"min": 1.0}, "min"),
    "bool-max": ({"max": True}, "max"),
}

# --- names in URLs, reasons, ids, numbers in forms, filters -------------------------------------

HOSTILE_NAMES = {"script": SCRIPT, "sql": SQL, "unicode": "pöol-ä", "overlong": OVERLONG, "dots": "..", "percent": "%00",
                 "nul": "a\x00b", "newline": "a\nb"}  # fmt: skip
# Control characters a terminal obeys: an OSC that retitles the window, a C1 CSI, a bell, a clear.
TERMINAL_ESCAPES = {"osc-title": "\x1b]0;PWNED\x07", "c1-csi": "no\x9b31mcapacity", "bell": "ring\x07", "clear": "\x1b[2Jgone", "del": "a\x7fb"}
REASONS = {"overlong": "x" * 501, "blank": "   ", "nul": "late\x00", "list": ["a"], "object": {"a": 1},
           "withdrawal": "withdrawn: the pool was deleted",  # would read as its pool's own withdrawal
           **{f"escape-{case}": text for case, text in TERMINAL_ESCAPES.items()}}
BAD_IDS = {"string": "abc", "negative": "-1", "float": "1.5", "beyond-int64": BEYOND_INT64, "script": SCRIPT}
MAX_NODES = {"negative": "-1", "zero": "0", "huge": "1000000000000", "beyond-int64": BEYOND_INT64, "float": "1.5", "string": "lots", "script": SCRIPT, "empty": ""}
# The node page's admin actions: case -> (form data, how the page names the refused field: its
# label before the flashed error, or the reject form's Reason error beside the field).
NODE_ACTIONS = {
    "no-action": ({}, "Action: "),
    "unknown-action": ({"action": "explode"}, "Action: "),
    "script-action": ({"action": SCRIPT}, "Action: "),
    "nul-action": ({"action": "revoke\x00"}, "Action: "),
    "string-approval": ({"action": "approve", "approval": "abc"}, "Repair: "),
    "script-approval": ({"action": "reject", "approval": SCRIPT}, "Repair: "),
    "overlong-note": ({"action": "reject", "approval": "{approval}", "note": "n" * 301}, 'id="reject-note-error" role="alert"'),
    "nul-note": ({"action": "reject", "approval": "{approval}", "note": "tonight\x00"}, 'id="reject-note-error" role="alert"'),
    "escape-note": ({"action": "reject", "approval": "{approval}", "note": "\x1b]0;PWNED\x07"}, 'id="reject-note-error" role="alert"'),
    "c1-note": ({"action": "reject", "approval": "{approval}", "note": "a\x9bb"}, 'id="reject-note-error" role="alert"'),
    "negative-gpu": ({"action": "inject-fault", "gpu": "-1", "xid": "79"}, "GPU: "),
    "gpu-out-of-range": ({"action": "inject-fault", "gpu": "8", "xid": "79"}, "GPU: "),
    "beyond-int64-gpu": ({"action": "inject-fault", "gpu": BEYOND_INT64, "xid": "79"}, "GPU: "),
    "float-gpu": ({"action": "inject-fault", "gpu": "1.5", "xid": "79"}, "GPU: "),
    "script-gpu": ({"action": "inject-fault", "gpu": SCRIPT, "xid": "79"}, "GPU: "),
    "negative-xid": ({"action": "inject-fault", "gpu": "0", "xid": "-5"}, "Xid: "),
    "zero-xid": ({"action": "inject-fault", "gpu": "0", "xid": "0"}, "Xid: "),
    "huge-xid": ({"action": "inject-fault", "gpu": "0", "xid": BEYOND_INT64}, "Xid: "),
    "string-xid": ({"action": "inject-fault", "gpu": "0", "xid": "lots"}, "Xid: "),
}
HOSTILE_VALUES = {"script": SCRIPT, "sql": "' OR 1=1 --", "nul": "a\x00b", "overlong": "x" * 5000, "unicode": "tëam-ä"}
COST_PARAMS = {
    "script-label-key": ({"by": SCRIPT}, "by"),
    "sql-label-key": ({"by": "team'; DROP TABLE billing_costrecord; --"}, "by"),
    "overlong-label-key": ({"by": "k" * 400}, "by"),
    "too-many-keys": ({"by": ",".join(f"k{i}" for i in range(50))}, "by"),
    "impossible-date": ({"from": "2026-13-45"}, "from"),
    "sql-date": ({"to": "2026-12-01' OR '1'='1"}, "to"),
    "huge-year": ({"from": "99999-01-01"}, "from"),
    "backwards": ({"from": "2026-12-31", "to": "2026-12-01"}, "to"),
    "bad-billing": ({"billing": SCRIPT}, "billing"),
    "bad-sort": ({"sort": "amount; DROP"}, "sort"),
    "nul-team": ({"team": "a\x00b"}, "team"),
    "nul-pool": ({"pool": "a\x00b"}, "pool"),
    # the calendar's ends: `to` + 1 day and the chart's half-day margins overflowed (a 500)
    "last-day-of-the-calendar": ({"to": "9999-12-31"}, "to"),
    "first-day-of-the-calendar": ({"from": "0001-01-01"}, "from"),
    "calendar-ends-csv": ({"format": "csv", "from": "0001-01-01", "to": "9999-12-31"}, "to"),
    "last-day-csv": ({"format": "csv", "to": "9999-12-31"}, "to"),
    "last-day-focus": ({"format": "focus", "to": "9999-12-31"}, "to"),
    "before-the-product": ({"from": "1999-12-31"}, "from"),
    "bad-format": ({"format": SCRIPT}, "format"),
}
# finance's team budget form (POST /costs/budgets/teams/new/): case -> (fields changed, the field
# its error shows beside). '²' is a digit to str.isdigit() but not to int() (it was a 500); a
# currency the team is never charged in would show 0.00 spent forever and never alert.
TEAM_BUDGET_FORM = {"team": "algorithm", "monthly": "1000", "currency": "CNY", "thresholds": "80, 100"}
TEAM_BUDGETS = {
    "superscript-threshold": ({"thresholds": "²"}, "thresholds"),
    "superscript-digits": ({"thresholds": "⁵0"}, "thresholds"),
    "arabic-indic-digit": ({"thresholds": "80, ٣"}, "thresholds"),
    "negative-threshold": ({"thresholds": "-5"}, "thresholds"),
    "zero-threshold": ({"thresholds": "0"}, "thresholds"),
    "huge-threshold": ({"thresholds": "9" * 90}, "thresholds"),
    "script-threshold": ({"thresholds": SCRIPT}, "thresholds"),
    "nul-threshold": ({"thresholds": "8\x000"}, "thresholds"),
    "not-charged-currency": ({"currency": "USD"}, "currency"),
    "made-up-currency": ({"currency": "XXX"}, "currency"),
    "non-ascii-currency": ({"currency": "ÄÖÜ"}, "currency"),
    "script-currency": ({"currency": SCRIPT}, "currency"),
    "negative-monthly": ({"monthly": "-1"}, "monthly"),
    "huge-monthly": ({"monthly": "1e40"}, "monthly"),
    "arabic-indic-monthly": ({"monthly": "١٠٠٠"}, "monthly"),
    "underscore-monthly": ({"monthly": "1_000"}, "monthly"),
    "script-team": ({"team": SCRIPT}, "team"),
}

# --- nesting and numbers a parser chokes on (every JSON and YAML entry point) -----------------
# `[` 10,000 deep was a RecursionError (500) on every endpoint that parses a body, the auth token
# and agent join included; YAML nested under the 64 KiB cap cost 2 s of CPU; a 5,000-digit int or
# February 30th in YAML was a ValueError (500). Now a 400 naming the path down to where
# EBCLOUD_MAX_DOCUMENT_DEPTH (32) was crossed (tests/test_bad_input_depth.py).

DEEP = 10_000
DEPTH_MESSAGE = "nested deeper than 32 levels"
# case -> (JSON body, the start of the field path it is refused for); each is under 64 KiB
NESTED_JSON = {
    "lists": ("[" * DEEP + "]" * DEEP, "[0][0][0]"),
    "lists-unclosed": ("[" * DEEP, "[0][0][0]"),
    "objects": ('{"a":' * DEEP + "1" + "}" * DEEP, "a.a.a"),
    "mixed": ('[{"a":' * (DEEP // 2) + "1" + "}]" * (DEEP // 2), "[0].a[0].a"),
    "after-a-string-of-brackets": ('["' + "[" * 100 + '\\"", ' + "[" * DEEP + "]" * DEEP + "]", "[1][0][0]"),
    "in-a-spec": (
        '{"apiVersion": "ebcloud.io/v1", "kind": "GpuNodePool", "metadata": {"name": "deep"}, "spec": {"nodeLabels": '
        + '{"a": ' * (DEEP // 2) + "1" + "}" * (DEEP // 2) + "}}",
        "spec.nodeLabels.a.a",
    ),
}
# case -> (YAML body, the start of the field path it is refused for); each is under 64 KiB
NESTED_YAML = {
    "flow-lists": ("[" * DEEP + "]" * DEEP, "[0][0][0]"),
    "flow-maps": ("{a: " * DEEP + "1" + "}" * DEEP, "a.a.a"),
    "compact-block-lists": ("- " * DEEP + "x\n", "[0][0][0]"),
    "block-maps": ("".join(" " * i + "a:\n" for i in range(40)) + " " * 40 + "b\n", "a.a.a"),
    "in-a-spec": (
        "apiVersion: ebcloud.io/v1\nkind: GpuNodePool\nmetadata: {name: deep}\nspec:\n  nodeLabels:\n    team: "
        + "[{b: " * (DEEP // 2) + "1" + "}]" * (DEEP // 2) + "\n",
        "spec.nodeLabels.team[0].b[0]",
    ),
}
# YAML scalars whose constructor raised a ValueError: case -> (document, what the answer says)
BAD_YAML_SCALARS = {
    "int-past-4300-digits": ("apiVersion: ebcloud.io/v1\nkind: GpuNodePool\nx: " + "9" * 5000 + "\n", "is not a valid int"),
    "hex-too-long-to-print": ("apiVersion: ebcloud.io/v1\nkind: GpuNodePool\nx: 0x" + "f" * 5000 + "\n", "too large a number"),
    "february-30": ("apiVersion: ebcloud.io/v1\nkind: GpuNodePool\nx: 2026-02-30\n", "is not a valid timestamp"),
}
