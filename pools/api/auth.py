"""`POST /api/v1/auth/token/`: exchange a username and password for the CLI's API token.

DRF's own view authenticates with its Request wrapper; we hand django-axes the underlying
HttpRequest so that a locked-out login is answered 429 by the axes middleware, like the web login.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.authtoken.models import Token
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from pools.api.parsers import JSONParser
from pools.api.serializers import ErrorSerializer, body_fields_check


class TokenView(ObtainAuthToken):
    parser_classes = (FormParser, MultiPartParser, JSONParser)  # ObtainAuthToken's, with the bounded JSON parser

    @extend_schema(
        request=AuthTokenSerializer,
        responses={
            200: inline_serializer("Token", {"token": serializers.CharField()}),
            400: OpenApiResponse(ErrorSerializer, description="Wrong username or password"),
            429: OpenApiResponse(description="Locked out after repeated failures"),
        },
        auth=[],
    )
    def post(self, request, *args, **kwargs):
        body = body_fields_check(request.data, ("username", "password"))  # in the API's words, as every body
        serializer = AuthTokenSerializer(data=body, context={"request": request._request})
        serializer.is_valid(raise_exception=True)
        token, _ = Token.objects.get_or_create(user=serializer.validated_data["user"])
        return Response({"token": token.key})
