"""What every page view shares: one template holds a page and its fragments (template
partials); `htmx_render` picks the fragment for an htmx request and makes the response vary on
`HX-Request`, so caches keep the page and its fragment apart."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers


def htmx_render(request, template: str, context: dict, *, partial: str | None = None, status: int = 200) -> HttpResponse:
    """`template`, or its `partial` when htmx asks (``template#partial``); `Vary: HX-Request`."""
    name = f"{template}#{partial}" if partial and request.htmx else template
    response = render(request, name, context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    return response
