"""Saving the edit form without changing anything leaves the pool's document as it was: the
form used to write the fields its page shows at their defaults (`autoRepair: true`, the system
image) and a budget amount stored as a number back as text, so Export YAML no longer gave the
document back as written and the pool's version moved, refusing other leads' open forms
(found by a QA sweep)."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from pools.core.documents import load_yaml
from pools.models import GpuNodePool
from pools.services import pools as services
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.django_db


class _FormFields(HTMLParser):
    """What a browser posts for the page's form: every named input, select and textarea as shown."""

    def __init__(self):
        super().__init__()
        self.fields: list[tuple[str, str]] = []
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        name = attrs.get("name")
        if tag == "input" and name and "disabled" not in attrs and attrs.get("type") not in ("submit", "button"):
            if attrs.get("type") != "checkbox" or "checked" in attrs:
                self.fields.append((name, attrs.get("value", "on" if attrs.get("type") == "checkbox" else "")))
        elif tag == "select" and name and "disabled" not in attrs:
            self._select = name
        elif tag == "option" and self._select and "selected" in attrs:
            self.fields.append((self._select, attrs.get("value", "")))
        elif tag == "textarea" and name:
            self._textarea = name

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None
        if tag == "textarea":
            self._textarea = None

    def handle_data(self, data):
        if self._textarea:
            self.fields.append((self._textarea, data))


def _as_shown(page: str) -> dict[str, list[str]]:
    parser = _FormFields()
    parser.feed(page)
    posted: dict[str, list[str]] = {}
    for name, value in parser.fields:
        if name != "csrfmiddlewaretoken":
            posted.setdefault(name, []).append(value)
    return posted


@pytest.mark.parametrize("example", ["create-train-pool.yaml", "inference-pool.yaml", "batch-preemptible-pool.yaml", "train-pool-with-scaling.yaml"])
def test_an_unchanged_save_leaves_the_document_and_its_version_as_they_were(actors, browser, example):
    document = load_yaml((EXAMPLES / example).read_text())
    document["spec"]["nodeCount"]["min"] = 0  # no order to approve
    if "budget" in document["spec"]:
        document["spec"]["budget"]["monthly"] = 60000  # a number, as YAML reads one
    pool = services.pool_create(user=actors["lead"], document=document)
    client = browser("lead")
    page = client.get(f"/pools/{pool.name}/edit/").content.decode()
    response = client.post(f"/pools/{pool.name}/edit/", _as_shown(page))
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    saved = GpuNodePool.objects.get(pk=pool.pk)
    assert saved.document == pool.document and saved.generation == pool.generation


def test_a_save_that_orders_again_a_refused_baseline_says_so(actors, browser):
    """Saving the pool asks again for the baseline it lacks (its nodeCount.min stands): the
    page says which order that filed, rather than the lead finding it in the events (found by a
    QA sweep, who took it for a silent re-order)."""
    document = load_yaml((EXAMPLES / "create-train-pool.yaml").read_text())
    pool = services.pool_create(user=actors["lead"], document=document)
    services.order_reject(user=actors["admin"], order=pool.orders.get(), reason="no A100 this month")
    client = browser("lead")
    page = client.get(f"/pools/{pool.name}/edit/").content.decode()
    response = client.post(f"/pools/{pool.name}/edit/", _as_shown(page), follow=True)
    again = pool.orders.get(status="Pending")
    assert f"Pool {pool.name} updated. Order #{again.pk} for {again.node_count} nodes awaits approval." in response.content.decode()
