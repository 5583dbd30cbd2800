"""Who may claim a namespace (design §3: a pod's namespace belongs to a team): Kubernetes' own
namespaces are no team's, a team's slug is always its own namespace, and a team is never created
with a slug another team's pods already hold (the reviewer's repro: a lead's pod in `research`
left the team `research`, created later, without a namespace). A refused request writes nothing."""

from __future__ import annotations

import pytest
from django.core.management.base import CommandError
from django.db import transaction
from django.urls import reverse

from pools.core.errors import ConflictError
from pools.demo.seed import load_people
from pools.models import Membership, NamespaceTeam, Team
from pools.models.pods import Pod, PodDisruptionBudget
from pools.services.namespaces import namespace_claim

pytestmark = pytest.mark.django_db

SQUAT = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "squat", "namespace": "research"},
         "spec": {"containers": [{"name": "a", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}  # fmt: skip
RESERVED = ["default", "kube-system", "kube-public", "kube-node-lease", "kube-flannel"]
CREATED = {"created_at_0": "2026-12-01", "created_at_1": "08:00:00"}
NO_INLINES = {"memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0", **CREATED}


def pod(name: str, namespace: str | None = None) -> dict:
    metadata = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {**SQUAT, "metadata": metadata}


def budget(name: str, namespace: str) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": namespace},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "x"}}}}  # fmt: skip


def errors(response) -> dict[str, str]:
    return {e["field"]: e["message"] for e in response.json()["errors"]}


def add_team(admin_client, slug: str, name: str = ""):
    return admin_client.post(reverse("admin:pools_team_add"), {"name": name or slug.title(), "slug": slug, **NO_INLINES})


def form_errors(response) -> str:
    return " ".join(str(e) for e in response.context["adminform"].form.errors.get("slug", []))


def test_the_reviewers_repro_a_team_is_not_created_on_a_namespace_another_team_holds(actors, api, admin_client):
    assert api("other_lead").post("/api/v1/pods/", SQUAT, format="json").status_code == 201
    claims = list(NamespaceTeam.objects.values_list("namespace", "team__slug"))

    response = add_team(admin_client, "research")
    assert response.status_code == 200  # the form again, with the error beside the slug
    message = form_errors(response)
    assert "already belongs to team 'inference'" in message and "1 pod(s)" in message
    assert "choose another slug" in message and "Namespace teams" in message
    assert not Team.objects.filter(slug="research").exists()
    assert list(NamespaceTeam.objects.values_list("namespace", "team__slug")) == claims  # nothing changed
    assert Pod.objects.get(name="squat").team.slug == "inference"  # inference's pod is untouched

    # Once inference has moved out and an admin removed the mapping, the team gets its namespace.
    assert api("other_lead").delete("/api/v1/pods/research/squat/").status_code in (200, 204)
    NamespaceTeam.objects.filter(namespace="research").delete()
    assert add_team(admin_client, "research").status_code == 302
    research = Team.objects.get(slug="research")
    lead = type(actors["lead"]).objects.create_user(username="lead-research", password="pw")
    Membership.objects.create(user=lead, team=research, role=Membership.Role.LEAD)
    actors["research_lead"] = lead
    response = api("research_lead").post("/api/v1/pods/", pod("mine"), format="json")  # no namespace: the team's slug
    assert response.status_code == 201, response.content
    assert response.json()["metadata"]["namespace"] == "research"


def test_a_teams_slug_is_its_namespace_before_its_first_pod(actors, api, admin_client):
    assert add_team(admin_client, "research").status_code == 302
    assert api("other_lead").post("/api/v1/pods/", SQUAT, format="json").status_code == 404
    assert not NamespaceTeam.objects.exists() and not Pod.objects.exists()


def test_a_claim_loses_to_a_team_created_after_its_check_and_rolls_back(teams):
    Team.objects.create(name="Late", slug="late")  # appeared between namespace_require and the write
    with pytest.raises(ConflictError, match="just taken by another team"), transaction.atomic():
        namespace_claim(namespace="late", team=teams["inference"])
    assert not NamespaceTeam.objects.filter(namespace="late").exists()


@pytest.mark.parametrize("namespace", RESERVED)
def test_kubernetes_namespaces_are_no_teams_for_pods(actors, api, namespace):
    for role, url in (("other_lead", "/api/v1/pods/"), ("admin", "/api/v1/pods/?team=inference")):
        response = api(role).post(url, pod("squat", namespace), format="json")
        assert response.status_code == 400, response.content
        message = errors(response)["metadata.namespace"]
        assert repr(namespace) in message and ("Kubernetes' own" in message or "'kube-' prefix" in message)
        assert "(inference)" in message  # where to submit instead
    assert not Pod.objects.exists() and not NamespaceTeam.objects.exists()


@pytest.mark.parametrize("namespace", RESERVED)
def test_kubernetes_namespaces_are_no_teams_for_disruption_budgets(actors, api, namespace):
    response = api("other_lead").post("/api/v1/poddisruptionbudgets/", budget("hold", namespace), format="json")
    assert response.status_code == 400, response.content
    assert repr(namespace) in errors(response)["metadata.namespace"]
    assert not PodDisruptionBudget.objects.exists() and not NamespaceTeam.objects.exists()


@pytest.mark.parametrize(
    ("slug", "says"),
    [("default", "one of Kubernetes' own"), ("kube-system", "one of Kubernetes' own"), ("kube-batch", "'kube-' prefix"),
     ("ml_team", "DNS-1123 label")],
)  # fmt: skip
def test_the_admin_refuses_a_team_slug_that_cannot_be_its_namespace(admin_client, slug, says):
    response = add_team(admin_client, slug, name="Newcomers")
    assert response.status_code == 200 and says in form_errors(response)
    assert not Team.objects.filter(name="Newcomers").exists()


def test_renaming_a_team_onto_a_held_namespace_is_refused_but_other_edits_save(admin_client, teams):
    NamespaceTeam.objects.create(namespace="shared", team=teams["inference"])
    NamespaceTeam.objects.create(namespace="algorithm", team=teams["inference"])  # written before the rule
    change = reverse("admin:pools_team_change", args=[teams["algorithm"].pk])
    response = admin_client.post(change, {"name": "Algorithm", "slug": "shared", **NO_INLINES})
    assert response.status_code == 200 and "already belongs to team 'inference'" in form_errors(response)
    assert admin_client.post(change, {"name": "Algorithms", "slug": "algorithm", **NO_INLINES}).status_code == 302
    assert Team.objects.get(pk=teams["algorithm"].pk).name == "Algorithms"


def test_a_renamed_team_keeps_the_namespace_of_its_old_slug_while_its_pods_are_there(api, admin_client, teams):
    """Renaming inference left its running pod in namespace 'inference', which no mapping held
    (a team's slug is its namespace without one, as for pods mirrored from a real cluster): the
    next team's first pod there would have claimed it. The old slug is mapped to the team."""
    assert api("other_lead").post("/api/v1/pods/", pod("mine", "inference"), format="json").status_code == 201
    NamespaceTeam.objects.filter(namespace="inference").delete()  # the namespace is the team's by its slug alone
    change = reverse("admin:pools_team_change", args=[teams["inference"].pk])
    assert admin_client.post(change, {"name": "Serving", "slug": "serving", **NO_INLINES}).status_code == 302
    assert NamespaceTeam.objects.get(namespace="inference").team == teams["inference"]
    assert api("lead").post("/api/v1/pods/", pod("squat", "inference"), format="json").status_code == 404

    # A team with nothing in its old namespace leaves it free.
    change = reverse("admin:pools_team_change", args=[teams["algorithm"].pk])
    assert admin_client.post(change, {"name": "Algorithms", "slug": "algorithms", **NO_INLINES}).status_code == 302
    assert not NamespaceTeam.objects.filter(namespace="algorithm").exists()


@pytest.mark.parametrize(
    ("namespace", "team", "says"),
    [("kube-system", "inference", "one of Kubernetes' own"), ("algorithm", "inference", "own namespace of team 'algorithm'"),
     ("algorithm", "algorithm", None), ("newspace", "inference", None)],
)  # fmt: skip
def test_the_admins_namespace_mapping_follows_the_same_rule(admin_client, teams, namespace, team, says):
    response = admin_client.post(reverse("admin:pools_namespaceteam_add"), {"namespace": namespace, "team": teams[team].pk} | CREATED)
    if says is None:
        assert response.status_code == 302 and NamespaceTeam.objects.get(namespace=namespace).team == teams[team]
    else:
        assert response.status_code == 200 and says in " ".join(response.context["adminform"].form.errors["namespace"])
        assert not NamespaceTeam.objects.exists()


def test_the_demo_seed_refuses_a_team_whose_namespace_another_team_holds(tmp_path):
    squatter = Team.objects.create(name="Squatters", slug="squatters")
    NamespaceTeam.objects.create(namespace="inference", team=squatter)
    with pytest.raises(CommandError, match="already belongs to team 'squatters'"):
        load_people(tmp_path / "passwords.json")
    assert list(Team.objects.values_list("slug", flat=True)) == ["squatters"]


def test_a_mapping_whose_team_still_has_pods_there_is_protected_from_deletion_and_moving(api, admin_client, teams):
    """Removing the mapping left inference's running pod in a namespace the next team's first
    pod would claim: the admin's delete page lists it as protected, as for any protected object."""
    assert api("other_lead").post("/api/v1/pods/", SQUAT, format="json").status_code == 201  # claims research
    assert api("other_lead").post("/api/v1/poddisruptionbudgets/", budget("hold", "research"), format="json").status_code == 201
    mapping = NamespaceTeam.objects.get(namespace="research")
    delete = reverse("admin:pools_namespaceteam_delete", args=[mapping.pk])
    says = "Team &#x27;inference&#x27; still has 1 live pod(s) (squat) and 1 disruption budget(s) in namespace &#x27;research&#x27;"

    for response in (admin_client.get(delete), admin_client.post(delete, {"post": "yes"})):
        assert response.status_code == 200 and "protected related objects" in response.content.decode()
        assert says in response.content.decode() and "delete them first" in response.content.decode()
    bulk = {"action": "delete_selected", "_selected_action": [mapping.pk], "post": "yes"}
    response = admin_client.post(reverse("admin:pools_namespaceteam_changelist"), bulk)
    assert response.status_code == 200 and says in response.content.decode()
    change = reverse("admin:pools_namespaceteam_change", args=[mapping.pk])
    for field, edit in (("team", {"namespace": "research", "team": teams["algorithm"].pk}), ("namespace", {"namespace": "lab", "team": teams["inference"].pk})):
        response = admin_client.post(change, edit | CREATED)
        assert response.status_code == 200 and "still has 1 live pod(s)" in " ".join(response.context["adminform"].form.errors[field])
    assert NamespaceTeam.objects.get(namespace="research").team == teams["inference"]  # nothing changed

    # Once the pod and the budget are gone, the mapping goes.
    assert api("other_lead").delete("/api/v1/pods/research/squat/").status_code in (200, 204)
    assert api("other_lead").delete("/api/v1/poddisruptionbudgets/research/hold/").status_code == 204
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert not NamespaceTeam.objects.exists()


def test_a_mapping_that_holds_nothing_a_team_needs_is_deleted_at_once(api, admin_client, teams, settings):
    own = NamespaceTeam.objects.create(namespace="inference", team=teams["inference"])  # the team's slug stays its namespace
    assert api("other_lead").post("/api/v1/pods/", pod("mine", "inference"), format="json").status_code == 201
    assert admin_client.post(reverse("admin:pools_namespaceteam_delete", args=[own.pk]), {"post": "yes"}).status_code == 302

    # On a real cluster the mirrored pods follow their namespace's mapping: changing or removing
    # it is how an admin moves a namespace, running pods and all.
    assert api("other_lead").post("/api/v1/pods/", SQUAT, format="json").status_code == 201
    settings.EBCLOUD_CLUSTER_BACKEND = "kubernetes"
    mapping = NamespaceTeam.objects.get(namespace="research")
    assert admin_client.post(reverse("admin:pools_namespaceteam_delete", args=[mapping.pk]), {"post": "yes"}).status_code == 302
    assert not NamespaceTeam.objects.exists()
