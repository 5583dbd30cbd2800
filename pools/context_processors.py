"""Role flags for the navigation (role-aware menus)."""

from pools import roles as _roles


def roles(request):
    user = request.user
    return {
        "is_platform_admin": _roles.is_admin(user),
        "is_finance": _roles.is_finance(user),
        "role_label": _roles.role_label(user) if user.is_authenticated else "",
    }
