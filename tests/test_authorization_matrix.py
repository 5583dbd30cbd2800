"""The authorization matrix (issue #9 acceptance item 4; design §3 roles, §4 interfaces).

Every named URL of the project is one row of `MATRIX`: how to build its arguments for objects
owned by team A (`algorithm`), and the HTTP status each role gets for a GET and, on write
views, for the write methods. Roles are the columns:

    lead        lead of team A, which owns the objects
    other_lead  lead of team B (`inference`): cross-team reads are 404, never 403
    member      member of team A
    finance     the `finance` group: reads everything, changes nothing
    admin       the `platform-admin` group
    anon        nobody: web pages redirect to the login page, the API answers 401
    agent       a node agent's credential (a node of team A's pool): only the agent API
                knows it; everywhere else it is nobody (default: the `anon` column)
    scheduler   kube-scheduler's credential (Basic, the secret of its configuration): only the
                scheduler extender knows it; everywhere else it is nobody (default: `anon`)

`test_every_url_name_has_a_row` fails when a URL name has no row (or a row names no URL), so
adding a URL means adding one row here. The objects are made once per module inside one
transaction; every request runs in a savepoint rolled back after it, so writes do not leak.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from billing.budget_admin import budget_team_set
from monitoring import services as monitoring_services
from pools.demo.seed import load_catalog
from pools.models import Membership, Team
from pools.services import pools as services
from pools.services.disruption_budgets import budget_create
from pools.services.notifications import notification_raise
from tests.conftest import _user, make_document
from tests.monitoring.conftest import report
from tests.pools.pod_helpers import pool_with_nodes, submit

ROLES = ("lead", "other_lead", "member", "finance", "admin", "anon", "agent", "scheduler")
LOGIN = "login"  # a 302 to the login page, with ?next=
EXCLUDED_NAMESPACES = {
    # Django's admin site authorizes by is_staff and per-model permissions (kept by
    # pools/permissions.py for the two groups); its ~170 generated URL names are Django's code.
    "admin": "Django admin: is_staff + model permissions, generated URLs",
}
METRICS_TOKEN = "scrape-secret-for-the-matrix"
SCHEDULER_SECRET = "kube-scheduler-secret-for-the-matrix"


def S(lead, other_lead, member, finance, admin, anon, agent=None, scheduler=None) -> dict[str, Any]:  # noqa: N802
    """One row of expected statuses, in the column order of ROLES."""
    credentials = (anon if agent is None else agent, anon if scheduler is None else scheduler)
    return dict(zip(ROLES, (lead, other_lead, member, finance, admin, anon, *credentials), strict=True))


@dataclass(frozen=True)
class Write:
    method: str
    expect: dict[str, Any]
    body: Callable[[World], Any] | dict | None = None


@dataclass(frozen=True)
class Row:
    name: str
    get: dict[str, Any]
    kwargs: Callable[[World], dict] = lambda w: {}
    api: bool = False  # DRF: token-authenticated client, JSON bodies
    owned: bool = False  # the URL names an object of team A: other_lead must see 404 (or 405)
    writes: tuple[Write, ...] = ()
    settings: dict = field(default_factory=dict)


@dataclass
class World:
    users: dict
    tokens: dict
    sessions: dict  # role -> session key, signed in once for the module
    agent_credential: str
    pool: Any  # team A's pool with two Ready nodes
    order: Any  # a Pending order of team A
    pod: Any  # a Pending pod of team A
    budget: Any  # a PodDisruptionBudget of team A
    node: Any  # a Ready node of `pool`
    notification: Any  # an open alert of team A


POOL = lambda w: {"name": w.pool.name}  # noqa: E731
POD = lambda w: {"namespace": w.pod.namespace, "name": w.pod.name}  # noqa: E731
BUDGET = lambda w: {"namespace": w.budget.namespace, "name": w.budget.name}  # noqa: E731
ORDER = lambda w: {"pk": w.order.pk}  # noqa: E731
TEAM_A = lambda w: {"slug": "algorithm"}  # noqa: E731  (team A has a team budget)

# Common shapes. Web: a page of a team-A object; API: the same through the REST API.
EVERYONE_WEB = S(200, 200, 200, 200, 200, LOGIN)
EVERYONE_API = S(200, 200, 200, 200, 200, 401)
TEAM_READ_WEB = S(200, 404, 200, 200, 200, LOGIN)
TEAM_READ_API = S(200, 404, 200, 200, 200, 401)
POST_ONLY_WEB = S(405, 405, 405, 405, 405, LOGIN)
POST_ONLY_API = S(405, 405, 405, 405, 405, 401)
LEADS_FORM = S(200, 200, 403, 403, 200, LOGIN)  # create pools: leads (their own team) and admins
LEADS_FORM_INVALID_POST = S(400, 400, 403, 403, 400, LOGIN)  # an incomplete form: refused or invalid, nothing written
INCOMPLETE = {"submitted": "1"}  # a bound form with its required fields missing (an empty POST is an unbound form)

EXTENDER = {"EBCLOUD_SCHEDULER_EXTENDER_TOKEN": SCHEDULER_SECRET}
SCHEDULER_BASIC = "Basic " + base64.b64encode(f"kube-scheduler:{SCHEDULER_SECRET}".encode()).decode()


def extender_args(w: World) -> dict:
    """What kube-scheduler posts about team A's Pending pod and the pool's first node."""
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": w.pod.document["spec"],
           "metadata": {"name": w.pod.name, "namespace": w.pod.namespace, "uid": "0f3c2a1e-matrix"}}  # fmt: skip
    return {"Pod": pod, "Nodes": None, "NodeNames": [w.node.name]}


def extender_preemption_args(w: World) -> dict:
    """What kube-scheduler posts to preempt for that pod: a victim on the pool's first node."""
    pod = extender_args(w)["Pod"]
    return {"Pod": pod, "NodeNameToMetaVictims": {w.node.name: {"Pods": [{"UID": "victim-uid"}], "NumPDBViolations": 0}}}


