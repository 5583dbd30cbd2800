"""Which team a namespace belongs to: one rule for the pod API (a namespace of another team does
not exist for you) and the scheduler extender (a pod's team is its namespace's)."""

from __future__ import annotations

from pools.core.namespaces import team_slug_error
from pools.models import NamespaceTeam, Team
from pools.models.pods import Pod, PodDisruptionBudget


def namespace_owner(namespace: str) -> Team | None:
    """The admins' (or its first pod's) mapping, else the team named like it (a team's own
    namespace is its slug); None while nobody has it. The mapping wins: a team is never
    created with a slug another team's mapping holds (`team_slug_problem`), so this order only
    matters for rows written before that rule, which keep their owner rather than silently
    changing the team of the pods running there."""
    mapped = NamespaceTeam.objects.filter(namespace=namespace).select_related("team").first()
    return mapped.team if mapped is not None else Team.objects.filter(slug=namespace).first()


def namespace_teams() -> dict[str, str]:
    """Every namespace a team owns by `namespace_owner`'s rule, namespace -> team slug: each
    team's own namespace (its slug), the admins' mappings winning. For a reader that applies the
    rule to many namespaces at once (the admission policy): two queries."""
    return {slug: slug for slug in Team.objects.values_list("slug", flat=True)} | dict(NamespaceTeam.objects.values_list("namespace", "team__slug"))


def team_slug_problem(slug: str, *, team_id: int | None = None) -> str:
    """Why `slug` cannot be the slug of team `team_id` (None: a new team), "" when it can. A team's slug
    is its namespace, so it must be a namespace a team may have, and not one another team holds
    already: handing that namespace over would move the other team's pods and budgets there
    (and their bills) to the new team, or leave the new team without a namespace of its own."""
    if error := team_slug_error(slug):
        return error
    claim = NamespaceTeam.objects.filter(namespace=slug).exclude(team_id=team_id).select_related("team").first()
    if claim is None:
        return ""
    pods, budgets = namespace_holdings(slug, claim.team_id)
    held = f"it holds {pods} pod(s) and {budgets} disruption budget(s) there" if pods or budgets else "it has nothing there now"
    return (f"namespace {slug!r} already belongs to team {claim.team.slug!r} ({held}), and a team's slug is its "
            f"namespace; choose another slug, or first remove the mapping {slug} -> {claim.team.slug} "
            f"under Namespace teams once that team has moved out")


def _live_pods(namespace: str, team_id: int):
    return Pod.objects.live().filter(namespace=namespace, team_id=team_id)


def namespace_holdings(namespace: str, team_id: int) -> tuple[int, int]:
    """How many live pods and disruption budgets team `team_id` has in `namespace`: what ties
    the team to the namespace."""
    return _live_pods(namespace, team_id).count(), PodDisruptionBudget.objects.filter(namespace=namespace, team_id=team_id).count()


def mapping_removal_problem(namespace: str, team: Team) -> str:
    """Why the mapping `namespace` -> `team` cannot be removed or pointed elsewhere ("" when it
    can). The control plane's own pods keep the team they were submitted for: with the mapping
    gone, the next team's first pod would claim the namespace, and this team's pods, budgets and
    bills would sit in another team's namespace. A team's own namespace (its slug) stays its
    without a mapping, so a mapping of it holds nothing."""
    if namespace == team.slug:
        return ""
    pods, budgets = namespace_holdings(namespace, team.pk)
    if not pods and not budgets:
        return ""
    held = []
    if pods:
        names = ", ".join(_live_pods(namespace, team.pk).order_by("name").values_list("name", flat=True)[:3])
        held.append(f"{pods} live pod(s) ({names}{f' and {pods - 3} more' if pods > 3 else ''})")
    if budgets:
        held.append(f"{budgets} disruption budget(s)")
    held = " and ".join(held)
    return (f"team {team.slug!r} still has {held} in namespace {namespace!r}; delete them first, or another "
            f"team's first pod could claim the namespace while they are there")
