"""DRF authentication for node agents: `Authorization: Bearer <credential>` (design §4)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from monitoring import services
from monitoring.models import AgentCredential


class AgentPrincipal:
    """`request.user` of an agent request: the node comes from here, never from the body."""

    is_authenticated = True
    is_active = True
    is_anonymous = False
    is_superuser = False

    def __init__(self, credential: AgentCredential):
        self.credential = credential
        self.node = credential.node

    def __str__(self) -> str:
        return f"agent of {self.node.name}"


def bearer_secret(request) -> str | None:
    """The credential of a well-formed `Authorization: Bearer <credential>` header, or None for
    anything else (no header, another scheme, a malformed value). Never raises: the agent API's
    fast path (api_views.ReportsView) calls this and leaves every failure to DRF and the class
    below, which say what was wrong."""
    scheme, _, raw = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() != "bearer" or not raw or " " in raw or not raw.isascii():
        return None
    return raw


class AgentCredentialAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization must be `Bearer <credential>`")
        try:
            raw = header[1].decode()
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed("invalid credential") from exc
        credential = services.credential_authenticate(raw)
        if credential is None:
            raise exceptions.AuthenticationFailed("invalid or revoked agent credential")
        return AgentPrincipal(credential), credential

    def authenticate_header(self, request):
        return f'{self.keyword} realm="agent"'


class IsAgent(permissions.BasePermission):
    def has_permission(self, request, view):
        return isinstance(request.user, AgentPrincipal)


class AgentCredentialScheme(OpenApiAuthenticationExtension):
    """Documents the agent credential in the OpenAPI schema as an HTTP bearer scheme."""

    target_class = "monitoring.api.authentication.AgentCredentialAuthentication"
    name = "agentCredential"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "The node's agent credential (from /api/agent/v1/join/)"}