MATRIX: tuple[Row, ...] = (
    # --- web: sign-in ---------------------------------------------------------------------
    #                                lead  other member finance admin anon
    Row("home", S(302, 302, 302, 302, 302, 302)),
    Row("login", S(200, 200, 200, 200, 200, 200)),
    Row("logout", S(405, 405, 405, 405, 405, 405), writes=(Write("post", S(302, 302, 302, 302, 302, 302)),)),
    # --- web: pools -----------------------------------------------------------------------
    Row("pools:list", EVERYONE_WEB),
    Row("pools:create", LEADS_FORM, writes=(Write("post", LEADS_FORM_INVALID_POST, INCOMPLETE),)),
    Row("pools:form-row", EVERYONE_WEB),
    Row("pools:preview", POST_ONLY_WEB, writes=(Write("post", LEADS_FORM, INCOMPLETE),)),  # the form's YAML: answers, writes nothing
    Row("pools:import", LEADS_FORM, writes=(Write("post", LEADS_FORM_INVALID_POST, INCOMPLETE),)),
    Row("pools:detail", TEAM_READ_WEB, POOL, owned=True),
    Row("pools:charts", TEAM_READ_WEB, POOL, owned=True),
    Row("pools:edit", S(200, 404, 403, 403, 200, LOGIN), POOL, owned=True,
        writes=(Write("post", S(400, 404, 403, 403, 400, LOGIN), INCOMPLETE),)),
    Row("pools:export", TEAM_READ_WEB, POOL, owned=True),
    Row("pools:delete", S(200, 404, 403, 403, 200, LOGIN), POOL, owned=True,
        writes=(Write("post", S(302, 404, 403, 403, 302, LOGIN), {}),)),
    Row("pools:fragmentation", TEAM_READ_WEB, POOL, owned=True),
    Row("pools:diagnose", TEAM_READ_WEB, POOL, owned=True),
    # The pool's alert rules and silences: the team reads them; its leads and admins silence.
    Row("pools:alerts", TEAM_READ_WEB, POOL, owned=True,
        writes=(Write("post", S(400, 404, 403, 403, 400, LOGIN), INCOMPLETE),)),
    # Team members read their pools' nodes; only platform admins act on them (POST `action`).
    Row("pools:node-detail", TEAM_READ_WEB, lambda w: {"name": w.pool.name, "node": w.node.name}, owned=True,
        writes=(Write("post", S(403, 404, 403, 403, 302, LOGIN), {"action": "revoke"}),)),
    Row("pools:fragmentation-apply", POST_ONLY_WEB, POOL, owned=True,
        writes=(Write("post", S(302, 404, 403, 403, 302, LOGIN), {"max_nodes": "1"}),)),
    Row("fragmentation", EVERYONE_WEB),  # team roles: their pools, each linking to its report
    Row("fragmentation-apply", POST_ONLY_WEB, writes=(Write("post", S(403, 403, 403, 403, 302, LOGIN), {"max_nodes": "1"}),)),
    # --- web: orders ----------------------------------------------------------------------
    Row("orders", EVERYONE_WEB),
    Row("order-decide", POST_ONLY_WEB, lambda w: {"order_id": w.order.pk, "decision": "approve"}, owned=True,
        writes=(Write("post", S(403, 404, 403, 403, 302, LOGIN), {}),)),
    # --- web: the audit log: platform admins, finance its money's entries (404 for the rest) ----
    Row("audit", S(404, 404, 404, 200, 200, LOGIN)),
    # --- web: alerts; a team's leads and platform admins acknowledge them ---------------------
    Row("notifications", EVERYONE_WEB),
    Row("notification-acknowledge", POST_ONLY_WEB, lambda w: {"pk": w.notification.pk}, owned=True,
        writes=(Write("post", S(302, 404, 403, 403, 302, LOGIN), {}),)),
    Row("repairs", S(404, 404, 404, 404, 200, LOGIN)),  # the fleet's repairs: platform admins only
    # --- web: pods ------------------------------------------------------------------------
    Row("pods:list", EVERYONE_WEB),
    Row("pods:create", S(200, 200, 200, 403, 200, LOGIN), writes=(Write("post", S(400, 400, 400, 403, 400, LOGIN), INCOMPLETE),)),
    Row("pods:detail", TEAM_READ_WEB, POD, owned=True),
    Row("pods:delete", POST_ONLY_WEB, POD, owned=True, writes=(Write("post", S(302, 404, 302, 403, 302, LOGIN), {}),)),
    Row("disruption:list", EVERYONE_WEB),
    Row("disruption:create", S(200, 200, 200, 403, 200, LOGIN), writes=(Write("post", S(400, 400, 400, 403, 400, LOGIN), INCOMPLETE),)),
    Row("disruption:delete", POST_ONLY_WEB, BUDGET, owned=True, writes=(Write("post", S(302, 404, 302, 403, 302, LOGIN), {}),)),
    # --- web: monitoring and billing ------------------------------------------------------
    Row("monitoring-overview", EVERYONE_WEB),
    Row("monitoring-trends", EVERYONE_WEB),  # each sees the trends of the pools they may see
    Row("billing:costs", EVERYONE_WEB),
    Row("billing:budgets", EVERYONE_WEB),
    # Budgets are set by finance and platform admins; another team's pool or team budget is not found.
    Row("billing:budget-pool", S(403, 404, 403, 200, 200, LOGIN), POOL, owned=True,
        writes=(Write("post", S(403, 404, 403, 400, 400, LOGIN), {"monthly": "-1"}),)),
    Row("billing:budget-team-create", S(403, 403, 403, 200, 200, LOGIN),
        writes=(Write("post", S(403, 403, 403, 400, 400, LOGIN), INCOMPLETE),)),
    Row("billing:budget-team", S(403, 404, 403, 200, 200, LOGIN), TEAM_A, owned=True,
        writes=(Write("post", S(403, 404, 403, 400, 400, LOGIN), INCOMPLETE),)),
    Row("billing:budget-team-delete", POST_ONLY_WEB, TEAM_A, owned=True,
        writes=(Write("post", S(403, 404, 403, 302, 302, LOGIN), {}),)),
    # --- REST API /api/v1/ ----------------------------------------------------------------
    #                                      lead  other member finance admin anon
    Row("api:token", S(405, 405, 405, 405, 405, 405), api=True,
        writes=(Write("post", S(400, 400, 400, 400, 400, 400), {"username": "lead", "password": "wrong"}),)),
    Row("api:pool-list", EVERYONE_API, api=True, writes=(Write("post", S(400, 400, 403, 403, 400, 401), {}),)),
    Row("api:pool-detail", TEAM_READ_API, POOL, api=True, owned=True, writes=(
        Write("patch", S(200, 404, 403, 403, 200, 401), {"spec": {"nodeCount": {"max": 7}}}),
        Write("put", S(200, 404, 403, 403, 200, 401), lambda w: w.pool.document),
        Write("delete", S(202, 404, 403, 403, 202, 401)),
    )),
    Row("api:pool-events", TEAM_READ_API, POOL, api=True, owned=True),
    Row("api:pool-diagnose", TEAM_READ_API, POOL, api=True, owned=True),
    Row("api:pool-nodes", TEAM_READ_API, POOL, api=True, owned=True),
    Row("api:pool-scale", POST_ONLY_API, POOL, api=True, owned=True,
        writes=(Write("post", S(200, 404, 403, 403, 200, 401), {"max": 7}),)),
    Row("api:pool-fragmentation", TEAM_READ_API, POOL, api=True, owned=True),
    Row("api:pool-alert-silences", TEAM_READ_API, POOL, api=True, owned=True,
        writes=(Write("post", S(400, 404, 403, 403, 400, 401), {}),)),
    # DELETE only (ends a silence): a GET is refused like on a POST-only URL.
    Row("api:pool-alert-silence", POST_ONLY_API, lambda w: {"name": w.pool.name, "pk": 999999}, api=True, owned=True,
        writes=(Write("delete", S(404, 404, 403, 403, 404, 401)),)),
    Row("api:pool-fragmentation-apply", POST_ONLY_API, POOL, api=True, owned=True,
        writes=(Write("post", S(200, 404, 403, 403, 200, 401), {"maxNodes": 1}),)),
    Row("api:fragmentation", S(403, 403, 403, 200, 200, 401), api=True),
    Row("api:fragmentation-apply", POST_ONLY_API, api=True, writes=(Write("post", S(403, 403, 403, 403, 200, 401), {"maxNodes": 1}),)),
    Row("api:order-list", EVERYONE_API, api=True),
    Row("api:order-detail", TEAM_READ_API, ORDER, api=True, owned=True),
    Row("api:order-approve", POST_ONLY_API, ORDER, api=True, owned=True, writes=(Write("post", S(403, 404, 403, 403, 200, 401), {}),)),
    Row("api:order-reject", POST_ONLY_API, ORDER, api=True, owned=True,
        writes=(Write("post", S(403, 404, 403, 403, 200, 401), {"reason": "over budget"}),)),
    Row("api:pod-list", EVERYONE_API, api=True, writes=(Write("post", S(400, 400, 400, 403, 400, 401), {}),)),
    Row("api:pod-detail", TEAM_READ_API, POD, api=True, owned=True, writes=(Write("delete", S(204, 404, 204, 403, 204, 401)),)),
    Row("api:pdb-list", EVERYONE_API, api=True, writes=(Write("post", S(400, 400, 400, 403, 400, 401), {}),)),
    Row("api:pdb-detail", TEAM_READ_API, BUDGET, api=True, owned=True, writes=(
        Write("put", S(400, 404, 400, 403, 400, 401), {}), Write("delete", S(204, 404, 204, 403, 204, 401)))),
    Row("billing:api-costs", EVERYONE_API, api=True),
    # The OpenAPI schema and its docs page are public: they describe the API, they hold no data.
    Row("schema", S(200, 200, 200, 200, 200, 200), api=True),
    Row("api-docs", S(200, 200, 200, 200, 200, 200), api=True),
    # --- agent API /api/agent/v1/: node credentials; users only mint join tokens ------------
    #                                      lead  other member finance admin anon agent
    Row("agent-api:join-tokens", S(405, 405, 405, 405, 405, 401), api=True,
        writes=(Write("post", S(403, 404, 403, 403, 201, 401, 401), lambda w: {"node": w.node.name}),)),
    # Joining is authenticated by the join token in the body alone: a wrong one is 401 for anyone.
    Row("agent-api:join", S(405, 405, 405, 405, 405, 405), api=True,
        writes=(Write("post", S(401, 401, 401, 401, 401, 401), lambda w: {"token": "abcdef.0123456789abcdef", "node": w.node.name}),)),
    Row("agent-api:credential-rotate", S(401, 401, 401, 401, 401, 401, 405), api=True,
        writes=(Write("post", S(401, 401, 401, 401, 401, 401, 200), {}),)),
    Row("agent-api:reports", S(401, 401, 401, 401, 401, 401, 405), api=True,
        writes=(Write("post", S(401, 401, 401, 401, 401, 401, 200), {"reports": [report(1)]}),)),
    # The simulated cloud hands a node's agent the GPU faults it raised on that node's machine.
    Row("agent-api:simulated-faults", S(401, 401, 401, 401, 401, 401, 405), api=True,
        writes=(Write("post", S(401, 401, 401, 401, 401, 401, 200)),)),
    # --- the scheduler extender /api/scheduler/v1/: kube-scheduler's secret, nobody else ---------
    #                                              lead  other member finance admin anon agent scheduler
    Row("scheduler-extender:filter", S(401, 401, 401, 401, 401, 401, 401, 405), api=True, settings=EXTENDER,
        writes=(Write("post", S(401, 401, 401, 401, 401, 401, 401, 200), lambda w: extender_args(w)),)),
    Row("scheduler-extender:prioritize", S(401, 401, 401, 401, 401, 401, 401, 405), api=True, settings=EXTENDER,
        writes=(Write("post", S(401, 401, 401, 401, 401, 401, 401, 200), lambda w: extender_args(w)),)),
    Row("scheduler-extender:preempt", S(401, 401, 401, 401, 401, 401, 401, 405), api=True, settings=EXTENDER,
        writes=(Write("post", S(401, 401, 401, 401, 401, 401, 401, 200), lambda w: extender_preemption_args(w)),)),
    # --- Prometheus: a scrape token, never a user session or an agent credential -----------
    Row("metrics", S(403, 403, 403, 403, 403, 403), settings={"EBCLOUD_METRICS_TOKEN": METRICS_TOKEN}),
    # --- a load balancer's probe: anyone, no credentials; reads only, writes nothing ---------
    Row("healthz", S(200, 200, 200, 200, 200, 200), writes=(Write("post", S(405, 405, 405, 405, 405, 405)),)),
)
ROWS = {row.name: row for row in MATRIX}


