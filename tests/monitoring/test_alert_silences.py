"""Silencing a pool's capacity alert until a time (issue 20 item 3) on the pool's Alerts page:
the team's leads and platform admins silence and end silences, each a pool event; members get a
403, another team a 404; bad input is an error beside its field."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator

from monitoring.models import AlertSilence
from pools.models import PoolEvent
from pools.services import pools as pool_services
from tests.conftest import make_document
from tests.corpus import TERMINAL_ESCAPES


@pytest.fixture
def watched(actors):
    return pool_services.pool_create(
        user=actors["lead"],
        document=make_document("watched-pool", nodeCount={"min": 0, "max": 6}, alerts={"allocationHigh": {"percent": 80, "for": "20m"}}),
    )  # fmt: skip


def until(hours: int = 2) -> str:
    return (timezone.now() + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M")


def test_the_page_shows_the_pools_own_rules_and_the_defaults(watched, browser):
    page = browser("member").get("/pools/watched-pool/alerts/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "allocated GPUs above 80% of capacity for 20m" in text  # the pool's own
    assert "mean GPU utilisation below 30% for 24h" in text  # the default
    assert 'id="silence-form"' not in text  # members read, they do not silence


def test_a_lead_silences_a_rule_until_a_time(watched, browser, actors):
    response = browser("lead").post("/pools/watched-pool/alerts/", {"rule": "NodesNotReady", "until": until(), "reason": "rack move tonight"})
    assert response.status_code == 302 and response["Location"] == "/pools/watched-pool/alerts/"
    silence = AlertSilence.objects.get()
    assert (silence.pool, silence.rule, silence.created_by, silence.reason) == (watched, "NodesNotReady", actors["lead"], "rack move tonight")
    event = PoolEvent.objects.get(pool=watched, reason="AlertSilenced")
    assert "Nodes not ready alerts silenced until" in event.message and "rack move tonight" in event.message
    page = browser("member").get("/pools/watched-pool/alerts/").content.decode()
    assert "rack move tonight" in page


def test_a_silence_in_the_past_or_without_a_reason_is_an_error_beside_the_field(watched, browser):
    response = browser("lead").post("/pools/watched-pool/alerts/", {"rule": "NodesNotReady", "until": until(-1), "reason": "late"})
    assert response.status_code == 400 and response.context["form"].errors["until"] == ["must be in the future"]
    assert "must be in the future" in response.content.decode()
    blank = browser("lead").post("/pools/watched-pool/alerts/", {"rule": "NodesNotReady", "until": until(), "reason": " "})
    assert blank.status_code == 400 and "reason" in blank.context["form"].errors
    assert not AlertSilence.objects.exists()
    too_far = browser("lead").post("/pools/watched-pool/alerts/", {"rule": "NodesNotReady", "until": until(24 * 91), "reason": "x"})
    assert too_far.status_code == 400 and too_far.context["form"].errors["until"] == ["must be at most 90 days ahead"]
    unknown = browser("lead").post("/pools/watched-pool/alerts/", {"rule": "Whatever", "until": until(), "reason": "x"})
    assert unknown.status_code == 400 and "rule" in unknown.context["form"].errors
    foreign_digits = until().translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))  # strptime reads them
    arabic = browser("lead").post("/pools/watched-pool/alerts/", {"rule": "NodesNotReady", "until": foreign_digits, "reason": "x"})
    assert arabic.status_code == 400 and arabic.context["form"].errors["until"] == ["Enter a valid date/time."]
    assert not AlertSilence.objects.exists()


def test_members_get_403_and_another_team_404(watched, browser):
    body = {"rule": "NodesNotReady", "until": until(), "reason": "no"}
    assert browser("member").post("/pools/watched-pool/alerts/", body).status_code == 403
    assert browser("other_lead").post("/pools/watched-pool/alerts/", body).status_code == 404
    assert browser("other_lead").get("/pools/watched-pool/alerts/").status_code == 404
    assert not AlertSilence.objects.exists()


def test_an_admin_ends_a_silence_and_the_rule_is_told_again(watched, browser, actors):
    silence = AlertSilence.objects.create(pool=watched, rule="LowGpuUtilization", until=timezone.now() + timedelta(days=1),
                                          reason="quiet week", created_by=actors["lead"])  # fmt: skip
    assert browser("member").post("/pools/watched-pool/alerts/", {"end": silence.pk}).status_code == 403
    assert browser("admin").post("/pools/watched-pool/alerts/", {"end": silence.pk}).status_code == 302
    silence.refresh_from_db()
    assert silence.until <= timezone.now()
    assert PoolEvent.objects.filter(pool=watched, reason="AlertSilenceEnded").exists()
    assert browser("admin").post("/pools/watched-pool/alerts/", {"end": "nope"}).status_code == 404


def test_the_api_silences_lists_and_ends_like_the_page(watched, api):
    lead = api("lead")
    url = "/api/v1/pools/watched-pool/alert-silences/"
    until_at = (timezone.now() + timedelta(hours=2)).replace(microsecond=0)
    created = lead.post(url, {"rule": "PodsPendingTooLong", "until": until_at.isoformat(), "reason": "image mirror down"}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["rule"], body["reason"], body["createdBy"]) == ("PodsPendingTooLong", "image mirror down", "lead")
    assert [s["id"] for s in api("member").get(url).json()] == [body["id"]]
    assert api("member").delete(f"{url}{body['id']}/").status_code == 403
    assert lead.delete(f"{url}{body['id']}/").status_code == 204
    assert lead.get(url).json() == []
    assert PoolEvent.objects.filter(pool=watched, reason__in=["AlertSilenced", "AlertSilenceEnded"]).count() == 2


def test_the_api_names_the_bad_field(watched, api):
    url = "/api/v1/pools/watched-pool/alert-silences/"
    past = (timezone.now() - timedelta(hours=1)).isoformat()
    response = api("lead").post(url, {"rule": "NodesNotReady", "until": past, "reason": "x"}, format="json")
    assert response.status_code == 400 and response.json()["errors"] == [{"field": "until", "message": "must be in the future"}]
    unknown = api("lead").post(url, {"rule": "Sometimes", "until": past, "reason": "x"}, format="json")
    assert unknown.status_code == 400 and unknown.json()["errors"][0]["field"] == "rule"
    assert api("other_lead").post(url, {"rule": "NodesNotReady", "until": past, "reason": "x"}, format="json").status_code == 404


@pytest.mark.parametrize("until", ["2099-12-08T10:00:00", "2099-12-08", "٢٠٩٩-12-08T10:00:00Z"])
def test_a_time_without_its_offset_is_refused_as_kubernetes_refuses_it(watched, api, until):
    """metav1.Time is RFC 3339: a time without an offset, or a bare date, was taken as UTC
    whatever zone its author meant (admin QA)."""
    response = api("lead").post("/api/v1/pools/watched-pool/alert-silences/", {"rule": "NodesNotReady", "until": until, "reason": "x"}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": "until", "message": "must be an RFC 3339 date and time with its offset, in the digits 0-9, e.g. 2026-12-01T08:00:00Z"}]
    assert not AlertSilence.objects.exists()


@pytest.mark.parametrize(("rule", "stored"), [
    ("allocationHigh", "HighGpuAllocation"), ("utilizationLow", "LowGpuUtilization"),
    ("pendingPods", "PodsPendingTooLong"), ("nodesNotReady", "NodesNotReady"), ("LowGpuUtilization", "LowGpuUtilization"),
])  # fmt: skip
def test_the_api_takes_the_spec_key_the_guide_names_or_the_alert_name(watched, api, rule, stored):
    """The team lead's guide (§9) names the rules by their `spec.alerts` keys; the API took only
    the alert names and refused `utilizationLow` with "not a valid choice". Either name stores
    the alert name, which the page, the events and the answer use."""
    until_at = (timezone.now() + timedelta(hours=2)).replace(microsecond=0).isoformat()
    response = api("lead").post("/api/v1/pools/watched-pool/alert-silences/", {"rule": rule, "until": until_at, "reason": "night idle"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["rule"] == stored and AlertSilence.objects.get().rule == stored


def test_an_unknown_rule_is_refused_with_the_names_it_may_be(watched, api):
    until_at = (timezone.now() + timedelta(hours=2)).isoformat()
    response = api("lead").post("/api/v1/pools/watched-pool/alert-silences/", {"rule": "utilisationLow", "until": until_at, "reason": "x"}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": "rule", "message": (
        '"utilisationLow" is not an alert rule; expected one of allocationHigh, utilizationLow, pendingPods, nodesNotReady '
        "(the keys under spec.alerts) or HighGpuAllocation, LowGpuUtilization, PodsPendingTooLong, NodesNotReady (the alert names)"
    )}]  # fmt: skip
    assert not AlertSilence.objects.exists()


@pytest.mark.parametrize("reason", sorted(TERMINAL_ESCAPES.values()) + ["\x1b]0;PWNED\x07 ok", "a\x9bb", "late\x00"])
def test_a_reason_with_control_characters_is_refused_on_the_api_and_the_page(watched, api, browser, reason):
    """The reason goes into the pool's event, which the CLI prints: an escape sequence there
    steers the reader's terminal. Refused as an order's reject reason is (tests/corpus.py REASONS)."""
    until_at = (timezone.now() + timedelta(days=1)).isoformat()
    response = api("lead").post("/api/v1/pools/watched-pool/alert-silences/", {"rule": "NodesNotReady", "until": until_at, "reason": reason}, format="json")
    assert response.status_code == 400, response.content
    assert [e["field"] for e in response.json()["errors"]] == ["reason"]
    page = browser("lead").post("/pools/watched-pool/alerts/", {"rule": "NodesNotReady", "until": until(), "reason": reason})
    assert page.status_code == 400 and "reason" in page.context["form"].errors
    assert not AlertSilence.objects.exists()
    assert not PoolEvent.objects.filter(pool=watched, reason="AlertSilenced").exists()


def test_a_reason_may_span_lines(watched, api):
    until_at = (timezone.now() + timedelta(days=1)).isoformat()
    response = api("lead").post("/api/v1/pools/watched-pool/alert-silences/", {"rule": "NodesNotReady", "until": until_at, "reason": "rack move\n\tthen a reboot"}, format="json")
    assert response.status_code == 201, response.content


def test_the_schema_answers_with_the_alert_name_only():
    """A request takes either name of a rule; an answer only ever gives the alert name, and the
    schema said an answer's `rule` might be a spec key too."""
    schemas = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]

    def choices(component: str) -> list[str]:
        ref = schemas[component]["properties"]["rule"]
        return schemas[ref.get("$ref", ref.get("allOf", [{}])[0].get("$ref", "")).rsplit("/", 1)[-1]]["enum"]

    assert choices("AlertSilence") == ["HighGpuAllocation", "LowGpuUtilization", "PodsPendingTooLong", "NodesNotReady"]
    assert set(choices("AlertSilenceRequest")) == {"allocationHigh", "utilizationLow", "pendingPods", "nodesNotReady", *choices("AlertSilence")}
