"""Who may do what: the one place that reads roles (design §3, §6).

Team roles come from Membership (`lead`, `member`); global roles are Django groups
(`finance`: reads everything, changes nothing; `platform-admin`: approves orders, edits quotas
and prices). Superusers are admins.
"""

from __future__ import annotations

FINANCE = "finance"
PLATFORM_ADMIN = "platform-admin"


def _group_names(user) -> frozenset[str]:
    cached = getattr(user, "_ebcloud_groups", None)
    if cached is None:
        cached = frozenset(user.groups.values_list("name", flat=True)) if user.is_authenticated else frozenset()
        user._ebcloud_groups = cached
    return cached


def is_admin(user) -> bool:
    return bool(user.is_authenticated and (user.is_superuser or PLATFORM_ADMIN in _group_names(user)))


def is_finance(user) -> bool:
    return bool(user.is_authenticated and FINANCE in _group_names(user))


def sees_all_teams(user) -> bool:
    """Admins and finance read every team's pools, orders, nodes, events and costs."""
    return is_admin(user) or is_finance(user)


def team_ids(user, *, role: str | None = None) -> frozenset[int]:
    """Teams the user belongs to (optionally only those where they hold `role`)."""
    if not user.is_authenticated:
        return frozenset()
    cache = getattr(user, "_ebcloud_teams", None)
    if cache is None:
        cache = tuple(user.memberships.values_list("team_id", "role"))
        user._ebcloud_teams = cache
    return frozenset(team for team, held in cache if role is None or held == role)


def lead_team_ids(user) -> frozenset[int]:
    return team_ids(user, role="lead")


def writes_for_team(user, team_id: int | None) -> bool:
    """Change a team's pods and disruption budgets: its members (any role), and platform admins."""
    return is_admin(user) or team_id in team_ids(user)


def can_manage_team_pools(user, team_id: int) -> bool:
    """Create, change and delete pools of a team: its leads, and platform admins."""
    return is_admin(user) or team_id in lead_team_ids(user)


def role_label(user) -> str:
    if is_admin(user):
        return "platform admin"
    if is_finance(user):
        return "finance"
    if lead_team_ids(user):
        return "team lead"
    return "member"
