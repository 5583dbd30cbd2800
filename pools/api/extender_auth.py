"""Who may call the scheduler extender: kube-scheduler, by the secret its configuration carries.

kube-scheduler cannot add a header to its extender calls; what it sends is set by its
KubeSchedulerConfiguration (`urlPrefix`, `tlsConfig`). We chose a secret in `urlPrefix`'s user
information, `https://kube-scheduler:<secret>@pools.example.com/api/scheduler/v1`, over a client
TLS certificate:

- Go's HTTP client turns a URL's user information into `Authorization: Basic ...`, so the secret
  travels in a header (TLS protects it like any API token) and never in a request path, where
  access logs and proxies would keep it; Go also strips it from its transport errors.
- A client certificate would have to be verified by whatever terminates TLS in front of the
  web tier and handed to Django in a header that the proxy must be trusted to set; a header we
  check ourselves needs no such trust and is tested here end to end.

kube-scheduler prints the URL (secret included) in its own error for an answer other than 200,
which is why the extender answers 200 to the scheduler for anything it can express in the
protocol (a filter's `Error`), and why deploy/kube-scheduler-config.yaml marks the extender
`ignorable`: such an error stays in kube-scheduler's log and never reaches a pod's events.

The secret is `EBCLOUD_SCHEDULER_EXTENDER_TOKEN`; without one, nobody may call the extender.
Anyone else (users' API tokens and sessions, node agents, a wrong secret) is answered 401.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

SCHEDULER_USERNAME = "kube-scheduler"


class SchedulerPrincipal:
    """`request.user` of a call from kube-scheduler."""

    is_authenticated = True
    is_active = True
    is_anonymous = False
    is_superuser = False

    def __str__(self) -> str:
        return SCHEDULER_USERNAME


def scheduler_credential_valid(header: str) -> bool:
    """Whether an `Authorization` header is `Basic` with `kube-scheduler:<the configured secret>`."""
    secret = settings.EBCLOUD_SCHEDULER_EXTENDER_TOKEN
    scheme, _, encoded = header.partition(" ")
    if not secret or scheme.lower() != "basic" or not encoded.isascii():
        return False
    try:
        username, _, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return hmac.compare_digest(username.encode(), SCHEDULER_USERNAME.encode()) & hmac.compare_digest(password.encode(), secret.encode())


class SchedulerCredentialAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not scheduler_credential_valid(header):
            raise exceptions.NotAuthenticated("only kube-scheduler may call the scheduler extender, with the secret of its configuration")
        return SchedulerPrincipal(), None

    def authenticate_header(self, request):
        return 'Basic realm="ebcloud scheduler extender"'


class IsScheduler(permissions.BasePermission):
    def has_permission(self, request, view):
        return isinstance(request.user, SchedulerPrincipal)


class SchedulerCredentialScheme(OpenApiAuthenticationExtension):
    """Documents the scheduler's credential in the OpenAPI schema as HTTP basic."""

    target_class = "pools.api.extender_auth.SchedulerCredentialAuthentication"
    name = "schedulerCredential"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "basic", "description": "kube-scheduler: user kube-scheduler, the secret EBCLOUD_SCHEDULER_EXTENDER_TOKEN (in the urlPrefix of its configuration)"}
