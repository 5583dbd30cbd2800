"""`application/yaml` request bodies, so `curl --data-binary @pool.yaml` works like JSON."""

from __future__ import annotations

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from pools.errors import ValidationError
from pools.spec import load_yaml


class YAMLParser(BaseParser):
    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.EBCLOUD_MAX_SPEC_BYTES
        data = stream.read(limit + 1) if stream is not None else b""
        try:
            return load_yaml(data, max_bytes=limit)
        except ValidationError as exc:
            raise ParseError(str(exc)) from exc


class YAMLTextParser(YAMLParser):
    """The other media types people use for YAML."""

    media_type = "application/x-yaml"
