"""What every page view shares: one template holds a page and its fragments (template
partials); `htmx_render` picks the fragment for an htmx request and makes the response vary on
`HX-Request`, so caches keep the page and its fragment apart. `document_form_page` is the page
that takes a pasted (or uploaded) YAML document and creates an object from it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.cache import patch_vary_headers

from config.request_paths import CONTROL
from pools.core.documents import load_yaml
from pools.core.errors import ConflictError, ValidationError


def htmx_render(request, template: str, context: dict, *, partial: str | None = None, status: int = 200) -> HttpResponse:
    """`template`, or its `partial` when htmx asks (``template#partial``); `Vary: HX-Request`."""
    name = f"{template}#{partial}" if partial and request.htmx else template
    response = render(request, name, context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    return response


def query_name(request, key: str) -> str:
    """The name of an object in the query string (`?pool=NAME`), "" when absent. A name with a
    control character names nothing: a 404 before the lookup, as in a path
    (`config.request_paths`), since PostgreSQL refuses even to compare text holding NUL."""
    name = request.GET.get(key, "")
    if CONTROL.search(name):
        raise Http404(f"no object has a {key} name with control characters")
    return name


def document_form_page(request, form, *, template: str, create: Callable[[dict, str], Any], done: Callable[[Any], tuple[str, str]],
                       text_field: str = "document") -> HttpResponse:  # fmt: skip
    """On a valid POST, `create(document, team slug)` writes the object the YAML in `text_field`
    describes and the user goes to `done(created)`'s (url, message); a document the server
    refuses is shown again with its field-path errors (400), nothing written; one naming what the
    user may not see (another team's namespace) is shown again too, saying it is not found (404)."""
    spec_errors, not_found = [], False
    if request.method == "POST" and form.is_valid():
        try:
            document = load_yaml(form.cleaned_data[text_field], max_bytes=settings.EBCLOUD_MAX_SPEC_BYTES, max_depth=settings.EBCLOUD_MAX_DOCUMENT_DEPTH)
            created = create(document, form.cleaned_data.get("team", ""))
        except ValidationError as exc:
            spec_errors = exc.errors
        except ConflictError as exc:
            form.add_error(None, str(exc))
        except Http404 as exc:
            form.add_error(None, str(exc))
            not_found = True
        else:
            url, message = done(created)
            messages.success(request, message)
            return HttpResponseRedirect(url)
    status = 404 if not_found else 400 if request.method == "POST" and (spec_errors or form.errors) else 200
    return htmx_render(request, template, {"form": form, "spec_errors": spec_errors}, status=status)