# --- completeness --------------------------------------------------------------------------


def url_names(resolver=None, namespace: str = "") -> set[str]:
    """Every named URL pattern, namespaced (`pools:detail`), outside EXCLUDED_NAMESPACES."""
    names: set[str] = set()
    for entry in (resolver or get_resolver()).url_patterns:
        if isinstance(entry, URLResolver):
            if entry.namespace in EXCLUDED_NAMESPACES and not namespace:
                continue
            inner = f"{namespace}:{entry.namespace}" if namespace and entry.namespace else (entry.namespace or namespace)
            names |= url_names(entry, inner)
        elif isinstance(entry, URLPattern) and entry.name:
            names.add(f"{namespace}:{entry.name}" if namespace else entry.name)
    return names


def test_every_url_name_has_a_row():
    """A URL without a row is an unreviewed access policy; a row without a URL is stale."""
    assert len(ROWS) == len(MATRIX), "two rows share a URL name"
    names = url_names()
    missing, stale = sorted(names - ROWS.keys()), sorted(ROWS.keys() - names)
    assert not missing and not stale, f"URL names without a row: {missing}; rows without a URL name: {stale}"


def test_cross_team_objects_are_404_not_403():
    """The table itself keeps the rule: another team's object does not exist for a lead."""
    for row in MATRIX:
        if row.owned:
            for expect in (row.get, *(w.expect for w in row.writes)):
                assert expect["other_lead"] in (404, 405), f"{row.name}: other_lead gets {expect['other_lead']}"


