"""The username django-axes records for a login attempt (`AXES_USERNAME_CALLABLE`).

Axes' default takes it verbatim from the form or the API body and stores it in a varchar(255):
an overlong username made every login path (`/login/`, `/admin/login/`, `/api/v1/auth/token/`)
answer 500 on PostgreSQL (issue #9 item 5, "overlong names"). Cut to the longest a user can
have, it still locks the name that was tried, and no real user is locked out by it.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model


def attempt_username(request, credentials: dict | None) -> str | None:
    field = settings.AXES_USERNAME_FORM_FIELD
    if credentials:
        username = credentials.get(field)
    else:
        username = getattr(request, "data", request.POST).get(field)
    if not isinstance(username, str):
        return username
    user_model = get_user_model()
    return username[: user_model._meta.get_field(user_model.USERNAME_FIELD).max_length]
