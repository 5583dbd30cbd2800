"""Shared fixtures: the demo catalog, two teams, and one actor per role (named by role)."""

from __future__ import annotations

import copy
import os
import re
import signal
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from pools import roles
from pools.core.documents import load_yaml
from pools.demo.seed import load_catalog, load_priority_classes
from pools.models import Membership, Team
from pools.selectors.extender_state import STATE as EXTENDER_STATE
from tests.ebcloud.cli_helpers import config_file, ebcloud, login_as  # noqa: F401 (fixtures of every CLI test)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SHARED_DATA = ROOT.parent / "shared" / "data"


CLOCK_SHIFT_DAYS = int(os.environ.get("EBCLOUD_TEST_CLOCK_SHIFT_DAYS", "0") or 0)


@pytest.fixture(autouse=True, scope="session")
def shifted_clock():
    """`EBCLOUD_TEST_CLOCK_SHIFT_DAYS=365 pytest` runs the whole suite with the clock that many
    days ahead (still ticking): a test that depends on today's date, instead of freezing the
    clock or passing `now`, fails in that run. CI runs one of its two passes that way."""
    if not CLOCK_SHIFT_DAYS:
        yield
        return
    from django.utils import timezone

    with time_machine.travel(timezone.now() + timedelta(days=CLOCK_SHIFT_DAYS), tick=True):
        yield


@pytest.fixture(autouse=True)
def realistic_simulated_cloud(settings):
    """Tests assume the simulated cloud's realistic step durations, whatever the shell exports
    (`make run` sets EBCLOUD_SIM_FAST for the demo)."""
    settings.EBCLOUD_SIM_STEP_SECONDS = settings.SIM_STEP_SECONDS_REALISTIC


@pytest.fixture(autouse=True)
def signal_handlers_restored():
    """A command run in the test's process (`call_command("demo_fleet")`, the agent's `main`, a
    django-q cluster) sets its own SIGINT and SIGTERM handlers, for the stop event of a run that
    has ended; left in place, they changed what a later test's Ctrl-C does, so a test passed or
    hung by the order it ran in. Each test starts with the handlers the suite started with; a
    test that sends Ctrl-C sets what it relies on (a suite started in the background, `cmd &`,
    starts with SIGINT ignored)."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in before.items():
        if signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)


@pytest.fixture(autouse=True)
def fresh_extender_state():
    """The scheduler extender keeps its state between requests, trusting that a primary key is
    never reused; a test's rolled-back rows break that, so every test starts it empty."""
    EXTENDER_STATE.reset()


@pytest.fixture
def catalog(db):
    """The demo's catalog and, as `seed_demo` loads them, the examples' PriorityClasses (the
    article's pod names `training`)."""
    load_catalog()
    load_priority_classes(EXAMPLES / "priorityclasses.yaml")


@pytest.fixture
def teams(db):
    return {
        "algorithm": Team.objects.create(name="Algorithm", slug="algorithm"),
        "inference": Team.objects.create(name="Inference", slug="inference"),
    }


def _user(username: str, *, team=None, role=None, group=None, superuser=False):
    user = get_user_model().objects.create_user(username=username, password="pw-" + username, is_superuser=superuser, is_staff=superuser)
    if team is not None:
        Membership.objects.create(user=user, team=team, role=role)
    if group:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


@pytest.fixture
def actors(catalog, teams):
    """lead (algorithm), other_lead (inference), member (algorithm), finance, admin."""
    return {
        "lead": _user("lead", team=teams["algorithm"], role=Membership.Role.LEAD),
        "other_lead": _user("other-lead", team=teams["inference"], role=Membership.Role.LEAD),
        "member": _user("member", team=teams["algorithm"], role=Membership.Role.MEMBER),
        "finance": _user("finance", group=roles.FINANCE),
        "admin": _user("admin", group=roles.PLATFORM_ADMIN),
    }


@pytest.fixture
def browser(client, actors):
    """browser(role) -> the Django test client logged in as that actor; browser(None) is anonymous."""

    def login(role: str | None):
        client.logout()
        if role is not None:
            client.force_login(actors[role])
        return client

    return login


@pytest.fixture
def admin_client(actors):
    """A client logged in as the world's platform admin (pytest-django's own `admin_client`
    would log in a superuser of its own, outside the teams and roles of `actors`)."""
    client = Client()
    client.force_login(actors["admin"])
    return client


@pytest.fixture
def api(actors):
    """api(role) -> an APIClient authenticated with that actor's token; api(None) is anonymous."""

    def client_for(role: str | None) -> APIClient:
        client = APIClient()
        if role is not None:
            token, _ = Token.objects.get_or_create(user=actors[role])
            client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return client_for


@pytest.fixture
def train_document():
    """The article's create-train-pool.yaml (seed O2), a fresh copy per test."""
    return copy.deepcopy(load_yaml((EXAMPLES / "create-train-pool.yaml").read_text()))


def make_document(name: str = "train-pool-a", **spec_overrides) -> dict:
    document = load_yaml((EXAMPLES / "create-train-pool.yaml").read_text())
    document["metadata"]["name"] = name
    document["spec"].update(spec_overrides)
    return document


def assets_off_site(page: str) -> list[str]:
    """The page's script, stylesheet, image and plotly URLs that another host serves: a page
    must load nothing from a CDN. Reads the URLs themselves, not the page's text (a CSRF token
    may spell "cdn")."""
    urls = re.findall(r'\b(?:src|data-plotly)="([^"]*)"', page) + re.findall(r'<link\b[^>]*\bhref="([^"]*)"', page)
    return [url for url in urls if re.match(r"(?:[a-z][a-z0-9+.-]*:)?//", url, re.IGNORECASE)]
