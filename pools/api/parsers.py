"""`application/yaml` request bodies, so `curl --data-binary @pool.yaml` works like JSON; JSON
bodies under the same size limit (`EBCLOUD_MAX_SPEC_BYTES`), so neither is a way around it."""

from __future__ import annotations

import io

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser
from rest_framework.parsers import JSONParser as DRFJSONParser

from pools.core.documents import load_yaml
from pools.core.errors import ValidationError


class YAMLParser(BaseParser):
    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.EBCLOUD_MAX_SPEC_BYTES
        data = stream.read(limit + 1) if stream is not None else b""
        try:
            return load_yaml(data, max_bytes=limit)
        except ValidationError as exc:
            raise ParseError(str(exc)) from exc


class JSONParser(DRFJSONParser):
    """DRF's JSON parser, refusing a body over `EBCLOUD_MAX_SPEC_BYTES` before parsing it."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.EBCLOUD_MAX_SPEC_BYTES
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise ParseError(f"the document is larger than {limit} bytes")
        return super().parse(io.BytesIO(data), media_type, parser_context)


class YAMLTextParser(YAMLParser):
    """The other media types people use for YAML."""

    media_type = "application/x-yaml"
