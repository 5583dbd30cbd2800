"""The global roles as Django groups with model permissions, kept in step after every migrate.

`platform-admin` edits quotas, prices, the catalog, teams, memberships and which team a
namespace belongs to (docs/pods.md: "an admin maps it") in the admin site (budgets are set on
the budgets page, which audits them: pools/views/admin_audit.py `ViewOnlyAdmin`);
`finance` may view everything there and change nothing.
"""

from __future__ import annotations

from django.apps import apps as global_apps
from django.contrib.auth.models import Group, Permission

from pools import roles

ADMIN_EDITS = {
    "pools": ("quota", "gpumodel", "nodetype", "zone", "team", "membership", "namespaceteam"),
    "billing": ("nodeprice", "leaseterm", "account", "pricebookentry"),
}
VIEW_APPS = ("pools", "billing")


def ensure_role_groups(sender=None, **kwargs) -> None:
    if not global_apps.is_installed("django.contrib.auth"):
        return
    admin, _ = Group.objects.get_or_create(name=roles.PLATFORM_ADMIN)
    finance, _ = Group.objects.get_or_create(name=roles.FINANCE)
    views = Permission.objects.filter(content_type__app_label__in=VIEW_APPS, codename__startswith="view_")
    edits = Permission.objects.none()
    for app_label, model_names in ADMIN_EDITS.items():
        edits |= Permission.objects.filter(
            content_type__app_label=app_label,
            content_type__model__in=model_names,
            codename__regex=r"^(add|change|delete)_",
        )
    admin.permissions.add(*views, *edits)
    finance.permissions.add(*views)