# --- the objects, once per module -----------------------------------------------------------


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    """Team A's pool (two Ready nodes), a Pending order, a Pending pod, a joined node agent,
    and one user per role with an API token; rolled back after the module."""
    with django_db_blocker.unblock(), transaction.atomic():
        load_catalog()
        team_a = Team.objects.create(name="Algorithm", slug="algorithm")
        team_b = Team.objects.create(name="Inference", slug="inference")
        users = {
            "lead": _user("lead", team=team_a, role=Membership.Role.LEAD),
            "other_lead": _user("other-lead", team=team_b, role=Membership.Role.LEAD),
            "member": _user("member", team=team_a, role=Membership.Role.MEMBER),
            "finance": _user("finance", group="finance"),
            "admin": _user("admin", group="platform-admin"),
        }
        pool = pool_with_nodes(users["lead"], name="train-pool-a", nodes=2)
        budget_team_set(user=users["finance"], team=team_a, monthly_amount=Decimal("1000"))
        ordered = services.pool_create(user=users["lead"], document=make_document("train-pool-b"))
        node = pool.nodes.order_by("name").first()
        _, join_token = monitoring_services.join_token_create(user=users["admin"], node=node)
        _, credential, _ = monitoring_services.agent_join(token=join_token, node_name=node.name)
        yield World(
            users=users,
            tokens={role: Token.objects.create(user=user).key for role, user in users.items()},
            sessions={role: _signed_in(user) for role, user in users.items()},
            agent_credential=credential,
            pool=pool,
            order=ordered.orders.get(),
            pod=submit(users["member"], "train-job"),
            budget=budget_create(user=users["member"], document={"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                                                 "metadata": {"name": "trainers"}, "spec": {"minAvailable": 1}}),
            node=node,
            notification=notification_raise(team=team_a, pool=pool, kind="HighGpuAllocation", message="full",
                                            key="matrix", now=timezone.now()),
        )
        transaction.set_rollback(True)


def _signed_in(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[django_settings.SESSION_COOKIE_NAME].value


def client_for(world: World, role: str, *, api: bool) -> Client:
    if api:
        client = APIClient()
        if role == "agent":
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.agent_credential}")
        elif role == "scheduler":
            client.credentials(HTTP_AUTHORIZATION=SCHEDULER_BASIC)
        elif role != "anon":
            client.credentials(HTTP_AUTHORIZATION=f"Token {world.tokens[role]}")
        return client
    if role == "agent":
        return Client(HTTP_AUTHORIZATION=f"Bearer {world.agent_credential}")
    if role == "scheduler":
        return Client(HTTP_AUTHORIZATION=SCHEDULER_BASIC)
    client = Client()
    if role != "anon":
        client.cookies[django_settings.SESSION_COOKIE_NAME] = world.sessions[role]
    return client


def send(client: Client, method: str, url: str, body: Any, *, api: bool):
    if method == "get":
        return client.get(url)
    if api:
        return getattr(client, method)(url, body, format="json")
    return getattr(client, method)(url, body or {})


CASES = [
    pytest.param(row, method, body, expect[role], role, id=f"{row.name}-{method.upper()}-{role}")
    for row in MATRIX
    for method, body, expect in (("get", None, row.get), *((w.method, w.body, w.expect) for w in row.writes))
    for role in ROLES
]


@pytest.mark.parametrize(("row", "method", "body", "expected", "role"), CASES)
def test_authorization_matrix(world, db, settings, row: Row, method: str, body, expected, role: str):
    """Each (URL name, method, role) answers exactly the status of its row."""
    for key, value in row.settings.items():
        setattr(settings, key, value)
    url = reverse(row.name, kwargs=row.kwargs(world))
    payload = body(world) if callable(body) else body
    response = send(client_for(world, role, api=row.api), method, url, payload, api=row.api)
    shown = f"{method.upper()} {url} as {role}: {response.status_code} {response.content[:300]!r}"
    if expected == LOGIN:
        assert response.status_code == 302 and response["Location"].startswith(reverse("login") + "?next="), shown
    else:
        assert response.status_code == expected, shown


@pytest.mark.parametrize("name", ["agent-api:credential-rotate", "agent-api:reports", "agent-api:simulated-faults"])
def test_the_agent_api_refuses_user_sessions(world, db, name):
    """A signed-in browser is not a node agent: the agent API ignores sessions (design §4)."""
    client = Client()
    client.force_login(world.users["admin"])
    response = client.post(reverse(name), {"reports": [report(1)]}, content_type="application/json")
    assert response.status_code == 401, response.content
