"""Role flags for the navigation (role-aware menus) and the count of open alerts."""

from django.utils.functional import SimpleLazyObject

from pools import roles as _roles
from pools.selectors.notifications import open_count


def roles(request):
    user = request.user
    return {
        "is_platform_admin": _roles.is_admin(user),
        "is_finance": _roles.is_finance(user),
        "role_label": _roles.role_label(user) if user.is_authenticated else "",
        # Counted only when a page shows it (not for JSON or fragments).
        "open_alerts": SimpleLazyObject(lambda: open_count(user)),
    }
