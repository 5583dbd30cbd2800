"""The pool's Diagnose page (seed T5): the article's self-check table run live, one row per
symptom with what was found, the likely cause and the first action. A thin shell over
`pools.selectors.diagnose`; another team's pool is a 404 (`selectors.pool_get`)."""

from __future__ import annotations

import re

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET

from pools.selectors import diagnose as diagnose_service
from pools.selectors import pools as selectors

STATUS_LABELS = {"ok": "OK", "warning": "Warning", "failing": "Failing", "unknown": "Unknown"}
STATUS_CLASSES = {"ok": "phase-Ready", "warning": "phase-Pending", "failing": "phase-Degraded", "unknown": ""}
_COMMAND = re.compile(r"`([^`]+)`")


def _text(value: str) -> SafeString:
    """Escaped text with `commands` as <code> and line breaks kept (a toleration's YAML)."""
    return mark_safe(_COMMAND.sub(r"<code>\1</code>", escape(value)).replace("\n", "<br>"))  # escaped before the tags go in


@login_required
@require_GET
def pool_diagnose(request, name: str):
    pool = selectors.pool_get(user=request.user, name=name)
    diagnosis = diagnose_service.pool_diagnose(pool=pool, now=timezone.now())
    rows = [
        {
            "check": c,
            "label": STATUS_LABELS[c.status],
            "css": STATUS_CLASSES[c.status],
            "found": _text(c.found),
            "cause": _text(c.cause) if c.cause else "",
            "action": _text(c.action) if c.action else "",
            "details": [_text(line) for line in c.details],
        }
        for c in diagnosis.checks
    ]
    context = {
        "pool": pool,
        "diagnosis": diagnosis,
        "rows": rows,
        "overall_label": STATUS_LABELS[diagnosis.status],
        "overall_css": STATUS_CLASSES[diagnosis.status],
    }
    return render(request, "pools/pool_diagnose.html", context)
